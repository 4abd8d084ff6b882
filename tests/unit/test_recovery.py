"""Recovery on a new instance (issue 12), pure: when an attempt ends instead of the run, the old
instance deleted and confirmed before the next is named and created, restore and resume,
checkpoint sync cadence, billed time, cost and budgets."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from controller.api import naming, reasons
from controller.api.models import TaoBrevJobSpec
from controller.api.spec_parse import parse_spec
from controller.api.status import AttemptRecord, TaoBrevJobStatus, merge_patch
from controller.api.vocabulary import Outcome
from controller.brev.client import FAILURE, RUNNING, STOPPED, Instance
from controller.lifecycle import budget, recovery
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import (
    ActionFailure,
    CheckpointRestore,
    CheckpointSync,
    CreateInstance,
    DeleteInstance,
    PrepareWorkload,
    ProbeExec,
    RestoreCheckpoints,
    StartContainer,
    StopContainer,
    SyncCheckpoints,
    UploadResults,
    UploadSummary,
    WaitForExit,
)
from tests.devenv import crdgen
from tests.unit.test_machine import IMAGE, INST, T0, TUN, at, decide, kinds

P = timedelta(seconds=TUN.poll_interval)
ID = "i-1"
A2 = naming.attempt_instance_name(INST, 2)
TUNABLES_LISTINGS = TUN.absent_listings


def rspec(
    *, recovery: dict[str, Any] | None = None, budget: dict[str, Any] | None = None, **instance: Any
) -> TaoBrevJobSpec:
    return parse_spec(
        {
            "task": {
                "image": IMAGE,
                "networkArch": "classification_pyt",
                "action": "train",
                "specContent": "a: 1\n",
            },
            "instance": instance or {"ephemeral": {"gpuName": "L40S"}},
            "data": {"resultsUri": "s3://bucket/out"},
            "credentials": {"ngcApiKey": {"name": "ngc"}, "s3": {"name": "s3"}},
            "timeouts": {"waitingExecSeconds": 600, "runningSeconds": 3600, "uploadingSeconds": 600},
            "recovery": recovery or {"maxAttempts": 2, "checkpointIntervalSeconds": 60},
            "budget": budget or {},
        }
    )


SPEC = rspec()


def inst(status: str = RUNNING, *, name: str = INST, id_: str = ID, type_: str = "g6.xlarge") -> Instance:
    return Instance(name=name, id=id_, status=status, gpu="L40S", instance_type=type_)


def running_job(*, created: bool = True, **fields: Any) -> TaoBrevJobStatus:
    """Attempt 1 running on an instance the job created (or reuses) and has seen."""
    base: dict[str, Any] = {
        "create_requested_at": T0 if created else None,
        "instance_id": ID,
        "brev_identity": "alice",
        "container_started_at": T0,
    }
    return at(Phase.RUNNING, created=created, **{**base, **fields})


def step(status: TaoBrevJobStatus, spec: TaoBrevJobSpec = SPEC, **obs: Any) -> Any:
    obs.setdefault("identity", "alice")
    return decide(status, spec_=spec, **obs)


def lose(status: TaoBrevJobStatus, spec: TaoBrevJobSpec = SPEC, start: int = 1) -> Any:
    """Listings without the instance until the absence is confirmed (never one listing), and a
    probe of a running container that does not answer (asked for before anything is concluded)."""
    d = None
    for i in range(TUN.absent_listings):
        d = step(status, spec, instance=None, now=T0 + P * (start + i))
        status = d.status
    assert d is not None
    if ProbeExec in kinds(d):
        now = T0 + P * (start + TUN.absent_listings - 1)
        d = step(status, spec, instance=None, now=now, completed=("ProbeExec",), probe_ok=False)
    return d


# --- an attempt ends, not the run ---------------------------------------------------------------


def test_a_lost_instance_ends_the_attempt_and_the_next_is_created_only_after_the_old_is_confirmed() -> None:
    status = step(running_job(), instance=inst()).status
    one = step(status, instance=None, now=T0 + P)
    assert one.status.phase is Phase.RUNNING  # one listing proves nothing
    d = lose(status)
    assert d.status.outcome is None
    assert d.status.phase is Phase.PROVISIONING
    assert d.status.instance.name == INST  # the old one stays current until confirmed deleted
    assert d.status.attempts is not None
    assert d.status.attempts[0].ended_reason == reasons.INSTANCE_NOT_LISTED
    assert CreateInstance not in kinds(d)
    now = T0 + P * 5
    d = step(d.status, instance=None, now=now)
    assert kinds(d) == [DeleteInstance]
    assert d.actions[0] == DeleteInstance(ID)
    d = step(d.status, instance=None, now=now, delete_not_found=True)
    assert d.status.instance.name == A2
    assert d.status.attempt == 2
    assert d.status.instance.id is None
    assert d.status.instance.create_requested_at is None
    assert d.status.attempts[0].instance.deleted_at == now
    assert CreateInstance not in kinds(d)  # the listing of this pass was of the old name
    d = step(d.status, instance=None, now=now + P)
    (create,) = d.actions
    assert isinstance(create, CreateInstance)
    assert create.request.name == A2
    assert d.status.instance.create_requested_at == now + P  # written with the create, before it runs
    assert d.status.attempts[-1].instance.name == A2


def test_no_create_while_the_old_instance_is_still_listed_after_an_accepted_delete() -> None:
    status = step(running_job(), instance=inst(FAILURE), now=T0 + P).status
    assert status.phase is Phase.PROVISIONING
    d = step(status, instance=inst(FAILURE), now=T0 + P * 2)
    assert kinds(d) == [DeleteInstance]
    d = step(d.status, instance=inst(FAILURE), now=T0 + P * 2, delete_requested=True)
    for i in range(3, 12):
        d = step(d.status, instance=inst("DELETING"), now=T0 + P * i)
        assert CreateInstance not in kinds(d)
        assert d.status.instance.name == INST
    # Unlisted after the accepted delete, for absent_listings listings: released, then attempt 2.
    for i in range(12, 12 + TUN.absent_listings):
        d = step(d.status, instance=None, now=T0 + P * i)
    assert d.status.instance.name == A2


def test_failure_status_while_running_starts_attempt_two() -> None:
    d = step(running_job(), instance=inst(FAILURE))
    assert d.status.outcome is None
    assert d.status.attempts is not None
    assert d.status.attempts[0].ended_reason == reasons.INSTANCE_FAILED
    assert d.status.reason == reasons.RECOVERING


def test_an_instance_stopped_by_someone_else_starts_a_new_attempt() -> None:
    d = step(running_job(), instance=inst(STOPPED))
    assert d.status.phase is Phase.PROVISIONING
    assert d.status.attempts is not None
    assert d.status.attempts[0].ended_reason == reasons.INSTANCE_STOPPED


def test_without_attempts_left_a_stopped_instance_ends_the_run_and_is_deleted() -> None:
    """Found by the model test: before, every exec failed transiently and the job never ended."""
    one = rspec(recovery={"maxAttempts": 1})
    d = step(running_job(), one, instance=inst(STOPPED))
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == reasons.INSTANCE_STOPPED
    assert StopContainer not in kinds(d)
    d = step(d.status, one, instance=inst(STOPPED), now=T0 + P)
    assert d.status.phase is Phase.DELETED
    assert DeleteInstance(ID) in d.actions


def test_a_stopped_reused_instance_is_not_judged_lost() -> None:
    d = step(running_job(created=False), rspec(reuse={"name": INST}), instance=inst(STOPPED))
    assert d.status.outcome is None


def test_never_exec_ready_starts_a_new_attempt_then_fails_when_attempts_are_spent() -> None:
    late = T0 + timedelta(seconds=601)
    status = at(Phase.WAITING_EXEC, create_requested_at=T0, instance_id=ID, brev_identity="alice")
    d = step(status, instance=inst(), now=late, probe_ok=False)
    assert d.status.phase is Phase.PROVISIONING
    assert d.status.attempts is not None
    assert d.status.attempts[0].ended_reason == reasons.timeout(Phase.WAITING_EXEC)
    last = at(
        Phase.WAITING_EXEC,
        create_requested_at=T0,
        instance_id=ID,
        brev_identity="alice",
        attempt=2,
        attempts=[
            AttemptRecord(attempt=1, instance_name="x", deleted_at=T0, ended_reason="InstanceLost"),
            AttemptRecord(attempt=2, instance_name=INST, create_requested_at=T0),
        ],
    )
    d = step(last, instance=inst(), now=late, probe_ok=False)
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == reasons.timeout(Phase.WAITING_EXEC)
    assert d.status.attempts is not None
    assert [a.attempt for a in d.status.attempts] == [1, 2]
    # The last attempt says why it ended too (the run's end is its end).
    assert d.status.attempts[1].ended_reason == reasons.timeout(Phase.WAITING_EXEC)
    assert d.status.attempts[1].ended_at == late
    assert d.status.attempts[1].ended_message


def test_exit_codes_are_retried_only_when_listed() -> None:
    listed = rspec(recovery={"maxAttempts": 3, "retryOnExitCodes": [137]})
    d = step(running_job(), listed, instance=inst(), exit_code=137, completed=("WaitForExit",))
    # The live instance's results and logs are uploaded first (the restore reads them back).
    assert kinds(d) == [UploadResults]
    assert d.status.phase is Phase.RUNNING
    assert d.status.outcome is None
    after_crash = step(d.status, listed, instance=inst())
    assert kinds(after_crash) == [UploadResults]  # still owed after a restart
    d = step(d.status, listed, instance=inst(), upload=UploadSummary(3, 300), completed=("UploadResults",))
    assert d.status.phase is Phase.PROVISIONING
    assert d.status.attempts is not None
    assert d.status.attempts[0].ended_reason == reasons.EXIT_CODE_RETRIED
    assert d.status.run.exit_code is None
    d = step(running_job(), listed, instance=inst(), exit_code=1, completed=("WaitForExit",))
    assert d.actions == ()  # is the instance staying? (see the next test)
    assert d.status.outcome is None
    settled = T0 + P * TUN.absent_listings
    d = step(d.status, listed, instance=inst(), now=settled)
    assert kinds(d) == [ProbeExec]
    d = step(d.status, listed, instance=inst(), now=settled, probe_ok=True, completed=("ProbeExec",))
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == reasons.TRAINING_FAILED
    assert d.status.phase is Phase.UPLOADING


def test_an_exit_seen_as_the_instance_goes_away_is_a_loss_not_a_training_failure() -> None:
    """The simulator (like a VM shutting down) kills the container first: `docker wait` says 137,
    then the instance vanishes. With attempts left that is recovered, not TrainingFailed."""
    d = step(running_job(), instance=inst(), exit_code=137, completed=("WaitForExit",))
    assert d.status.outcome is None
    for i in range(1, 1 + TUNABLES_LISTINGS):
        d = step(d.status, instance=None, now=T0 + P * i)
        assert ProbeExec not in kinds(d)  # ssh may linger: only listings count once it is unlisted
    assert d.status.outcome is None
    assert d.status.phase is Phase.PROVISIONING
    assert d.status.attempts is not None
    assert d.status.attempts[0].ended_reason == reasons.INSTANCE_NOT_LISTED


def test_without_attempts_left_a_failed_exit_is_judged_at_once() -> None:
    one = rspec(recovery={"maxAttempts": 1})
    d = step(running_job(), one, instance=inst(), exit_code=1, completed=("WaitForExit",))
    assert d.status.reason == reasons.TRAINING_FAILED


def test_a_reused_instance_is_never_recovered() -> None:
    reuse = rspec(reuse={"name": INST})
    d = step(running_job(created=False), reuse, instance=inst(FAILURE))
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == reasons.INSTANCE_FAILED
    # Attempt 1 (on the reused instance, not created by the job) is the only one; it ends with the run.
    assert [(a.attempt, a.instance.name, a.instance.created) for a in d.status.attempts] == [(1, INST, False)]
    assert d.status.current.ended_reason == reasons.INSTANCE_FAILED


def test_canceling_during_recovery_tears_down_the_old_instance_and_creates_nothing() -> None:
    status = step(running_job(), instance=inst(FAILURE)).status
    d = step(status, instance=inst(FAILURE), now=T0 + P, deleting=True)
    assert d.status.outcome is Outcome.CANCELED
    assert d.status.phase is Phase.DELETED
    assert CreateInstance not in kinds(d)
    assert DeleteInstance(ID) in d.actions
    d = step(d.status, instance=None, now=T0 + P * 2, deleting=True, delete_not_found=True)
    assert d.finished
    assert d.status.attempts is not None
    assert d.status.attempts[0].instance.deleted_at == T0 + P * 2


RETAIN = rspec(ephemeral={"gpuName": "L40S"}, onCompletion="Retain")
RETAIN_CAPPED = rspec(ephemeral={"gpuName": "L40S"}, onCompletion="Retain", budget={"maxBilledSeconds": 60})


@pytest.mark.parametrize(
    ("trigger", "spec", "reason"),
    [
        ({"deleting": True}, RETAIN, reasons.CANCELED),
        ({"now": T0 + timedelta(seconds=1800) + P * 2}, RETAIN, reasons.timeout(Phase.PROVISIONING)),
        ({"now": T0 + timedelta(seconds=61)}, RETAIN_CAPPED, reasons.BUDGET_EXCEEDED),
    ],
)
def test_a_retain_job_ending_between_attempts_deletes_the_superseded_instance(
    trigger: dict[str, Any], spec: TaoBrevJobSpec, reason: str
) -> None:
    """Issue 25, scenario 9: the instance recovery was deleting is no longer the job's result;
    onCompletion: Retain keeps the run's instance, never a superseded one."""
    status = step(running_job(), spec, instance=inst(FAILURE), now=T0 + P).status
    assert status.phase is Phase.PROVISIONING
    assert status.attempts is not None and status.attempts[0].ended_at is not None
    assert status.outcome is None and status.instance.name == INST  # the old one, being deleted
    obs: dict[str, Any] = {"instance": inst(FAILURE), "now": T0 + P * 4, **trigger}
    d = step(status, spec, **obs)
    assert d.status.outcome is Outcome.FAILED or d.status.outcome is Outcome.CANCELED
    assert d.status.reason == reason
    assert d.status.phase is Phase.DELETED
    assert not d.finished, "a superseded instance is deleted and confirmed, never retained"
    assert DeleteInstance(ID) in d.actions
    obs.update(instance=None, delete_not_found=True)
    d = step(d.status, spec, **obs)
    assert d.finished
    assert d.status.attempts is not None
    assert d.status.attempts[0].instance.deleted_at is not None
    assert "deleted" in (d.status.message or "") and "retained" not in (d.status.message or "")


