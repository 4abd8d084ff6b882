"""Issue 25, scenario 5 at the pure tier: after a non-zero exit with attempts left, the wait for
the still-listed instance to answer a probe has its own bound (Tunables.exit_answer_timeout past
the settle listings), not the Running timeout."""

from __future__ import annotations

from datetime import timedelta

from controller.api.status import TaoBrevJobStatus
from controller.api.vocabulary import Outcome
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import (
    ActionFailure,
    CleanupWorkload,
    DeleteInstance,
    ProbeExec,
    UploadResults,
)
from tests.unit.test_machine import T0, TUN, kinds
from tests.unit.test_recovery import ID, SPEC, inst, rspec, running_job, step

EXITED = T0 + timedelta(seconds=100)
BOUND = 300.0  # Tunables.exit_answer_timeout's default
# The settle listings after the exit, then the bound.
SILENT_LIMIT = TUN.absent_listings * TUN.poll_interval + BOUND


def exited_137() -> TaoBrevJobStatus:
    return running_job(exit_code=137, container_exited_at=EXITED)


def test_a_silent_instance_is_probed_until_the_bound() -> None:
    # A probe that failed in this pass: none again before a requeue, and that comes by the bound.
    d = step(exited_137(), instance=inst(), probe_ok=False, now=EXITED + timedelta(seconds=SILENT_LIMIT - 1))
    assert d.status.outcome is None
    assert ProbeExec not in kinds(d)
    assert d.requeue_after is not None and 0 < d.requeue_after <= 1.0
    # The next pass probes, within what is left of the bound.
    d = step(d.status, instance=inst(), now=EXITED + timedelta(seconds=SILENT_LIMIT - 120))
    probes = [a for a in d.actions if isinstance(a, ProbeExec)]
    assert probes == [ProbeExec(probes[0].instance, limit=120.0)]


def test_a_probe_never_outlives_the_bound_by_more_than_its_floor() -> None:
    # Seeds 14331, 15595 and 16327: a probe with the first-exec limit (900 s) hung on a silent
    # instance held the decision 600 s past the bound.
    d = step(exited_137(), instance=inst(), now=EXITED + timedelta(seconds=SILENT_LIMIT + 5))
    (probe,) = [a for a in d.actions if isinstance(a, ProbeExec)]
    assert probe.limit == TUN.answer_probe_min


def test_past_the_bound_the_run_ends_unreached_and_the_instance_is_deleted() -> None:
    late = EXITED + timedelta(seconds=SILENT_LIMIT + 1)
    d = step(exited_137(), instance=inst(), probe_ok=False, now=late)
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == "InstanceUnresponsive"
    assert "not uploaded" in (d.status.message or "")
    assert any(e.type == "Warning" and "not uploaded" in e.message for e in d.events)
    assert d.status.phase is Phase.UPLOADING
    assert UploadResults not in kinds(d)
    d = step(d.status, instance=inst(), now=late + timedelta(seconds=1))
    assert d.status.phase is Phase.DELETED
    assert CleanupWorkload not in kinds(d), "a cleanup would hang as the probes did"
    assert DeleteInstance(ID) in d.actions
    assert TUN.exit_answer_timeout == BOUND


# ---- the same bound while Running, when the exit itself was never seen ---------------------------
# Seed 735 of the simulation: the container exited non-zero, the instance stopped answering, and
# the wait that would have reported the exit was cancelled with the Lease. Every later wait failed
# (the instance did not answer) until the Running timeout, 24 h of billing.

SILENT = ActionFailure("WaitForExit", "SshConnectionFailed", "ssh: connect: Connection timed out", False)


def test_failed_waits_of_a_silent_instance_end_the_attempt_at_the_bound_not_the_running_timeout() -> None:
    d = step(running_job(), instance=inst(), failure=SILENT, now=T0 + timedelta(seconds=10))
    assert d.status.run.unanswered_since == T0 + timedelta(seconds=10)
    assert d.status.phase is Phase.RUNNING and d.status.run_outcome is None  # one silence: retried
    d = step(d.status, instance=inst(), failure=SILENT, now=T0 + timedelta(seconds=10 + BOUND - 1))
    assert d.status.phase is Phase.RUNNING and d.status.run_outcome is None
    d = step(d.status, instance=inst(), failure=SILENT, now=T0 + timedelta(seconds=10 + BOUND + 1))
    # Attempts left: this attempt ends, its instance is deleted before the next one is created.
    assert d.status.phase is Phase.PROVISIONING
    assert d.status.attempts[-1].ended_reason == "InstanceUnresponsive"
    assert d.status.run.unanswered_since is None
    assert any(e.type == "Warning" and e.reason == "InstanceUnresponsive" for e in d.events)


