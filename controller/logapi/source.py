"""Where an attempt's log is (PURE): on its running instance, archived in S3, or nowhere (with
why, for the 404 a viewer reads). A workflow's log is a step's (`step`, default: the step whose
container is the current one): live while that container is, then at <resultsUri>/logs/<step>/."""

from __future__ import annotations

from dataclasses import dataclass

from controller.api.container_paths import step_container
from controller.api.status import AttemptRecord, StepPhase, TaoBrevJobStatus
from controller.lifecycle.phases import Phase

# The container (and its log) is on the instance from the start of Running until teardown
# removes it after the upload.
_ON_INSTANCE = (Phase.RUNNING, Phase.UPLOADING)


@dataclass(frozen=True)
class Live:
    attempt: int
    instance: str
    container: str
    running: bool  # False: exited, its log complete on the instance until the upload is done


@dataclass(frozen=True)
class Archived:
    attempt: int
    step: str | None = None  # a workflow step's log (logs/<step>/container.log)


@dataclass(frozen=True)
class NoLog:
    message: str


def log_source(  # noqa: PLR0911
    status: TaoBrevJobStatus, attempt: int | None, step: str | None = None
) -> Live | Archived | NoLog:
    if status.steps or step is not None:
        return _step_source(status, step)
    records = status.attempts
    if not records:
        return NoLog(f"the job has not started a run yet (phase {status.phase or 'Pending'})")
    numbers = [r.attempt for r in records]
    wanted = attempt if attempt is not None else numbers[-1]
    record = next((r for r in records if r.attempt == wanted), None)
    if record is None:
        return NoLog(f"attempt {wanted} does not exist: the job's attempts are {_listed(numbers)}")
    uploaded = [r.attempt for r in records if r.upload.uploaded_at is not None]
    if record.upload.uploaded_at is not None:
        if uploaded[-1] != wanted:
            return NoLog(
                f"attempt {wanted}'s archived log was replaced by attempt {uploaded[-1]}'s (both "
                "upload to the same resultsUri): read attempt "
                f"{uploaded[-1]}, or status.attempts[].run.logTail for attempt {wanted}'s last lines"
            )
        return Archived(wanted)
    if _on_instance(status, record) and status.job_id:
        return Live(wanted, record.instance.name, status.job_id, running=record.run.exited_at is None)
    if record.run.started_at is None:
        return NoLog(f"attempt {wanted} has not started its container yet (phase {status.phase})")
    return NoLog(
        f"attempt {wanted}'s log is not available: its instance is gone and the log was not "
        f"uploaded ({record.ended_reason or 'no upload'}); its last lines are in "
        f"status.attempts[{numbers.index(wanted)}].run.logTail"
    )


def _on_instance(status: TaoBrevJobStatus, record: AttemptRecord) -> bool:
    current = status.attempts[-1] is record
    return (
        current
        and status.phase in _ON_INSTANCE
        and record.run.started_at is not None
        and record.instance.deleted_at is None
        and record.run.cleaned_up_at is None
    )


def _listed(numbers: list[int]) -> str:
    return ", ".join(str(n) for n in numbers)


def _step_source(status: TaoBrevJobStatus, step: str | None) -> Live | Archived | NoLog:  # noqa: PLR0911
    """A workflow step's log: its container's while that is the attempt's current one, else the
    copy its upload saved (a step reused by spec.startAtStep: the earlier run's copy)."""
    names = [r.name for r in status.steps]
    if not names:
        return NoLog(f"--step {step}: the job is no workflow (spec.task); leave --step out")
    current = status.attempts[-1] if status.attempts else None
    running = current.run.step if current is not None else None
    if step is None:
        started = [r.name for r in status.steps if r.started_at is not None]
        step = running or (started[-1] if started else None)
        if step is None:
            return NoLog(f"no step of the workflow has started yet (phase {status.phase or 'Pending'})")
    record = next((r for r in status.steps if r.name == step), None)
    if record is None:
        return NoLog(f"the workflow has no step {step!r}: its steps are {', '.join(names)}")
    live = current is not None and running == step and _on_instance(status, current) and status.job_id
    if live and current is not None and status.job_id:
        container = step_container(status.job_id, step)
        return Live(current.attempt, current.instance.name, container, running=current.run.exited_at is None)
    attempt = record.attempt or (current.attempt if current is not None else 1)
    if record.results_verified or record.phase == StepPhase.REUSED:
        return Archived(attempt, step=step)
    if record.started_at is None:
        why = f": {record.message}" if record.message else ""
        return NoLog(f"step {step} has not run ({record.phase}{why})")
    return NoLog(
        f"step {step}'s log is not available: its container is gone and its log was not uploaded "
        f"({record.message or record.phase})"
    )