# --- restore, resume and checkpoint sync -----------------------------------------------------------


def attempt_two(phase: Phase, **fields: Any) -> TaoBrevJobStatus:
    """Attempt 2 in `phase` on A2 (its `fields` as flat keywords), attempt 1's INST deleted."""
    status = at(phase, create_requested_at=T0, instance_id="i-2", brev_identity="alice", **fields)
    two = status.current
    two.attempt = 2
    two.instance.name = A2
    two.instance.billed_from = T0
    one = AttemptRecord(attempt=1, instance_name=INST, create_requested_at=T0, deleted_at=T0 + P)
    status.attempts = [one, two]
    status.backend_ref = f"{A2}/job-abc"
    assert (status.attempt, status.instance.name, one.instance.billed_from) == (2, A2, T0)
    return status


def test_attempt_two_restores_checkpoints_before_the_container_starts_and_resumes_from_the_latest() -> None:
    listed = inst(name=A2, id_="i-2")
    d = step(attempt_two(Phase.PULLING), instance=listed)
    assert kinds(d) == [PrepareWorkload, RestoreCheckpoints]
    path = "/workspace/results/train/model_epoch_003.pth"
    d = step(
        d.status, instance=listed, prepared=True, restored=CheckpointRestore(objects=5, path=path, epoch=3)
    )
    (start,) = d.actions
    assert isinstance(start, StartContainer)
    assert start.resume_path == path
    assert d.status.attempts is not None
    assert d.status.attempts[-1].resumed_from_epoch == 3
    # The running wait (which restarts a missing container) carries the same override.
    d = step(d.status, instance=listed, container_started=True, completed=("StartContainer",))
    waits = [a for a in d.actions if isinstance(a, WaitForExit)]
    assert waits[0].resume_path == path


