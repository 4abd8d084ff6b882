"""spec.debug.keepInstanceOnFailure and the cancel annotation (issue 27), pure: a Program failure's
instance is kept with its secrets removed until a deadline in status, then deleted, and sooner on
deletion, a cancel or a reached budget; `taobrev.io/cancel` ends a run Canceled like a deletion,
without the object going away."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from controller.api import naming, reasons
from controller.api.errors import SpecError
from controller.api.models import TaoBrevJobSpec
from controller.api.spec_parse import parse_spec
from controller.api.status import TaoBrevJobStatus
from controller.api.vocabulary import FailureClass, Outcome
from controller.brev.client import DELETING, FAILURE
from controller.fleet.orphans import Memory, Policy, references_of
from controller.fleet.orphans import decide as sweep
from controller.lifecycle.conditions import INSTANCE_RELEASED
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import (
    Action,
    ActionFailure,
    CleanupWorkload,
    CreateInstance,
    Decision,
    DeleteInstance,
    StopContainer,
    UploadResults,
    UploadSummary,
)
from tests.unit.test_machine import INST, T0, at
from tests.unit.test_recovery import inst, rspec, running_job, step

KEEP = {"keepInstanceOnFailure": "30m"}


def kspec(debug: dict[str, Any] | None = KEEP, **changes: Any) -> TaoBrevJobSpec:
    base = rspec(recovery={"maxAttempts": 1}).model_dump(by_alias=True, exclude_none=True, mode="json")
    if debug is not None:
        base["debug"] = debug
    return parse_spec({**base, **changes})


def answer(action: Action) -> dict[str, Any]:
    """What a successful action brings back into the next observation."""
    match action:
        case UploadResults():
            return {"upload": UploadSummary(objects=2, bytes=20)}
        case CleanupWorkload(keep=keep):
            return {"cleaned": True, "kept_for_debug": keep}
        case DeleteInstance():
            return {"delete_not_found": True}
        case StopContainer():
            return {"container_stopped": True}
    return {}


def drive(d: Decision, spec: TaoBrevJobSpec, now: datetime, **obs: Any) -> Decision:
    """Performs each decision's actions (all succeed) until one asks for none."""
    for _ in range(12):
        if not d.actions:
            return d
        got: dict[str, Any] = {"completed": tuple(type(a).__name__ for a in d.actions)}
        for action in d.actions:
            got |= answer(action)
        d = step(d.status, spec, instance=inst(), now=now, **(obs | got))
    raise AssertionError("no end")


def failed_and_kept(spec: TaoBrevJobSpec, *, exit_code: int = 1) -> Decision:
    exited = step(running_job(), spec, instance=inst(), exit_code=exit_code, completed=("WaitForExit",))
    assert exited.status.run_outcome == Outcome.FAILED
    return drive(exited, spec, T0)


def test_a_program_failure_keeps_the_instance_with_its_secrets_removed_until_the_deadline() -> None:
    spec = kspec()
    d = failed_and_kept(spec)
    rec = d.status.instance
    # Uploaded first; then the cleanup that keeps (must succeed), never a delete.
    assert d.status.upload.uploaded_at is not None and d.status.run.cleaned_up_at is not None
    assert rec.kept_until == T0 + timedelta(minutes=30)
    assert rec.delete_requested_at is None
    assert (d.status.phase, d.status.outcome, d.status.failure_class) == (
        Phase.DELETED,
        Outcome.FAILED,
        FailureClass.PROGRAM,
    )
    assert d.status.finished_at is None  # the finalizer holds: deleting the object deletes it
    note = d.status.teardown.message or ""
    assert f"brev shell {INST}" in note and "2026" in note and "secrets were removed" in note
    released = next(c for c in d.status.conditions if c.type == INSTANCE_RELEASED)
    assert (released.reason, released.message) == (reasons.KEPT_FOR_DEBUGGING, note)
    assert any(e.reason == reasons.KEPT_FOR_DEBUGGING for e in d.events)
    assert "keptUntil" in d.status.to_k8s()["attempts"][-1]["instance"]
    # Back at the deadline at the latest, and at least every billing step.
    assert d.requeue_after is not None and 1 <= d.requeue_after <= 600

    later = step(d.status, spec, instance=inst(), now=T0 + timedelta(minutes=20))
    assert later.actions == () and later.status.instance.keep_ended_at is None
    due = step(later.status, spec, instance=inst(), now=T0 + timedelta(minutes=30))
    assert [type(a) for a in due.actions] == [DeleteInstance]
    assert due.status.instance.keep_ended_at == T0 + timedelta(minutes=30)
    assert any(e.reason == reasons.KEEP_ENDED for e in due.events)
    done = drive(due, spec, T0 + timedelta(minutes=30))
    assert done.status.finished_at is not None and done.status.outcome == Outcome.FAILED
    assert done.status.reason == reasons.TRAINING_FAILED


