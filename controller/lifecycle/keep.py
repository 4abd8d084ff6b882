"""Keeping a failed run's instance for debugging (PURE): spec.debug.keepInstanceOnFailure.

After a Program failure (the training exited non-zero or ran past runningSeconds) of an instance
the job deletes, teardown goes as usual up to the cleanup — results and logs uploaded — then:

1. the cleanup removes only what holds a secret (the job's secret files and registry login, the
   checkpoint sync's container, and the training container too when its config carries
   spec.credentials.extraEnv) and must succeed: a cleanup that fails means no keep, the instance
   is deleted at once (its secrets go with it);
2. `instance.keptUntil` (now + the duration) is written with the cleanup's result, so a restart or
   a new leader keeps the deadline; an Event and the InstanceReleased condition say how to connect
   and until when;
3. passes come back at the deadline (and at least every BILL_STEP_SECONDS, so billed time in status
   moves and the budget is judged); the keep ends at the deadline, or at once when the TaoBrevJob
   is deleted, canceled (taobrev.io/cancel), its instance is being deleted by someone else, or
   spec.budget is reached (the kept time is billed);
4. `instance.keepEndedAt` is written and teardown's delete follows, within its usual bounds.

So the keep adds at most the duration (<= 24 h) before the delete, never an open end.
"""

from __future__ import annotations

from datetime import timedelta

from controller.api import reasons
from controller.api.timestamps import format_time
from controller.api.vocabulary import FailureClass, Outcome
from controller.brev.client import DELETING
from controller.lifecycle import budget
from controller.lifecycle.decision_pass import Pass
from controller.lifecycle.failure_class import failure_class
from controller.lifecycle.status_text import clip
from controller.lifecycle.steps import CleanupWorkload, EventNote

# While kept, a pass at least this often (recovery.BILL_STEP_SECONDS: billed time in status moves).
_PASS_EVERY = 600.0


def keep_seconds(p: Pass) -> int | None:
    """How long this run's instance is to be kept (None: not at all): set in the spec, the run
    failed by the program's doing, a container ran, and the job deletes the instance."""
    spec = p.spec
    if spec is None or spec.debug is None:
        return None
    seconds = spec.debug.keep_seconds()
    if seconds is None or p.s.run_outcome != Outcome.FAILED or p.s.run.started_at is None:
        return None
    if failure_class(p.s.reason) != FailureClass.PROGRAM or not p.deletes_instance():
        return None
    return seconds


def _ends_early(p: Pass) -> str | None:
    """Why a keep must end now, before its deadline (None: it goes on)."""
    if p.obs.deleting:
        return "the TaoBrevJob is being deleted"
    if p.obs.cancel_requested is not None:
        return "canceled (annotation taobrev.io/cancel)"
    inst = p.obs.instance
    if inst is not None and inst.status == DELETING:
        return f"instance {p.instance} is being deleted (not by this job)"
    spent = budget.over_budget(p.spec, p.s, p.now)
    if spent is not None:
        return f"{spent} while the instance was kept"
    return None


def wanted(p: Pass) -> bool:
    """Teardown's cleanup should keep the instance for debugging (none started yet)."""
    return p.s.instance.kept_until is None and keep_seconds(p) is not None and _ends_early(p) is None


def cleanup(p: Pass) -> CleanupWorkload:
    """The cleanup teardown asks for: all of it, or (to keep) only what holds a secret."""
    if not wanted(p):
        # On a retained instance the secrets must really go; on one we delete, best effort.
        return CleanupWorkload(p.instance, must_succeed=not p.deletes_instance())
    spec = p.spec
    secret_env = spec is not None and bool(spec.credentials.extra_env)
    return CleanupWorkload(p.instance, must_succeed=True, keep=True, keep_container=not secret_env)


def begin(p: Pass) -> None:
    """The cleanup that keeps the instance succeeded (its secrets are gone): keep it."""
    seconds = keep_seconds(p)
    if not p.obs.kept_for_debug or not wanted(p) or seconds is None:
        return
    until = p.now + timedelta(seconds=seconds)
    p.s.instance.keep(until)
    job = p.s.job_id
    container = (
        f"its stopped container {job} is there (`docker start -ai {job}`, `docker logs {job}`)"
        if _container_kept(p)
        else f"container {job} was removed (its config held spec.credentials.extraEnv values)"
    )
    note = clip(
        f"instance {p.instance} kept for debugging until {format_time(until)}: `brev shell {p.instance}`; "
        f"the job's files are in ~/taobrev/{job}, {container}; its secrets were removed. Billed until "
        "deleted (counts against spec.budget); `kubectl taobrev cancel` or deleting the TaoBrevJob "
        "deletes it now"
    )
    p.s.teardown.waiting(note)
    p.events.append(EventNote("Normal", reasons.KEPT_FOR_DEBUGGING, note))


def _container_kept(p: Pass) -> bool:
    return p.spec is not None and not p.spec.credentials.extra_env


def holds(p: Pass) -> bool:
    """Whether teardown waits (the instance is kept now); ends the keep at its deadline or early."""
    rec = p.s.instance
    until = rec.kept_until
    if until is None or rec.keep_ended_at is not None:
        return False
    why = _ends_early(p)
    if why is None and p.now >= until:
        why = f"kept until {format_time(until)} (spec.debug.keepInstanceOnFailure)"
    if why is not None:
        rec.end_keep(p.now)
        note = clip(f"instance {p.instance} no longer kept for debugging: {why}; deleting it")
        p.s.teardown.waiting(note)
        p.events.append(EventNote("Normal", reasons.KEEP_ENDED, note))
        return False
    # Back at the deadline; in between at least every billing step, so billed time in status
    # moves and the budget is judged (a reached budget ends the keep at once).
    left = (until - p.now).total_seconds()
    rest = budget.budget_left(p.spec, p.s, p.now)
    p.requeue = max(1.0, min(left, _PASS_EVERY, rest if rest is not None else left))
    return True
