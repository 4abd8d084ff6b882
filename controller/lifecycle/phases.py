"""The phase table (PURE): what each phase of a TaoBrevJob means, in one place.

    Pending -> Provisioning -> WaitingExec -> Pulling -> Running -> Uploading -> Deleted

Every question of the form "what does this phase mean" — may it move there, which
`spec.timeouts` field bounds it, does the pass need the job's Secrets, is the run still ahead,
does a job in it hold its quota slot, may the job's files be on the instance — is answered by
its row in `PHASES`, never by a tuple of phases written where the question is asked. The step
function of each phase is bound to its row in `controller.lifecycle.machine.STEPS` (the step modules
read this table, so it cannot import them). Adding a phase is one `Phase` member, one row here
and one step function there; tests/unit/test_phases.py checks the table is whole.

This module imports nothing of the operator: the raw-dict readers (admission) and every layer
above use it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum


class Phase(StrEnum):
    """Where the job is; the operator's summary of its conditions."""

    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    WAITING_EXEC = "WaitingExec"
    PULLING = "Pulling"
    RUNNING = "Running"
    UPLOADING = "Uploading"
    DELETED = "Deleted"


@dataclass(frozen=True)
class PhaseSpec:
    """One phase's row."""

    # The phases decide() may move to from here (anything else is a bug; asserted on entry).
    next: frozenset[Phase]
    # The `spec.timeouts` field bounding the time in this phase (None: not bounded by one;
    # Pending's pendingSeconds counts from the pre-flight's first failure, not from entry).
    timeout: str | None
    # No container yet: a run that ends here has nothing to upload and goes to Deleted.
    pre_run: bool = False
    # A job here holds its admission (quota) slot: admitted and not yet through.
    holds_slot: bool = False
    # The pass loads the job's Secrets (the pre-flight reads them, Pulling delivers them).
    needs_secrets: bool = False
    # spec.budget is judged on entering each pass here before the run ends (Running judges it
    # at the exit instead: an exit 0 inside the budget, seen late, is a success).
    budget_judged: bool = False
    # Its remote steps get the time left in the phase as their deadline (probe, pull and
    # staging, upload), so the phase never overruns its timeout by a whole call's timeout.
    deadline_bound: bool = False
    # Once entered, the job's spec, Secrets or container may be on the instance: teardown
    # must clean up (before it, nothing of the job was ever put there).
    workload: bool = False
    # A status here may go out with the next step's (nothing asked of Brev yet).
    holdable: bool = False


_P = Phase
PHASES: Mapping[Phase, PhaseSpec] = {
    _P.PENDING: PhaseSpec(
        next=frozenset({_P.PROVISIONING, _P.DELETED}),
        timeout=None,
        pre_run=True,
        needs_secrets=True,
        holdable=True,
    ),
    _P.PROVISIONING: PhaseSpec(
        next=frozenset({_P.WAITING_EXEC, _P.DELETED}),
        timeout="provisioning_seconds",
        pre_run=True,
        holds_slot=True,
        needs_secrets=True,
        budget_judged=True,
        holdable=True,
    ),
    # Back to Provisioning: the attempt ended and another one follows (controller/lifecycle/recovery.py).
    _P.WAITING_EXEC: PhaseSpec(
        next=frozenset({_P.PULLING, _P.DELETED, _P.PROVISIONING}),
        timeout="waiting_exec_seconds",
        pre_run=True,
        holds_slot=True,
        needs_secrets=True,
        budget_judged=True,
        deadline_bound=True,
    ),
    _P.PULLING: PhaseSpec(
        next=frozenset({_P.RUNNING, _P.DELETED, _P.PROVISIONING}),
        timeout="pulling_seconds",
        pre_run=True,
        holds_slot=True,
        needs_secrets=True,
        budget_judged=True,
        deadline_bound=True,
        workload=True,
    ),
    _P.RUNNING: PhaseSpec(
        next=frozenset({_P.UPLOADING, _P.PROVISIONING}),
        timeout="running_seconds",
        holds_slot=True,
        workload=True,
    ),
    _P.UPLOADING: PhaseSpec(
        next=frozenset({_P.DELETED}),
        timeout="uploading_seconds",
        holds_slot=True,
        deadline_bound=True,
        workload=True,
    ),
    _P.DELETED: PhaseSpec(next=frozenset(), timeout="deleting_seconds"),
}

# The allowed phase changes, as data (a view of the table's `next` column).
TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {phase: row.next for phase, row in PHASES.items()}


def row(phase: str | None) -> PhaseSpec:
    """The row of a phase as status holds it: no phase yet is Pending. An unknown name (written
    by a newer release) raises ValueError."""
    return PHASES[Phase(phase or Phase.PENDING)]


def entered_any(phase_times: Mapping[str, object], flag: Callable[[PhaseSpec], bool]) -> bool:
    """Whether the job ever entered a phase whose row answers `flag` (e.g. `lambda r: r.holds_slot`;
    status.phaseTimes' keys; names this release does not know are skipped)."""
    known = {str(p) for p, r in PHASES.items() if flag(r)}
    return any(name in known for name in phase_times)