def test_the_kept_cleanup_keeps_the_container_unless_it_carries_secret_env() -> None:
    spec = kspec()
    exited = step(running_job(), spec, instance=inst(), exit_code=1, completed=("WaitForExit",))
    uploaded = step(
        exited.status, spec, instance=inst(), completed=("UploadResults",), **answer(UploadResults(""))
    )
    (cleanup,) = uploaded.actions
    assert cleanup == CleanupWorkload(INST, must_succeed=True, keep=True, keep_container=True)
    secret_env = kspec(
        credentials={
            "ngcApiKey": {"name": "ngc"},
            "s3": {"name": "s3"},
            "extraEnv": [{"name": "HF_TOKEN", "secretKeyRef": {"name": "hf", "key": "t"}}],
        }
    )
    uploaded = step(
        step(running_job(), secret_env, instance=inst(), exit_code=1, completed=("WaitForExit",)).status,
        secret_env,
        instance=inst(),
        completed=("UploadResults",),
        **answer(UploadResults("")),
    )
    (cleanup,) = uploaded.actions
    assert cleanup == CleanupWorkload(INST, must_succeed=True, keep=True, keep_container=False)
    assert "was removed" in drive(uploaded, secret_env, T0).status.teardown.message  # type: ignore[operator]


def test_a_cleanup_that_fails_keeps_nothing_and_deletes_at_once() -> None:
    spec = kspec()
    exited = step(running_job(), spec, instance=inst(), exit_code=1, completed=("WaitForExit",))
    uploaded = step(
        exited.status, spec, instance=inst(), completed=("UploadResults",), **answer(UploadResults(""))
    )
    failure = ActionFailure("CleanupWorkload", reasons.CLEANUP_FAILED, "rm failed", permanent=False)
    d = step(uploaded.status, spec, instance=inst(), failure=failure)
    assert [type(a) for a in d.actions] == [DeleteInstance]
    assert d.status.instance.kept_until is None


@pytest.mark.parametrize(
    ("spec", "exit_code", "why"),
    [
        (kspec(debug=None), 1, "off by default"),
        (kspec(), 0, "no failure"),
        (
            kspec(instance={"ephemeral": {"gpuName": "L40S"}, "onCompletion": "Retain"}, debug=None),
            1,
            "retained",
        ),
    ],
)
def test_nothing_is_kept_without_the_field_after_success_or_for_a_retained_instance(
    spec: TaoBrevJobSpec, exit_code: int, why: str
) -> None:
    d = failed_and_kept(spec, exit_code=exit_code) if exit_code else None
    if d is None:
        ok = step(running_job(), spec, instance=inst(), exit_code=0, completed=("WaitForExit",))
        d = drive(ok, spec, T0)
    assert d.status.instance.kept_until is None, why
    assert all(not (isinstance(a, CleanupWorkload) and a.keep) for a in d.actions), why


def test_an_infrastructure_failure_is_not_kept() -> None:
    spec = kspec()
    lost = step(running_job(), spec, instance=inst(FAILURE))
    assert lost.status.failure_class == FailureClass.INFRASTRUCTURE
    assert drive(lost, spec, T0).status.instance.kept_until is None


@pytest.mark.parametrize(
    ("obs", "why"),
    [
        ({"deleting": True}, "being deleted"),
        ({"cancel_requested": "2026-01-01T00:10:00Z"}, "canceled"),
        ({"instance": inst(DELETING)}, "not by this job"),
    ],
)
def test_deletion_a_cancel_or_anothers_delete_ends_the_keep_at_once(obs: dict[str, Any], why: str) -> None:
    spec = kspec()
    kept = failed_and_kept(spec)
    now = T0 + timedelta(minutes=5)
    d = step(kept.status, spec, **({"instance": inst(), "now": now} | obs))
    assert d.status.instance.keep_ended_at == now
    assert why in (d.status.teardown.message or "")
    assert [type(a) for a in d.actions] == ([DeleteInstance] if "instance" not in obs else [])
    assert d.status.run_outcome == Outcome.FAILED and d.status.reason == reasons.TRAINING_FAILED


def test_a_budget_reached_while_kept_deletes_it_at_once() -> None:
    spec = kspec(budget={"maxBilledSeconds": 1200})
    kept = failed_and_kept(spec)
    # The job was billed from T0 (running_job's create): the kept time counts.
    assert kept.requeue_after is not None and kept.requeue_after <= 1200
    d = step(kept.status, spec, instance=inst(), now=T0 + timedelta(seconds=1200))
    assert [type(a) for a in d.actions] == [DeleteInstance]
    assert "spec.budget.maxBilledSeconds" in (d.status.teardown.message or "")


def test_the_deadline_survives_a_restart_and_deletingseconds_counts_from_its_end() -> None:
    spec = kspec()
    kept = failed_and_kept(spec)
    stored = TaoBrevJobStatus.from_k8s(kept.status.to_k8s())
    assert stored.instance.kept_until == kept.status.instance.kept_until
    end = T0 + timedelta(minutes=30)
    due = step(stored, spec, instance=inst(), now=end)
    # The delete lingers a while: no InstanceNotReleased warning for the 30 min kept.
    slow = step(due.status, spec, instance=inst(DELETING), now=end + timedelta(seconds=60))
    assert not any(e.reason == reasons.INSTANCE_NOT_RELEASED for e in slow.events)


