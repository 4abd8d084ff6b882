"""The TaoBrevJob state machine (PURE: no I/O, time passed in).

    Pending -> Provisioning -> WaitingExec -> Pulling -> Running -> Uploading -> Deleted

`decide(spec, status, observation, tunables)` returns the next status (a typed
`TaoBrevJobStatus`; the reconciler parses and serialises it), the actions to perform, Events, and
when to look again. Once the run has ended (success, failure, timeout or cancellation) the common
tail follows: stop the container if it runs, upload results and logs if a container ever started,
then tear down in phase Deleted — remove the container and secret files, delete an instance this
job created and confirm it gone. Only then is the job finished (`finishedAt`), which releases the
finalizer.

Absence is confirmed, never assumed. The instance is matched by Brev's id once seen. A listing
without it makes it *suspected* lost (`absentListings`); only after `Tunables.absent_listings`
(>= 3) consecutive listings, spaced by the poll interval, with no exec evidence in between, does
the machine act: if a container ran, the run ends as InstanceNotListed and one upload of what can
be reached is tried first; then `brev delete` (by id, under the identity that created the
instance) decides, and only its "not found" turns the reason into InstanceLost.

An instance this job created is released only when `brev delete` answers not found, or the delete
was accepted and the instance is then absent from `absent_listings` listings. If the logged-in
identity is not the one that asked for the instance, its listings (made with --all) and accepted
deletes still count, but its "not found" does not: the job is Stalled (InstanceNotAccessible,
naming the fix) until the credential that created the instance is restored.

Every state after the run ended reaches `brev delete` of an owned instance within a stated bound
(P = poll interval, W = wait_timeout; each pass also bounded by the CLI's own timeouts):

- Provisioning/WaitingExec/Pulling with an outcome: teardown in the same pass.
- Running with an outcome (cancel, timeout): stop + bounded waits for `Tunables.grace`
  (default 2 x W); then Uploading whether or not the container exited. Unlisted (suspected
  lost): N listings (N x P) without exec evidence, then Uploading at once.
- Uploading after InstanceNotListed: one upload attempt; still unlisted, teardown.
- Uploading: `spec.timeouts.uploadingSeconds`, counted from entering the phase, but never before
  one upload attempt (so operator downtime cannot skip the upload); a permanent upload failure
  goes to teardown at once.
- Deleted, cleanup on an instance we delete: one attempt; any failure is noted and skipped.
- Deleted, cleanup on a reused instance: retried with backoff (<= backoff_max) without end; after
  `cleanup_attempts` failures the job is Stalled (SecretsMayRemain) — never a silent finish.
- Deleted, delete: sent in the first teardown pass; re-sent with backoff while it fails, and
  while the instance is listed but not DELETING after `create_settle`; past deletingSeconds a
  Warning Event, and it keeps trying (giving up would leave it billing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from controller import conditions, naming, reasons
from controller.brev.client import DELETING, FAILURE, RUNNING, STOPPED, CreateRequest, Instance
from controller.errors import InstanceNotFound
from controller.models import (
    OnCompletion,
    Outcome,
    Phase,
    ResultsSummary,
    TaoBrevJobSpec,
    TaoBrevJobStatus,
    Timeouts,
)
from controller.steps import (
    Action,
    ActionFailure,
    CleanupWorkload,
    CreateInstance,
    Decision,
    DeleteInstance,
    EventNote,
    Observation,
    PrepareWorkload,
    ProbeExec,
    StartContainer,
    StartInstance,
    StopContainer,
    UploadResults,
    WaitForExit,
)

# Allowed transitions, as data: anything else is a bug in decide() (checked by unit tests).
TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {
    Phase.PENDING: frozenset({Phase.PROVISIONING, Phase.DELETED}),
    Phase.PROVISIONING: frozenset({Phase.WAITING_EXEC, Phase.DELETED}),
    Phase.WAITING_EXEC: frozenset({Phase.PULLING, Phase.DELETED}),
    Phase.PULLING: frozenset({Phase.RUNNING, Phase.DELETED}),
    Phase.RUNNING: frozenset({Phase.UPLOADING}),
    Phase.UPLOADING: frozenset({Phase.DELETED}),
    Phase.DELETED: frozenset(),
}

MIN_ABSENT_LISTINGS = 3
# Failure reasons of a `brev create` that Brev answered with a definite "no" (nothing was created):
# transient ones listed here; every permanent create failure (a validation error) is one too.
# A timeout or any other failure may have created the instance all the same.
_CREATE_REFUSALS = frozenset({"InsufficientCapacity"})
# Actions whose success proves the instance answers exec (so it exists, listed or not).
_EXEC_EVIDENCE = frozenset(
    {"PrepareWorkload", "StartContainer", "WaitForExit", "StopContainer", "UploadResults", "CleanupWorkload"}
)


@dataclass(frozen=True)
class Tunables:
    """Operator settings decide() needs (seconds)."""

    poll_interval: float = 5.0
    wait_timeout: float = 30.0
    # How long after a create call returned an absent instance still counts as "maybe being
    # created"; keep it above the CLI's create timeout.
    create_settle: float = 120.0
    backoff_base: float = 2.0
    backoff_max: float = 60.0
    # Consecutive listings (spaced by poll_interval) without the instance before it is suspected
    # lost enough to ask `brev delete`, or, after an accepted delete, counted as released.
    absent_listings: int = MIN_ABSENT_LISTINGS
    # How long a stopped container may take to exit before results are uploaded anyway
    # (None: 2 x wait_timeout).
    stop_grace: float | None = None
    # Failed cleanups of a reused instance before the job says secrets may remain on it.
    cleanup_attempts: int = 3

    def __post_init__(self) -> None:
        if self.absent_listings < MIN_ABSENT_LISTINGS:
            raise ValueError(
                f"Tunables.absent_listings={self.absent_listings}: one listing glitch must never end a "
                f"job; use at least {MIN_ABSENT_LISTINGS}"
            )

    @property
    def grace(self) -> float:
        return self.stop_grace if self.stop_grace is not None else 2 * self.wait_timeout


MAX_MESSAGE = 800
# status.lastLogLines: the CRD allows 20 items; lines and the whole field are capped too, so a
# progress bar or a multi-megabyte line can never make a status patch too large.
MAX_LOG_LINES = 20
MAX_LOG_LINE = 512
MAX_LOG_BYTES = 8192


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    """Keep status readable: brev's errors carry trace fragments; the head says what failed and
    the tail says why, so keep both."""
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head]} … {text[-(limit - head - 3) :]}"


def log_lines(tail: Sequence[str]) -> list[str]:
    """The container log tail as status keeps it: a `\\r`-redrawn line (tqdm) shows only what the
    terminal would show (its last non-empty segment); each line, the count and the total capped."""
    lines: list[str] = []
    for chunk in tail:
        for raw in chunk.split("\n"):
            segments = [seg for seg in raw.split("\r") if seg.strip()]
            if not segments:
                continue
            line = segments[-1].rstrip()
            if len(line) > MAX_LOG_LINE:
                line = line[: MAX_LOG_LINE - 1] + "…"
            lines.append(line)
    lines = lines[-MAX_LOG_LINES:]
    while lines and sum(len(line.encode()) for line in lines) > MAX_LOG_BYTES:
        lines.pop(0)
    return lines


def phase_timeout(spec: TaoBrevJobSpec | None, phase: Phase) -> int | None:
    t = spec.timeouts if spec is not None else Timeouts()
    return {
        Phase.PROVISIONING: t.provisioning_seconds,
        Phase.WAITING_EXEC: t.waiting_exec_seconds,
        Phase.PULLING: t.pulling_seconds,
        Phase.RUNNING: t.running_seconds,
        Phase.UPLOADING: t.uploading_seconds,
        Phase.DELETED: t.deleting_seconds,
    }.get(phase)


def same_reach(recorded: str, current: str) -> bool:
    """Whether `current` can see and delete what `recorded` created. Identities are the client's
    strings (`org-key:<org>:<key digest>`, `user:<subject>`, `token:<digest>`): the same one, or
    an API key of the same org (a rotated key: an org key reaches every instance of its org,
    tests/brevsim/SIM-CONTRACT.md section 3). Anything else is another user's view."""
    if recorded == current:
        return True
    r, c = recorded.split(":"), current.split(":")
    return len(r) >= 3 and len(c) >= 3 and r[0] == c[0] == "org-key" and r[1] == c[1]


