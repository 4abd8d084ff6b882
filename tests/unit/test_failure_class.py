"""`status.failureClass`: whose move it is after a failure (issue 27, part 5)."""

from __future__ import annotations

from datetime import timedelta

from controller.api import reasons
from controller.api.vocabulary import FailureClass, Outcome
from controller.brev.client import FAILURE
from controller.lifecycle.failure_class import CLASS_OF, failure_class
from controller.lifecycle.phases import Phase
from tests.unit.test_machine import T0
from tests.unit.test_recovery import inst, rspec, running_job, step

# Reasons that never end a run Failed: outcomes that are no failure, Events, conditions, phases.
NO_FAILURE = {
    reasons.SUCCEEDED,
    reasons.RUN_COMPLETED,
    reasons.CANCELED,
    reasons.CANCELED_BY_USER,
    reasons.KEPT_FOR_DEBUGGING,
    reasons.KEEP_ENDED,
    reasons.INSTANCE_CREATE_REQUESTED,
    reasons.INSTANCE_START_REQUESTED,
    reasons.INSTANCE_DELETE_REQUESTED,
    reasons.INSTANCE_NOT_RELEASED,
    reasons.STOP_GRACE_EXPIRED,
    reasons.CLEANUP_FAILED,
    reasons.UPLOAD_SKIPPED,
    reasons.FINISHED,
    reasons.INSTANCE_AMBIGUOUS,
    reasons.SECRETS_MAY_REMAIN,
    reasons.RUN_NOT_FINISHED,
    reasons.RESULTS_NOT_UPLOADED,
    reasons.NOT_STALLED,
    reasons.INSTANCE_IN_USE,
    reasons.RELEASED,
    reasons.EXIT_CODE_RETRIED,
    reasons.RECOVERING,
    reasons.ATTEMPT_STARTED,
    # workflow steps' own Events (the run's outcome carries StepFailed / StepTimedOut)
    reasons.STEP_STARTED,
    reasons.STEP_SUCCEEDED,
    reasons.STEP_SKIPPED,
    reasons.STEP_REUSED,
    reasons.STEP_INTERRUPTED,
    reasons.CHECKPOINT_SYNC_FAILED,
    reasons.CHECKPOINT_RESTORED,
    reasons.KUEUE_EVICTED,
    reasons.PREFLIGHT_PASSED,
    reasons.DRY_RUN,
}


def _constants() -> set[str]:
    return {
        value
        for name, value in vars(reasons).items()
        if name.isupper() and isinstance(value, str) and not name.startswith("_")
    }


def test_every_reason_is_classified_or_is_no_failure() -> None:
    unclassified = _constants() - CLASS_OF.keys() - NO_FAILURE
    assert unclassified == set(), "classify them in controller/lifecycle/failure_class.py"
    assert not NO_FAILURE & CLASS_OF.keys()


def test_every_phase_timeout_has_a_class() -> None:
    for phase in Phase:
        if phase != Phase.DELETED:
            assert reasons.timeout(phase) in CLASS_OF, phase
    assert failure_class(reasons.timeout(Phase.RUNNING)) is FailureClass.PROGRAM
    assert failure_class(reasons.timeout(Phase.PENDING)) is FailureClass.CONFIGURATION
    assert failure_class(reasons.timeout(Phase.PULLING)) is FailureClass.INFRASTRUCTURE


def test_a_reason_this_release_does_not_know_is_never_blamed_on_the_user() -> None:
    assert failure_class("SomethingNewFromBrev") is FailureClass.INFRASTRUCTURE
    assert failure_class(None) is FailureClass.INFRASTRUCTURE


def test_the_status_says_whose_move_it_is() -> None:
    one = rspec(recovery={"maxAttempts": 1})
    program = step(running_job(), one, instance=inst(), exit_code=1, completed=("WaitForExit",))
    assert (program.status.outcome, program.status.failure_class) == (Outcome.FAILED, FailureClass.PROGRAM)
    lost = step(running_job(), one, instance=inst(FAILURE))
    assert (lost.status.outcome, lost.status.failure_class) == (Outcome.FAILED, FailureClass.INFRASTRUCTURE)
    capped = rspec(budget={"maxBilledSeconds": 120})
    over = T0 + timedelta(seconds=121)
    budget = step(running_job(), capped, instance=inst(), now=over, completed=("WaitForExit",))
    assert (budget.status.reason, budget.status.failure_class) == (
        reasons.BUDGET_EXCEEDED,
        FailureClass.BUDGET,
    )
    running = step(running_job(), one, instance=inst())
    assert running.status.failure_class is None
    succeeded = step(running_job(), one, instance=inst(), exit_code=0, completed=("WaitForExit",))
    assert succeeded.status.outcome is None and succeeded.status.failure_class is None
    assert "failureClass" in program.status.to_k8s() and "failureClass" not in running.status.to_k8s()
