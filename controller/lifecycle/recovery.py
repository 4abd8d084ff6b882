"""Recovery on a new instance, checkpoint sync/restore, billed time and budgets (PURE).

When an attempt's instance is lost (absence confirmed by controller/lifecycle/absence.py, never one
listing), goes to FAILURE or DELETING, is STOPPED by someone else, never accepts commands
(WaitingExec timeout), or the container exits with a code in `spec.recovery.retryOnExitCodes`,
and `spec.recovery.maxAttempts` allows, the attempt ends instead of the run:

1. `end_attempt`: the attempt's record (`status.attempts[]`) says why; phase goes back to
   Provisioning with the OLD instance still current (its name and id stay in status).
2. `release_previous` (start of every Provisioning pass): `brev delete` the old instance and
   confirm it gone exactly as teardown does (not-found under the creating identity, or an
   accepted delete then `absent_listings` listings). Only then is `deletedAt` written.
3. In the SAME status write the next attempt's name (`naming.attempt_instance_name`) becomes
   current and its per-instance fields are reset; the create follows in a later pass, after that
   status landed. So at no point are two instances of the job live unless the older one is the
   current one being deleted, and a crash anywhere restarts from status without a second create
   or a forgotten instance. Confirm-then-create costs the delete confirmation (one `brev delete`
   answering not-found for a lost instance; a few listings for a live one) in recovery time.

A reused instance (spec.instance.reuse) is never recovered: there is nothing to create.

Billed time per attempt runs from the first `brev create` request to the confirmed deletion
(or the job's finish for a retained instance, or now); cost = billed x the type's hourly price
from `brev search` (unknown prices make the total unknown, never zero).
"""

from __future__ import annotations

from datetime import datetime

from controller.api import naming, reasons
from controller.api.status import (
    CheckpointStatus,
    TaoBrevJobStatus,
)
from controller.api.vocabulary import Outcome
from controller.brev.client import STOPPED, STOPPING
from controller.lifecycle import budget
from controller.lifecycle.budget import billed_seconds, exact_totals
from controller.lifecycle.decision_pass import Pass
from controller.lifecycle.phases import PHASES, Phase
from controller.lifecycle.status_text import clip
from controller.lifecycle.steps import EventNote, SyncCheckpoints

# Stored billed seconds of a running attempt move in steps of this much. Every step is a status
# write and a watch event per running job: at 60 s (every exit wait re-arm) they were half the
# operator's CPU at 1,000 running jobs (issue 11). Status is the coarse human view; the budget
# check, ended attempts and the billing gauges use the exact figure every pass.
BILL_STEP_SECONDS = 600


# -- policy --------------------------------------------------------------------------------------


def enabled(p: Pass) -> bool:
    """Recovery (and so checkpoint sync) applies: a parsed spec, an instance this job creates,
    and more than one attempt allowed."""
    spec = p.spec
    return spec is not None and spec.instance.ephemeral is not None and spec.recovery.max_attempts > 1


def attempt_no(p: Pass) -> int:
    return p.s.attempt or 1


def _evictions(status: TaoBrevJobStatus) -> int:
    """Attempts Kueue's evictions ended: not the job's failures, so they spend no attempt."""
    return sum(1 for a in status.attempts or () if a.ended_reason == reasons.KUEUE_EVICTED)


def may_retry(p: Pass) -> bool:
    """Another attempt may follow this one: recovery applies, the run has not ended, the job is
    not being deleted, attempts are left, and so is budget. Without budget the run ends with
    this attempt's own reason (e.g. InstanceUnresponsive), not a BudgetExceeded that the next
    Provisioning pass would find: the budget did not end a run whose outcome nobody could see
    (found by the simulation, seed 8122: a container that exited 0 inside its budget on an
    instance that then went silent was reported BudgetExceeded)."""
    return (
        enabled(p)
        and p.spec is not None
        and not p.s.run_outcome
        and not p.obs.deleting
        and attempt_no(p) - _evictions(p.s) < p.spec.recovery.max_attempts
        and over_budget(p) is None
    )


def retries_exit_code(p: Pass, code: int) -> bool:
    return code != 0 and p.spec is not None and code in p.spec.recovery.retry_on_exit_codes and may_retry(p)


def stopped_by_someone(p: Pass) -> tuple[str, str] | None:
    """An instance this job created is STOPPED/STOPPING: this job never stops it, so someone (or
    Brev) did, and nothing on it answers. With attempts left a new one follows; without, the run
    ends (InstanceStopped) and teardown deletes it."""
    inst = p.obs.instance
    if not p.owned or inst is None or inst.status not in (STOPPED, STOPPING):
        return None
    return reasons.INSTANCE_STOPPED, f"instance {p.instance} is {inst.status} (not stopped by this job)"


# -- attempts ------------------------------------------------------------------------------------