def test_a_restore_that_passed_over_an_unreadable_checkpoint_resumes_from_the_one_before_and_warns() -> None:
    listed = inst(name=A2, id_="i-2")
    path, cut = "/workspace/results/train/model_epoch_002.pth", "/workspace/results/train/model_epoch_003.pth"
    restored = CheckpointRestore(objects=3, path=path, epoch=2, unreadable=(cut,))
    d = step(attempt_two(Phase.PULLING), instance=listed, prepared=True, restored=restored)
    (start,) = d.actions
    assert isinstance(start, StartContainer)
    assert start.resume_path == path
    (note,) = [e for e in d.events if e.reason == "CheckpointRestored"]
    assert note.type == "Warning"
    assert cut in note.message and "unreadable" in note.message


def test_a_restore_that_finds_nothing_starts_from_scratch() -> None:
    listed = inst(name=A2, id_="i-2")
    d = step(attempt_two(Phase.PULLING), instance=listed, prepared=True, restored=CheckpointRestore(0))
    (start,) = d.actions
    assert isinstance(start, StartContainer)
    assert start.resume_path is None


def test_attempt_one_restores_nothing() -> None:
    status = at(Phase.PULLING, create_requested_at=T0, instance_id=ID, brev_identity="alice")
    d = step(status, instance=inst())
    assert kinds(d) == [PrepareWorkload]
    d = step(status, instance=inst(), prepared=True)
    assert d.actions == (StartContainer(INST, resume_path=None),)


