"""Where an attempt's log is (PURE): on its running instance, archived in S3, or nowhere (with
why, for the 404 a viewer reads)."""

from __future__ import annotations

from dataclasses import dataclass

from controller.api.status import AttemptRecord, TaoBrevJobStatus
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


@dataclass(frozen=True)
class NoLog:
    message: str


def log_source(status: TaoBrevJobStatus, attempt: int | None) -> Live | Archived | NoLog:  # noqa: PLR0911
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
