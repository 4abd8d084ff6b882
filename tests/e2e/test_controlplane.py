"""The local control plane is a real, RBAC-enforcing Kubernetes API at the pinned version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.versions import load_versions
from tests.devenv import kubebuild
from tests.devenv.controlplane import ControlPlane, kubectl_path
from tests.fixtures.cluster import Kubectl, namespace_name

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_server_reports_pinned_version(kubectl: Kubectl) -> None:
    """`kubectl version` shows the kube-apiserver version pinned in versions.yaml (not v0.0.0)."""
    server = json.loads(kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert server["gitVersion"] == load_versions().kubernetes.version


def test_admin_can_create_configmap(kubectl: Kubectl, namespace: str) -> None:
    """The admin context writes and reads back objects in the per-test namespace."""
    kubectl("create", "configmap", "probe", "-n", namespace, "--from-literal=answer=42")
    cm = json.loads(kubectl("get", "configmap", "probe", "-n", namespace, "-o", "json").stdout)
    assert cm["data"] == {"answer": "42"}


def test_operator_user_is_authenticated_but_forbidden(control_plane: ControlPlane, namespace: str) -> None:
    """The unprivileged `operator` context authenticates yet has no RBAC: listing secrets is Forbidden."""
    who = json.loads(control_plane.kubectl("auth", "whoami", "-o", "json", context="operator").stdout)
    assert who["status"]["userInfo"]["username"] == "taobrev-dev-operator"
    denied = control_plane.kubectl("get", "secrets", "-n", namespace, context="operator", check=False)
    assert denied.returncode != 0
    assert "Forbidden" in denied.stderr
    assert 'User "taobrev-dev-operator" cannot list resource "secrets"' in denied.stderr


def test_service_account_token_authenticates_as_the_service_account(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """A TokenRequest token, via kubeconfig_for_token, authenticates as system:serviceaccount:<ns>:<name>."""
    token = control_plane.service_account_token(namespace, "taobrev-operator", duration="10m")
    kubeconfig = control_plane.kubeconfig_for_token(token, tmp_path / "sa.kubeconfig")
    assert kubeconfig.stat().st_mode & 0o077 == 0  # holds a credential: owner-only
    proc = subprocess.run(
        [kubectl_path(), f"--kubeconfig={kubeconfig}", "auth", "whoami", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    user = json.loads(proc.stdout)["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{namespace}:taobrev-operator"
    assert f"system:serviceaccounts:{namespace}" in user["groups"]


@pytest.mark.parametrize(
    "test_name",
    [
        "test_x",
        "test_thing[param-1/ABC]",
        "9lives",
        "___",
        "test_" + "very_long_name_" * 10,
    ],
)
def test_namespace_names_are_dns1123_labels(test_name: str) -> None:
    """Per-test namespace names are valid DNS-1123 labels of at most 63 characters."""
    name = namespace_name(test_name, "a1b2c3")
    assert len(name) <= 63
    assert name.endswith("-a1b2c3")
    assert name[0].isalpha()
    assert all(c.isdigit() or ("a" <= c <= "z") or c == "-" for c in name)


def _devenv(command: str, devenv_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TAOBREV_DEVENV_DIR": str(devenv_dir)}
    return subprocess.run(
        [sys.executable, "-m", "tests.devenv", command],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_devenv_up_status_down_across_processes(tmp_path: Path) -> None:
    """`up` leaves a healthy control plane running after it exits; `status` sees it; `down` stops it."""
    kubebuild.build()  # a cold build (minutes) happens here with progress, not inside `up`'s timeout
    devenv_dir = tmp_path / "devenv"
    up = _devenv("up", devenv_dir)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        kubeconfig = devenv_dir / "controlplane" / "kubeconfig"
        assert f"export KUBECONFIG={kubeconfig}" in up.stdout.splitlines()

        # The `up` process has exited; the servers it started must still answer.
        ready = subprocess.run(
            [kubectl_path(), f"--kubeconfig={kubeconfig}", "get", "--raw", "/readyz"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (ready.returncode, ready.stdout.strip()) == (0, "ok"), ready.stderr

        status = _devenv("status", devenv_dir)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "healthy" in status.stdout
        pids = ControlPlane.load(devenv_dir / "controlplane").pids
    finally:
        down = _devenv("down", devenv_dir)
    assert down.returncode == 0, down.stdout + down.stderr
    for name, pid in pids.items():
        stat = Path(f"/proc/{pid}/stat")
        # Gone, or a zombie waiting for init to reap it: either way no longer running.
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", name

    after = _devenv("status", devenv_dir)
    assert after.returncode == 1
    assert "not running" in after.stdout