def test_checkpoint_sync_runs_once_per_interval_before_the_wait() -> None:
    status = step(running_job(), instance=inst(), now=T0 + timedelta(seconds=59)).status
    d = step(status, instance=inst(), now=T0 + timedelta(seconds=59))
    assert SyncCheckpoints not in kinds(d)
    d = step(status, instance=inst(), now=T0 + timedelta(seconds=60))
    assert kinds(d) == [SyncCheckpoints, WaitForExit]
    synced = CheckpointSync("ok", started=True, epoch=2, objects=7)
    d = step(
        d.status,
        instance=inst(),
        now=T0 + timedelta(seconds=61),
        checkpoint_sync=synced,
        completed=("SyncCheckpoints", "WaitForExit"),
    )
    assert kinds(d) == [WaitForExit]
    assert d.status.checkpoint is not None
    assert d.status.checkpoint.epoch == 2
    assert d.status.checkpoint.objects == 7
    d = step(d.status, instance=inst(), now=T0 + timedelta(seconds=119))
    assert SyncCheckpoints not in kinds(d)
    d = step(d.status, instance=inst(), now=T0 + timedelta(seconds=120))
    assert SyncCheckpoints in kinds(d)


def test_a_failed_sync_is_counted_and_never_delays_the_wait_or_fails_the_job() -> None:
    d = step(running_job(), instance=inst(), now=T0 + timedelta(seconds=60))
    failure = ActionFailure("SyncCheckpoints", "CheckpointSyncFailed", "s3 unreachable", permanent=False)
    d = step(d.status, instance=inst(), now=T0 + timedelta(seconds=61), failure=failure)
    assert kinds(d) == [WaitForExit]
    assert d.requeue_after == 0.0
    assert d.status.reason is None
    assert d.status.retries == 0
    assert d.status.checkpoint is not None
    assert d.status.checkpoint.failures == 1
    assert reasons.CHECKPOINT_SYNC_FAILED in [e.reason for e in d.events]