class _Pass:
    """Accumulates one decision; keeps decide() readable without hidden I/O."""

    def __init__(
        self, spec: TaoBrevJobSpec | None, status: TaoBrevJobStatus, obs: Observation, tun: Tunables
    ) -> None:
        self.spec = spec
        self.obs = obs
        self.tun = tun
        self.s = status.model_copy(deep=True)
        # One phase change per written status (observers see every phase the job went through).
        self.start_phase = status.phase or Phase.PENDING
        self.prev_conditions = list(status.conditions)
        self.actions: list[Action] = []
        self.events: list[EventNote] = []
        self.requeue: float | None = tun.poll_interval

    # -- time and phase
    @property
    def phase(self) -> Phase:
        return self.s.phase or Phase.PENDING

    @property
    def now(self) -> datetime:
        return self.obs.now

    def since(self, then: datetime | None) -> float:
        return (self.now - then).total_seconds() if then is not None else float("inf")

    def enter(self, phase: Phase, message: str) -> None:
        old = self.phase
        if phase == old:
            return
        assert phase in TRANSITIONS[old], f"illegal transition {old} -> {phase}"
        self.s.phase = phase
        self.s.phase_times = {**self.s.phase_times, str(phase): self.now}
        self.s.retries = 0
        if not self.s.outcome:
            # Once the run has ended, message keeps saying why; phase changes are in Events.
            self.s.message = message
        self.events.append(EventNote("Normal", str(phase), message))

    def phase_age(self) -> float:
        entered = self.s.phase_times.get(str(self.phase))
        return (self.now - entered).total_seconds() if entered else 0.0

    def timed_out(self) -> bool:
        limit = phase_timeout(self.spec, self.phase)
        return limit is not None and self.phase_age() > limit

    # -- outcome, trouble
    def end_run(self, outcome: Outcome, reason: str, message: str) -> None:
        """The run is over (or will never start): remember why; the tail takes over."""
        if self.s.outcome:
            return
        self.s.outcome = outcome
        self.s.reason = reason
        self.s.message = message = clip(message)
        self.s.run_ended_at = self.now
        self.s.retries = 0
        kind = "Normal" if outcome == Outcome.SUCCEEDED else "Warning"
        self.events.append(EventNote(kind, reason, message))

    def backoff(self) -> None:
        retries = max(self.s.retries, 1)
        self.requeue = min(self.tun.backoff_base * 2 ** (retries - 1), self.tun.backoff_max)

    def transient(self, failure: ActionFailure) -> None:
        """A failure to retry with backoff. Before the run ended it is the job's current problem
        (reason/message); after, the final reason/message stay and teardownMessage says it."""
        self.s.retries += 1
        note = clip(f"{failure.action}: {failure.message}") + f" (attempt {self.s.retries}, will retry)"
        if self.s.outcome:
            self.s.teardown_message = note
        else:
            self.s.reason = failure.reason
            self.s.message = note
        self.backoff()
        if self.s.retries == 1:
            self.events.append(EventNote("Warning", failure.reason, note))

    def recovered(self) -> None:
        """An action succeeded after transient failures: the transient reason must not linger."""
        if not self.obs.completed or not self.s.retries:
            return
        retries, self.s.retries = self.s.retries, 0
        if self.s.outcome:
            self.s.teardown_message = None
        else:
            # Before the run ended, reason only ever holds a transient problem.
            self.s.reason = None
            self.s.message = f"{self.phase}: recovered after {retries} failed attempt(s)"

    def stall(self, reason: str, message: str) -> None:
        """Needs a human: the Stalled condition says so (with the fix) until it is resolved."""
        if self.s.stalled_reason != reason or self.s.stalled_message != message:
            if self.s.stalled_reason != reason:
                self.events.append(EventNote("Warning", reason, message))
            self.s.stalled_reason = reason
            self.s.stalled_message = message
        self.requeue = self.tun.backoff_max

    def unstall(self, *stall_reasons: str) -> None:
        if self.s.stalled_reason in stall_reasons:
            self.s.stalled_reason = None
            self.s.stalled_message = None

    # -- the instance
    @property
    def owned(self) -> bool:
        return bool(self.s.instance_created)

    @property
    def ephemeral(self) -> bool:
        return self.spec.instance.ephemeral is not None if self.spec is not None else self.owned

    @property
    def instance(self) -> str:
        return str(self.s.instance_name)

    @property
    def target(self) -> str:
        """What `brev delete` is given: the id once known (ids never repeat), else the name."""
        return self.s.instance_id or self.instance

    def deletes_instance(self) -> bool:
        if not self.owned:
            return False
        # Without a parsed spec, delete what we created: a leak bills, a re-create is cheap.
        return self.spec is None or self.spec.instance.effective_on_completion() == OnCompletion.DELETE

    def asked_brev(self) -> bool:
        """Whether an instance of ours may exist at all: a create was sent that Brev did not
        definitely refuse (accepted, failed ambiguously or cut short by a crash), or it was seen."""
        return self.s.create_requested_at is not None or self.s.instance_id is not None

    def settle_from(self) -> datetime | None:
        """Where the create settle time starts: the later of the last create sent and the last
        create call that came back (a create re-sent after the settle time is in flight while
        createReturnedAt still holds the earlier call's return)."""
        times = [t for t in (self.s.create_requested_at, self.s.create_returned_at) if t is not None]
        return max(times) if times else None

    def seen(self, inst: Instance) -> None:
        if self.s.instance_id is None:
            self.s.instance_id = inst.id
        self.present()

    def present(self) -> None:
        self.s.absent_listings = None
        self.s.absent_since = None
        self.s.absent_checked_at = None

    def note_absence(self) -> int:
        """Count this listing if it is a new one (at most one per poll interval)."""
        if self.since(self.s.absent_checked_at) >= self.tun.poll_interval:
            self.s.absent_listings = (self.s.absent_listings or 0) + 1
            self.s.absent_since = self.s.absent_since or self.now
            self.s.absent_checked_at = self.now
        return self.s.absent_listings or 0

    def exec_evidence(self) -> bool:
        done = set(self.obs.completed)
        return bool(done & _EXEC_EVIDENCE) or ("ProbeExec" in done and bool(self.obs.probe_ok))

    def identity_differs(self) -> bool:
        """The CLI is logged in as someone else than who asked for the instance. Listings (made
        with --all) and an accepted delete still count; a "not found" does not (brev resolves
        names and ids among the caller's own instances only)."""
        recorded, current = self.s.brev_identity, self.obs.identity
        differs = recorded is not None and current is not None and not same_reach(recorded, current)
        if not differs:
            self.unstall(reasons.INSTANCE_NOT_ACCESSIBLE)
        return differs

    def not_accessible(self) -> None:
        self.stall(
            reasons.INSTANCE_NOT_ACCESSIBLE,
            f"instance {self.instance} ({self.s.instance_id or 'id not yet seen'}) was requested by brev "
            f"identity {self.s.brev_identity!r}, but the operator is logged in as {self.obs.identity!r}, "
            "which cannot confirm it gone; restore the credential that created it (the operator's brev "
            "credentials Secret) — nothing is concluded about the instance until then",
        )

    def ambiguous(self) -> bool:
        if not self.obs.instance_ambiguous:
            self.unstall(reasons.INSTANCE_AMBIGUOUS)
            return False
        self.stall(
            reasons.INSTANCE_AMBIGUOUS,
            f"several instances named {self.instance} exist and none is recorded as this job's; "
            "delete the extra ones (`brev ls`, `brev delete <id>`) and the job adopts the remaining one",
        )
        return True


