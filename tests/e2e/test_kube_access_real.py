"""controller.kube.access.KubeAccess against the real API server: the status schema's limits (the CRD's
20-line attempts[].run.logTail) make a patch fail with 422, which must end in a trimmed status rather
than a crash loop; a Secret the operator may not read is a SecretAccessDenied naming the RBAC fix."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from controller.api.errors import SecretAccessDenied
from controller.kube.access import Connection, KubeAccess, api_client
from tests.devenv.controlplane import ControlPlane
from tests.status_paths import instance, run
from tests.unit.test_models import valid_job

pytestmark = pytest.mark.e2e


def access(cp: ControlPlane, token: str) -> KubeAccess:
    conn = Connection(server=cp.server, ca_path=str(cp.ca_file), token_path=None, token=token)
    return KubeAccess(api_client(conn), request_timeout=10)


def test_status_the_schema_refuses_is_trimmed_and_written(
    control_plane: ControlPlane, crds_installed: list[Path], namespace: str
) -> None:
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(valid_job("big")))
    kube = access(control_plane, control_plane.admin_token)
    # 30 lines > the CRD's maxItems 20: the API server answers 422 to the full status.
    attempt = {
        "attempt": 1,
        "instance": {"name": "tbj-big"},
        "run": {"logTail": [f"epoch {i}" for i in range(30)]},
    }
    status = {"phase": "Running", "jobId": "j-1", "attempts": [attempt]}
    assert asyncio.run(kube.patch_status(namespace, "big", status)) is True
    got = json.loads(control_plane.kubectl("get", "tbj", "big", "-n", namespace, "-o", "json").stdout)[
        "status"
    ]
    assert got["phase"] == "Running"
    assert got["jobId"] == "j-1"
    assert instance(got)["name"] == "tbj-big"
    assert run(got)["logTail"] == [f"epoch {i}" for i in range(25, 30)]


def test_patch_of_a_deleted_object_is_false(
    control_plane: ControlPlane, crds_installed: list[Path], namespace: str
) -> None:
    kube = access(control_plane, control_plane.admin_token)
    assert asyncio.run(kube.patch_status(namespace, "never-existed", {"phase": "Running"})) is False


def test_secret_read_without_rbac_is_access_denied_naming_the_fix(
    control_plane: ControlPlane, namespace: str
) -> None:
    kube = access(control_plane, control_plane.operator_token)  # authenticated, no RBAC bindings
    with pytest.raises(SecretAccessDenied) as info:
        asyncio.run(kube.read_secret(namespace, "ngc"))
    assert f"grant `get` on secrets in namespace {namespace}" in str(info.value)
