#!/usr/bin/env python3
"""Resolve the image tags in versions.yaml to the digests their registries serve now, and write them.

Release-time tool (`make resolve-digests`): for every `images.<name>` entry with `image` + `digest`
it asks the image's registry (OCI distribution API, anonymous pull token) for the manifest digest
of the tag, then writes `digest:` in versions.yaml and, for the operator image, in
deploy/base/kustomization.yaml and the Helm chart's values.yaml. It needs network access to those
registries; without it, it fails naming the registry and changes nothing. Nothing is written
unless every image resolved. The operator image must have been pushed (and be anonymously
pullable) before it can resolve; `--only aws_cli --only python_base` resolves the others first.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# Index/list first: a multi-arch tag resolves to its index, which is what `docker pull tag` uses.
ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
TIMEOUT = 30


class ResolveError(Exception):
    pass


def split_reference(ref: str) -> tuple[str, str, str]:
    """`[host/]repo:tag` -> (registry base URL, repository, tag), Docker Hub's defaults applied."""
    if "@" in ref:
        raise ResolveError(f"{ref!r}: `image` must be a tag (the digest is written separately)")
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        raise ResolveError(f"{ref!r}: `image` needs an explicit tag (name:tag)")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, repo = first, rest
    else:
        host, repo = "registry-1.docker.io", name if "/" in name else f"library/{name}"
    # Loopback registries speak plain HTTP (as docker allows for them); everything else HTTPS.
    scheme = "http" if host.split(":")[0] in ("localhost", "127.0.0.1") else "https"
    return f"{scheme}://{host}", repo, tag


def _open(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> Any:
    # Registry and token URLs come from versions.yaml and the registry's auth challenge: only
    # http(s) is ever opened (no file:, no custom schemes).
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ResolveError(f"refusing to open {url!r}: only http(s) registry URLs")
    request = urllib.request.Request(url, headers=headers or {}, method=method)  # noqa: S310 - checked
    return urllib.request.urlopen(request, timeout=TIMEOUT)  # noqa: S310 - scheme checked above


def _bearer_token(challenge: str, repo: str) -> str:
    params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    if not challenge.lower().startswith("bearer") or "realm" not in params:
        raise ResolveError(f"unsupported registry auth challenge {challenge!r} (only anonymous Bearer)")
    query = {"scope": params.get("scope", f"repository:{repo}:pull")}
    if "service" in params:
        query["service"] = params["service"]
    url = f"{params['realm']}?{urllib.parse.urlencode(query)}"
    with _open(url) as resp:
        body = json.load(resp)
    token = body.get("token") or body.get("access_token")
    if not isinstance(token, str):
        raise ResolveError(f"token endpoint {params['realm']} returned no token")
    return token


def resolve(ref: str) -> str:
    """The sha256 digest the registry serves for `ref`'s tag now."""
    base, repo, tag = split_reference(ref)
    url = f"{base}/v2/{repo}/manifests/{tag}"
    headers = {"Accept": ACCEPT}
    try:
        for attempt in range(2):
            try:
                with _open(url, headers, method="HEAD") as resp:
                    digest = str(resp.headers.get("Docker-Content-Digest", ""))
                break
            except urllib.error.HTTPError as e:
                if e.code == 401 and attempt == 0:
                    headers["Authorization"] = (
                        f"Bearer {_bearer_token(e.headers.get('WWW-Authenticate', ''), repo)}"
                    )
                    continue
                raise ResolveError(f"{ref}: {url} answered HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise ResolveError(
            f"{ref}: cannot reach {base} ({e.reason}). resolve-digests needs network access to the "
            "image registries: run it at release time on a machine that can pull these images"
        ) from None
    except OSError as e:
        raise ResolveError(
            f"{ref}: cannot reach {base} ({e}); resolve-digests needs registry network access"
        ) from None
    if not DIGEST.fullmatch(digest):
        raise ResolveError(
            f"{ref}: the registry sent no sha256 Docker-Content-Digest header (got {digest!r})"
        )
    return digest


def set_digest(text: str, image: str, digest: str) -> str:
    """Rewrite the `digest:` line that follows `image: <image>` (comments and layout kept)."""
    pattern = re.compile(
        rf"^(?P<indent>[ ]*)(?:- )?(?:image|newName|repository): {re.escape(image)}[ ]*\n"
        rf"(?:(?P=indent)(?!digest:)\S.*\n)*?"
        rf"(?P=indent)digest: \S+[ ]*$",
        re.MULTILINE,
    )
    new, count = pattern.subn(lambda m: m.group(0).rsplit("digest:", 1)[0] + f"digest: {digest}", text)
    if count != 1:
        raise ResolveError(f"expected one `digest:` line after {image!r}, found {count}")
    return new


def kustomize_image(ref: str) -> str:
    return ref.rpartition(":")[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=Path, default=REPO / "versions.yaml")
    parser.add_argument("--kustomization", type=Path, default=REPO / "deploy" / "base" / "kustomization.yaml")
    parser.add_argument(
        "--chart-values", type=Path, default=REPO / "deploy" / "helm" / "taobrev-operator" / "values.yaml"
    )
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="an images.<NAME> entry")
    args = parser.parse_args(argv)

    images = yaml.safe_load(args.versions.read_text())["images"]
    pinned = {k: v for k, v in images.items() if isinstance(v, dict) and {"image", "digest"} <= set(v)}
    unknown = set(args.only) - set(pinned)
    if unknown:
        print(
            f"resolve-digests: no pinned images.{sorted(unknown)} in {args.versions}; have {sorted(pinned)}",
            file=sys.stderr,
        )
        return 2
    wanted = {k: v for k, v in pinned.items() if not args.only or k in args.only}
    try:
        digests = {name: resolve(entry["image"]) for name, entry in wanted.items()}
        versions_text = args.versions.read_text()
        kustomization_text = args.kustomization.read_text()
        chart_text = args.chart_values.read_text()
        for name, digest in digests.items():
            versions_text = set_digest(versions_text, wanted[name]["image"], digest)
            if name == "operator":
                kustomization_text = set_digest(
                    kustomization_text, kustomize_image(wanted[name]["image"]), digest
                )
                chart_text = set_digest(chart_text, kustomize_image(wanted[name]["image"]), digest)
    except ResolveError as e:
        print(f"resolve-digests: {e}\nnothing was changed.", file=sys.stderr)
        return 1
    args.versions.write_text(versions_text)
    args.kustomization.write_text(kustomization_text)
    args.chart_values.write_text(chart_text)
    for name, digest in digests.items():
        print(f"images.{name}: {wanted[name]['image']}@{digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