def test_without_recovery_there_is_no_checkpoint_sync() -> None:
    one = rspec(recovery={"maxAttempts": 1, "checkpointIntervalSeconds": 60})
    d = step(running_job(), one, instance=inst(), now=T0 + timedelta(seconds=600))
    assert SyncCheckpoints not in kinds(d)


# --- billed time, cost, budgets --------------------------------------------------------------------


def test_billed_time_runs_from_create_request_to_confirmed_deletion_with_cost_from_the_price() -> None:
    status = step(running_job(), instance=inst(FAILURE), price_per_hour=3.6).status
    d = step(status, instance=None, now=T0 + timedelta(seconds=100), delete_not_found=True)
    assert d.status.attempts is not None
    first = d.status.attempts[0]
    assert first.billed_seconds == 100
    assert first.instance.price_per_hour == 3.6
    assert first.estimated_cost_dollars == 0.1
    assert d.status.billed_seconds == 100
    assert d.status.cost_known is True
    assert d.status.estimated_cost_dollars == 0.1


def test_an_unknown_price_makes_the_cost_unknown_never_zero() -> None:
    d = step(running_job(), instance=inst(), now=T0 + timedelta(seconds=120))
    assert d.status.billed_seconds == 120
    assert d.status.cost_known is False
    assert d.status.estimated_cost_dollars is None