def decide(
    spec: TaoBrevJobSpec | None,
    status: TaoBrevJobStatus,
    obs: Observation,
    *,
    namespace: str,
    name: str,
    uid: str,
    generation: int,
    tunables: Tunables | None = None,
    spec_error: str | None = None,
) -> Decision:
    """One step. `spec` None means it did not parse (`spec_error` says why): the job is Stalled,
    its instance stays under watch, and deletion still tears down from the names and id in status."""
    p = _Pass(spec, status, obs, tunables or Tunables())
    if p.s.finished_at:
        return _finish(p, generation, requeue=None)

    if spec is None:
        p.stall(reasons.INVALID_SPEC, clip(spec_error or "spec does not parse"))
        if not obs.deleting:
            return _finish(p, generation, requeue=p.requeue)
        if not p.s.phase:
            p.s.phase = Phase.PENDING
            p.s.phase_times = {str(Phase.PENDING): obs.now}
        p.end_run(Outcome.FAILED, reasons.INVALID_SPEC, spec_error or "spec does not parse")
    else:
        p.unstall(reasons.INVALID_SPEC)

    if not p.s.phase:
        # A first, visible Pending (with the names every later step relies on), then move on.
        p.s.phase = Phase.PENDING
        p.s.phase_times = {str(Phase.PENDING): obs.now}
        p.s.message = "accepted"
        p.events.append(EventNote("Normal", str(Phase.PENDING), "accepted"))
        if obs.blocker is None and not obs.deleting:
            _assign_names(p, namespace, name, uid)
            p.requeue = 0.0
            return _finish(p, generation, requeue=p.requeue)

    if p.phase != Phase.PENDING and not p.s.instance_name:
        # Status written by someone else (or an older version) without our names: they are
        # deterministic, so re-deriving them is safe and keeps teardown able to find the instance.
        _assign_names(p, namespace, name, uid)
    if obs.blocker is not None:
        p.end_run(Outcome.FAILED, obs.blocker.reason, obs.blocker.message)
    if obs.deleting and not p.s.outcome:
        p.end_run(Outcome.CANCELED, reasons.CANCELED, f"the TaoBrevJob was deleted during {p.phase}")

    if not _handle_failure(p):
        _step(p, namespace=namespace, name=name, uid=uid)
    return _finish(p, generation, requeue=p.requeue)