def test_the_spec_refuses_a_keep_it_cannot_honour() -> None:
    with pytest.raises(SpecError, match=r"spec.debug.keepInstanceOnFailure: '25h'.*24h"):
        kspec(debug={"keepInstanceOnFailure": "25h"})
    with pytest.raises(SpecError, match="only for an instance the job deletes"):
        kspec(instance={"ephemeral": {}, "onCompletion": "Retain"})
    with pytest.raises(SpecError, match="only for an instance the job deletes"):
        kspec(instance={"reuse": {"name": "box"}})
    assert kspec(debug={"keepInstanceOnFailure": "90"}).debug.keep_seconds() == 90  # type: ignore[union-attr]


def test_the_sweeper_holds_a_kept_instance_until_its_deadline_then_not() -> None:
    kept = failed_and_kept(kspec())
    status = kept.status.to_k8s()
    name = naming.instance_name("ns", "job", "uid-1", cluster_id="cluster")
    status["attempts"][-1]["instance"]["name"] = name
    job = {"metadata": {"namespace": "ns", "name": "job", "uid": "uid-1"}, "spec": {}, "status": status}

    def swept(now: datetime) -> list[str]:
        plan = sweep(
            listing=[inst(name=name)],
            references=[references_of(job, "cluster")],
            retained={},
            memory=Memory(),
            now=now,
            cluster_id="cluster",
            policy=Policy.DELETE,
            grace=0.0,
        )
        return [f.instance.name for f in plan.delete]

    assert swept(T0 + timedelta(minutes=29)) == []  # an unfinished job's kept instance: in use
    assert swept(T0 + timedelta(minutes=31)) == [name]  # past its deadline: no longer held
    # A keep that ended early (deletion, cancel, budget) holds it no longer either.
    status["attempts"][-1]["instance"]["keepEndedAt"] = "2026-01-01T00:05:00Z"
    assert swept(T0 + timedelta(minutes=10)) == [name]


# --- the cancel annotation ---------------------------------------------------------------------

CANCEL = "2026-01-01T00:00:30Z"


def test_a_cancel_ends_a_running_job_canceled_uploads_deletes_and_finishes() -> None:
    spec = kspec(debug=None)
    d = step(running_job(), spec, instance=inst(), cancel_requested=CANCEL)
    assert (d.status.run_outcome, d.status.reason) == (Outcome.CANCELED, reasons.CANCELED_BY_USER)
    assert "taobrev.io/cancel" in (d.status.message or "") and CANCEL in (d.status.message or "")
    assert StopContainer in [type(a) for a in d.actions]  # the deletion path: stop within the grace
    done = drive(
        step(
            d.status,
            spec,
            instance=inst(),
            cancel_requested=CANCEL,
            exit_code=143,
            completed=("WaitForExit",),
        ),
        spec,
        T0,
        cancel_requested=CANCEL,
    )
    assert done.status.finished_at is not None
    assert (done.status.outcome, done.status.reason, done.status.failure_class) == (
        Outcome.CANCELED,
        reasons.CANCELED_BY_USER,
        None,
    )
    assert done.status.upload.uploaded_at is not None and done.status.instance.deleted_at is not None
    assert done.requeue_after is None


def test_a_canceled_failure_is_not_kept_and_a_cancel_after_the_end_changes_nothing() -> None:
    spec = kspec()
    d = step(running_job(), spec, instance=inst(), cancel_requested=CANCEL)
    assert d.status.instance.kept_until is None
    ok = step(running_job(), spec, instance=inst(), exit_code=0, completed=("WaitForExit",))
    late = step(ok.status, spec, instance=inst(), cancel_requested=CANCEL)
    assert late.status.run_outcome == Outcome.SUCCEEDED


def test_a_queued_job_canceled_ends_canceled_without_creating_anything() -> None:
    spec = kspec(debug=None)
    pending = at(Phase.PENDING, instance_id=None)
    d = step(pending, spec, instance=None, cancel_requested=CANCEL)
    assert (d.status.outcome, d.status.reason) == (Outcome.CANCELED, reasons.CANCELED_BY_USER)
    assert d.status.finished_at is not None and d.status.phase == Phase.DELETED
    assert not any(isinstance(a, CreateInstance) for a in d.actions)
    assert d.status.instance.create_requested_at is None


def test_a_cancel_between_attempts_starts_no_new_attempt() -> None:
    spec = rspec(recovery={"maxAttempts": 3})
    lost = step(running_job(), spec, instance=inst(FAILURE))
    assert lost.status.phase == Phase.PROVISIONING  # the attempt ended, recovery goes on
    d = step(lost.status, spec, instance=inst(FAILURE), cancel_requested=CANCEL)
    assert d.status.run_outcome == Outcome.CANCELED
    for _ in range(6):
        got = {"completed": tuple(type(a).__name__ for a in d.actions)}
        for a in d.actions:
            got |= answer(a)
        d = step(d.status, spec, instance=None, cancel_requested=CANCEL, **got)
        assert not any(isinstance(a, CreateInstance) for a in d.actions)
    assert len(d.status.attempts) == 1 and d.status.finished_at is not None
