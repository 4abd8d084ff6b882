"""KubeAccess's sweeper methods over fakes of the kubernetes client: every page of the job list
(or an error, never a partial list), the cluster uid, and the ConfigMap's optimistic writes."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
import structlog.testing
from kubernetes.client.rest import ApiException

from controller.api.errors import KubeAccessDenied, KubeUnavailable
from controller.app import _kube_system_uid
from controller.kube.access import GROUP, PLURAL, VERSION, KubeAccess


class FakeCustom:
    def __init__(self, pages: list[dict[str, Any] | BaseException]) -> None:
        self.pages = list(pages)
        self.calls: list[dict[str, Any]] = []

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **kwargs: Any) -> Any:
        assert (group, version, plural) == (GROUP, VERSION, PLURAL)
        self.calls.append(kwargs)
        page = self.pages.pop(0)
        if isinstance(page, BaseException):
            raise page
        return page


class FakeCore:
    def __init__(self, *, uid: str | None = "ks-uid", error: BaseException | None = None) -> None:
        self.uid = uid
        self.error = error
        self.maps: dict[tuple[str, str], Any] = {}
        self.writes: list[tuple[str, str | None]] = []

    def read_namespace(self, name: str, **_: Any) -> Any:
        if self.error is not None:
            raise self.error
        return SimpleNamespace(metadata=SimpleNamespace(uid=self.uid))

    def read_namespaced_config_map(self, name: str, namespace: str, **_: Any) -> Any:
        if (namespace, name) not in self.maps:
            raise ApiException(status=404, reason="Not Found")
        return self.maps[(namespace, name)]

    def create_namespaced_config_map(self, namespace: str, body: Any, **_: Any) -> None:
        self.writes.append(("create", body.metadata.resource_version))
        body.metadata.resource_version = "1"
        self.maps[(namespace, body.metadata.name)] = body

    def replace_namespaced_config_map(self, name: str, namespace: str, body: Any, **_: Any) -> None:
        self.writes.append(("replace", body.metadata.resource_version))
        if body.metadata.resource_version != self.maps[(namespace, name)].metadata.resource_version:
            raise ApiException(status=409, reason="Conflict")
        body.metadata.resource_version = str(int(body.metadata.resource_version) + 1)
        self.maps[(namespace, name)] = body


def job(name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": name}}


def test_list_jobs_follows_every_page() -> None:
    custom = FakeCustom(
        [
            {"items": [job("a"), job("b")], "metadata": {"continue": "tok"}},
            {"items": [job("c")], "metadata": {}},
        ]
    )
    jobs = asyncio.run(KubeAccess(core=FakeCore(), custom=custom).list_jobs(page_size=2))
    assert [j["metadata"]["name"] for j in jobs] == ["a", "b", "c"]
    assert [c.get("_continue") for c in custom.calls] == [None, "tok"]
    assert all(c["limit"] == 2 for c in custom.calls)


def test_map_jobs_keeps_what_each_returns_page_by_page_and_list_jobs_drops_managed_fields() -> None:
    """The admission ledger and the sweep keep what they read of each job, not every body (10,000
    bodies at every relist: issue 30); a listed body carries no managedFields."""

    def pages() -> list[dict[str, Any] | BaseException]:
        heavy = {"metadata": {"namespace": "ns", "name": "b", "uid": "b", "managedFields": [{}]}}
        return [
            {"items": [job("a"), heavy], "metadata": {"continue": "tok"}},
            {"items": [job("c")], "metadata": {}},
        ]

    seen: list[str] = []

    def name_unless_b(body: dict[str, Any]) -> str | None:
        seen.append(body["metadata"]["name"])
        return None if body["metadata"]["name"] == "b" else body["metadata"]["name"].upper()

    kube = KubeAccess(core=FakeCore(), custom=FakeCustom(pages()))
    assert asyncio.run(kube.map_jobs(name_unless_b, page_size=2)) == ["A", "C"]
    assert seen == ["a", "b", "c"]
    listed = asyncio.run(KubeAccess(core=FakeCore(), custom=FakeCustom(pages())).list_jobs())
    assert [j["metadata"] for j in listed][1] == {"namespace": "ns", "name": "b", "uid": "b"}


def done(name: str) -> dict[str, Any]:
    return {**job(name), "status": {"finishedAt": "2026-12-01T00:00:00Z"}}


# The API server's answer to a field selector on a field the CRD does not declare selectable
# (tests/e2e/test_crd.py checks this text against the real kube-apiserver).
REFUSAL = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    b'"message":"field label not supported: status.finishedAt","reason":"BadRequest","code":400}'
)


def test_finished_selects_on_the_crds_field_at_the_api_server() -> None:
    custom = FakeCustom([{"items": [job("a")], "metadata": {}}, {"items": [done("b")], "metadata": {}}])
    kube = KubeAccess(core=FakeCore(), custom=custom)
    assert [j["metadata"]["name"] for j in asyncio.run(kube.list_jobs(finished=False))] == ["a"]
    assert [j["metadata"]["name"] for j in asyncio.run(kube.list_jobs(finished=True))] == ["b"]
    assert [c.get("field_selector") for c in custom.calls] == ["status.finishedAt=", "status.finishedAt!="]


def test_a_refused_selector_lists_everything_filters_here_and_warns_once() -> None:
    # Kubernetes before 1.31, or a CRD applied without selectableFields: the same jobs, read whole.
    everything = {"items": [job("a"), done("b"), job("c")], "metadata": {}}
    custom = FakeCustom([ApiException(status=400, reason="Bad Request"), everything, everything, everything])
    custom.pages[0].body = REFUSAL  # type: ignore[union-attr]
    kube = KubeAccess(core=FakeCore(), custom=custom)
    with structlog.testing.capture_logs() as logs:
        unfinished = asyncio.run(kube.list_jobs(finished=False))
        finished = asyncio.run(kube.list_jobs(finished=True))
        whole = asyncio.run(kube.list_jobs())
    assert [j["metadata"]["name"] for j in unfinished] == ["a", "c"]
    assert [j["metadata"]["name"] for j in finished] == ["b"]
    assert len(whole) == 3
    assert [c.get("field_selector") for c in custom.calls] == ["status.finishedAt=", None, None, None]
    warnings = [e for e in logs if e["event"] == "job_list_field_selector_refused"]
    assert len(warnings) == 1
    assert "selectableFields" in warnings[0]["fix"]


def test_another_bad_request_is_not_taken_for_a_refused_selector() -> None:
    custom = FakeCustom([ApiException(status=400, reason="Bad Request")])
    with pytest.raises(KubeUnavailable, match="400"):
        asyncio.run(KubeAccess(core=FakeCore(), custom=custom).list_jobs(finished=False))
    assert len(custom.calls) == 1


def test_a_failed_page_fails_the_whole_list() -> None:
    custom = FakeCustom(
        [{"items": [job("a")], "metadata": {"continue": "tok"}}, ApiException(status=503, reason="Busy")]
    )
    with pytest.raises(KubeUnavailable, match="listing TaoBrevJobs"):
        asyncio.run(KubeAccess(core=FakeCore(), custom=custom).list_jobs())


def test_a_forbidden_list_names_the_rbac_fix() -> None:
    custom = FakeCustom([ApiException(status=403, reason="Forbidden")])
    with pytest.raises(KubeAccessDenied, match="RBAC"):
        asyncio.run(KubeAccess(core=FakeCore(), custom=custom).list_jobs())


def test_namespace_uid_and_its_failure_naming_the_setting() -> None:
    assert asyncio.run(KubeAccess(core=FakeCore(), custom=FakeCustom([])).namespace_uid("kube-system")) == (
        "ks-uid"
    )
    denied = FakeCore(error=ApiException(status=403, reason="Forbidden"))
    with pytest.raises(KubeAccessDenied, match="TAOBREV_CLUSTER_ID"):
        asyncio.run(KubeAccess(core=denied, custom=FakeCustom([])).namespace_uid("kube-system"))


def test_config_map_is_created_then_replaced_at_the_version_read() -> None:
    core = FakeCore()
    kube = KubeAccess(core=core, custom=FakeCustom([]))
    assert asyncio.run(kube.read_config_map("sys", "rec")) is None
    asyncio.run(kube.write_config_map("sys", "rec", {"a": "1"}, None))
    found = asyncio.run(kube.read_config_map("sys", "rec"))
    assert found == ({"a": "1"}, "1")
    asyncio.run(kube.write_config_map("sys", "rec", {"a": "1", "b": "2"}, "1"))
    with pytest.raises(KubeUnavailable, match="409"):
        asyncio.run(kube.write_config_map("sys", "rec", {}, "1"))  # someone wrote in between
    assert core.writes == [("create", None), ("replace", "1"), ("replace", "1")]
    assert asyncio.run(kube.read_config_map("sys", "rec")) == ({"a": "1", "b": "2"}, "2")


def test_a_cluster_id_that_cannot_be_derived_stops_start_up_with_the_fix() -> None:
    denied = KubeAccess(
        core=FakeCore(error=ApiException(status=403, reason="Forbidden")), custom=FakeCustom([])
    )
    uid, why = asyncio.run(_kube_system_uid(denied))
    assert uid == ""
    assert isinstance(why, KubeAccessDenied)  # at once: a denial does not pass by retrying
    ok = KubeAccess(core=FakeCore(uid="ks-uid"), custom=FakeCustom([]))
    assert asyncio.run(_kube_system_uid(ok)) == ("ks-uid", None)
