"""Conditions derived from status (PURE), kstatus-compatible.

- Ready: True once the job finished successfully and its instance is released (kstatus "Current").
- Reconciling: True while anything is left to do, teardown included (kstatus "InProgress").
- Stalled: True once the job finished without success (kstatus "Failed"), and while the operator
  cannot go on without help (status.stalledReason: InvalidSpec, InstanceNotAccessible, ...).
- Succeeded: True only once the run succeeded AND its results are verified in S3, and then never
  flips back; False once the run failed; Unknown before.
- InstanceReleased: True once teardown is done (ephemeral instance deleted, or retained one left);
  reason KeptForDebugging while spec.debug.keepInstanceOnFailure keeps a failed run's instance.
- Admitted: True once the job was admitted under the instance quotas (controller/fleet/admission.py);
  it then holds its slot until it finished. Queued: True while a limit holds it back (reason
  ClusterInstanceLimit / NamespaceInstanceLimit / NamespaceGPULimit, message with the limit, the
  usage and its place in the queue). Suspended: True while spec.suspend holds it back. Kueue's
  vocabulary (Admitted, and a suspended workload), plus the Queued the issue asks for.

`kubectl wait --for=condition=Succeeded` waits for a successful run; `--for=condition=Ready`
additionally for teardown. Transition times only move when a condition's status changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from controller.api import reasons
from controller.api.status import Condition, TaoBrevJobStatus
from controller.api.timestamps import format_time
from controller.api.vocabulary import ConditionStatus, Outcome
from controller.fleet import admission
from controller.lifecycle.phases import PHASES, Phase, entered_any

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"
SUCCEEDED = "Succeeded"
INSTANCE_RELEASED = "InstanceReleased"
ADMITTED = "Admitted"
QUEUED = "Queued"
SUSPENDED = "Suspended"
TYPES = (READY, RECONCILING, STALLED, SUCCEEDED, INSTANCE_RELEASED, ADMITTED, QUEUED, SUSPENDED)


def shown_outcome(status: TaoBrevJobStatus) -> Outcome | None:
    """status.outcome as users read it (the OUTCOME column, GitOps health, scripts): how the run
    ended, except that a run that exited 0 is Succeeded only once its results are verified in S3
    (issue 32: a bucket typo must never show Succeeded first and Failed later)."""
    run = status.run_outcome
    if run == Outcome.SUCCEEDED and status.upload.uploaded_at is None:
        return None
    return run


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
    outcome = status.run_outcome
    reason = status.reason or phase
    message = status.message or ""
    finished = status.finished_at is not None
    succeeded = outcome == Outcome.SUCCEEDED
    old = {c.type: c for c in previous}
    was_succeeded = (prev := old.get(SUCCEEDED)) is not None and prev.status == ConditionStatus.TRUE
    delivered = was_succeeded or (succeeded and status.upload.uploaded_at is not None)
    stalled = finished and not succeeded
    stall_reason = reason if stalled else (status.stalled_reason or reasons.NOT_STALLED)
    stall_message = message if stalled else (status.stalled_message or message)
    if delivered:
        run: bool | None = True
        run_reason = reasons.SUCCEEDED
    elif outcome and not succeeded:
        run, run_reason = False, reason
    else:
        run, run_reason = None, (reasons.RESULTS_NOT_UPLOADED if succeeded else reasons.RUN_NOT_FINISHED)

    new = [
        _cond(
            READY, finished and succeeded, reasons.SUCCEEDED if finished and succeeded else reason, message
        ),
        _cond(RECONCILING, not finished, phase if not finished else reasons.FINISHED, message),
        _cond(STALLED, stalled or status.stalled_reason is not None, stall_reason, stall_message),
        _cond(SUCCEEDED, run, run_reason, message),
        _cond(
            INSTANCE_RELEASED,
            finished,
            reasons.RELEASED if finished else _in_use(status),
            "teardown complete"
            if finished
            else (status.teardown.message or f"teardown not finished ({phase})"),
        ),
    ]
    new += _admission(status)
    for c in new:
        prev = old.get(c.type)
        same = prev is not None and prev.status == c.status and prev.last_transition_time is not None
        c.last_transition_time = prev.last_transition_time if same and prev else now
        c.observed_generation = generation
    return new


def _in_use(status: TaoBrevJobStatus) -> str:
    """InstanceReleased's reason before teardown finished: KeptForDebugging while the instance is
    kept (spec.debug.keepInstanceOnFailure; the message says how to connect and until when)."""
    inst = status.instance
    kept = inst.kept_until is not None and inst.keep_ended_at is None
    return reasons.KEPT_FOR_DEBUGGING if kept else reasons.INSTANCE_IN_USE


def _admission(status: TaoBrevJobStatus) -> list[Condition]:
    """Admitted / Queued / Suspended, from status alone (the queue record)."""
    admitted = is_admitted(status)
    why = status.queue.reason
    queued = not admitted and why in admission.LIMIT_REASONS
    suspended = not admitted and why == admission.SUSPENDED
    waiting = status.queue.message or "not admitted yet"
    if admitted:
        when = f" at {format_time(status.queue.admitted_at)}" if status.queue.admitted_at else ""
        text = f"admitted{when}; holds its quota slot until finished"
        adm = _cond(ADMITTED, True, admission.ADMITTED, text)
    else:
        adm = _cond(ADMITTED, False, why or admission.NOT_ADMITTED, waiting)
    if queued and why:
        que = _cond(QUEUED, True, why, waiting)
    else:
        idle = admission.ADMITTED if admitted else admission.NOT_QUEUED
        idle = admission.SUSPENDED if suspended else idle
        que = _cond(QUEUED, False, idle, "")
    if suspended:
        sus = _cond(SUSPENDED, True, admission.SUSPENDED, waiting)
    else:
        sus = _cond(SUSPENDED, False, admission.NOT_SUSPENDED, "")
    return [adm, que, sus]


def is_admitted(status: TaoBrevJobStatus) -> bool:
    """Admitted under the quotas; a job that ever left Pending for Provisioning was admitted (also
    one from before quotas). A job that went from Pending straight to Deleted never was."""
    if status.queue.admitted_at is not None or entered_any(status.phase_times, lambda r: r.holds_slot):
        return True
    return status.phase is not None and PHASES[status.phase].holds_slot
