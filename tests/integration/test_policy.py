"""`make policy`: checkov 3.3.30 on the rendered deploy/ kustomizations and the Dockerfile.

checkov lives in its own venv outside the repository (its dependency pins conflict with ours), the
same one `make policy` uses; the first run installs it from PyPI (about 2.5 minutes on 2 busy
cores) and fails loudly if it cannot: a missing checker is a broken environment, not a skip.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.devenv import checkov as checkov_install
from tests.fixtures.helm import helm_binary

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
TOOL = DEPLOY / "tools" / "policy_check.py"
CHECKOV_VERSION = checkov_install.VERSION


@pytest.fixture(scope="module")
def checkov() -> str:
    try:
        exe = checkov_install.ensure()
    except checkov_install.CheckovUnavailable as exc:
        pytest.fail(str(exc))
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True, timeout=300)
    assert version.stdout.strip() == CHECKOV_VERSION, version.stdout
    return str(exe)


@pytest.fixture(scope="module")
def helm() -> str:
    return str(helm_binary("v3"))


def policy(checkov: str, deploy: Path, helm: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), "--checkov", checkov, "--deploy", str(deploy), "--helm", helm],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_checkov_finds_no_failure_in_the_rendered_deploy_tree(checkov: str, helm: str) -> None:
    """deploy/, deploy/base, base + each opt-in component, the Helm chart (defaults, and every
    option on) and the Dockerfile: 0 failed checks; the one accepted Kubernetes finding is the
    annotated opt-in binding (in the kustomize component and in the chart's rendering)."""
    result = policy(checkov, DEPLOY, helm)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kubernetes scan results" in result.stdout
    assert "dockerfile scan results" in result.stdout
    assert "Failed checks: 1" not in result.stdout
    assert result.stdout.count("Failed checks: 0") == 2, result.stdout
    # The opt-in cluster-wide binding (the component; the chart with every option on) and the
    # chart's two job-namespace RoleBindings, each annotated with its reason.
    assert "Skipped checks: 4" in result.stdout


def test_cluster_wide_secret_read_in_the_default_install_fails_the_policy(
    checkov: str, helm: str, tmp_path: Path
) -> None:
    """The check can fail: a copy of deploy/ whose base binds the job-Secrets ClusterRole
    cluster-wide (what the default did before) fails CKV2_K8S_5."""
    broken = tmp_path / "deploy"
    shutil.copytree(DEPLOY, broken, ignore=shutil.ignore_patterns("examples"))
    binding = yaml.safe_load(
        (DEPLOY / "components" / "cluster-wide-secrets" / "clusterrolebinding.yaml").read_text()
    )
    binding["metadata"] = {"name": "taobrev-operator-secrets-everywhere"}  # no accepted-finding annotation
    rbac = broken / "base" / "rbac.yaml"
    rbac.write_text(rbac.read_text() + "---\n" + yaml.safe_dump(binding))

    result = policy(checkov, broken, helm)

    assert result.returncode != 0, result.stdout
    assert "CKV2_K8S_5" in result.stdout


def test_the_charts_rendering_is_checked(checkov: str, helm: str, tmp_path: Path) -> None:
    """The chart is in the scan: a copy whose cluster-wide binding lost its accepted-finding
    annotation fails CKV2_K8S_5 (the kustomize component keeps its annotation)."""
    broken = tmp_path / "deploy"
    shutil.copytree(DEPLOY, broken, ignore=shutil.ignore_patterns("examples"))
    template = broken / "helm" / "taobrev-operator" / "templates" / "cluster-wide-secrets.yaml"
    text = template.read_text()
    assert "checkov.io/skip1: CKV2_K8S_5" in text
    template.write_text(text.replace("checkov.io/skip1:", "example.com/not-a-skip:"))

    result = policy(checkov, broken, helm)

    assert result.returncode != 0, result.stdout
    assert "FAILED for resource: ClusterRoleBinding.default.taobrev-operator-job-secrets" in result.stdout
