"""Issue 9 in the pure machine: no single observation ends a job, every path after the run ended
has a deadline and ends in `brev delete`, and status stays within what the CRD accepts.

Each test failed on the machine before the fix (see the commit message for which and how).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from controller.api import naming, reasons
from controller.api.status import TaoBrevJobStatus
from controller.api.vocabulary import Outcome
from controller.brev.client import STOPPED
from controller.lifecycle import machine
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import (
    ActionFailure,
    CleanupWorkload,
    CreateInstance,
    DeleteInstance,
    Observation,
    ProbeExec,
    StartInstance,
    StopContainer,
    UploadResults,
    UploadSummary,
    WaitForExit,
)
from tests.unit.test_machine import EPHEMERAL, INST, REUSE, T0, TUN, at, cond, decide, kinds, running

P = timedelta(seconds=TUN.poll_interval)
ID = "i-1"

# The marked name a job gets under the default Tunables (controller/api/naming.py).
MARKED_PREFIX = (
    f"tbj-{naming.owner_mark(machine.Tunables().cluster_id, machine.Tunables().deployment)}-ns-job-"
)


def listed_running(**fields: Any) -> TaoBrevJobStatus:
    """Running on an instance this job created and has seen (id recorded)."""
    return at(Phase.RUNNING, create_requested_at=T0, instance_id=ID, brev_identity="alice", **fields)


def tearing_down(**fields: Any) -> TaoBrevJobStatus:
    base: dict[str, Any] = {
        "outcome": Outcome.SUCCEEDED,
        "reason": reasons.SUCCEEDED,
        "uploaded_at": T0,
        "cleaned_up_at": T0,
        "create_requested_at": T0,
        "instance_id": ID,
        "brev_identity": "alice",
    }
    base.update(fields)
    return at(Phase.DELETED, **base)


# --- 1. absence is confirmed, never assumed ------------------------------------------------------


def test_one_listing_without_the_instance_does_not_end_a_running_job() -> None:
    d = decide(listed_running(), instance=None, identity="alice")
    assert d.status.outcome is None
    assert d.status.instance.absence.listings == 1
    assert DeleteInstance not in kinds(d)
    assert kinds(d) == [WaitForExit]


def test_a_relisted_instance_clears_the_suspicion() -> None:
    status = decide(listed_running(), instance=None, identity="alice").status
    d = decide(status, instance=running(), identity="alice", now=T0 + P)
    assert d.status.instance.absence.listings is None
    assert d.status.outcome is None


def test_exec_evidence_in_the_same_pass_clears_the_suspicion() -> None:
    status = listed_running(absent_listings=2, absent_since=T0, absent_checked_at=T0)
    d = decide(status, instance=None, identity="alice", now=T0 + P, completed=("WaitForExit",))
    assert d.status.instance.absence.listings is None
    assert d.status.outcome is None


def test_listings_are_counted_once_per_poll_interval() -> None:
    status = decide(listed_running(), instance=None, identity="alice").status
    d = decide(status, instance=None, identity="alice", now=T0 + timedelta(seconds=1))
    assert d.status.instance.absence.listings == 1


def test_a_suspected_loss_is_confirmed_by_brev_delete_of_the_id_before_instance_lost() -> None:
    status = at(Phase.WAITING_EXEC, create_requested_at=T0, instance_id=ID, brev_identity="alice")
    for i in range(TUN.absent_listings):
        d = decide(status, instance=None, identity="alice", now=T0 + P * i)
        status = d.status
        assert status.outcome is None
    (delete,) = d.actions
    assert isinstance(delete, DeleteInstance)
    assert delete.name == ID
    assert reasons.INSTANCE_NOT_LISTED in [e.reason for e in d.events]
    d = decide(status, instance=None, identity="alice", now=T0 + P * 2, delete_not_found=True)
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == reasons.INSTANCE_LOST
    assert "not found" in (d.status.message or "")


def test_an_unlisted_instance_that_ran_a_container_gets_one_upload_attempt_before_the_delete() -> None:
    status = listed_running(container_started_at=T0)
    for i in range(TUN.absent_listings):
        d = decide(status, instance=None, identity="alice", now=T0 + P * i)
        status = d.status
    # The container runs: the instance is asked before the listings are believed.
    assert kinds(d) == [ProbeExec]
    assert status.phase is Phase.RUNNING
    last = T0 + P * (TUN.absent_listings - 1)
    d = decide(status, instance=None, identity="alice", now=last, completed=("ProbeExec",), probe_ok=False)
    status = d.status
    assert status.reason == reasons.INSTANCE_NOT_LISTED
    assert status.phase is Phase.UPLOADING
    assert kinds(d) == [UploadResults]
    failure = ActionFailure("UploadResults", "BrevUnavailable", "ssh: no route to host", permanent=False)
    status = decide(status, identity="alice", now=T0 + P * 3, failure=failure).status
    d = decide(status, instance=None, identity="alice", now=T0 + P * 4)
    assert d.status.phase is Phase.DELETED
    (delete,) = d.actions
    assert isinstance(delete, DeleteInstance)
    assert delete.name == ID
    d = decide(d.status, instance=None, identity="alice", now=T0 + P * 4, delete_not_found=True)
    assert d.finished
    assert d.status.reason == reasons.INSTANCE_LOST


def test_an_unlisted_instance_whose_running_container_answers_a_probe_is_kept() -> None:
    """Three listings without a running instance are no proof when it answers: a leader change or
    a restart cut its `docker wait` short, so no exec evidence came in between (issue 25's
    simulation found healthy runs deleted and re-created this way)."""
    status = listed_running(container_started_at=T0)
    for i in range(TUN.absent_listings):
        d = decide(status, instance=None, identity="alice", now=T0 + P * i)
        status = d.status
    assert kinds(d) == [ProbeExec]
    last = T0 + P * (TUN.absent_listings - 1)
    d = decide(status, instance=None, identity="alice", now=last, completed=("ProbeExec",), probe_ok=True)
    assert d.status.phase is Phase.RUNNING
    assert d.status.reason != reasons.INSTANCE_NOT_LISTED
    assert d.status.instance.absence.listings is None  # counting starts again
    assert DeleteInstance not in kinds(d) and UploadResults not in kinds(d)


def test_the_instance_id_is_recorded_on_first_sighting_and_the_identity_before_create() -> None:
    d = decide(at(Phase.PROVISIONING), identity="alice")
    assert isinstance(d.actions[0], CreateInstance)
    assert d.status.instance.identity == "alice"
    d = decide(d.status, instance=running(), identity="alice")
    assert d.status.instance.id == ID


def test_teardown_never_counts_a_single_absence_as_released() -> None:
    status = tearing_down(delete_requested_at=T0, delete_accepted_at=T0)
    d = decide(status, instance=None, identity="alice", now=T0 + P)
    assert d.status.finished_at is None
    (delete,) = d.actions
    assert isinstance(delete, DeleteInstance)
    assert delete.name == ID


def test_teardown_is_released_when_delete_answers_not_found() -> None:
    d = decide(tearing_down(delete_requested_at=T0), instance=None, identity="alice", delete_not_found=True)
    assert d.finished
    assert cond(d.status, "InstanceReleased") == "True"


def test_an_accepted_delete_then_n_absent_listings_is_released() -> None:
    status = tearing_down(delete_requested_at=T0, delete_accepted_at=T0)
    failure = ActionFailure("DeleteInstance", "BrevUnavailable", "server answer unknown", permanent=False)
    for i in range(1, TUN.absent_listings + 1):
        d = decide(status, instance=None, identity="alice", now=T0 + P * i)
        status = d.status
        if not d.finished:
            # The confirming delete fails transiently (e.g. a DELETING instance's unknown answer).
            status = decide(status, identity="alice", now=T0 + P * i, failure=failure).status
    assert d.finished


def test_a_never_created_instance_is_confirmed_absent_by_name_after_the_settle_time() -> None:
    status = at(Phase.DELETED, outcome=Outcome.CANCELED, create_requested_at=T0, create_returned_at=T0)
    d = decide(status, instance=None, identity="alice", now=T0 + timedelta(seconds=30))
    assert d.actions == ()
    assert d.status.finished_at is None
    d = decide(status, instance=None, identity="alice", now=T0 + timedelta(seconds=61))
    (delete,) = d.actions
    assert isinstance(delete, DeleteInstance)
    assert delete.name == INST


def test_another_identity_never_confirms_absence_and_says_how_to_fix_it() -> None:
    d = decide(tearing_down(), instance=None, identity="bob", delete_not_found=True)
    assert d.status.finished_at is None
    assert d.actions == ()
    assert d.status.stalled_reason == reasons.INSTANCE_NOT_ACCESSIBLE
    assert "restore the credential" in (d.status.stalled_message or "")
    assert cond(d.status, "Stalled") == "True"
    assert reasons.INSTANCE_NOT_ACCESSIBLE in [e.reason for e in d.events]
    assert d.requeue_after == TUN.backoff_max
    d = decide(d.status, instance=None, identity="alice", delete_not_found=True)
    assert d.finished
    assert d.status.stalled_reason is None


def test_another_identity_may_still_delete_what_it_can_see_and_an_accepted_delete_counts() -> None:
    """An org API key sees and deletes every instance: its accepted delete is real evidence."""
    d = decide(tearing_down(), instance=running(), identity="org-key")
    assert kinds(d) == [DeleteInstance]
    d = decide(d.status, instance=running(), identity="org-key", delete_requested=True)
    assert d.status.instance.delete_accepted_at == T0
    status = d.status
    for i in range(1, TUN.absent_listings + 1):
        d = decide(status, instance=None, identity="org-key", now=T0 + P * i)
        status = d.status
    assert d.finished


def test_another_identity_mid_run_is_not_a_lost_instance() -> None:
    status = listed_running(absent_listings=5, absent_since=T0, absent_checked_at=T0)
    d = decide(status, instance=None, identity="bob", now=T0 + P)
    assert d.status.outcome is None
    assert DeleteInstance not in kinds(d)
    assert d.status.stalled_reason == reasons.INSTANCE_NOT_ACCESSIBLE


def test_duplicate_names_before_the_id_is_known_stall_instead_of_creating() -> None:
    d = decide(at(Phase.PROVISIONING, create_requested_at=T0), instance_ambiguous=True, now=T0 + P * 100)
    assert d.actions == ()
    assert d.status.stalled_reason == reasons.INSTANCE_AMBIGUOUS


# --- 2. every path after the run ended has a deadline and ends in delete -------------------------


def test_a_container_that_will_not_stop_is_given_up_on_after_the_grace() -> None:
    status = listed_running(outcome=Outcome.CANCELED, reason=reasons.CANCELED, run_ended_at=T0)
    d = decide(status, instance=running(), now=T0 + timedelta(seconds=TUN.grace - 1))
    assert kinds(d) == [StopContainer, WaitForExit]
    d = decide(status, instance=running(), now=T0 + timedelta(seconds=TUN.grace + 1))
    assert d.status.phase is Phase.UPLOADING
    assert kinds(d) == [UploadResults]
    assert d.status.reason == reasons.CANCELED
    assert reasons.STOP_GRACE_EXPIRED in [e.reason for e in d.events]


def test_a_failed_cleanup_never_holds_up_the_delete_of_an_owned_instance() -> None:
    status = tearing_down(cleaned_up_at=None)
    failure = ActionFailure("CleanupWorkload", "ContainerInspectFailed", "docker: disk full", permanent=True)
    d = decide(status, instance=running(), identity="alice", failure=failure)
    assert kinds(d) == [DeleteInstance]
    assert d.status.reason == reasons.SUCCEEDED


def test_repeated_cleanup_failures_on_a_reused_instance_stall_and_keep_retrying() -> None:
    status = at(
        Phase.DELETED, created=False, outcome=Outcome.SUCCEEDED, reason=reasons.SUCCEEDED, uploaded_at=T0
    )
    failure = ActionFailure("CleanupWorkload", "BrevUnavailable", "ssh: connection refused", permanent=False)
    for _ in range(TUN.cleanup_attempts):
        d = decide(status, spec_=REUSE, instance=running(), failure=failure)
        status = d.status
        assert d.requeue_after is not None
        assert d.requeue_after > 0
    assert status.stalled_reason == reasons.SECRETS_MAY_REMAIN
    assert INST in (status.stalled_message or "")
    assert status.finished_at is None
    assert status.reason == reasons.SUCCEEDED
    d = decide(status, spec_=REUSE, instance=running())
    assert kinds(d) == [CleanupWorkload]
    d = decide(d.status, spec_=REUSE, instance=running(), cleaned=True, completed=("CleanupWorkload",))
    assert d.finished
    assert d.status.stalled_reason is None


def test_a_reused_instance_not_running_at_teardown_keeps_the_job_in_teardown_saying_so() -> None:
    """Issue 10: a STOPPED reused instance still holds the job's container (with its env): the job
    must not finish with cleanedUpAt set; it stalls with SecretsMayRemain and looks again."""
    status = at(
        Phase.DELETED, created=False, outcome=Outcome.SUCCEEDED, reason=reasons.SUCCEEDED, uploaded_at=T0
    )
    d = decide(status, spec_=REUSE, instance=running(STOPPED))
    assert not d.finished
    assert d.status.finished_at is None
    assert d.status.run.cleaned_up_at is None
    assert d.status.stalled_reason == reasons.SECRETS_MAY_REMAIN
    assert "brev start" in (d.status.stalled_message or "")
    assert d.requeue_after == TUN.backoff_max
    d = decide(d.status, spec_=REUSE, instance=running())
    assert kinds(d) == [CleanupWorkload]
    d = decide(d.status, spec_=REUSE, instance=running(), cleaned=True, completed=("CleanupWorkload",))
    assert d.finished
    assert d.status.stalled_reason is None


def test_a_permanent_failure_in_teardown_backs_off_instead_of_looping() -> None:
    failure = ActionFailure("DeleteInstance", "BrevRequestRejected", "multiple instances", permanent=True)
    d = decide(tearing_down(delete_requested_at=T0), instance=running(), identity="alice", failure=failure)
    assert d.actions == ()
    assert d.requeue_after is not None
    assert d.requeue_after > 0
    assert d.status.reason == reasons.SUCCEEDED


def test_a_permanent_upload_failure_goes_to_teardown_at_once() -> None:
    status = at(Phase.UPLOADING, outcome=Outcome.SUCCEEDED, reason=reasons.SUCCEEDED, upload_attempts=1)
    failure = ActionFailure("UploadResults", "S3AccessDenied", "AccessDenied", permanent=True)
    d = decide(status, instance=running(), failure=failure)
    assert d.status.phase is Phase.DELETED
    assert d.status.reason == reasons.UPLOAD_FAILED
    assert UploadResults not in kinds(d)


# --- 3. the log tail fits the CRD ------------------------------------------------------------------


def test_progress_bars_collapse_to_their_last_redraw_and_the_tail_is_capped() -> None:
    bar = "".join(f"\r{i}%|{'#' * (i // 10)}|" for i in range(0, 101, 5))
    tail = ("epoch 1",) * 30 + (bar + "\n", "x" * 5_000_000 + "\n", "done\r\n")
    d = decide(at(Phase.RUNNING), instance=running(), exit_code=0, log_tail=tail)
    lines = d.status.run.log_tail
    assert len(lines) <= machine.MAX_LOG_LINES
    assert all(len(line) <= machine.MAX_LOG_LINE for line in lines)
    assert sum(len(line.encode()) for line in lines) <= machine.MAX_LOG_BYTES
    assert "100%|##########|" in lines
    assert lines[-1] == "done"
    assert not any("\r" in line for line in lines)


# --- 4. a spec the operator cannot parse -----------------------------------------------------------


def test_an_unparseable_spec_stalls_the_job_without_finishing_it() -> None:
    d = machine.decide(
        None,
        listed_running(),
        _obs(instance=running()),
        namespace="ns",
        name="job",
        uid="uid-1",
        generation=2,
        tunables=TUN,
        spec_error="spec.task.newField: extra inputs are not permitted",
    )
    assert d.status.finished_at is None
    assert d.actions == ()
    assert d.status.stalled_reason == reasons.INVALID_SPEC
    assert "spec.task.newField" in (d.status.stalled_message or "")
    assert cond(d.status, "Stalled") == "True"
    assert d.status.phase is Phase.RUNNING


def test_deleting_a_job_with_an_unparseable_spec_still_deletes_its_instance_by_id() -> None:
    status = listed_running(cleaned_up_at=T0)
    kinds_seen: list[type] = []
    for _ in range(4):
        d = machine.decide(
            None,
            status,
            _obs(instance=running(), deleting=True, identity="alice"),
            namespace="ns",
            name="job",
            uid="uid-1",
            generation=2,
            tunables=TUN,
            spec_error="spec.x: bad",
        )
        status = d.status
        kinds_seen += kinds(d)
        if d.actions:
            break
    assert status.phase is Phase.DELETED
    assert status.reason == reasons.INVALID_SPEC
    assert DeleteInstance in kinds_seen
    delete = next(a for a in d.actions if isinstance(a, DeleteInstance))
    assert delete.name == ID


# --- 5. operator downtime is not the job's fault -------------------------------------------------


def test_a_container_that_exited_0_during_downtime_succeeds() -> None:
    status = listed_running(container_started_at=T0)
    late = T0 + timedelta(hours=3)  # runningSeconds is 3600
    d = decide(status, instance=running(), now=late)
    assert d.status.outcome is None
    assert kinds(d) == [WaitForExit]
    d = decide(
        d.status,
        instance=running(),
        now=late,
        exit_code=0,
        exit_finished_at=T0 + timedelta(minutes=20),
        completed=("WaitForExit",),
    )
    assert d.status.run_outcome is Outcome.SUCCEEDED
    assert d.status.run.exited_at == T0 + timedelta(minutes=20)


def test_a_container_still_running_past_the_deadline_times_out_after_one_look() -> None:
    late = T0 + timedelta(hours=3)
    d = decide(
        listed_running(container_started_at=T0), instance=running(), now=late, completed=("WaitForExit",)
    )
    assert d.status.reason == "RunningTimeout"
    assert kinds(d) == [StopContainer, WaitForExit]


def test_uploading_past_its_deadline_after_downtime_still_tries_once() -> None:
    status = at(Phase.UPLOADING, outcome=Outcome.SUCCEEDED, reason=reasons.SUCCEEDED)
    d = decide(status, instance=running(), now=T0 + timedelta(hours=5))
    assert kinds(d) == [UploadResults]
    d = decide(d.status, instance=running(), now=T0 + timedelta(hours=5, seconds=1))
    assert kinds(d) == [UploadResults], "an upload a crash cut short is not an attempt"
    failure = ActionFailure("UploadResults", "BrevUnavailable", "timeout", permanent=False)
    d = decide(d.status, instance=running(), now=T0 + timedelta(hours=5), failure=failure)
    assert d.status.upload.attempts == 1
    d = decide(d.status, instance=running(), now=T0 + timedelta(hours=5, seconds=10))
    assert d.status.reason == reasons.UPLOAD_FAILED
    assert d.status.phase is Phase.DELETED


# --- 6. Succeeded means the results are in S3, and never flips -----------------------------------


def test_succeeded_is_true_only_once_the_results_are_uploaded() -> None:
    d = decide(at(Phase.RUNNING), instance=running(), exit_code=0)
    assert d.status.run_outcome is Outcome.SUCCEEDED
    assert d.status.outcome is None  # not until the results are verified
    assert cond(d.status, "Succeeded") == "Unknown"
    d = decide(d.status, instance=running(), upload=UploadSummary(objects=1, bytes=1))
    assert cond(d.status, "Succeeded") == "True"


def test_succeeded_never_flips_back() -> None:
    d = decide(at(Phase.RUNNING), instance=running(), exit_code=0)
    d = decide(d.status, instance=running(), upload=UploadSummary(objects=1, bytes=1))
    later = d.status.model_copy(update={"run_outcome": Outcome.FAILED, "reason": reasons.UPLOAD_FAILED})
    d = decide(later, instance=running(), now=T0 + P)
    assert cond(d.status, "Succeeded") == "True"


# --- 7. smaller ones -------------------------------------------------------------------------------


def test_a_failed_start_of_a_stopped_reused_instance_is_retried() -> None:
    status = at(Phase.PROVISIONING, created=False)
    d = decide(status, spec_=REUSE, instance=running(STOPPED))
    assert kinds(d) == [StartInstance]
    failure = ActionFailure("StartInstance", "BrevUnavailable", "502", permanent=False)
    d = decide(d.status, spec_=REUSE, instance=running(STOPPED), failure=failure)
    d = decide(d.status, spec_=REUSE, instance=running(STOPPED), now=T0 + timedelta(seconds=2))
    assert kinds(d) == [StartInstance]


def test_a_transient_error_after_the_run_ended_keeps_the_final_reason() -> None:
    status = at(Phase.UPLOADING, outcome=Outcome.FAILED, reason=reasons.TRAINING_FAILED, message="exit 3")
    failure = ActionFailure("UploadResults", "BrevUnavailable", "ssh timeout", permanent=False)
    d = decide(status, instance=running(), failure=failure)
    assert d.status.reason == reasons.TRAINING_FAILED
    assert d.status.message == "exit 3"
    assert "ssh timeout" in (d.status.teardown.message or "")
    d = decide(
        d.status, instance=running(), upload=UploadSummary(objects=1, bytes=1), completed=("UploadResults",)
    )
    assert d.status.reason == reasons.TRAINING_FAILED


def test_a_transient_reason_does_not_outlive_the_recovery() -> None:
    failure = ActionFailure("ProbeExec", "BrevUnavailable", "capacity", permanent=False)
    status = decide(at(Phase.WAITING_EXEC), instance=running(), failure=failure).status
    assert status.reason == "BrevUnavailable"
    d = decide(status, instance=running(), probe_ok=True, completed=("ProbeExec",))
    assert d.status.reason is None
    assert d.status.retries == 0


def test_the_create_settle_time_starts_when_the_create_call_returned() -> None:
    long_call = T0 + timedelta(seconds=600)
    status = at(Phase.PROVISIONING, create_requested_at=T0, create_returned_at=long_call)
    d = decide(status, now=long_call + timedelta(seconds=30))
    assert d.actions == ()
    failure = ActionFailure("CreateInstance", "BrevUnavailable", "timeout", permanent=False)
    d = decide(at(Phase.PROVISIONING, create_requested_at=T0), failure=failure, now=long_call)
    assert d.status.instance.create_returned_at == long_call


def test_nothing_is_created_before_the_finalizer_is_on_the_object() -> None:
    d = decide(decide(TaoBrevJobStatus()).status, has_finalizer=False)
    assert d.status.phase is Phase.PENDING
    assert d.actions == ()
    assert d.requeue_after is not None
    assert d.requeue_after > 0


def test_a_pending_edit_from_reuse_to_ephemeral_re_derives_the_names() -> None:
    first = decide(TaoBrevJobStatus(), spec_=REUSE).status
    assert first.instance.created is False
    d = decide(first, spec_=EPHEMERAL)
    assert d.status.instance.created is True
    assert d.status.instance.name  # the current attempt's (the empty one before it has none)
    assert d.status.instance.name.startswith(MARKED_PREFIX)


def test_tunables_refuse_fewer_than_three_listings() -> None:
    with pytest.raises(ValueError, match="absent_listings"):
        machine.Tunables(absent_listings=1)


def _obs(**fields: Any) -> Observation:
    fields.setdefault("instance_known", True)
    return Observation(now=T0, **fields)


def test_not_found_from_exec_is_no_proof_of_loss() -> None:
    """Another identity's exec answers "not found" for an instance that runs fine."""
    failure = ActionFailure(
        "WaitForExit", "InstanceNotFound", "instance with id/name x not found", permanent=True
    )
    d = decide(listed_running(container_started_at=T0), instance=running(), identity="bob", failure=failure)
    assert d.status.outcome is None
    assert d.actions == ()
    assert d.requeue_after == TUN.backoff_base


def test_a_rotated_api_key_of_the_same_org_answers_for_what_the_old_key_created() -> None:
    assert machine.same_reach("org-key:org-1:aaaa", "org-key:org-1:bbbb")
    assert not machine.same_reach("org-key:org-1:aaaa", "org-key:org-2:aaaa")
    assert not machine.same_reach("user:bob", "org-key:org-1:aaaa")
    assert not machine.same_reach("user:bob", "user:carol")
    status = tearing_down(brev_identity="org-key:org-1:aaaa")
    d = decide(status, instance=None, identity="org-key:org-1:bbbb", delete_not_found=True)
    assert d.finished