def test_a_reached_time_budget_stops_uploads_and_tears_down_with_the_figures() -> None:
    capped = rspec(budget={"maxBilledSeconds": 120})
    d = step(running_job(), capped, instance=inst(), now=T0 + timedelta(seconds=119))
    assert d.status.outcome is None
    over = T0 + timedelta(seconds=121)
    d = step(running_job(), capped, instance=inst(), now=over)
    assert d.status.outcome is None, "the exit is looked for before the budget is judged"
    (look,) = d.actions
    assert isinstance(look, WaitForExit) and not look.start_if_missing
    d = step(running_job(), capped, instance=inst(), now=over, completed=("WaitForExit",))
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == reasons.BUDGET_EXCEEDED
    assert "121s" in (d.status.message or "")
    assert "maxBilledSeconds=120" in (d.status.message or "")
    assert StopContainer in kinds(d)


BUDGET_600 = rspec(budget={"maxBilledSeconds": 600})


def test_an_exit_inside_the_budget_seen_after_downtime_succeeds() -> None:
    """Issue 25, scenario 8: the operator was down while the container exited 0 at 300 s; the
    first pass after the restart is at 1,000 s, past the 600 s budget. Look first, as the
    timeout path does: the run succeeded, and a CI caller must not pay for it twice."""
    late = T0 + timedelta(seconds=1000)
    d = step(running_job(), BUDGET_600, instance=inst(), now=late)
    assert d.status.outcome is None
    (look,) = d.actions
    assert isinstance(look, WaitForExit) and not look.start_if_missing
    exited = T0 + timedelta(seconds=300)
    d = step(
        d.status,
        BUDGET_600,
        instance=inst(),
        now=late,
        exit_code=0,
        exit_finished_at=exited,
        completed=("WaitForExit",),
    )
    assert d.status.run_outcome is Outcome.SUCCEEDED, (d.status.reason, d.status.message)


def test_an_exit_seen_in_the_pass_after_the_budget_passed_is_judged_at_its_time() -> None:
    exited = T0 + timedelta(seconds=590)
    d = step(
        running_job(),
        BUDGET_600,
        instance=inst(),
        now=T0 + timedelta(seconds=605),
        exit_code=0,
        exit_finished_at=exited,
        completed=("WaitForExit",),
    )
    assert d.status.run_outcome is Outcome.SUCCEEDED, (d.status.reason, d.status.message)


def test_an_exit_after_the_budget_passed_is_over_budget() -> None:
    d = step(
        running_job(),
        BUDGET_600,
        instance=inst(),
        now=T0 + timedelta(seconds=700),
        exit_code=0,
        exit_finished_at=T0 + timedelta(seconds=650),
        completed=("WaitForExit",),
    )
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == reasons.BUDGET_EXCEEDED


