"""deploy/helm/taobrev-operator: `helm lint`, and `helm template` against the kustomize install.

For each install variant of docs/install.md (the base; with monitoring; with the opt-in
cluster-wide Secret read; the "Job namespaces" overlay, namespaced mode with job namespaces and
monitoring), the chart with the matching values renders the same objects (kind, namespace, name)
as `kubectl kustomize`, equal field for field once each tool's own labels are set aside
(tests/fixtures/helm.py `normalise`). The one object only kustomize has is the Namespace: Helm
keeps its release record in the namespace, so it must exist before the chart (docs/helm.md).
Both helm majors pinned in versions.yaml run every test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.helm import (
    CHART,
    DEPLOY,
    NAMESPACE,
    by_key,
    chart_objects,
    helm_binary,
    helm_env,
    quantity,
    render_chart,
    render_kustomize,
)

MAJORS = ("v3", "v4")
JOB_NAMESPACES = ("ml-team", "vision")  # docs/install.md's names
ONLY_KUSTOMIZE = {("Namespace", "", NAMESPACE)}


@pytest.fixture(scope="module", params=MAJORS)
def helm(request: pytest.FixtureRequest) -> Path:
    return helm_binary(request.param)


def overlay(tmp: Path, text: str) -> Path:
    (tmp / "kustomization.yaml").write_text(text)
    return tmp


def component_overlay(tmp: Path, component: str) -> Path:
    """deploy/base plus one of deploy/components (policy_check.py renders the same)."""
    return overlay(
        tmp,
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY / "base", tmp)],
                "components": [os.path.relpath(DEPLOY / "components" / component, tmp)],
            }
        ),
    )


def readme_namespaced_overlay(tmp: Path) -> Path:
    """docs/install.md's "Job namespaces" overlay, verbatim, with job_namespaces.py's RoleBindings
    (as tests/e2e/test_deploy.py builds it)."""
    readme = (DEPLOY.parent / "docs" / "install.md").read_text()
    snippet = readme.split("# my-overlay/kustomization.yaml\n", 1)[1].split("```", 1)[0]
    shutil.copytree(DEPLOY, tmp / "deploy", ignore=shutil.ignore_patterns("examples", "image", "helm"))
    bindings = subprocess.run(
        [sys.executable, str(DEPLOY / "tools" / "job_namespaces.py"), *JOB_NAMESPACES],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    mine = tmp / "my-overlay"
    mine.mkdir()
    (mine / "job-namespaces.yaml").write_text(bindings)
    return overlay(mine, snippet)


VARIANTS: dict[str, tuple[Any, dict[str, Any]]] = {
    "base": (lambda tmp: DEPLOY / "base", {}),
    "deploy (monitoring)": (lambda tmp: DEPLOY, {"monitoring": {"enabled": True}}),
    "cluster-wide-secrets": (
        lambda tmp: component_overlay(tmp, "cluster-wide-secrets"),
        {"clusterWideSecrets": {"enabled": True}},
    ),
    "namespaced with job namespaces": (
        readme_namespaced_overlay,
        {
            "monitoring": {"enabled": True},
            "jobNamespaces": list(JOB_NAMESPACES),
            "namespacedMode": {"enabled": True},
        },
    ),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_chart_renders_what_kustomize_renders(helm: Path, variant: str, tmp_path: Path) -> None:
    target, values = VARIANTS[variant]
    kustomize = by_key(render_kustomize(target(tmp_path)))
    chart = by_key(chart_objects(helm, values))

    assert set(kustomize) - set(chart) == ONLY_KUSTOMIZE
    assert set(chart) - set(kustomize) == set()
    for key, expected in kustomize.items():
        if key not in ONLY_KUSTOMIZE:
            assert chart[key] == expected, key


def test_the_comparison_sees_a_difference(helm: Path) -> None:
    """The normaliser keeps what matters: one setting, a pod annotation, a port or the memory
    differing between the two renderings is caught."""
    kustomize = by_key(render_kustomize(DEPLOY / "base"))
    for values in (
        {"settings": {"TAOBREV_LOG_LEVEL": "DEBUG"}},
        {"ports": {"health": 8081, "metrics": 8000, "logApi": 8443}},
        {"podAnnotations": {"example.com/team": "ml"}},
        {"sizing": {"concurrentJobs": 200}},
    ):
        chart = by_key(chart_objects(helm, values))
        assert any(chart[k] != v for k, v in kustomize.items() if k in chart), values


def test_helm_lint_passes_for_every_variant(helm: Path, tmp_path: Path) -> None:
    """`helm lint --strict` (warnings fail too) with each variant's values."""
    for name, (_, values) in VARIANTS.items():
        values_file = tmp_path / "values.json"
        values_file.write_text(json.dumps(values))
        lint = subprocess.run(
            [
                str(helm),
                "lint",
                "--strict",
                str(CHART),
                "--namespace",
                NAMESPACE,
                "--values",
                str(values_file),
            ],
            env=helm_env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert lint.returncode == 0, name + ":\n" + lint.stdout + lint.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in lint.stdout, name


def container_resources(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [d for d in objects if d["kind"] == "Deployment"]
    resources: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    return resources


@pytest.mark.parametrize(
    ("values", "mib"),
    [
        ({}, 3072),  # 109 + 33 x 40 + 12 x 128 = 2,965 -> 3Gi, deploy/base's figure
        ({"sizing": {"concurrentJobs": 1000}}, 13568),  # 1,429 + 12,000 = 13,429 -> 13,568
        # 109 + (32 + 8 + 1) x 40 + 12 x 10 = 1,869 -> 2,048 (numbers and strings both read)
        (
            {
                "settings": {"TAOBREV_LANE_CREATE": 32, "TAOBREV_LANE_DELETE": "8"},
                "sizing": {"concurrentJobs": 10},
            },
            2048,
        ),
    ],
)
def test_memory_follows_the_sizing_formula(helm: Path, values: dict[str, Any], mib: int) -> None:
    """request = limit = 109 + (create + delete + 1) x 40 + 12 x N MiB, rounded up to 256 MiB
    (docs/settings.md "Operator pod memory")."""
    resources = container_resources(chart_objects(helm, values))
    assert quantity(resources["requests"]["memory"]) == quantity(resources["limits"]["memory"]) == mib * 2**20


def test_memory_in_values_replaces_the_formula(helm: Path) -> None:
    resources = container_resources(chart_objects(helm, {"resources": {"limits": {"memory": "5Gi"}}}))
    # Helm merges maps: the default CPU stays; no formula memory is added to the requests.
    assert resources["limits"] == {"cpu": "1", "memory": "5Gi"}
    assert resources["requests"] == {"cpu": "100m"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"settings": {"TAOBREV_NAMESPACES": "a"}},
            "settings.TAOBREV_NAMESPACES: the chart sets it; use namespacedMode",
        ),
        ({"settings": {"TAOBREV_LANE_CREAT": "3"}}, "TAOBREV_LANE_CREAT"),
        (
            {"replicaCount": 2, "leaderElection": {"enabled": False}},
            "set replicaCount=1 or enable leader election",
        ),
        ({"jobNamespaces": [NAMESPACE]}, "is the release (operator) namespace"),
        ({"namespacedMode": {"enabled": True}}, "namespacedMode.enabled=true needs jobNamespaces"),
        ({"jobNamespaces": ["ML_team"]}, "jobNamespaces"),
        ({"image": {"digest": "sha256:abc"}}, "digest"),
    ],
)
def test_bad_values_fail_naming_the_value(helm: Path, values: dict[str, Any], message: str) -> None:
    """values.schema.json and the templates' checks refuse bad values before anything is applied."""
    result = render_chart(helm, values, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def named(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"] + "/" + d["metadata"]["name"]: d for d in objects}


def test_options_beyond_kustomize_render_as_documented(helm: Path) -> None:
    """One replica without leader election, the log API off, a verified log API certificate."""
    single = named(
        chart_objects(
            helm, {"replicaCount": 1, "leaderElection": {"enabled": False}, "logApi": {"enabled": False}}
        )
    )
    assert single["ConfigMap/taobrev-operator-config"]["data"]["TAOBREV_LEADER_ELECTION"] == "false"
    assert single["ConfigMap/taobrev-operator-config"]["data"]["TAOBREV_LOG_API_PORT"] == "0"
    assert "Role/taobrev-operator-leader-election" not in single
    assert "APIService/v1alpha1.logs.taobrev.io" not in single
    assert "Service/taobrev-log-api" not in single
    ports = single["Deployment/taobrev-operator"]["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert [p["name"] for p in ports] == ["health", "metrics"]

    tls = {"enabled": True, "certSecret": "log-api-tls", "caBundle": "Q0E=", "apiServiceAnnotations": {}}
    verified = named(chart_objects(helm, {"logApi": tls}))
    api = verified["APIService/v1alpha1.logs.taobrev.io"]["spec"]
    assert api["caBundle"] == "Q0E=" and "insecureSkipTLSVerify" not in api
    pod = verified["Deployment/taobrev-operator"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["TAOBREV_LOG_API_CERT_DIR"] == "/var/run/secrets/taobrev/log-api"
    assert {"name": "log-api-cert", "secret": {"secretName": "log-api-tls", "defaultMode": 0o440}} in pod[
        "volumes"
    ]
