"""deploy/tools: the per-namespace RoleBinding generator, the digest resolver's pure parts, and the
digest pins in controller/versions.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from controller.versions import UNRESOLVED_DIGEST, PinnedImage, Versions

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "deploy" / "tools"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def load_tool(name: str) -> ModuleType:
    # deploy/tools holds standalone scripts, not a package.
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


job_namespaces = load_tool("job_namespaces")
resolve_digests = load_tool("resolve_digests")


# -- job_namespaces.py -----------------------------------------------------------------------------


def test_one_role_binding_per_job_namespace_to_the_base_job_secrets_role() -> None:
    """Each namespace (duplicates once) gets a RoleBinding of deploy/base's job-Secrets
    ClusterRole to the operator's ServiceAccount."""
    docs = list(
        yaml.safe_load_all(
            job_namespaces.render(
                ["ml-team", "vision", "ml-team"],
                operator_namespace="taobrev-system",
                service_account="taobrev-operator",
            )
        )
    )
    assert [d["metadata"]["namespace"] for d in docs] == ["ml-team", "vision"]
    base = [d for d in yaml.safe_load_all((REPO / "deploy" / "base" / "rbac.yaml").read_text()) if d]
    (role,) = [
        d for d in base if d["kind"] == "ClusterRole" and d["metadata"]["name"] == job_namespaces.CLUSTER_ROLE
    ]
    for doc in docs:
        assert doc["kind"] == "RoleBinding"
        assert doc["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        }
        assert doc["subjects"] == [
            {"kind": "ServiceAccount", "name": "taobrev-operator", "namespace": "taobrev-system"}
        ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ML_Team"], "namespace 'ML_Team' is not a valid Kubernetes name"),
        (["--", "-bad"], "namespace '-bad' is not a valid Kubernetes name"),
        (["ok", "--service-account", "Op"], "--service-account 'Op' is not a valid Kubernetes name"),
        (["taobrev-system"], "is the operator's own namespace"),
    ],
)
def test_bad_namespace_names_fail_naming_the_value_and_the_rule(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert job_namespaces.main(argv) == 2
    out, err = capsys.readouterr()
    assert message in err
    assert out == ""


# -- resolve_digests.py (pure parts; tests/integration/test_resolve_digests.py talks HTTP) --------


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (
            "python:3.11.14-slim-bookworm",
            ("https://registry-1.docker.io", "library/python", "3.11.14-slim-bookworm"),
        ),
        ("bitnami/kubectl:1.30", ("https://registry-1.docker.io", "bitnami/kubectl", "1.30")),
        ("public.ecr.aws/aws-cli/aws-cli:2.22.35", ("https://public.ecr.aws", "aws-cli/aws-cli", "2.22.35")),
        ("localhost:5000/a/b:1", ("http://localhost:5000", "a/b", "1")),
        ("127.0.0.1:5000/a:1", ("http://127.0.0.1:5000", "a", "1")),
    ],
)
def test_references_split_into_registry_repository_and_tag(ref: str, expected: tuple[str, str, str]) -> None:
    assert resolve_digests.split_reference(ref) == expected


@pytest.mark.parametrize("ref", ["python", "registry.example.com:5000/x", f"python:3.11@{DIGEST}"])
def test_a_reference_without_a_tag_is_refused(ref: str) -> None:
    with pytest.raises(resolve_digests.ResolveError, match="tag"):
        resolve_digests.split_reference(ref)


def test_set_digest_rewrites_only_the_digest_after_its_image_and_keeps_comments() -> None:
    versions = (REPO / "versions.yaml").read_text()
    image = yaml.safe_load(versions)["images"]["aws_cli"]["image"]
    new = resolve_digests.set_digest(versions, image, DIGEST)
    old_doc, new_doc = yaml.safe_load(versions), yaml.safe_load(new)
    assert new_doc["images"]["aws_cli"] == {"image": image, "digest": DIGEST}
    new_doc["images"]["aws_cli"]["digest"] = old_doc["images"]["aws_cli"]["digest"]
    assert new_doc == old_doc
    assert [ln for ln in new.splitlines() if ln.lstrip().startswith("#")] == [
        ln for ln in versions.splitlines() if ln.lstrip().startswith("#")
    ]


def test_set_digest_finds_the_kustomize_image_entry() -> None:
    text = (REPO / "deploy" / "base" / "kustomization.yaml").read_text()
    (entry,) = yaml.safe_load(text)["images"]
    new = yaml.safe_load(resolve_digests.set_digest(text, entry["newName"], DIGEST))
    assert new["images"] == [{**entry, "digest": DIGEST}]


def test_set_digest_refuses_an_image_it_cannot_find() -> None:
    with pytest.raises(resolve_digests.ResolveError, match="expected one `digest:` line"):
        resolve_digests.set_digest((REPO / "versions.yaml").read_text(), "nope:1", DIGEST)


# -- controller/versions.py ------------------------------------------------------------------------


def test_a_resolved_pin_is_referenced_by_digest_and_an_unresolved_one_by_tag() -> None:
    assert PinnedImage(image="a/b:1", digest=DIGEST).reference == f"a/b:1@{DIGEST}"
    unresolved = PinnedImage(image="a/b:1", digest=UNRESOLVED_DIGEST)
    assert unresolved.reference == "a/b:1"
    assert not unresolved.resolved


@pytest.mark.parametrize("digest", ["sha256:abc", "latest", "sha512:" + "0" * 128, DIGEST.upper(), ""])
def test_a_hand_made_digest_is_rejected_with_the_fix(digest: str) -> None:
    with pytest.raises(ValidationError, match="make resolve-digests"):
        PinnedImage(image="a/b:1", digest=digest)


def test_versions_file_aws_cli_reference_follows_its_digest() -> None:
    """The API the workload reads (`images.aws_cli`, a str) carries the digest once resolved."""
    doc: dict[str, Any] = yaml.safe_load((REPO / "versions.yaml").read_text())
    doc["images"]["aws_cli"]["digest"] = DIGEST
    assert Versions.model_validate(doc).images.aws_cli == f"{doc['images']['aws_cli']['image']}@{DIGEST}"
