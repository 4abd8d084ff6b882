"""Conditions derived from status (PURE), kstatus-compatible.

- Ready: True once the job finished successfully and its instance is released (kstatus "Current").
- Reconciling: True while anything is left to do, teardown included (kstatus "InProgress").
- Stalled: True once the job finished without success (kstatus "Failed").
- Succeeded: the run's own result: Unknown until the run ends, then True/False.
- InstanceReleased: True once teardown is done (ephemeral instance deleted, or retained one left).

`kubectl wait --for=condition=Succeeded` waits for a successful run; `--for=condition=Ready`
additionally for teardown. Transition times only move when a condition's status changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from controller import reasons
from controller.models import Condition, ConditionStatus, Outcome, Phase, TaoBrevJobStatus

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"
SUCCEEDED = "Succeeded"
INSTANCE_RELEASED = "InstanceReleased"
TYPES = (READY, RECONCILING, STALLED, SUCCEEDED, INSTANCE_RELEASED)


def _status(ok: bool | None) -> ConditionStatus:
    if ok is None:
        return ConditionStatus.UNKNOWN
    return ConditionStatus.TRUE if ok else ConditionStatus.FALSE


def _cond(ctype: str, ok: bool | None, reason: str, message: str) -> Condition:
    return Condition(type=ctype, status=_status(ok), reason=reason, message=message)


def derive(
    status: TaoBrevJobStatus, previous: Sequence[Condition], generation: int, now: datetime
) -> list[Condition]:
    phase = str(status.phase or Phase.PENDING)
    outcome = status.outcome
    reason = status.reason or phase
    message = status.message or ""
    finished = status.finished_at is not None
    succeeded = outcome == Outcome.SUCCEEDED

    new = [
        _cond(
            READY, finished and succeeded, reasons.SUCCEEDED if finished and succeeded else reason, message
        ),
        _cond(RECONCILING, not finished, phase if not finished else reasons.FINISHED, message),
        _cond(
            STALLED,
            finished and not succeeded,
            reason if finished and not succeeded else reasons.NOT_STALLED,
            message,
        ),
        _cond(
            SUCCEEDED,
            None if not outcome else succeeded,
            reason if outcome else reasons.RUN_NOT_FINISHED,
            message,
        ),
        _cond(
            INSTANCE_RELEASED,
            finished,
            reasons.RELEASED if finished else reasons.INSTANCE_IN_USE,
            "teardown complete"
            if finished
            else (status.teardown_message or f"teardown not finished ({phase})"),
        ),
    ]
    old = {c.type: c for c in previous}
    for c in new:
        prev = old.get(c.type)
        same = prev is not None and prev.status == c.status and prev.last_transition_time is not None
        c.last_transition_time = prev.last_transition_time if same and prev else now
        c.observed_generation = generation
    return new
