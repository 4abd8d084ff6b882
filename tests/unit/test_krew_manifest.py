"""deploy/krew/taobrev.yaml is a krew plugin manifest krew would accept (the fields its validation
requires), its version is the package's, and its sha256 is the archive deploy/tools/krew_archive.py
builds from the shim in the repository (so a changed shim cannot ship under an old checksum)."""

from __future__ import annotations

import io
import re
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import yaml

from tests.unit.test_deploy_tools import load_tool

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy" / "krew" / "taobrev.yaml"
SHIM = REPO / "deploy" / "krew" / "kubectl-taobrev"
krew_archive = load_tool("krew_archive")
# krew's own checks (pkg/index/validation): a v-prefixed semantic version, a name of lower-case
# words, https download, a hex sha256, a bin, and os/arch selectors.
SEMVER = re.compile(r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")


def manifest() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    return doc


def package_version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def test_the_manifest_has_what_krew_requires() -> None:
    doc = manifest()
    assert doc["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert doc["kind"] == "Plugin"
    assert doc["metadata"]["name"] == MANIFEST.stem == "taobrev"  # krew: the file is named for the plugin
    spec = doc["spec"]
    assert SEMVER.match(spec["version"])
    assert spec["shortDescription"] and len(spec["shortDescription"]) <= 60
    assert spec["description"].strip()
    assert spec["platforms"]
    for platform in spec["platforms"]:
        assert platform["uri"].startswith("https://")
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert platform["bin"] == "kubectl-taobrev"
        selector = platform["selector"]
        keys = {e["key"] for e in selector.get("matchExpressions", [])} | set(selector.get("matchLabels", {}))
        assert keys <= {"os", "arch"} and keys


def test_the_manifest_the_archive_url_and_the_shim_name_the_packages_version() -> None:
    version = package_version()
    spec = manifest()["spec"]
    assert spec["version"] == f"v{version}"
    for platform in spec["platforms"]:
        assert f"/v{version}/" in platform["uri"]
    assert f"pip install --user taobrev-operator=={version}" in spec["caveats"]
    assert f"taobrev-operator=={version}" in SHIM.read_text()


def test_the_sha256_is_the_archive_built_from_the_shim_and_the_archive_keeps_it_executable() -> None:
    data = krew_archive.archive(SHIM)
    assert data == krew_archive.archive(SHIM), "the archive is reproducible byte for byte"
    assert {p["sha256"] for p in manifest()["spec"]["platforms"]} == {krew_archive.sha256(data)}
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        (info,) = zf.infolist()
        assert info.filename == "kubectl-taobrev"
        assert (info.external_attr >> 16) & 0o777 == 0o755
        assert zf.read(info) == SHIM.read_bytes()
