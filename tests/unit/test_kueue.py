"""Admission by a real Kueue, the pure half (controller/fleet/kueue.py and the lifecycle's part):
the Workload a job's demand becomes, what Kueue's conditions on it mean, the status patches that
answer Kueue, and an eviction of an admitted job — stopped through teardown, its instance deleted
before the quota goes back, nothing created until Kueue admits it again, then resumed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from controller.api import reasons
from controller.fleet import admission, kueue
from controller.fleet.admission import Admission
from controller.fleet.kueue import Demand, State, WorkloadView
from controller.lifecycle import recovery
from controller.lifecycle.decision_pass import Pass
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import (
    CreateInstance,
    DeleteInstance,
    Observation,
    StopContainer,
    UploadResults,
    UploadSummary,
    WaitForExit,
)
from tests.unit.test_machine import T0, TUN, at, kinds
from tests.unit.test_recovery import A2, ID, SPEC, P, inst, rspec, running_job, step

WAITING = Admission(False, admission.WAITING_FOR_KUEUE, "waiting for Kueue (LocalQueue team-a): no quota")
ADMITTED = Admission(True, admission.ADMITTED, "admitted by Kueue (ClusterQueue team-a)")


def workload(*conditions: tuple[str, str, str], reserved: bool = False, rv: str = "7") -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": t,
                "status": s,
                "reason": r,
                "message": f"{t} {r}",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
            for t, s, r in conditions
        ]
    }
    if reserved:
        status["admission"] = {"clusterQueue": "team-a", "podSetAssignments": [{"name": "instance"}]}
    return {"metadata": {"name": "taobrevjob-j-12345", "resourceVersion": rv}, "status": status}


# --- the Workload -------------------------------------------------------------------------------


def test_the_workload_is_owned_by_the_job_and_asks_for_its_gpus_of_the_named_model() -> None:
    body = kueue.workload_body(
        "ns", "job", "uid-1", Demand("team-a", 4, gpu_name="A100 80GB", priority=7), "img:1"
    )
    meta, spec = body["metadata"], body["spec"]
    assert body["apiVersion"] == "kueue.x-k8s.io/v1beta2" and body["kind"] == "Workload"
    assert meta["name"] == kueue.workload_name("job", "uid-1")
    assert meta["labels"][kueue.JOB_UID_LABEL] == "uid-1"
    (owner,) = meta["ownerReferences"]
    assert owner == {
        "apiVersion": "taobrev.io/v1alpha1",
        "kind": "TaoBrevJob",
        "name": "job",
        "uid": "uid-1",
        "controller": True,
    }
    assert spec["queueName"] == "team-a" and spec["priority"] == 7 and "priorityClassRef" not in spec
    (podset,) = spec["podSets"]
    assert podset["count"] == 1  # one instance: a ClusterQueue covering `pods` counts instances
    pod = podset["template"]["spec"]
    assert pod["containers"][0]["resources"]["requests"] == {"taobrev.io/gpu": "4"}
    assert pod["nodeSelector"] == {"taobrev.io/gpu-name": "a100-80gb"}


def test_a_priority_class_label_becomes_the_class_reference_with_its_value() -> None:
    spec = kueue.workload_body("ns", "j", "u", Demand("q", 1, priority=1000, priority_class="urgent"), "i")[
        "spec"
    ]
    assert spec["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "urgent",
    }
    assert spec["priority"] == 1000
    assert "nodeSelector" not in spec["podSets"][0]["template"]["spec"]  # no gpuName: any flavor


def test_workload_names_are_stable_per_uid_and_valid_for_long_job_names() -> None:
    assert kueue.workload_name("j", "u1") == kueue.workload_name("j", "u1") != kueue.workload_name("j", "u2")
    long = kueue.workload_name("x" * 253, "u")
    assert len(long) <= 253 and long.startswith("taobrevjob-x")


def test_only_labelled_jobs_that_create_their_instance_are_kueues() -> None:
    labels = {kueue.QUEUE_LABEL: "team-a"}
    assert kueue.managed(labels, creates_instance=True)
    assert not kueue.managed(labels, creates_instance=False)  # a reused instance counts against nothing
    assert not kueue.managed({}, creates_instance=True)
    body = {"metadata": {"labels": labels}, "spec": {"instance": {"reuse": {"name": "box"}}}}
    assert not kueue.managed_body(body)
    assert kueue.managed_body({"metadata": {"labels": labels}, "spec": {"instance": {"ephemeral": {}}}})


# --- Kueue's answers --------------------------------------------------------------------------------


def test_states_follow_kueues_conditions() -> None:
    assert WorkloadView.of(workload()).state is State.PENDING
    pending = WorkloadView.of(workload(("QuotaReserved", "False", "Pending")))
    assert pending.state is State.PENDING
    assert pending.waiting_message("team-a") == (
        "waiting for Kueue (LocalQueue team-a, Workload taobrevjob-j-12345): QuotaReserved Pending"
    )
    admitted = workload(
        ("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"), reserved=True
    )
    assert WorkloadView.of(admitted).state is State.ADMITTED
    assert WorkloadView.of(admitted).cluster_queue == "team-a"
    # Quota reserved but an admission check pending: not admitted yet.
    checking = workload(
        ("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "False", "UnsatisfiedChecks"), reserved=True
    )
    assert WorkloadView.of(checking).state is State.PENDING
    evicted = workload(("Admitted", "True", "Admitted"), ("Evicted", "True", "Preempted"), reserved=True)
    assert WorkloadView.of(evicted).state is State.EVICTED
    assert (
        WorkloadView.of(workload(("Evicted", "True", "x"), ("Finished", "True", "Succeeded"))).state
        is State.FINISHED
    )


def test_the_release_patch_gives_the_quota_back_as_kueues_jobframework_does() -> None:
    view = WorkloadView.of(
        workload(
            ("QuotaReserved", "True", "QuotaReserved"),
            ("Admitted", "True", "Admitted"),
            ("Evicted", "True", "Preempted"),
            reserved=True,
        )
    )
    patch = kueue.release_patch(view, T0)
    assert patch["metadata"] == {"resourceVersion": "7"}  # a Workload changed since is re-read
    assert patch["status"]["admission"] is None
    conds = {c["type"]: c for c in patch["status"]["conditions"]}
    assert (conds["QuotaReserved"]["status"], conds["QuotaReserved"]["reason"]) == ("False", "Pending")
    assert conds["Admitted"]["status"] == "False"
    assert (conds["Requeued"]["status"], conds["Requeued"]["reason"]) == ("True", "Preempted")
    assert conds["Evicted"]["status"] == "True"  # Kueue resets it when it admits the job again
    assert conds["Evicted"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # untouched
    assert conds["QuotaReserved"]["lastTransitionTime"] == "2026-11-29T12:00:00Z"


def test_the_finished_patch_says_succeeded_or_failed() -> None:
    view = WorkloadView.of(workload(("Admitted", "True", "Admitted"), reserved=True))
    for ok, reason in ((True, "Succeeded"), (False, "Failed")):
        (fin,) = [
            c
            for c in kueue.finished_patch(view, ok, "done", T0)["status"]["conditions"]
            if c["type"] == "Finished"
        ]
        assert (fin["status"], fin["reason"], fin["message"]) == ("True", reason, "done")


# --- an eviction, in the lifecycle ---------------------------------------------------------------

WHY = "Preempted to accommodate a workload (UID: u-9) due to prioritization in the ClusterQueue"


def evicted_and_stopped(spec: Any = SPEC) -> Any:
    """A running job Kueue evicts: stop, exit, upload, attempt ended."""
    status = step(running_job(), spec, instance=inst()).status
    d = step(status, spec, instance=inst(), evicted=WHY, now=T0 + P)
    assert kinds(d) == [StopContainer, WaitForExit]
    assert d.status.reason == reasons.KUEUE_EVICTED
    assert d.status.outcome is None and d.status.phase is Phase.RUNNING
    d = step(d.status, spec, instance=inst(), evicted=WHY, now=T0 + P, exit_code=143, container_stopped=True)
    assert kinds(d) == [UploadResults]  # results and checkpoints go to S3 before the instance goes
    d = step(d.status, spec, instance=inst(), evicted=WHY, now=T0 + P * 2, upload=UploadSummary(3, 1024))
    assert d.status.phase is Phase.PROVISIONING and d.status.outcome is None
    assert d.status.attempts[0].ended_reason == reasons.KUEUE_EVICTED
    assert WHY in (d.status.attempts[0].ended_message or "")
    assert d.status.attempts[0].upload.uploaded_at == T0 + P * 2
    return d


def test_an_evicted_running_job_stops_uploads_and_waits_for_kueue_with_nothing_created() -> None:
    d = evicted_and_stopped()
    # The old instance is deleted and confirmed first (the quota is Kueue's again only then).
    d = step(d.status, instance=inst(), evicted=WHY, now=T0 + P * 3)
    assert kinds(d) == [DeleteInstance]
    d = step(d.status, instance=None, evicted=WHY, now=T0 + P * 3, delete_not_found=True)
    assert d.status.instance.name == A2 and d.status.attempts[0].instance.deleted_at is not None
    assert recovery.awaiting_readmission(d.status)
    # Hours in Kueue's queue: nothing created, no Provisioning deadline of ours.
    for hours in (0, 1, 30):
        w = step(
            d.status, instance=None, evicted=WHY, admission=WAITING, now=T0 + timedelta(hours=hours) + P * 4
        )
        assert CreateInstance not in kinds(w) and w.status.outcome is None
        assert w.status.reason == reasons.KUEUE_EVICTED
        assert "nothing created until admitted again" in (w.status.message or "")
    # Admitted again: attempt 2 is created, and restores the checkpoints before it runs.
    later = T0 + timedelta(hours=31)
    d = step(w.status, instance=None, admission=ADMITTED, now=later)
    (create,) = d.actions
    assert isinstance(create, CreateInstance) and create.request.name == A2
    assert not recovery.awaiting_readmission(d.status)
    assert d.status.phase_times["Provisioning"] == later
    assert recovery.needs_restore(_pass_of(d.status))


def _pass_of(status: Any, spec: Any = SPEC) -> Pass:
    return Pass(spec, status, Observation(now=T0), TUN)


def test_an_eviction_spends_no_attempt_of_spec_recovery() -> None:
    spec = rspec(recovery={"maxAttempts": 2, "checkpointIntervalSeconds": 60})
    d = evicted_and_stopped(spec)
    d = step(d.status, spec, instance=None, now=T0 + P * 3, delete_not_found=True)
    d = step(d.status, spec, instance=None, admission=ADMITTED, now=T0 + P * 4)
    assert d.status.attempt == 2
    p = _pass_of(d.status, spec)
    assert recovery.attempt_no(p) == 2
    assert recovery.may_retry(p)  # one of two attempts spent: the eviction's was not the job's


def test_an_eviction_before_the_run_ends_the_attempt_without_stop_or_upload() -> None:
    status = at(Phase.WAITING_EXEC, create_requested_at=T0, instance_id=ID, brev_identity="alice")
    d = step(status, instance=inst(), evicted=WHY, now=T0 + P)
    assert StopContainer not in kinds(d) and UploadResults not in kinds(d)
    assert d.status.phase is Phase.PROVISIONING
    assert d.status.attempts[0].ended_reason == reasons.KUEUE_EVICTED


def test_an_eviction_after_the_run_ended_changes_nothing() -> None:
    status = step(running_job(), instance=inst()).status
    done = step(status, instance=inst(), exit_code=0, now=T0 + P).status
    assert done.phase is Phase.UPLOADING
    d = step(done, instance=inst(), evicted=WHY, now=T0 + P * 2)
    assert d.status.attempts[0].ended_reason == reasons.RUN_COMPLETED  # the run's own end stands
    assert d.status.run_outcome == "Succeeded" and kinds(d) == kinds(
        step(done, instance=inst(), now=T0 + P * 2)
    )


def test_only_an_eviction_or_an_admission_of_a_workload_of_ours_wakes_its_job() -> None:
    def labelled(*conditions: tuple[str, str, str], reserved: bool = False) -> dict[str, Any]:
        wl = workload(*conditions, reserved=reserved)
        wl["metadata"]["labels"] = {kueue.JOB_UID_LABEL: "uid-1"}
        return wl

    assert kueue.wakes(labelled(("Evicted", "True", "Preempted"), reserved=True)) == ("uid-1", State.EVICTED)
    admitted = labelled(
        ("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"), reserved=True
    )
    assert kueue.wakes(admitted) == ("uid-1", State.ADMITTED)
    assert kueue.wakes(labelled(("QuotaReserved", "False", "Pending"))) is None  # nothing to act on
    assert kueue.wakes(workload(("Evicted", "True", "Preempted"))) is None  # no owner uid: not ours