def test_without_attempts_left_the_run_ends_unresponsive_and_the_instance_is_deleted_unreached() -> None:
    one = SPEC.model_copy(update={"recovery": SPEC.recovery.model_copy(update={"max_attempts": 1})})
    d = step(running_job(), one, instance=inst(), failure=SILENT, now=T0)
    d = step(d.status, one, instance=inst(), failure=SILENT, now=T0 + timedelta(seconds=BOUND / 2))
    late = T0 + timedelta(seconds=BOUND + 1)
    d = step(d.status, one, instance=inst(), failure=SILENT, now=late)
    assert d.status.run_outcome is Outcome.FAILED
    assert d.status.reason == "InstanceUnresponsive"
    assert UploadResults not in kinds(d)
    d = step(d.status, one, instance=inst(), now=late + timedelta(seconds=1))
    assert d.status.phase is Phase.DELETED
    assert DeleteInstance(ID) in d.actions


def test_with_attempts_left_but_no_budget_the_run_ends_unresponsive_not_budget_exceeded() -> None:
    # Seed 8122: the container exited 0 just inside its budget, then the instance went silent;
    # the attempt ended at the bound, and the next (Provisioning) pass found the budget spent and
    # said BudgetExceeded. Nobody could see how the run ended: the truthful reason is the silence.
    capped = rspec(budget={"maxBilledSeconds": 300})
    d = step(running_job(), capped, instance=inst(), failure=SILENT, now=T0 + timedelta(seconds=10))
    d = step(d.status, capped, instance=inst(), failure=SILENT, now=T0 + timedelta(seconds=10 + BOUND / 2))
    late = T0 + timedelta(seconds=10 + BOUND + 1)
    d = step(d.status, capped, instance=inst(), failure=SILENT, now=late)
    assert d.status.run_outcome is Outcome.FAILED
    assert d.status.reason == "InstanceUnresponsive"
    assert len(d.status.attempts) == 1, "no attempt the budget cannot pay for"


def test_an_answer_clears_the_silence_and_other_failures_do_not_count() -> None:
    d = step(running_job(), instance=inst(), failure=SILENT, now=T0)
    assert d.status.run.unanswered_since == T0
    answered = step(d.status, instance=inst(), completed=("WaitForExit",), now=T0 + timedelta(seconds=5))
    assert answered.status.run.unanswered_since is None
    busy = ActionFailure("WaitForExit", "LaneBusy", "no wait slot in time", False)
    d = step(running_job(), instance=inst(), failure=busy, now=T0)
    assert d.status.run.unanswered_since is None  # the operator's own queue, not the instance
    # Unlisted or not RUNNING: the listings judge loss, not this bound.
    d = step(running_job(unanswered_since=T0), instance=None, failure=SILENT, now=T0 + timedelta(hours=1))
    assert d.status.reason != "InstanceUnresponsive"


def test_silence_across_a_gap_nobody_watched_is_counted_again_from_after_the_gap() -> None:
    """One failed wait, the operator down longer than the bound, one failed wait: two observations
    at the ends of the bound prove nothing about the time between (the instance may have answered
    anyone who asked). The count starts again after the gap and needs failed waits spread over a
    whole bound."""
    d = step(running_job(), instance=inst(), failure=SILENT, now=T0)
    after_downtime = T0 + timedelta(seconds=BOUND + 60)
    d = step(d.status, instance=inst(), failure=SILENT, now=after_downtime)
    assert d.status.phase is Phase.RUNNING and d.status.run_outcome is None
    assert d.status.run.unanswered_since == after_downtime
    for s in (BOUND / 3, 2 * BOUND / 3, BOUND - 1):
        d = step(d.status, instance=inst(), failure=SILENT, now=after_downtime + timedelta(seconds=s))
    assert d.status.phase is Phase.RUNNING, "not yet a whole bound of silence after the gap"
    d = step(d.status, instance=inst(), failure=SILENT, now=after_downtime + timedelta(seconds=BOUND + 1))
    assert d.status.phase is Phase.PROVISIONING
    assert d.status.attempts[-1].ended_reason == "InstanceUnresponsive"


def test_an_answer_clears_the_silence_count() -> None:
    d = step(running_job(), instance=inst(), failure=SILENT, now=T0)
    d = step(
        d.status, instance=inst(), completed=("ProbeExec",), probe_ok=True, now=T0 + timedelta(seconds=100)
    )
    assert d.status.run.unanswered_since is None and d.status.run.unanswered_checked_at is None
