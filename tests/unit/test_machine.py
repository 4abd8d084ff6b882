"""The pure state machine: one decide() call per check, typed status in and out (no I/O, no loop).

Each test builds the status a job would have at some point, an Observation of the world, and
asserts what decide() writes and asks for. Driving decide() through the reconciler's loop against
a simulated Brev is the component and model tiers' job (tests/component, tests/model).
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.api import naming, reasons
from controller.api.models import TaoBrevJobSpec
from controller.api.spec_parse import parse_spec
from controller.api.status import AbsenceRecord, TaoBrevJobStatus
from controller.api.vocabulary import Outcome
from controller.brev.client import DELETING, DEPLOYING, FAILURE, RUNNING, STOPPED, Instance
from controller.lifecycle import machine
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import (
    ActionFailure,
    CleanupWorkload,
    CreateInstance,
    Decision,
    DeleteInstance,
    Observation,
    PrepareWorkload,
    ProbeExec,
    StartContainer,
    StartInstance,
    StopContainer,
    UploadResults,
    UploadSummary,
    WaitForExit,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TUN = machine.Tunables(poll_interval=5, wait_timeout=30, create_settle=60, backoff_base=2, backoff_max=60)
INST = "tbj-ns-job-abc"
IMAGE = "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt"

# The marked name a job gets under the default Tunables (controller/api/naming.py).
MARKED_PREFIX = (
    f"tbj-{naming.owner_mark(machine.Tunables().cluster_id, machine.Tunables().deployment)}-ns-job-"
)


def spec(**instance: Any) -> TaoBrevJobSpec:
    inst = instance or {"ephemeral": {"gpuName": "L40S"}}
    return parse_spec(
        {
            "task": {
                "image": IMAGE,
                "networkArch": "classification_pyt",
                "action": "train",
                "specContent": "a: 1\n",
            },
            "instance": inst,
            "data": {"resultsUri": "s3://bucket/out"},
            "credentials": {"ngcApiKey": {"name": "ngc"}, "s3": {"name": "s3"}},
            "timeouts": {"waitingExecSeconds": 600, "runningSeconds": 3600, "uploadingSeconds": 600},
            # One attempt: these tests pin the behaviour without recovery (tests/unit/test_recovery*.py).
            "recovery": {"maxAttempts": 1},
        }
    )


EPHEMERAL = spec()
REUSE = spec(reuse={"name": INST})


def at(phase: Phase, *, since: datetime = T0, created: bool = True, **fields: Any) -> TaoBrevJobStatus:
    """The status of a job that entered `phase` at `since` (names assigned, as decide() does)."""
    times = {str(p): since for p in Phase if list(Phase).index(p) <= list(Phase).index(phase)}
    return TaoBrevJobStatus(
        phase=phase,
        phase_times=times,
        job_id="job-abc",
        instance_name=INST,
        instance_created=created,
        backend_ref=f"{INST}/job-abc",
        **fields,
    )


def running(status: str = RUNNING) -> Instance:
    return Instance(name=INST, id="i-1", status=status, gpu="L40S")


def decide(
    status: TaoBrevJobStatus,
    *,
    spec_: TaoBrevJobSpec = EPHEMERAL,
    now: datetime = T0,
    generation: int = 1,
    **obs: Any,
) -> Decision:
    obs.setdefault("instance_known", True)
    observation = Observation(now=now, **obs)
    return machine.decide(
        spec_,
        status,
        observation,
        namespace="ns",
        name="job",
        uid="uid-1",
        generation=generation,
        tunables=TUN,
    )


def cond(status: TaoBrevJobStatus, ctype: str) -> str:
    return str(next(c.status for c in status.conditions if c.type == ctype))


def kinds(d: Decision) -> list[type]:
    return [type(a) for a in d.actions]


# --- the happy path, one step at a time ----------------------------------------------------------


def test_a_new_job_gets_a_visible_pending_with_its_names_and_moves_on_at_once() -> None:
    d = decide(TaoBrevJobStatus(), generation=3)
    assert d.status.phase is Phase.PENDING
    assert d.status.instance.name  # the current attempt's (the empty one before it has none)
    assert d.status.instance.name.startswith(MARKED_PREFIX)
    assert d.status.backend_ref == f"{d.status.instance.name}/{d.status.job_id}"
    assert d.status.observed_generation == 3
    assert d.actions == ()
    assert d.requeue_after == 0.0


def test_pending_moves_to_provisioning_without_a_brev_call() -> None:
    d = decide(decide(TaoBrevJobStatus()).status)
    assert d.status.phase is Phase.PROVISIONING
    assert d.actions == ()


def test_absent_ephemeral_instance_is_created_with_the_marker_in_the_same_status() -> None:
    d = decide(at(Phase.PROVISIONING))
    (create,) = d.actions
    assert isinstance(create, CreateInstance)
    assert create.request.name == INST
    assert create.request.gpu_name == "L40S"
    assert d.status.instance.create_requested_at == T0
    assert [e.reason for e in d.events] == [reasons.INSTANCE_CREATE_REQUESTED]


def test_a_running_instance_moves_to_waiting_exec_and_probes() -> None:
    d = decide(at(Phase.PROVISIONING, create_requested_at=T0), instance=running())
    assert d.status.phase is Phase.WAITING_EXEC
    assert d.status.instance.gpu == "L40S"
    assert kinds(d) == [ProbeExec]


def test_a_deploying_instance_is_awaited() -> None:
    d = decide(at(Phase.PROVISIONING, create_requested_at=T0), instance=running(DEPLOYING))
    assert d.status.phase is Phase.PROVISIONING
    assert d.actions == ()
    assert d.requeue_after == TUN.poll_interval


def test_a_successful_probe_moves_to_pulling_and_prepares() -> None:
    d = decide(at(Phase.WAITING_EXEC), instance=running(), probe_ok=True)
    assert d.status.phase is Phase.PULLING
    assert kinds(d) == [PrepareWorkload]


def test_a_failed_probe_waits_a_poll_interval_instead_of_probing_again() -> None:
    d = decide(at(Phase.WAITING_EXEC), instance=running(), probe_ok=False)
    assert d.status.phase is Phase.WAITING_EXEC
    assert d.actions == ()
    assert d.requeue_after == TUN.poll_interval


def test_prepared_workload_starts_the_container() -> None:
    d = decide(at(Phase.PULLING), instance=running(), prepared=True, now=T0 + timedelta(seconds=9))
    assert d.status.phase is Phase.RUNNING
    assert d.status.run.started_at == T0 + timedelta(seconds=9)
    assert kinds(d) == [StartContainer]


def test_a_running_container_is_waited_for_with_a_bounded_wait() -> None:
    d = decide(at(Phase.RUNNING), instance=running())
    (wait,) = d.actions
    assert isinstance(wait, WaitForExit)
    assert 1 <= wait.timeout_seconds <= TUN.wait_timeout
    assert wait.start_if_missing


def test_running_jobs_started_together_do_not_re_arm_their_waits_together() -> None:
    # A wave applied at once must not come back every period in the same second.
    # Their wait ends spread over the whole period, not one half of it.
    ends = []
    for i in range(200):
        st = at(Phase.RUNNING).model_copy(update={"job_id": f"job-{i:03d}-abcdef"})
        (wait,) = decide(st, instance=running()).actions
        assert isinstance(wait, WaitForExit)
        ends.append(wait.timeout_seconds)
    quarters = [
        sum(1 for e in ends if q * TUN.wait_timeout / 4 < e <= (q + 1) * TUN.wait_timeout / 4)
        for q in range(4)
    ]
    assert min(quarters) >= 30, quarters


def test_a_running_job_costs_one_wait_per_period() -> None:
    # Each wait runs its whole bound as the remote `timeout` takes it (whole seconds), then the
    # pass and the call take 0.3 s before the next wait starts.
    st = at(Phase.RUNNING).model_copy(update={"job_id": "job-x-123456"})
    now, waits = T0, 0
    while now < T0 + timedelta(seconds=TUN.wait_timeout * 20):
        (wait,) = decide(st, instance=running(), now=now).actions
        assert isinstance(wait, WaitForExit)
        assert wait.timeout_seconds <= TUN.wait_timeout
        now += timedelta(seconds=int(wait.timeout_seconds) + 0.3)
        waits += 1
    assert waits <= 21  # the first wait is shorter


def test_a_running_job_reads_its_log_tail_once_per_interval_and_on_its_first_wait() -> None:
    # Every changed tail is a status write: with the default 600 s over 30 s waits, one wait in
    # 20 asks for it while the container runs (an exit always brings it: see Workload).
    every = round(TUN.log_tail_interval / TUN.wait_timeout)
    assert every >= 2
    for i in range(20):
        st = at(Phase.RUNNING, container_started_at=T0).model_copy(update={"job_id": f"job-{i}-tail"})
        now, tails, waits = T0, [], 0
        while now < T0 + timedelta(seconds=TUN.log_tail_interval * 5):  # within runningSeconds
            (wait,) = decide(st, instance=running(), now=now).actions
            assert isinstance(wait, WaitForExit)
            if waits == 0:
                assert wait.tail  # the first lines after the start are shown at once
            tails.append(wait.tail)
            now += timedelta(seconds=int(wait.timeout_seconds) + 0.3)
            waits += 1
        assert 4 <= sum(tails[1:]) <= 5, (i, sum(tails))  # 100 waits, one in 20
        # spread evenly: never two asked in a row
        assert not any(a and b for a, b in itertools.pairwise(tails[1:]))


def test_a_log_tail_interval_within_one_wait_reads_it_every_wait() -> None:
    tun = machine.Tunables(wait_timeout=30, log_tail_interval=30)
    st = at(Phase.RUNNING, container_started_at=T0)
    for k in range(10):
        obs = Observation(now=T0 + timedelta(seconds=300 + 30 * k), instance_known=True, instance=running())
        d = machine.decide(EPHEMERAL, st, obs, namespace="n", name="j", uid="u", generation=1, tunables=tun)
        (wait,) = d.actions
        assert isinstance(wait, WaitForExit)
        assert wait.tail


def test_exit_zero_uploads_then_deletes_then_finishes_succeeded() -> None:
    d = decide(at(Phase.RUNNING), instance=running(), exit_code=0, log_tail=("epoch 1 loss 0.5",))
    assert d.status.phase is Phase.UPLOADING
    # Exited 0 is not Succeeded yet (issue 32): nothing a user reads says so before the results
    # are verified in S3.
    assert d.status.run_outcome is Outcome.SUCCEEDED
    assert d.status.outcome is None
    assert d.status.reason == reasons.RUN_COMPLETED
    assert "uploading results" in (d.status.message or "")
    assert cond(d.status, "Succeeded") == "Unknown"
    assert [(e.type, e.reason) for e in d.events if e.reason != "Uploading"] == [
        ("Normal", reasons.RUN_COMPLETED)
    ]
    assert d.status.run.exit_code == 0
    assert d.status.run.log_tail == ["epoch 1 loss 0.5"]
    assert kinds(d) == [UploadResults]
    d = decide(d.status, instance=running(), upload=UploadSummary(objects=3, bytes=300))
    assert d.status.phase is Phase.DELETED
    assert d.status.outcome is Outcome.SUCCEEDED
    assert d.status.reason == reasons.SUCCEEDED
    assert ("Normal", reasons.SUCCEEDED) in [(e.type, e.reason) for e in d.events]
    assert cond(d.status, "Succeeded") == "True"
    assert d.status.upload.results is not None
    assert d.status.upload.results.objects == 3
    assert kinds(d) == [CleanupWorkload]
    d = decide(d.status, instance=running(), cleaned=True)
    assert kinds(d) == [DeleteInstance]
    assert d.status.instance.delete_requested_at == T0
    d = decide(d.status, instance=running(DELETING), delete_requested=True)
    assert d.status.instance.delete_accepted_at == T0
    assert d.status.finished_at is None
    d = decide(d.status, instance=None, delete_not_found=True)
    assert d.finished
    assert d.status.finished_at == T0
    assert d.status.outcome is Outcome.SUCCEEDED
    assert d.status.message == (
        "Succeeded: training exited 0; results verified in S3 (3 objects, 300 bytes); "
        f"results in s3://bucket/out; instance {INST} deleted"
    )
    assert cond(d.status, "Ready") == "True"
    assert cond(d.status, "Succeeded") == "True"
    assert cond(d.status, "Reconciling") == "False"
    assert cond(d.status, "Stalled") == "False"
    assert cond(d.status, "InstanceReleased") == "True"


def test_non_zero_exit_uploads_and_fails_with_the_code() -> None:
    d = decide(at(Phase.RUNNING), instance=running(), exit_code=3)
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == reasons.TRAINING_FAILED
    assert "code 3" in (d.status.message or "")
    assert kinds(d) == [UploadResults]
    assert cond(d.status, "Succeeded") == "False"


def test_the_status_serialises_to_the_stored_form_and_back() -> None:
    d = decide(at(Phase.RUNNING), instance=running(), exit_code=0, now=T0 + timedelta(microseconds=7))
    wire = d.status.to_k8s()
    assert wire["phase"] == "Uploading"
    assert wire["attempts"][-1]["run"]["exitedAt"] == "2026-11-29T12:00:00Z"
    assert TaoBrevJobStatus.from_k8s(wire).to_k8s() == wire


# --- crash safety --------------------------------------------------------------------------------


def test_an_ambiguous_create_is_retried_with_the_same_name_only_after_the_settle_time() -> None:
    status = at(Phase.PROVISIONING, create_requested_at=T0)
    d = decide(status, now=T0 + timedelta(seconds=30))
    assert d.actions == (), "inside the settle time an absent instance may still be on its way"
    d = decide(status, now=T0 + timedelta(seconds=61))
    (create,) = d.actions
    assert isinstance(create, CreateInstance)
    assert create.request.name == INST


def test_an_instance_found_after_a_restart_is_adopted_not_created_again() -> None:
    d = decide(at(Phase.PROVISIONING, create_requested_at=T0), instance=running(DEPLOYING))
    assert CreateInstance not in kinds(d)


def test_unknown_listing_never_triggers_create_or_finish() -> None:
    d = decide(at(Phase.PROVISIONING), instance_known=False)
    assert d.actions == ()
    assert d.requeue_after == TUN.poll_interval
    teardown = at(Phase.DELETED, outcome=Outcome.CANCELED, cleaned_up_at=T0, create_requested_at=T0)
    d = decide(teardown, instance_known=False, now=T0 + timedelta(hours=1))
    assert d.status.finished_at is None


def test_status_without_names_past_pending_gets_its_deterministic_names_back() -> None:
    """E.g. a status patched by hand to Running: the machine must not crash, and must still be
    able to find (and tear down) the instance its uid maps to."""
    status = TaoBrevJobStatus(phase=Phase.RUNNING, phase_times={"Running": T0})
    d = decide(status, instance=running())
    assert d.status.instance.name  # the current attempt's (the empty one before it has none)
    assert d.status.instance.name.startswith(MARKED_PREFIX)


# --- cancellation, failures, timeouts ------------------------------------------------------------


def test_delete_while_running_stops_the_container_and_waits_for_it() -> None:
    d = decide(at(Phase.RUNNING), instance=running(), deleting=True)
    assert d.status.outcome is Outcome.CANCELED
    assert d.status.reason == reasons.CANCELED
    assert kinds(d) == [StopContainer, WaitForExit]
    wait = d.actions[1]
    assert isinstance(wait, WaitForExit)
    assert not wait.start_if_missing


@pytest.mark.parametrize("phase", [Phase.PROVISIONING, Phase.WAITING_EXEC, Phase.PULLING])
def test_delete_before_the_container_exists_tears_down_without_upload(phase: Phase) -> None:
    d = decide(at(phase, create_requested_at=T0), instance=running(), deleting=True)
    assert d.status.outcome is Outcome.CANCELED
    assert d.status.phase is Phase.DELETED
    assert UploadResults not in kinds(d)
    assert StartContainer not in kinds(d)


def test_reused_instance_is_cleaned_up_with_must_succeed_and_never_deleted() -> None:
    status = at(Phase.DELETED, created=False, outcome=Outcome.SUCCEEDED, uploaded_at=T0)
    d = decide(status, spec_=REUSE, instance=running())
    (cleanup,) = d.actions
    assert isinstance(cleanup, CleanupWorkload)
    assert cleanup.must_succeed
    d = decide(d.status, spec_=REUSE, instance=running(), cleaned=True)
    assert d.finished
    assert "left running (retained)" in (d.status.message or "")


def test_a_stopped_reused_instance_is_started() -> None:
    d = decide(at(Phase.PROVISIONING, created=False), spec_=REUSE, instance=running(STOPPED))
    assert kinds(d) == [StartInstance]
    assert d.status.instance.start_requested_at == T0


def test_missing_reused_instance_fails_with_a_reason_naming_the_field() -> None:
    status = at(Phase.PROVISIONING, created=False)
    for i in range(TUN.absent_listings):
        d = decide(status, spec_=REUSE, instance=None, now=T0 + timedelta(seconds=TUN.poll_interval * i))
        status = d.status
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == reasons.REUSE_INSTANCE_NOT_FOUND
    assert "spec.instance.reuse.name" in (d.status.message or "")


def test_exec_never_ready_times_out_naming_the_phase_and_limit_and_tears_down() -> None:
    d = decide(at(Phase.WAITING_EXEC), instance=running(), now=T0 + timedelta(seconds=601))
    assert d.status.reason == "WaitingExecTimeout"
    assert "600s" in (d.status.message or "")
    assert d.status.phase is Phase.DELETED


def test_instance_failure_status_during_provisioning_fails_and_tears_down() -> None:
    d = decide(at(Phase.PROVISIONING, create_requested_at=T0), instance=running(FAILURE))
    assert d.status.reason == reasons.INSTANCE_FAILED
    assert d.status.phase is Phase.DELETED
    assert kinds(d) == [DeleteInstance]


def test_transient_failures_back_off_exponentially_and_count_retries() -> None:
    f = ActionFailure("CreateInstance", "BrevUnavailable", "capacity", permanent=False)
    status = at(Phase.PROVISIONING)
    delays = []
    for _ in range(7):
        d = decide(status, failure=f)
        status = d.status
        delays.append(d.requeue_after)
    assert delays == [2, 4, 8, 16, 32, 60, 60]
    assert status.retries == 7
    assert status.reason == "BrevUnavailable"


def test_permanent_action_failure_ends_the_job_and_tears_down() -> None:
    f = ActionFailure("PrepareWorkload", "RegistryEntitlementFailed", "unauthorized", permanent=True)
    d = decide(at(Phase.PULLING), instance=running(), failure=f)
    assert d.status.reason == "RegistryEntitlementFailed"
    assert d.status.outcome is Outcome.FAILED
    assert d.status.phase is Phase.DELETED


def test_blocker_in_pending_finishes_without_touching_brev() -> None:
    blocker = ActionFailure("ReadSecrets", "SecretNotFound", "Secret ns/ngc does not exist", True)
    d = decide(TaoBrevJobStatus(), blocker=blocker, generation=4)
    assert d.actions == ()
    assert d.finished
    assert d.status.phase is Phase.DELETED
    assert d.status.reason == "SecretNotFound"
    assert d.status.observed_generation == 4


def test_finished_job_is_left_alone() -> None:
    status = at(Phase.DELETED, outcome=Outcome.SUCCEEDED, finished_at=T0)
    d = decide(status, now=T0 + timedelta(days=1), instance=None)
    assert d.finished
    assert d.events == ()


def test_conditions_keep_their_transition_time_while_unchanged() -> None:
    first = decide(at(Phase.WAITING_EXEC), instance=running(), probe_ok=False).status
    later = decide(first, instance=running(), probe_ok=True, now=T0 + timedelta(minutes=5)).status
    before = {c.type: c for c in first.conditions}
    after = {c.type: c for c in later.conditions}
    assert after["Reconciling"].last_transition_time == before["Reconciling"].last_transition_time
    assert later.phase is Phase.PULLING


def test_instance_lost_while_uploading_fails_the_job_instead_of_retrying_forever() -> None:
    status = at(Phase.UPLOADING, outcome=Outcome.SUCCEEDED, exit_code=0, instance_id="i-1", upload_attempts=1)
    status.instance.absence = AbsenceRecord(listings=2, since=T0, checked_at=T0)
    d = decide(status, instance=None, now=T0 + timedelta(seconds=5), delete_not_found=True)
    assert d.status.reason == reasons.INSTANCE_LOST
    assert d.status.outcome is Outcome.FAILED
    assert d.status.phase is Phase.DELETED
    assert UploadResults not in kinds(d)


# --- declarations ------------------------------------------------------------------------------


def test_transitions_only_go_forward_in_phase_order() -> None:
    """The table is data that decide() asserts against: a backwards or self edge would let a job
    re-run a step it already passed (e.g. create a second instance). The one exception is back to
    Provisioning for a new attempt (controller/lifecycle/recovery.py), never after the run ended."""
    order = list(Phase)
    assert set(machine.TRANSITIONS) == set(Phase)
    for src, dsts in machine.TRANSITIONS.items():
        for dst in dsts:
            if dst == Phase.PROVISIONING and src in (Phase.WAITING_EXEC, Phase.PULLING, Phase.RUNNING):
                continue
            assert order.index(dst) > order.index(src), f"{src} -> {dst}"
    assert machine.TRANSITIONS[Phase.DELETED] == frozenset()


def test_every_phase_after_pending_can_reach_teardown() -> None:
    for phase in list(Phase)[1:-1]:
        seen, todo = set(), [phase]
        while todo:
            p = todo.pop()
            seen.add(p)
            todo.extend(machine.TRANSITIONS[p] - seen)
        assert Phase.DELETED in seen, phase


def test_long_cli_errors_are_clipped_keeping_what_failed_and_why() -> None:
    text = "UploadResults: brev exec failed " + "trace " * 500 + "exit status 255"
    out = machine.clip(text)
    assert len(out) <= machine.MAX_MESSAGE
    assert out.startswith("UploadResults: brev exec failed")
    assert out.endswith("exit status 255")