def _finish(p: _Pass, generation: int, requeue: float | None) -> Decision:
    p.s.observed_generation = generation
    p.s.conditions = conditions.derive(p.s, p.prev_conditions, generation, p.now)
    if p.s.finished_at:
        requeue = None
    return Decision(status=p.s, actions=tuple(p.actions), requeue_after=requeue, events=tuple(p.events))


def _handle_failure(p: _Pass) -> bool:
    """Fold an action failure into status. True if the pass should stop here (backoff)."""
    f = p.obs.failure
    if f is None:
        p.recovered()
        return False
    if f.action == "CreateInstance":
        _create_failed(p, f)
    if f.action == "UploadResults":
        # Counted when it came back, not when asked: an attempt a crash cut short is no attempt.
        p.s.upload_attempts = (p.s.upload_attempts or 0) + 1  # the settle time starts when the call came back
    if f.action == "StartInstance":
        p.s.start_requested_at = None  # the start did not happen: ask again after the backoff
    if f.action == "CleanupWorkload" and p.deletes_instance():
        # The secrets go with the instance: a failed cleanup never holds up its delete.
        p.s.cleaned_up_at = p.now
        p.s.teardown_message = clip(f"cleanup failed ({f.message}); deleting the instance anyway")
        p.events.append(EventNote("Warning", reasons.CLEANUP_FAILED, p.s.teardown_message))
        return False
    if f.reason == InstanceNotFound.reason and f.action != "DeleteInstance":
        # "Not found" from exec or start is no proof of loss (another identity, a lagging
        # backend): retry with backoff; listings and `brev delete` decide whether it is gone.
        f = ActionFailure(f.action, f.reason, f.message, permanent=False)
    if f.action == "UploadResults" and f.permanent and p.phase == Phase.UPLOADING:
        _upload_failed(p, f"upload failed: {f.message}")
        return False
    if f.permanent and not p.s.outcome:
        p.end_run(Outcome.FAILED, f.reason, f"{f.action}: {f.message}")
        return False
    # Transient, or permanent after the run ended: back off (never hot-loop), keep the outcome.
    p.transient(f)
    if f.action == "CleanupWorkload" and p.s.retries >= p.tun.cleanup_attempts:
        p.stall(
            reasons.SECRETS_MAY_REMAIN,
            f"could not remove container {p.s.job_id} and the job's files (with its secrets) from "
            f"reused instance {p.instance} after {p.s.retries} attempts ({clip(f.message, 300)}); "
            "still retrying — make the instance reachable (`brev start`, `brev exec` works) or "
            f"remove ~/taobrev/{p.s.job_id} on it by hand",
        )
    return True


def _create_failed(p: _Pass, f: ActionFailure) -> None:
    """A `brev create` came back with an error. A definite refusal (no capacity, a validation
    error) of the only create that could have made our instance leaves nothing to confirm: the
    job is back to "never asked Brev" (no settle time, and the identity recorded for that create
    no longer matters). Any other failure, or a refusal of a create re-sent after an earlier one
    that may have succeeded, keeps the create pending confirmation under its identity."""
    # createReturnedAt is still unset while the first create that may have made something is in
    # flight (a re-send keeps the earlier call's return there).
    first = p.s.create_returned_at is None and p.s.instance_id is None
    if first and (f.permanent or f.reason in _CREATE_REFUSALS):
        p.s.create_requested_at = None
        p.s.brev_identity = None
        return
    p.s.create_returned_at = p.now


def _step(p: _Pass, *, namespace: str, name: str, uid: str) -> None:
    phase = p.phase
    if phase == Phase.PENDING:
        _pending(p, namespace, name, uid)
    elif p.s.outcome and phase in (Phase.PROVISIONING, Phase.WAITING_EXEC, Phase.PULLING):
        # Nothing ran, so nothing to upload: go straight to teardown.
        p.enter(Phase.DELETED, f"tearing down after {p.s.reason}")
        _teardown(p)
    elif phase == Phase.PROVISIONING:
        _provisioning(p)
    elif phase == Phase.WAITING_EXEC:
        _waiting_exec(p)
    elif phase == Phase.PULLING:
        _pulling(p)
    elif phase == Phase.RUNNING:
        _running(p)
    elif phase == Phase.UPLOADING:
        _uploading(p)
    else:
        _teardown(p)


