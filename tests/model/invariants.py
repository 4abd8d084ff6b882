"""Lifecycle invariants stated over the fake world and the status Kubernetes holds, not over what
the operator believes. Each raises AssertionError naming what broke (issue 9)."""

from __future__ import annotations

from itertools import pairwise

from controller.lifecycle import machine
from controller.lifecycle.phases import Phase
from tests import status_paths as sp
from tests.fakes.brev import CreateRecord
from tests.fakes.harness import Harness
from tests.status_paths import attempt_no

# Passes in a row that asked for no delay while no simulated time passed: more is a hot loop.
MAX_ZERO_DELAY_CHAIN = 5


def no_live_instance_after_finish(h: Harness, instance_name: str) -> None:
    """`finishedAt` (or the object released) => no instance this job created still bills."""
    if not (h.finished or h.obj is None):
        return
    live = [i for i in h.brev.created_ids(instance_name) if h.brev.live(i)]
    assert not live, (
        f"finished ({h.status.get('outcome')}/{h.status.get('reason')}: {h.status.get('message')}) "
        f"while instance(s) {live} it created are live and no delete was accepted"
    )


def at_most_one_create(h: Harness, instance_name: str) -> None:
    """One create per name. The one exception is not the operator's doing: Brev lost the earlier
    instance (`vanish`) before it was ever listed, and the create re-sent after the settle time
    (which would have adopted it) made a new one."""
    accepted = h.brev.accepted_creates(instance_name)
    extra = [c for prev, c in pairwise(accepted) if not _vanished_before(h, prev, c.at)]
    assert not extra, f"{len(accepted)} creates accepted for one job: {accepted}"


def _vanished_before(h: Harness, create: CreateRecord, at: float) -> bool:
    inst = h.brev.gone.get(create.id or "")
    return inst is not None and inst.vanished_at is not None and inst.vanished_at <= at


def no_live_instance_of_any_attempt_after_finish(h: Harness, base: str) -> None:
    for name in h.attempt_names(base):
        no_live_instance_after_finish(h, name)


def one_create_per_attempt(h: Harness, base: str) -> None:
    """Each attempt's name is created at most once (a restart adopts, never duplicates)."""
    for name in h.attempt_names(base):
        at_most_one_create(h, name)


def never_two_live_instances(h: Harness, base: str) -> None:
    """At most one instance of the job bills, unless the older ones are listed in status.attempts
    as ended with their deletion pending (so a crash cannot forget them)."""
    live = [i for i in h.all_created_ids(base) if h.brev.live(i)]
    if len(live) <= 1:
        return
    pending = {
        (a.get("instance") or {}).get("id")
        for a in h.status.get("attempts") or []
        if a.get("endedAt") and not (a.get("instance") or {}).get("deletedAt")
    }
    unaccounted = [i for i in live[:-1] if i not in pending]
    assert not unaccounted, (
        f"{len(live)} live instances of one job ({live}); not pending deletion: {unaccounted}"
    )


def attempts_within_limit(h: Harness, base: str, max_attempts: int) -> None:
    attempts = h.status.get("attempts") or []
    assert len(attempts) <= max_attempts, f"{len(attempts)} attempts recorded, maxAttempts={max_attempts}"
    assert (attempt_no(h.status) or 1) <= max_attempts
    names = {c.name for c in h.brev.creates if c.accepted and c.name in set(h.attempt_names(base))}
    assert len(names) <= max_attempts, f"instances created under {sorted(names)}, maxAttempts={max_attempts}"


class FinishedNeverCreates:
    """Once finished (or its object gone), the job creates nothing more."""

    def __init__(self) -> None:
        self.creates_at_finish: int | None = None

    def check(self, h: Harness) -> None:
        if self.creates_at_finish is None:
            if h.finished or h.obj is None:
                self.creates_at_finish = len(h.brev.creates)
            return
        late = h.brev.creates[self.creates_at_finish :]
        assert not [c for c in late if c.accepted], f"created after the job finished: {late}"


class CanceledNeverCreates:
    """Once a cancel is recorded (runOutcome Canceled), the job creates nothing more: no attempt
    after it, whatever recovery would have done."""

    def __init__(self) -> None:
        self.creates_at_cancel: int | None = None

    def check(self, h: Harness) -> None:
        if self.creates_at_cancel is None:
            if h.status.get("runOutcome") == "Canceled":
                self.creates_at_cancel = len(h.brev.creates)
            return
        late = h.brev.creates[self.creates_at_cancel :]
        assert not [c for c in late if c.accepted], f"created after the run was canceled: {late}"


def kept_instance_holds_no_secret(h: Harness) -> None:
    """While a failed run's instance is kept for debugging, none of the job's secret files and no
    container whose config holds secret env is on it."""
    rec = sp.instance(h.status)
    if not rec.get("keptUntil") or rec.get("keepEndedAt"):
        return
    inst = h.brev.instances.get(rec.get("id") or "")
    if inst is None:
        return
    secrets = [p for p in inst.files if "/secrets/" in p]
    carrying = [c.job_id for c in inst.containers.values() if c.carries_secrets]
    assert not secrets and not carrying, f"kept instance {inst.name} holds {secrets} {carrying}"


