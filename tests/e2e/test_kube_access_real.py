"""controller.kube.access.KubeAccess against the real API server: the status schema's limits (the CRD's
20-line attempts[].run.logTail) make a patch fail with 422, which must end in a trimmed status rather
than a crash loop; a Secret the operator may not read is a SecretAccessDenied naming the RBAC fix."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from controller.api.errors import SecretAccessDenied
from controller.kube.access import (
    FINISHED_FIELD,
    GROUP,
    NOTIFIER_PLURAL,
    VERSION,
    Connection,
    KubeAccess,
    _refused_selector,
    api_client,
)
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


def test_the_listings_select_unfinished_or_finished_jobs_on_the_api_server(
    control_plane: ControlPlane, crds_installed: list[Path], namespace: str
) -> None:
    """Issue 30: the CRD's selectable status.finishedAt lets the periodic listings skip finished
    jobs at the server; a job without status (just applied) counts as unfinished."""
    for name in ("fresh", "running", "done"):
        control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(valid_job(name)))
    kube = access(control_plane, control_plane.admin_token)
    assert asyncio.run(kube.patch_status(namespace, "running", {"phase": "Running"}))
    done = {"phase": "Deleted", "outcome": "Succeeded", "finishedAt": "2026-12-01T00:00:00Z"}
    assert asyncio.run(kube.patch_status(namespace, "done", done))

    def names(finished: bool | None) -> list[str]:
        jobs = asyncio.run(kube.list_jobs([namespace], finished=finished))
        return sorted(j["metadata"]["name"] for j in jobs)

    assert names(False) == ["fresh", "running"]
    assert names(True) == ["done"]
    assert names(None) == ["done", "fresh", "running"]
    assert kube._no_field_selector is False  # the server selected; no fallback was needed
    # As a user selects (docs/crd-reference.md).
    got = control_plane.kubectl(
        "get", "tbj", "-n", namespace, "--field-selector", "status.phase=Running", "-o", "name"
    ).stdout.split()
    assert got == ["taobrevjob.taobrev.io/running"]


def test_a_field_the_crd_does_not_declare_is_refused_as_the_fallback_expects(
    control_plane: ControlPlane, crds_installed: list[Path], namespace: str
) -> None:
    """The fallback (list all, filter in process) keys on the API server's refusal text; the
    TaoBrevNotifier CRD declares no selectable field, so it gets the real refusal."""
    custom = k8s.CustomObjectsApi(
        api_client(
            Connection(
                server=control_plane.server,
                ca_path=str(control_plane.ca_file),
                token_path=None,
                token=control_plane.admin_token,
            )
        )
    )
    with pytest.raises(ApiException) as info:
        custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, NOTIFIER_PLURAL, field_selector=f"{FINISHED_FIELD}="
        )
    assert _refused_selector(info.value), (info.value.status, info.value.body)