def end_attempt(p: Pass, reason: str, message: str) -> None:
    """This attempt is over, the job is not: record why and go back to Provisioning, where the old
    instance is deleted and confirmed before the next one is created."""
    track(p)
    assert p.s.attempts, "an owned instance always has an attempt record"
    rec = p.s.current
    n = rec.attempt
    # absence.py's wording for the end of a run; here no upload follows.
    message = message.removesuffix("; uploading what can be reached, then deleting it")
    rec.end(p.now, reason, clip(message))
    note = f"attempt {n} ended: {message}; deleting instance {p.instance}, then attempt {n + 1} on a new one"
    p.events.append(EventNote("Warning", reason, clip(note)))
    rec.retire_run()
    if p.phase == Phase.PROVISIONING:
        p.s.phase_times = {**p.s.phase_times, str(Phase.PROVISIONING): p.now}
        p.s.retries = 0
    else:
        p.enter(Phase.PROVISIONING, note)
    p.s.reason = reasons.RECOVERING
    p.s.message = clip(note)
    p.requeue = 0.0


def release_previous(p: Pass, released: bool) -> None:
    """Called while the current attempt has ended: `released` is whether its instance is now
    confirmed deleted. Then the next attempt becomes current (before any create)."""
    if p.s.instance.deleted_at is None:
        if not released:
            return
        p.s.instance.deleted(p.now)
    _next_attempt(p)


def ended_not_switched(p: Pass) -> bool:
    return p.s.current.ended_at is not None and p.s.run_outcome is None


def awaiting_readmission(status: TaoBrevJobStatus) -> bool:
    """Kueue evicted the job, that attempt's instance is confirmed deleted and the next attempt has
    asked Brev nothing yet: the job waits for Kueue to admit it again (docs/kueue.md). Also the
    moment its Workload's quota reservation may go back to Kueue."""
    attempts = status.attempts or []
    if len(attempts) < 2 or status.run_outcome:
        return False
    previous, current = attempts[-2], attempts[-1]
    return (
        previous.ended_reason == reasons.KUEUE_EVICTED
        and previous.instance.deleted_at is not None
        and current.instance.create_requested_at is None
        and current.ended_at is None
    )


def _next_attempt(p: Pass) -> None:
    first = p.s.attempts[0].instance.name
    n = p.s.current.attempt + 1
    name = naming.attempt_instance_name(first, n)
    p.s.start_attempt(name, created=True)
    if p.s.job_id:
        p.s.backend_ref = naming.backend_ref(name, p.s.job_id)
    p.s.teardown.waiting(None)
    p.s.retries = 0
    p.s.reason = reasons.RECOVERING
    p.s.message = f"attempt {n}: creating instance {name}"
    p.events.append(EventNote("Normal", reasons.ATTEMPT_STARTED, p.s.message))
    # The listing in this pass was of the old name: look again before creating.
    p.requeue = 0.0


# -- bookkeeping and billing ----------------------------------------------------------------------


def track(p: Pass) -> None:
    """Keep the current attempt's billing facts in step (every pass, at the end), and the billed
    figures with them."""
    if not p.owned or not p.s.attempts or p.finished_before:
        # A finished job's record is final: another process (a restart, an upgrade that rounds
        # differently) must not rewrite its billed figures (found by tests/e2e/test_upgrade).
        return
    if p.s.instance.deleted_at is None:
        _follow(p)
    _bill(p)


def _follow(p: Pass) -> None:
    rec = p.s.instance
    # Billing starts at the FIRST create that may have made the instance; a refused create
    # (nothing made) clears it.
    billed_from = None if not p.asked_brev() else (rec.billed_from or rec.create_requested_at)
    listed = p.obs.instance.instance_type if p.obs.instance is not None else None
    rec.bill(billed_from, listed, p.obs.price_per_hour)
    if p.s.finished_at is not None and rec.billed_from is not None and p.deletes_instance():
        rec.deleted(p.s.finished_at)  # teardown finishes only once the delete is confirmed


def totals(p: Pass) -> tuple[float, float | None]:
    """(billed seconds, cost in dollars or None when a price is unknown) over all attempts, exact."""
    return exact_totals(p.s, p.now)


def _bill(p: Pass) -> None:
    for rec in p.s.attempts or ():
        exact = billed_seconds(rec, p.now, p.s.finished_at)
        price = rec.instance.price_per_hour
        closed = rec.instance.deleted_at is not None or p.s.finished_at is not None
        old = rec.billed_seconds
        step = closed or old is None or exact - old >= BILL_STEP_SECONDS
        rec.bill(int(exact) if step or old is None else old, price)
    recs = p.s.attempts or []
    p.s.billed_seconds = sum(r.billed_seconds or 0 for r in recs)
    known = all(r.instance.price_per_hour is not None or not r.billed_seconds for r in recs)
    p.s.cost_known = known
    p.s.estimated_cost_dollars = (
        round(sum(r.estimated_cost_dollars or 0.0 for r in recs), 4) if known else None
    )