def test_the_budget_caps_the_exit_wait() -> None:
    """A wait may not overrun the budget by up to TAOBREV_WAIT_TIMEOUT."""
    assert TUN.wait_timeout > 20
    d = step(running_job(), BUDGET_600, instance=inst(), now=T0 + timedelta(seconds=590))
    (wait,) = [a for a in d.actions if isinstance(a, WaitForExit)]
    assert wait.timeout_seconds <= 10


def test_a_reached_cost_budget_counts_every_attempt() -> None:
    capped = rspec(budget={"maxCostDollars": 1.0})
    status = attempt_two(Phase.RUNNING, container_started_at=T0)
    assert status.attempts is not None
    status.attempts[0].instance.price_per_hour = 36.0  # attempt 1: 5 s at $36/h = $0.05
    status.attempts[0].instance.type = "g6.xlarge"
    listed = inst(name=A2, id_="i-2")
    d = step(status, capped, instance=listed, price_per_hour=36.0, now=T0 + timedelta(seconds=90))
    assert d.status.outcome is None
    over = T0 + timedelta(seconds=96)
    looked = step(d.status, capped, instance=listed, now=over)
    assert looked.status.outcome is None  # the exit is looked for first (issue 25, scenario 8)
    d = step(d.status, capped, instance=listed, now=over, completed=("WaitForExit",))
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == reasons.BUDGET_EXCEEDED
    assert "maxCostDollars" in (d.status.message or "")


def test_an_idle_running_pass_writes_the_same_billed_figure_within_a_step() -> None:
    """Each stored step is a status write per running job; the step is long (see recovery.py)."""
    first = step(running_job(), instance=inst(), now=T0 + timedelta(seconds=30)).status
    step_s = recovery.BILL_STEP_SECONDS
    assert step_s >= 300
    again = step(first, instance=inst(), now=T0 + timedelta(seconds=30 + step_s - 1)).status
    assert again.billed_seconds == first.billed_seconds == 30
    later = step(first, instance=inst(), now=T0 + timedelta(seconds=30 + step_s)).status
    assert later.billed_seconds == 30 + step_s


def test_between_steps_the_exact_totals_still_move_for_the_gauges_and_the_budget() -> None:
    first = step(running_job(), instance=inst(), price_per_hour=3.6, now=T0 + timedelta(seconds=30)).status
    secs, cost = budget.exact_totals(first, T0 + timedelta(seconds=100))
    assert first.billed_seconds == 30
    assert secs == 100
    assert cost == pytest.approx(0.1)


# --- names ---------------------------------------------------------------------------------------


def test_attempt_names_keep_the_suffix_within_63_characters() -> None:
    assert naming.attempt_instance_name(INST, 1) == INST
    assert naming.attempt_instance_name(INST, 2) == f"{INST}-a2"
    long = "tbj-" + "x" * 59
    name = naming.attempt_instance_name(long, 10)
    assert len(name) <= 63
    assert name.endswith("-a10")


def test_a_nested_field_cleared_in_status_is_sent_as_null() -> None:
    """JSON merge patch merges nested objects: a checkpoint failure count that was reset must be
    nulled explicitly, or the stored status keeps it."""
    old = {"checkpoint": {"epoch": 2, "failures": 1, "lastError": "boom"}, "attempt": 1}
    new = {"checkpoint": {"epoch": 3}, "attempt": 1}
    assert merge_patch(old, new) == {
        "checkpoint": {"epoch": 3, "failures": None, "lastError": None},
        "attempt": 1,
    }


def test_the_crd_schema_has_no_numeric_exclusive_bounds() -> None:
    """OpenAPI v3 (the API server) wants exclusiveMinimum as a boolean: pydantic's gt= renders a
    number, which the API server refuses when the CRD is applied (found by tests/e2e/test_crd.py)."""
    text = crdgen.render()
    assert "exclusiveMinimum" not in text
    assert "exclusiveMaximum" not in text