def foreign_instances_untouched(h: Harness, instance_name: str) -> None:
    """Only an instance this job created (under any attempt's name) may be deleted."""
    ours = set(h.all_created_ids(instance_name))
    wrong = [d for d in h.brev.deletes if d.outcome == "accepted" and d.id not in ours]
    assert not wrong, f"deleted an instance the job did not create: {wrong}"


def upload_before_delete(h: Harness) -> None:
    """A container ran and the instance still answered: results were tried before the delete."""
    w = h.brev
    for start in w.container_starts:
        deletes = [d for d in w.deletes if d.id == start.instance_id and d.outcome == "accepted"]
        deletes = [d for d in deletes if d.seq > start.seq]
        if not deletes:
            continue
        first = deletes[0]
        inst = w.instances.get(start.instance_id) or w.gone.get(start.instance_id)
        if inst is not None and inst.broken_at is not None and inst.broken_at <= first.at:
            continue  # FAILURE or STOPPED by someone else: nothing on it could be reached
        uploads = [
            u for u in w.uploads if u.instance_id == start.instance_id and start.seq < u.seq < first.seq
        ]
        if uploads:
            continue
        execs = [e for e in w.execs if e.instance_id == start.instance_id and start.seq < e.seq < first.seq]
        answered = execs[-1].answered if execs else True
        assert not answered, (
            f"instance {start.instance_id} deleted at t={first.at:.0f}s without an upload attempt, "
            f"though a container ran (t={start.at:.0f}s) and the instance answered its last command"
        )


class WriteChecker:
    """Walks the status writes once, in order: legal transitions only (machine.TRANSITIONS), the
    first phase is Pending, `finishedAt` is never removed, a True Succeeded never turns False."""

    def __init__(self) -> None:
        self.checked = 0
        self.prev: str | None = None
        self.prev_times: dict[str, str] = {}
        self.finished = False
        self.succeeded = False

    def check(self, h: Harness) -> None:
        for w in h.kube.writes[self.checked :]:
            self.checked += 1
            phase = w.status.get("phase")
            if self.prev is None:
                # One pass may enter Pending and leave it at once (deleted before the first pass),
                # and a new job's steps before anything is asked of Brev go out as one write
                # (reconciler._holdable): the phases it went through carry phaseTimes in it.
                entered = set((w.status.get("phaseTimes") or {}).keys())
                pending = str(Phase.PENDING)
                assert phase in (None, pending) or _reachable(pending, phase, entered), (
                    f"first phase written is {phase} (entered in this write: {sorted(entered)})"
                )
            elif phase != self.prev:
                assert phase is not None, f"phase removed after {self.prev}"
                # One decision may pass through phases (Running -> Uploading -> Deleted): those
                # it entered carry a new phaseTimes entry in this write.
                before = self.prev_times
                after = w.status.get("phaseTimes") or {}
                entered = {p for p, t in after.items() if before.get(p) != t}
                assert _reachable(self.prev, phase, entered), (
                    f"illegal transition {self.prev} -> {phase} (entered in this write: {sorted(entered)})"
                )
            self.prev = phase or self.prev
            self.prev_times = dict(w.status.get("phaseTimes") or {})
            if self.finished:
                assert w.status.get("finishedAt"), "finishedAt was removed"
            self.finished = self.finished or bool(w.status.get("finishedAt"))
            cond = {c.get("type"): c.get("status") for c in w.status.get("conditions") or []}
            if self.succeeded:
                assert cond.get("Succeeded") != "False", (
                    f"Succeeded flipped True -> False ({w.status.get('reason')}: {w.status.get('message')})"
                )
            self.succeeded = self.succeeded or cond.get("Succeeded") == "True"


def _reachable(old: str, new: str, entered: set[str]) -> bool:
    """`new` follows `old` in machine.TRANSITIONS, directly or through phases in `entered`."""
    frontier, seen = [old], {old}
    while frontier:
        for nxt in machine.TRANSITIONS[Phase(frontier.pop())]:
            if str(nxt) == new:
                return True
            if str(nxt) in entered and str(nxt) not in seen:
                seen.add(str(nxt))
                frontier.append(str(nxt))
    return False


class DelayChecker:
    """No pass loops without backoff: passes that ask for no delay while no simulated time
    passed come in bounded chains."""

    def __init__(self) -> None:
        self.chain = 0

    def feed(self, delay: float | None, elapsed: float) -> None:
        if delay == 0 and elapsed == 0:
            self.chain += 1
        else:
            self.chain = 0
        assert self.chain <= MAX_ZERO_DELAY_CHAIN, (
            f"{self.chain} passes in a row asked to run again at once with no time passing"
        )