def over_budget(p: Pass, at: datetime | None = None) -> str | None:
    """The budget message once billed time or cost (all attempts, exact) reached a limit, now or
    at `at` (a container's exit: what billed after it is not the run's doing)."""
    return budget.over_budget(p.spec, p.s, at or p.now)


def budget_left(p: Pass) -> float | None:
    """Seconds until the budget is reached at the current attempt's rate (None: no budget, or a
    cost budget with an unknown price). Bounds the exit wait, so no wait overruns the budget."""
    return budget.budget_left(p.spec, p.s, p.now)


def check_budget(p: Pass) -> None:
    """Before the run ended: a reached budget ends it (stop, upload what exists, tear down).
    Running is judged by run_phases.running instead: it looks for the exit first (an exit 0 inside
    the budget, seen late after downtime, is a success) and judges an exit at its own time."""
    if p.s.run_outcome or not PHASES[p.phase].budget_judged:
        return
    message = over_budget(p)
    if message is not None:
        p.end_run(Outcome.FAILED, reasons.BUDGET_EXCEEDED, message)


# -- checkpoints ---------------------------------------------------------------------------------


def fold_sync(p: Pass) -> None:
    """What the last `SyncCheckpoints` learned about the previous sync."""
    got = p.obs.checkpoint_sync
    if got is None:
        return
    ck = p.s.checkpoint or CheckpointStatus()
    if got.state == "ok":
        if got.epoch is not None:
            ck.epoch = max(got.epoch, ck.epoch or 0)
        ck.objects = got.objects
        ck.synced_at = p.now
        ck.failures = None
        ck.last_error = None
    elif got.state == "failed":
        sync_failed(p, ck, got.message)
    p.s.checkpoint = ck


def sync_failed(p: Pass, ck: CheckpointStatus, message: str) -> None:
    """Transient by definition: counted and shown, retried next interval, never fails the job."""
    ck.failures = (ck.failures or 0) + 1
    ck.last_error = clip(message, 500)
    if ck.failures == 1:
        p.events.append(
            EventNote("Warning", reasons.CHECKPOINT_SYNC_FAILED, clip(f"checkpoint sync failed: {message}"))
        )
    p.s.checkpoint = ck


def schedule_sync(p: Pass) -> None:
    """One `SyncCheckpoints` per interval while the container runs (first one an interval after it
    started). The request time is written before the action, so a crash never doubles it."""
    if not enabled(p) or p.spec is None or p.s.run.started_at is None:
        return
    if p.obs.did(SyncCheckpoints) or p.obs.failure is not None:
        return
    if sync_due_in(p) != 0.0:
        return
    ck = p.s.checkpoint or CheckpointStatus()
    ck.sync_requested_at = p.now
    p.s.checkpoint = ck
    # A workflow step's checkpoints go under checkpoints/<job id>/<step>/ (run.step: its name).
    p.actions.append(SyncCheckpoints(p.instance, step=p.s.run.step))


def sync_due_in(p: Pass) -> float | None:
    """Seconds until the next checkpoint sync is due (0 = now); None = no sync is scheduled."""
    if not enabled(p) or p.spec is None or p.s.run.started_at is None:
        return None
    ck = p.s.checkpoint or CheckpointStatus()
    since = ck.sync_requested_at
    last = since if since is not None and since >= p.s.run.started_at else p.s.run.started_at
    return max(0.0, p.spec.recovery.checkpoint_interval_seconds - p.since(last))


def needs_restore(p: Pass) -> bool:
    rec = p.s.current  # before the first attempt: attempt 1, never restored
    return enabled(p) and rec.attempt >= 2 and rec.restored_at is None


def fold_restore(p: Pass) -> None:
    got = p.obs.restored
    rec = p.s.current
    if got is None or not p.s.attempts or rec.restored_at is not None:
        return
    rec.restored(p.now, got.path, got.epoch)
    if got.path is not None:
        msg = f"attempt {rec.attempt} resumes from {got.path} (epoch {got.epoch}; {got.objects} objects)"
    else:
        msg = f"attempt {rec.attempt}: no checkpoint found under checkpoints/; training starts from scratch"
    if got.unreadable:
        # A newer checkpoint cut short (copied while TAO wrote it, or by a killed copy): resuming
        # from it would fail the run; the previous whole one is used instead, and said so.
        passed = ", ".join(got.unreadable)
        msg += f"; passed over {len(got.unreadable)} unreadable newer checkpoint(s): {passed}"
        p.events.append(EventNote("Warning", reasons.CHECKPOINT_RESTORED, clip(msg)))
        return
    p.events.append(EventNote("Normal", reasons.CHECKPOINT_RESTORED, msg))


def resume_path(p: Pass) -> str | None:
    """The override for attempt >= 2 of a `train` action when a checkpoint was restored."""
    rec = p.s.current
    if rec.attempt < 2 or rec.resumed_from is None:
        return None
    if p.spec is None:
        return None
    if not p.spec.is_workflow and p.spec.workflow()[0].action != "train":
        return None  # a workflow's start_container passes it to train and retrain steps only
    return rec.resumed_from
