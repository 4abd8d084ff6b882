"""The transitions a job's status shows, as events (PURE).

Events are derived from status, never kept on their own: status is durable (it is written before
anything acts on it), so a restarted operator derives the same events again, and only the
delivery record (status.notifications) says which were confirmed. Each event's key names the
transition and the attempt it belongs to; its id is a UUID derived from the job's uid and that
key, so a re-send after a crash carries the same id and receivers drop the duplicate.

A fact that status no longer shows (a recovery retires the attempt's run record) is an event
that can be derived only while it shows: one the operator never saw before a crash is not sent.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from controller.api import reasons
from controller.api.status import StepPhase, TaoBrevJobStatus
from controller.api.vocabulary import Outcome, Transition
from controller.lifecycle.conditions import STALLED

# uuid5 namespace of taobrev event ids (uuid5(NAMESPACE_DNS, "events.taobrev.io")).
ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "events.taobrev.io")
# The order of transitions that carry the same time (an outcome with its budget note).
_RANK = {t: i for i, t in enumerate(Transition)}
_OUTCOMES = {
    Outcome.SUCCEEDED: Transition.SUCCEEDED,
    Outcome.FAILED: Transition.FAILED,
    Outcome.CANCELED: Transition.CANCELED,
}


@dataclass(frozen=True)
class JobEvent:
    """One transition of one job."""

    transition: Transition
    # e.g. "admitted", "running/1", "recovering/2", "stalled/InstanceAmbiguous/1", "succeeded/1".
    key: str
    attempt: int | None
    time: datetime
    step: str | None = None  # a workflow step's transition (StepSucceeded, StepFailed)

    def id_for(self, uid: str) -> str:
        return event_id(uid, self.key)

    @property
    def ce_type(self) -> str:
        """The CloudEvents type, e.g. io.taobrev.job.succeeded."""
        return f"io.taobrev.job.{self.transition.value.lower()}"


def event_id(uid: str, key: str) -> str:
    """Stable: the same job and transition always give the same id (uuid5 of uid and key)."""
    return str(uuid.uuid5(ID_NAMESPACE, f"{uid}/{key}"))


def _key(transition: Transition, attempt: int | None, detail: str | None = None) -> str:
    parts = [transition.value[0].lower() + transition.value[1:]]
    if detail:
        parts.append(detail)
    if attempt is not None:
        parts.append(str(attempt))
    return "/".join(parts)


def _event(transition: Transition, attempt: int | None, at: datetime, detail: str | None = None) -> JobEvent:
    return JobEvent(transition, _key(transition, attempt, detail), attempt, at)


def _step_events(status: TaoBrevJobStatus) -> list[JobEvent]:
    """Each workflow step that ended (key e.g. stepSucceeded/train/1: the step and its attempt)."""
    found = []
    ended = {StepPhase.SUCCEEDED: Transition.STEP_SUCCEEDED, StepPhase.FAILED: Transition.STEP_FAILED}
    for rec in status.steps:
        transition = ended.get(rec.phase)
        if transition is not None and rec.finished_at is not None:
            key = _key(transition, rec.attempt, rec.name)
            found.append(JobEvent(transition, key, rec.attempt, rec.finished_at, step=rec.name))
    return found


def job_events(status: TaoBrevJobStatus) -> list[JobEvent]:
    """Every transition `status` shows, oldest first."""
    found: list[JobEvent] = _step_events(status)
    latest = max(status.phase_times.values(), default=None)
    if status.queue.admitted_at is not None:
        found.append(_event(Transition.ADMITTED, None, status.queue.admitted_at))
    for i, rec in enumerate(status.attempts):
        if rec.run.started_at is not None:
            found.append(_event(Transition.RUNNING, rec.attempt, rec.run.started_at))
        recovering = i + 1 < len(status.attempts) or (
            status.run_outcome is None and status.reason == reasons.RECOVERING
        )
        if rec.ended_at is not None and recovering:
            found.append(_event(Transition.RECOVERING, rec.attempt + 1, rec.ended_at))
    attempt = status.attempt
    ended = status.current.ended_at if status.attempts else None
    if status.run_outcome == Outcome.FAILED and status.reason == reasons.BUDGET_EXCEEDED:
        at = ended or status.finished_at or latest
        if at is not None:
            found.append(_event(Transition.BUDGET_EXCEEDED, attempt, at))
    if status.outcome is not None:
        if status.outcome == Outcome.SUCCEEDED:
            at = status.upload.uploaded_at if status.attempts else None
        else:
            at = ended
        at = at or status.finished_at or latest
        if at is not None:
            found.append(_event(_OUTCOMES[status.outcome], attempt, at))
    if status.stalled_reason is not None:
        since = next((c.last_transition_time for c in status.conditions if c.type == STALLED), None)
        at = since or latest
        if at is not None:
            found.append(_event(Transition.STALLED, attempt, at, status.stalled_reason))
    return sorted(found, key=lambda e: (e.time, _RANK[e.transition]))


def wanted(event: JobEvent, *filters: list[Transition]) -> bool:
    """Whether every non-empty filter (a notifier's spec.events, the job's spec.notify.events)
    lets the event through."""
    return all(not f or event.transition in f for f in filters)