def _pending(p: _Pass, namespace: str, name: str, uid: str) -> None:
    if p.s.outcome:
        # Failed validation or canceled before anything existed: nothing to tear down.
        p.enter(Phase.DELETED, f"finished before provisioning: {p.s.reason}")
        _teardown(p)
        return
    if not p.obs.has_finalizer:
        # Nothing may exist on Brev that a delete without our finalizer could orphan.
        p.s.message = "waiting for the finalizer before creating anything"
        p.requeue = min(p.tun.poll_interval, 1.0)
        return
    # Nothing exists on Brev yet: names follow the current spec (an edit may switch reuse and
    # ephemeral while Pending).
    _assign_names(p, namespace, name, uid)
    reuse = p.spec.instance.reuse if p.spec is not None else None
    p.enter(Phase.PROVISIONING, f"{'creating' if reuse is None else 'reusing'} instance {p.instance}")
    p.requeue = 0.0


def _assign_names(p: _Pass, namespace: str, name: str, uid: str) -> None:
    # Names are written to status BEFORE any brev call, so a restart adopts, never duplicates.
    if p.spec is None:
        return
    job = naming.job_id(name, uid)
    reuse = p.spec.instance.reuse
    inst = reuse.name if reuse else naming.instance_name(namespace, name, uid)
    p.s.job_id = job
    p.s.instance_name = inst
    p.s.instance_created = reuse is None
    p.s.backend_ref = naming.backend_ref(inst, job)


def _check_timeout(p: _Pass) -> bool:
    if p.timed_out():
        limit = phase_timeout(p.spec, p.phase)
        p.end_run(
            Outcome.FAILED,
            reasons.timeout(p.phase),
            f"{p.phase} did not finish within {limit}s (spec.timeouts); tearing down",
        )
        return True
    return False


def _confirm_lost(p: _Pass) -> tuple[str, str] | None:
    """The instance is not in this listing. Suspected lost until `absent_listings` listings (with
    no exec evidence) say so; then `brev delete` (owned) decides. Returns (reason, message) once
    confirmed."""
    if p.exec_evidence():
        p.present()  # it answered exec in this pass: it exists, whatever the listing says
        return None
    n = p.note_absence()
    if n < p.tun.absent_listings:
        return None
    where = f"instance {p.instance} ({p.s.instance_id or 'no id seen'})"
    gone = (
        f"{where} disappeared: not listed in {n} consecutive listings over {int(p.since(p.s.absent_since))}s"
    )
    if not p.owned:
        # Not ours to delete: enough listings are the most we can learn.
        return reasons.INSTANCE_LOST, gone
    if p.identity_differs():
        p.not_accessible()  # only the creating identity's "not found" would be proof
        return None
    if p.s.container_started_at is not None and not p.s.upload_attempts:
        # A container ran: its results may still be reachable. Upload first; the delete in
        # teardown then confirms (InstanceNotListed until it does, never InstanceLost).
        p.events.append(EventNote("Warning", reasons.INSTANCE_NOT_LISTED, gone))
        return reasons.INSTANCE_NOT_LISTED, f"{gone}; uploading what can be reached, then deleting it"
    return _confirm_by_delete(p, gone)


def _confirm_by_delete(p: _Pass, gone: str) -> tuple[str, str] | None:
    if p.obs.delete_not_found or p.obs.delete_requested:
        if p.obs.delete_requested:
            p.s.delete_accepted_at = p.s.delete_accepted_at or p.now
        how = (
            "brev delete answers not found"
            if p.obs.delete_not_found
            else "it was unreachable, so it was deleted"
        )
        return reasons.INSTANCE_LOST, f"{gone}; {how}"
    if p.since(p.s.delete_requested_at) >= p.tun.poll_interval:
        p.s.delete_requested_at = p.now
        p.actions.append(DeleteInstance(p.target))
        p.events.append(
            EventNote(
                "Warning", reasons.INSTANCE_NOT_LISTED, f"{gone}; confirming with brev delete {p.target}"
            )
        )
        p.requeue = 0.0
    return None


def _instance_fate(p: _Pass) -> tuple[str, str] | None:
    """None while the instance is (or may be) there; (reason, message) once it is confirmed lost
    or failed. Listing facts (DELETING, FAILURE) count at once; absence only when confirmed."""
    if not p.obs.instance_known or p.ambiguous():
        return None
    inst = p.obs.instance
    if inst is None:
        return _confirm_lost(p)
    p.identity_differs()
    p.seen(inst)
    if inst.status == DELETING:
        return reasons.INSTANCE_LOST, f"instance {p.instance} is being deleted (not by this job)"
    if inst.status == FAILURE:
        return reasons.INSTANCE_FAILED, f"instance {p.instance} went to FAILURE during {p.phase}"
    return None


def _instance_gone_or_failed(p: _Pass) -> bool:
    """Mid-run loss of the instance ends the job with a distinct reason. Also True while a
    `brev delete` confirming a suspected loss is under way (the caller does nothing else)."""
    fate = _instance_fate(p)
    if fate is None:
        return bool(p.actions)
    p.end_run(Outcome.FAILED, *fate)
    return True


