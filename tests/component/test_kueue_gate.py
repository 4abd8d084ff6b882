"""The Kueue gate (controller/fleet/kueue_gate.py) against an in-memory Workload store that keeps
resourceVersions as the API server does: what it creates, what it answers, and what it writes back
to Kueue after the job's status changes."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from controller.api import reasons
from controller.api.spec_parse import parse_spec
from controller.api.status import TaoBrevJobStatus
from controller.api.vocabulary import Outcome
from controller.fleet import admission, kueue
from controller.fleet.kueue_gate import CLASS_NOT_FOUND, KueueGate

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
RAW = {
    "task": {
        "image": "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt",
        "networkArch": "n",
        "action": "train",
        "gpus": 2,
        "specContent": "a: 1\n",
    },
    "instance": {"ephemeral": {"gpuName": "H100"}},
    "data": {"resultsUri": "s3://bucket/out"},
    "credentials": {"ngcApiKey": {"name": "ngc"}, "s3": {"name": "s3"}},
    "priority": 5,
}
SPEC = parse_spec(RAW)
LABELS = {kueue.QUEUE_LABEL: "team-a"}


class Store:
    """Workloads by (namespace, name), each write bumping resourceVersion; a patch computed from
    an older version is refused (409), as a merge patch carrying resourceVersion is."""

    def __init__(self, classes: Mapping[str, int] | None = None) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.classes = dict(classes or {})
        self.creates = 0
        self.patches: list[dict[str, Any]] = []
        self._rv = 0

    def _bump(self, obj: dict[str, Any]) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(dict(body))
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if key not in self.objects:
            self.creates += 1
            self._bump(obj)
            self.objects[key] = obj
        return copy.deepcopy(self.objects[key])

    async def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        obj = self.objects.get((namespace, name))
        if obj is None or patch["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            return False
        status = obj.setdefault("status", {})
        for key, value in patch["status"].items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = value
        self.patches.append(copy.deepcopy(dict(patch)))
        self._bump(obj)
        return True

    async def priority_class_value(self, name: str) -> int | None:
        return self.classes.get(name)

    # Kueue's side, by hand.
    def kueue_sets(self, name: str, *conditions: tuple[str, str, str], reserved: bool | None = None) -> None:
        obj = self.objects[("ns", name)]
        status = obj.setdefault("status", {})
        conds = [c for c in status.get("conditions", []) if c["type"] not in {t for t, _, _ in conditions}]
        conds += [{"type": t, "status": s, "reason": r, "message": f"{t}: {r}"} for t, s, r in conditions]
        status["conditions"] = conds
        if reserved is True:
            status["admission"] = {"clusterQueue": "cq-a", "podSetAssignments": [{"name": "instance"}]}
        elif reserved is False:
            status.pop("admission", None)
        self._bump(obj)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def gate(store: Store) -> KueueGate:
    return KueueGate(store, clock=lambda: NOW)


WL = kueue.workload_name("job", "uid-1")


def test_the_first_ask_creates_the_workload_and_the_job_waits_until_kueue_admits_it() -> None:
    store = Store()
    g = gate(store)
    v = run(g.verdict("ns", "job", "uid-1", LABELS, SPEC, RAW))
    assert (v.admitted, v.reason) == (False, admission.WAITING_FOR_KUEUE)
    body = store.objects[("ns", WL)]
    assert body["spec"]["priority"] == 5  # spec.priority without a class
    requests = body["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {kueue.GPU_RESOURCE: "2"}  # spec.task.gpus
    store.kueue_sets(WL, ("QuotaReserved", "False", "Pending"))
    v = run(g.verdict("ns", "job", "uid-1", LABELS, SPEC, RAW))
    assert not v.admitted and "QuotaReserved: Pending" in v.message
    store.kueue_sets(
        WL, ("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"), reserved=True
    )
    v = run(g.verdict("ns", "job", "uid-1", LABELS, SPEC, RAW))
    assert v.admitted and "ClusterQueue cq-a" in v.message
    assert store.creates == 1


def test_a_priority_class_sets_the_workloads_priority_and_a_missing_one_creates_nothing() -> None:
    store = Store(classes={"urgent": 900})
    labels = {**LABELS, kueue.PRIORITY_CLASS_LABEL: "nope"}
    v = run(gate(store).verdict("ns", "job", "uid-1", labels, SPEC, RAW))
    assert (v.admitted, v.reason) == (False, CLASS_NOT_FOUND)
    assert "kueue.x-k8s.io/priority-class=nope" in v.message and store.creates == 0
    labels[kueue.PRIORITY_CLASS_LABEL] = "urgent"
    run(gate(store).verdict("ns", "job", "uid-1", labels, SPEC, RAW))
    spec = store.objects[("ns", WL)]["spec"]
    assert spec["priority"] == 900 and spec["priorityClassRef"]["name"] == "urgent"


def test_a_suspended_job_gets_no_workload() -> None:
    store = Store()
    v = run(gate(store).verdict("ns", "job", "uid-1", LABELS, parse_spec({**RAW, "suspend": True}), RAW))
    assert (v.admitted, v.reason) == (False, admission.SUSPENDED) and store.creates == 0


def _evicted_status() -> TaoBrevJobStatus:
    """Attempt 1 ended by an eviction, its instance confirmed deleted; attempt 2 asked nothing."""
    status = TaoBrevJobStatus(phase="Provisioning", job_id="j")
    status.start_attempt("inst", created=True)
    status.current.end(NOW, reasons.KUEUE_EVICTED, "evicted by Kueue: Preempted")
    status.instance.deleted(NOW)
    status.start_attempt("inst-a2", created=True)
    return status


def test_an_eviction_is_reported_and_the_quota_goes_back_once_the_instance_is_gone() -> None:
    store = Store()
    g = gate(store)
    run(g.verdict("ns", "job", "uid-1", LABELS, SPEC, RAW))
    store.kueue_sets(
        WL, ("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"), reserved=True
    )
    assert run(g.evicted("ns", "job", "uid-1")) is None
    store.kueue_sets(WL, ("Evicted", "True", "Preempted"))
    assert run(g.evicted("ns", "job", "uid-1")) == "Evicted: Preempted"
    # Still running (nothing released yet): nothing written back.
    running = TaoBrevJobStatus(phase="Running", job_id="j")
    running.start_attempt("inst", created=True)
    run(g.settle("ns", "job", "uid-1", running))
    assert store.patches == []
    run(g.settle("ns", "job", "uid-1", _evicted_status()))
    assert len(store.patches) == 1
    status = store.objects[("ns", WL)]["status"]
    assert "admission" not in status
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["QuotaReserved"]["status"] == "False" and conds["Requeued"]["status"] == "True"
    run(g.settle("ns", "job", "uid-1", _evicted_status()))  # released already: nothing more
    assert len(store.patches) == 1


def test_a_finished_job_marks_its_workload_finished_once() -> None:
    store = Store()
    g = gate(store)
    run(g.verdict("ns", "job", "uid-1", LABELS, SPEC, RAW))
    done = TaoBrevJobStatus(
        phase="Deleted", job_id="j", finished_at=NOW, outcome=Outcome.FAILED, message="boom"
    )
    run(g.settle("ns", "job", "uid-1", done))
    run(g.settle("ns", "job", "uid-1", done))
    (patch,) = store.patches
    (fin,) = [c for c in patch["status"]["conditions"] if c["type"] == "Finished"]
    assert (fin["status"], fin["reason"], fin["message"]) == ("True", "Failed", "boom")


def test_a_write_that_lost_a_race_with_kueue_is_redone_on_the_next_pass() -> None:
    store = Store()
    g = gate(store)
    run(g.verdict("ns", "job", "uid-1", LABELS, SPEC, RAW))
    done = TaoBrevJobStatus(phase="Deleted", job_id="j", finished_at=NOW, outcome=Outcome.SUCCEEDED)
    real = store.patch_status

    async def raced(namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        store.kueue_sets(WL, ("QuotaReserved", "False", "Pending"))  # Kueue wrote in between
        return await real(namespace, name, patch)

    store.patch_status = raced  # type: ignore[method-assign]
    run(g.settle("ns", "job", "uid-1", done))
    assert store.patches == []
    store.patch_status = real  # type: ignore[method-assign]
    run(g.settle("ns", "job", "uid-1", done))
    assert [c["reason"] for c in store.patches[0]["status"]["conditions"] if c["type"] == "Finished"] == [
        "Succeeded"
    ]
