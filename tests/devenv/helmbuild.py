"""Build helm 3 and helm 4 from the Go module proxy, cached outside the repository.

The chart (deploy/helm/taobrev-operator) is linted, rendered and installed with both major
versions pinned in versions.yaml (`helm.v3`, `helm.v4`). Neither module has replace directives, so
`go install helm.sh/helm/vN/cmd/helm@<version>` builds it with exactly the dependency versions helm
was released with; the ldflags are those of helm's own Makefile (version stamp; for helm 3 also
the Kubernetes version `helm template` and `helm lint` assume, which helm 4 reads from its build
info itself).

Binaries land in ``$TAOBREV_CACHE/helm-<version>/helm``; a warm run only checks they exist.
``python -m tests.devenv.helmbuild`` builds both and prints their paths.
"""

from __future__ import annotations

import fcntl
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from controller.versions import load_versions
from tests.devenv.kubebuild import _log, _run, cache_root

MAJORS = ("v3", "v4")


class HelmUnavailable(RuntimeError):
    """helm could not be built; the message carries the build's error."""


def pinned(major: str) -> str:
    pins = load_versions().helm
    return {"v3": pins.v3, "v4": pins.v4}[major]


def binary_path(major: str) -> Path:
    return cache_root() / f"helm-{pinned(major)}" / "helm"


def _ldflags(major: str, version: str, workdir: Path) -> str:
    module = f"helm.sh/helm/{major}"
    flags = ["-s", "-w", f"-X {module}/internal/version.version={version}"]
    flags.append(f"-X {module}/internal/version.gitTreeState=clean")
    if major == "v3":
        # helm 3's Makefile stamps the Kubernetes version of its client-go (v0.X.Y -> 1.X) as the
        # default `helm template`/`helm lint` assume; unstamped it would claim 1.20.
        out = _run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            workdir,
            f"downloading {module}@{version}",
        )
        gomod = Path(json.loads(out[out.index("{") :])["GoMod"]).read_text()
        minor = re.search(r"^\s*k8s\.io/client-go v0\.(\d+)\.", gomod, re.M)
        if minor is None:
            raise HelmUnavailable(f"no k8s.io/client-go requirement in {module}@{version}'s go.mod")
        for pkg in ("pkg/lint/rules", "pkg/chartutil"):
            flags += [f"-X {module}/{pkg}.k8sVersionMajor=1", f"-X {module}/{pkg}.k8sVersionMinor={minor[1]}"]
    return " ".join(flags)


def build(major: str) -> Path:
    """The pinned helm of this major version (`v3` or `v4`), built on first use."""
    version = pinned(major)
    binary = binary_path(major)
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    # pytest-xdist workers may all want it at once: one builds, the others wait and find it.
    with (binary.parent.parent / f"{binary.parent.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if binary.exists():
            return binary
        if shutil.which("go") is None:
            raise HelmUnavailable("the Go toolchain is required to build helm; install Go >= 1.26")
        start = time.monotonic()
        _log(
            f"first-time build of helm {version} from the Go module proxy "
            f"(a few minutes; cached in {binary.parent})"
        )
        # go install writes into GOBIN; a scratch GOBIN next to the target, renamed last, so an
        # interrupted build never leaves a half-written binary that looks cached.
        with tempfile.TemporaryDirectory(dir=binary.parent, prefix="build-") as tmp:
            work = Path(tmp)
            try:
                flags = _ldflags(major, version, work)
                _run(
                    ["env", f"GOBIN={work}", "go", "install", "-trimpath", "-ldflags", flags,
                     f"helm.sh/helm/{major}/cmd/helm@{version}"],
                    work,
                    f"compiling helm {version}",
                )  # fmt: skip
            except RuntimeError as exc:
                raise HelmUnavailable(str(exc)) from exc
            (work / "helm").rename(binary)
        _log(f"helm {version} ready in {time.monotonic() - start:.0f}s: {binary}")
    return binary


def main() -> int:
    try:
        for major in MAJORS:
            print(build(major))
    except HelmUnavailable as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