def _provisioning(p: _Pass) -> None:
    if _check_timeout(p):
        _step_after_end(p)
        return
    if not p.obs.instance_known or p.ambiguous():
        return  # listing failed transiently, or it cannot tell which instance is ours: look again
    inst = p.obs.instance
    if p.obs.created:
        p.s.create_returned_at = p.now
    if inst is not None:
        p.seen(inst)
        p.s.gpu = inst.gpu
        if inst.status == RUNNING:
            p.enter(
                Phase.WAITING_EXEC, f"instance {p.instance} is RUNNING; waiting for it to accept commands"
            )
            p.actions.append(ProbeExec(p.instance))
        elif inst.status in (FAILURE, DELETING):
            _instance_gone_or_failed(p)
            _step_after_end(p)
        elif inst.status == STOPPED and not p.ephemeral:
            _start(p)
        return
    _provisioning_absent(p)


def _provisioning_absent(p: _Pass) -> None:
    if p.s.instance_id is not None:
        # Seen before, missing now: suspected lost, like mid-run.
        if _instance_gone_or_failed(p) and p.s.outcome:
            _step_after_end(p)
        return
    if not p.ephemeral:
        n = p.note_absence()
        if n < p.tun.absent_listings:
            return
        p.end_run(
            Outcome.FAILED,
            reasons.REUSE_INSTANCE_NOT_FOUND,
            f"instance {p.instance} named in spec.instance.reuse.name does not exist (not listed in "
            f"{n} listings); create it or use spec.instance.ephemeral",
        )
        _step_after_end(p)
        return
    if p.obs.created:
        return  # just created; the listing catches up on the next pass
    if p.s.create_requested_at is None or p.since(p.settle_from()) > p.tun.create_settle:
        if p.identity_differs():
            # The first create may have landed under the other identity: never a second one.
            p.not_accessible()
            return
        # Marker first (the status patch lands before the action runs), then create. A repeat after
        # the settle time reuses the same name, so brev answers "already exists" and we adopt.
        if p.s.brev_identity is None or not p.asked_brev():
            p.s.brev_identity = p.obs.identity
        if not p.asked_brev():
            p.s.create_returned_at = None  # the first create that may make something
        elif p.s.create_returned_at is None:
            # The earlier create never came back (cut short by a crash): it settled from its send.
            p.s.create_returned_at = p.s.create_requested_at
        p.s.create_requested_at = p.now
        p.actions.append(CreateInstance(_create_request(p)))
        p.events.append(EventNote("Normal", reasons.INSTANCE_CREATE_REQUESTED, f"brev create {p.instance}"))


def _start(p: _Pass) -> None:
    """A STOPPED reused instance: `brev start` it, again if it is still STOPPED after the settle."""
    if p.obs.start_requested:
        return
    if p.s.start_requested_at is None or p.since(p.s.start_requested_at) > p.tun.create_settle:
        p.s.start_requested_at = p.now
        p.actions.append(StartInstance(p.instance))
        p.events.append(EventNote("Normal", reasons.INSTANCE_START_REQUESTED, f"brev start {p.instance}"))


def _create_request(p: _Pass) -> CreateRequest:
    assert p.spec is not None
    e = p.spec.instance.ephemeral
    assert e is not None
    return CreateRequest(
        name=p.instance,
        types=tuple(e.types or ()),
        gpu_name=e.gpu_name,
        provider=e.provider,
        min_vram=e.min_vram,
        min_total_vram=e.min_total_vram,
        min_capability=e.min_capability,
        min_disk=e.min_disk,
        max_boot_time=e.max_boot_time_minutes,
        startup_script=e.startup_script,
        cloud_cred_id=e.cloud_cred_id,
        workspace_group_id=e.workspace_group_id,
    )


def _waiting_exec(p: _Pass) -> None:
    if _instance_gone_or_failed(p) or _check_timeout(p):
        if p.s.outcome:
            _step_after_end(p)
        return
    if p.obs.probe_ok:
        p.enter(Phase.PULLING, "instance accepts commands; logging in to the registry and pulling the image")
        p.actions.append(PrepareWorkload(p.instance))
        return
    if p.obs.probe_ok is False:
        # Look again after poll_interval, not in this pass: each probe is a brev call.
        p.s.message = f"instance {p.instance} does not accept commands yet"
        return
    p.actions.append(ProbeExec(p.instance))


def _pulling(p: _Pass) -> None:
    if _instance_gone_or_failed(p) or _check_timeout(p):
        if p.s.outcome:
            _step_after_end(p)
        return
    if p.obs.prepared:
        p.enter(Phase.RUNNING, f"starting container {p.s.job_id} on {p.instance}")
        p.s.container_started_at = p.now
        p.actions.append(StartContainer(p.instance))
        p.requeue = 0.0
        return
    p.actions.append(PrepareWorkload(p.instance))


def _exited(p: _Pass, code: int) -> None:
    """The container exited: judge the run by its own FinishedAt (operator downtime is not the
    job's fault); without it, by now."""
    exited = p.obs.exit_finished_at or p.now
    p.s.exit_code = code
    p.s.container_exited_at = exited
    limit = phase_timeout(p.spec, Phase.RUNNING)
    started = p.s.container_started_at
    if limit is not None and started is not None and (exited - started).total_seconds() > limit:
        p.end_run(
            Outcome.FAILED,
            reasons.timeout(Phase.RUNNING),
            f"Running did not finish within {limit}s (spec.timeouts); exit code {code}",
        )
    elif code == 0:
        p.end_run(Outcome.SUCCEEDED, reasons.SUCCEEDED, "training container exited 0")
    else:
        p.end_run(Outcome.FAILED, reasons.TRAINING_FAILED, f"training container exited with code {code}")
    results = p.spec.data.results_uri if p.spec is not None else "(spec unknown)"
    p.enter(Phase.UPLOADING, f"uploading results and logs to {results}")
    _uploading(p)


