"""deploy/tools/resolve_digests.py (`make resolve-digests`) against a registry on loopback that
speaks the OCI distribution API with an anonymous Bearer token challenge, as docker.io, ECR Public
and nvcr.io do."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from controller.versions import Versions

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "deploy" / "tools" / "resolve_digests.py"
TOKEN = "anonymous-pull-token"
# name in versions.yaml -> the digest the fake registry serves for its tag
SERVED = {
    name: "sha256:" + ch * 64 for name, ch in (("aws_cli", "a"), ("python_base", "b"), ("operator", "c"))
}


class FakeRegistry(BaseHTTPRequestHandler):
    manifests: ClassVar[dict[str, str]] = {}  # "<repo>:<tag>" -> digest
    seen_accept: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path != "/token":
            self.send_error(404)
            return
        query = urllib.parse.parse_qs(url.query)
        assert query["service"] == ["fake-registry"]
        body = json.dumps({"token": TOKEN}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        prefix, _, rest = self.path.partition("/v2/")
        repo, _, tag = rest.partition("/manifests/")
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            host = self.headers["Host"]
            self.send_response(401)
            self.send_header(
                "WWW-Authenticate",
                f'Bearer realm="http://{host}/token",service="fake-registry",scope="repository:{repo}:pull"',
            )
            self.end_headers()
            return
        self.seen_accept.append(self.headers.get("Accept", ""))
        digest = self.manifests.get(f"{repo}:{tag}")
        if prefix or digest is None:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Docker-Content-Digest", digest)
        self.end_headers()


@pytest.fixture
def registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeRegistry)
    FakeRegistry.manifests = {}
    FakeRegistry.seen_accept = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def release_tree(tmp_path: Path, registry: str) -> tuple[Path, Path]:
    """Copies of versions.yaml, deploy/base/kustomization.yaml and the Helm chart's values.yaml
    (next to the kustomization) whose images live on `registry`."""
    versions = (REPO / "versions.yaml").read_text()
    kustomization = (REPO / "deploy" / "base" / "kustomization.yaml").read_text()
    chart_values = (REPO / "deploy" / "helm" / "taobrev-operator" / "values.yaml").read_text()
    images = yaml.safe_load(versions)["images"]
    for name, digest in SERVED.items():
        old_name, _, tag = images[name]["image"].rpartition(":")
        repo = name.replace("_", "-")
        versions = versions.replace(f"image: {old_name}:{tag}\n", f"image: {registry}/{repo}:{tag}\n")
        FakeRegistry.manifests[f"{repo}:{tag}"] = digest
        if name == "operator":
            kustomization = kustomization.replace(f"newName: {old_name}\n", f"newName: {registry}/{repo}\n")
            chart_values = chart_values.replace(
                f"repository: {old_name}\n", f"repository: {registry}/{repo}\n"
            )
    (tmp_path / "values.yaml").write_text(chart_values)
    (tmp_path / "versions.yaml").write_text(versions)
    (tmp_path / "kustomization.yaml").write_text(kustomization)
    return tmp_path / "versions.yaml", tmp_path / "kustomization.yaml"


def run_tool(versions: Path, kustomization: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(TOOL),
            "--versions",
            str(versions),
            "--kustomization",
            str(kustomization),
            "--chart-values",
            str(kustomization.with_name("values.yaml")),
            *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_every_pinned_image_gets_the_digest_its_registry_serves(registry: str, tmp_path: Path) -> None:
    """All three digests are written (after the token dance), versions.py accepts the result, the
    aws-cli reference becomes image@digest, and the kustomization carries the operator's."""
    versions, kustomization = release_tree(tmp_path, registry)
    before = yaml.safe_load(versions.read_text())

    result = run_tool(versions, kustomization)

    assert result.returncode == 0, result.stderr
    after = Versions.model_validate(yaml.safe_load(versions.read_text()))
    assert after.images.aws_cli_pin.digest == SERVED["aws_cli"]
    assert after.images.python_base.digest == SERVED["python_base"]
    assert after.images.operator.digest == SERVED["operator"]
    assert after.images.aws_cli == f"{before['images']['aws_cli']['image']}@{SERVED['aws_cli']}"
    (entry,) = yaml.safe_load(kustomization.read_text())["images"]
    assert entry["digest"] == SERVED["operator"]
    assert (
        yaml.safe_load(kustomization.with_name("values.yaml").read_text())["image"]["digest"]
        == SERVED["operator"]
    )
    # Multi-arch tags resolve to their index, as `docker pull <tag>` would.
    assert FakeRegistry.seen_accept
    assert all(a.startswith("application/vnd.oci.image.index.v1+json") for a in FakeRegistry.seen_accept)


def test_a_tag_the_registry_does_not_have_changes_nothing(registry: str, tmp_path: Path) -> None:
    versions, kustomization = release_tree(tmp_path, registry)
    FakeRegistry.manifests = {
        k: v for k, v in FakeRegistry.manifests.items() if not k.startswith("operator:")
    }
    before = (versions.read_text(), kustomization.read_text())

    result = run_tool(versions, kustomization)

    assert result.returncode == 1
    assert "operator" in result.stderr
    assert "HTTP 404" in result.stderr
    assert "nothing was changed" in result.stderr
    assert (versions.read_text(), kustomization.read_text()) == before


def test_only_resolves_the_named_images(registry: str, tmp_path: Path) -> None:
    """`--only aws_cli --only python_base`: the release step before the operator image is pushed."""
    versions, kustomization = release_tree(tmp_path, registry)
    kustomization_before = kustomization.read_text()

    result = run_tool(versions, kustomization, "--only", "aws_cli", "--only", "python_base")

    assert result.returncode == 0, result.stderr
    images = yaml.safe_load(versions.read_text())["images"]
    assert images["aws_cli"]["digest"] == SERVED["aws_cli"]
    assert images["python_base"]["digest"] == SERVED["python_base"]
    assert images["operator"]["digest"] == "REPLACE_AT_RELEASE"
    assert kustomization.read_text() == kustomization_before


def test_without_registry_access_it_fails_with_a_clear_message_and_changes_nothing(tmp_path: Path) -> None:
    """What happens on a machine without registry network access (like the development sandbox):
    a closed loopback port stands in for the unreachable registry."""
    with ThreadingHTTPServer(("127.0.0.1", 0), FakeRegistry) as closed:
        unreachable = f"127.0.0.1:{closed.server_address[1]}"
    versions, kustomization = release_tree(tmp_path, unreachable)
    before = (versions.read_text(), kustomization.read_text())

    result = run_tool(versions, kustomization)

    assert result.returncode == 1
    assert f"cannot reach http://{unreachable}" in result.stderr
    assert "needs network access to the image registries" in result.stderr
    assert "nothing was changed" in result.stderr
    assert (versions.read_text(), kustomization.read_text()) == before