def _running(p: _Pass) -> None:
    if p.obs.log_tail:
        p.s.last_log_lines = log_lines(p.obs.log_tail)
    if p.obs.exit_code is not None:
        _exited(p, p.obs.exit_code)
        return
    if p.spec is None:
        # Deleted with a spec we cannot read: nothing to upload to; cleanup removes the container.
        p.enter(Phase.UPLOADING, "spec does not parse; tearing down")
        _uploading(p)
        return
    if not p.s.outcome and _instance_gone_or_failed(p) and not p.s.outcome:
        return  # confirming a suspected loss with brev delete first
    if not p.s.outcome and p.timed_out():
        if "WaitForExit" in p.obs.completed:
            # Looked in this pass and it still runs: now it really is over time.
            _check_timeout(p)
        else:
            # After downtime the container may have exited long ago: look before judging.
            p.actions.append(
                WaitForExit(p.instance, timeout_seconds=p.tun.wait_timeout, start_if_missing=False)
            )
            p.requeue = 0.0
            return
    if p.s.outcome:
        _stopping(p)
        return
    # A bounded blocking wait: returns as soon as the container exits, costs one brev call per
    # wait_timeout while it runs.
    p.actions.append(WaitForExit(p.instance, timeout_seconds=p.tun.wait_timeout))
    p.requeue = 0.0


def _stopping(p: _Pass) -> None:
    """Canceled, timed out or lost while running: stop the container, bounded by the grace."""
    if p.s.reason in (reasons.INSTANCE_LOST, reasons.INSTANCE_FAILED):
        p.enter(Phase.UPLOADING, "instance lost; nothing to upload")
        _uploading(p)
        return
    if p.s.reason == reasons.INSTANCE_NOT_LISTED:
        # No stop through an exec that may not answer: straight to the one upload attempt.
        p.enter(Phase.UPLOADING, "instance not listed; uploading what can be reached")
        _uploading(p)
        return
    if p.s.run_ended_at is None:
        p.s.run_ended_at = p.now
    if p.since(p.s.run_ended_at) > p.tun.grace:
        note = (
            f"container {p.s.job_id} did not stop within {int(p.tun.grace)}s; uploading what is there, "
            "then deleting"
        )
        p.s.teardown_message = note
        p.events.append(EventNote("Warning", reasons.STOP_GRACE_EXPIRED, note))
        p.enter(Phase.UPLOADING, note)
        _uploading(p)
        return
    if not p.obs.container_stopped:
        p.actions.append(StopContainer(p.instance))
    p.actions.append(WaitForExit(p.instance, timeout_seconds=p.tun.wait_timeout, start_if_missing=False))
    p.requeue = 0.0


def _upload_failed(p: _Pass, message: str) -> None:
    # Billing must stop even if results cannot be saved: tear down, and say so.
    p.s.outcome = Outcome.FAILED
    p.s.reason = reasons.UPLOAD_FAILED
    p.s.message = clip(message)
    p.events.append(EventNote("Warning", reasons.UPLOAD_FAILED, p.s.message))
    p.enter(Phase.DELETED, "tearing down without results")
    _teardown(p)


def _uploading(p: _Pass) -> None:
    if p.obs.upload is not None:
        p.s.upload_attempts = (p.s.upload_attempts or 0) + 1
        p.s.uploaded_at = p.now
        p.s.results = ResultsSummary(
            uri=p.spec.data.results_uri if p.spec is not None else None,
            objects=p.obs.upload.objects,
            bytes=p.obs.upload.bytes,
        )
        p.enter(Phase.DELETED, f"uploaded {p.obs.upload.objects} objects; tearing down")
        _teardown(p)
        return
    if _nothing_to_upload(p):
        return
    attempts = p.s.upload_attempts or 0
    fate = _instance_fate(p)
    if fate is not None and attempts:
        # Nothing left to upload from: say so (the results are lost), whatever the run's outcome.
        p.s.outcome = Outcome.FAILED
        p.s.reason, message = fate
        p.s.message = f"{message}; the results were not uploaded"
        p.events.append(EventNote("Warning", p.s.reason, p.s.message))
        p.enter(Phase.DELETED, "tearing down")
        _teardown(p)
        return
    if p.actions:
        return  # confirming the instance's absence first
    if p.timed_out() and attempts:
        limit = phase_timeout(p.spec, Phase.UPLOADING)
        _upload_failed(p, f"upload did not finish within {limit}s (spec.timeouts.uploadingSeconds)")
        return
    p.actions.append(UploadResults(p.instance))
    p.requeue = 0.0


def _nothing_to_upload(p: _Pass) -> bool:
    """No spec, the instance lost, or still unlisted after the one reach-what-we-can attempt:
    on to teardown (True when this step is done)."""
    unlisted = p.obs.instance_known and p.obs.instance is None and not p.exec_evidence()
    tried_unlisted = bool(p.s.upload_attempts) and p.s.reason == reasons.INSTANCE_NOT_LISTED and unlisted
    lost = p.s.reason in (reasons.INSTANCE_LOST, reasons.INSTANCE_FAILED)
    if p.spec is not None and not lost and not tried_unlisted:
        return False
    if p.start_phase == Phase.RUNNING:
        p.requeue = 0.0  # Uploading is written first; Deleted follows in the next step
        return True
    p.enter(Phase.DELETED, "tearing down without an upload")
    _teardown(p)
    return True


def _step_after_end(p: _Pass) -> None:
    """The run ended before a container existed: go straight to teardown."""
    if p.phase in (Phase.PROVISIONING, Phase.WAITING_EXEC, Phase.PULLING):
        p.enter(Phase.DELETED, f"tearing down after {p.s.reason}")
        _teardown(p)
    elif p.phase == Phase.RUNNING:
        _running(p)


def _teardown(p: _Pass) -> None:
    """Phase Deleted: remove what the job put on the instance, delete an instance we own, confirm
    it gone, then finish. An ephemeral instance is never abandoned: past deletingSeconds we keep
    trying (with backoff) and report it, because giving up would leave it billing."""
    name = p.s.instance_name
    if name and not _cleanup_done(p):
        return
    if name and p.deletes_instance() and not _instance_released(p):
        return
    p.s.finished_at = p.now
    p.s.teardown_message = None
    released = "deleted" if p.deletes_instance() else "left running (retained)"
    outcome = p.s.outcome or Outcome.CANCELED
    p.s.outcome = outcome
    results = f"; results in {p.s.results.uri}" if p.s.uploaded_at and p.s.results else ""
    touched = not p.owned or p.asked_brev()
    instance = f"; instance {name} {released}" if name and touched else ""
    p.s.message = f"{outcome}: {p.s.message or ''}{results}{instance}"
    p.events.append(
        EventNote("Normal" if outcome == Outcome.SUCCEEDED else "Warning", reasons.FINISHED, p.s.message)
    )


def _cleanup_done(p: _Pass) -> bool:
    """Container and job directory (with the secret files) removed, or nothing to remove."""
    if p.s.cleaned_up_at:
        return True
    if p.obs.cleaned or not _workload_may_exist(p):
        p.s.cleaned_up_at = p.now
        p.unstall(reasons.SECRETS_MAY_REMAIN)
        return True
    if not p.obs.instance_known:
        return False
    inst = p.obs.instance
    if inst is not None and inst.status == RUNNING:
        # On a retained instance the secrets must really go; on one we delete, best effort.
        p.actions.append(CleanupWorkload(p.instance, must_succeed=not p.deletes_instance()))
        p.requeue = 0.0
        return False
    if inst is None and not p.deletes_instance() and p.note_absence() < p.tun.absent_listings:
        return False  # a retained instance missing from one listing may still hold our secrets
    # Unreachable, gone, or goes with the instance: nothing of ours can be removed now.
    p.s.cleaned_up_at = p.now
    return True


def _instance_released(p: _Pass) -> bool:
    """Ask brev to delete our instance, then confirm: `brev delete` answers not found, or the
    delete was accepted and the instance stays unlisted for `absent_listings` listings."""
    if not p.asked_brev():
        return True  # no create was ever sent: nothing of ours can exist
    if not p.obs.instance_known or p.ambiguous():
        return False
    differs = p.identity_differs()
    if p.obs.delete_not_found:
        if not differs:
            if p.s.reason == reasons.INSTANCE_NOT_LISTED:
                p.s.reason = reasons.INSTANCE_LOST  # now confirmed
                p.s.message = f"{p.s.message}; brev delete confirms it is gone"
            return True
        p.not_accessible()
        return False
    if p.obs.delete_requested:
        p.s.delete_accepted_at = p.s.delete_accepted_at or p.now
        p.unstall(reasons.INSTANCE_NOT_ACCESSIBLE)  # brev found it and is deleting it
    inst = p.obs.instance
    if inst is not None:
        p.seen(inst)
        stale = p.since(p.s.delete_requested_at) > p.tun.create_settle
        if inst.status != DELETING and not p.obs.delete_requested and (stale or not p.s.delete_accepted_at):
            _delete(p)
        _warn_if_slow(p)
        return False
    return _released_unlisted(p)


def _released_unlisted(p: _Pass) -> bool:
    # Not listed. A create that may still be on its way must settle before absence means anything.
    if p.s.instance_id is None and p.since(p.settle_from()) <= p.tun.create_settle:
        # status.message keeps saying why the job ended; InstanceReleased says teardown goes on.
        p.s.teardown_message = f"waiting to confirm that instance {p.instance} was never created"
        return False
    if p.obs.delete_requested:
        p.present()  # brev just resolved it: it exists, listed or not
        return False
    n = p.note_absence()
    if p.s.delete_accepted_at and n >= p.tun.absent_listings:
        return True
    if p.identity_differs():
        if not p.s.delete_accepted_at:
            p.not_accessible()
        # else: brev accepted the delete; this identity's listings confirm it (not Stalled).
        return False
    if p.since(p.s.delete_requested_at) >= p.tun.poll_interval:
        _delete(p)  # "not found" under the creating identity is the proof
    _warn_if_slow(p)
    return False


def _delete(p: _Pass) -> None:
    p.s.delete_requested_at = p.now
    p.actions.append(DeleteInstance(p.target))
    p.events.append(EventNote("Normal", reasons.INSTANCE_DELETE_REQUESTED, f"brev delete {p.target}"))


def _warn_if_slow(p: _Pass) -> None:
    if not p.timed_out():
        return
    note = (
        f"instance {p.instance} still not confirmed deleted {int(p.phase_age())}s into teardown; still trying"
    )
    if not (p.s.teardown_message or "").startswith(f"instance {p.instance} still not confirmed"):
        p.events.append(EventNote("Warning", reasons.INSTANCE_NOT_RELEASED, note))
    p.s.teardown_message = note
    if not p.actions:
        p.requeue = p.tun.backoff_max


def _workload_may_exist(p: _Pass) -> bool:
    """Secrets, spec or a container exist on the instance only from Pulling on."""
    return str(Phase.PULLING) in p.s.phase_times
