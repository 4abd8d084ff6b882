"""`Pass`: one decision being accumulated (PURE) — a copy of the status, the actions, Events and
the requeue delay — with the helpers every phase step uses (phase changes, outcome, trouble,
the instance)."""

from __future__ import annotations

from datetime import datetime

from controller.api import reasons
from controller.api.models import OnCompletion, TaoBrevJobSpec, phase_timeout
from controller.api.status import TaoBrevJobStatus
from controller.api.vocabulary import Outcome
from controller.brev.client import Instance
from controller.lifecycle.backoff import exponential
from controller.lifecycle.identities import same_reach
from controller.lifecycle.phases import TRANSITIONS, Phase
from controller.lifecycle.status_text import clip
from controller.lifecycle.steps import (
    Action,
    ActionFailure,
    CleanupWorkload,
    EventNote,
    Observation,
    PrepareWorkload,
    ProbeExec,
    StartContainer,
    StopContainer,
    UploadResults,
    WaitForExit,
)
from controller.lifecycle.tunables import Tunables

# Actions whose success proves the instance answers exec (so it exists, listed or not).
_EXEC_EVIDENCE = frozenset(
    kind.__name__
    for kind in (PrepareWorkload, StartContainer, WaitForExit, StopContainer, UploadResults, CleanupWorkload)
)


class Pass:
    """Accumulates one decision; keeps decide() readable without hidden I/O.

    Naming says which methods write: `process_*` and the verbs (`enter`, `enter_then_step`,
    `end_run`, `transient`, `backoff`, `recovered`, `stall`, `unstall`, `not_accessible`, `seen`,
    `present`) change status; every other method and property only answers: a question never
    changes state."""

    def __init__(
        self, spec: TaoBrevJobSpec | None, status: TaoBrevJobStatus, obs: Observation, tun: Tunables
    ) -> None:
        self.spec = spec
        self.obs = obs
        self.tun = tun
        self.s = status.clone()
        # One phase change per written status (observers see every phase the job went through).
        self.start_phase = status.phase or Phase.PENDING
        # Finished before this pass: its record is final (recovery.track leaves it as stored).
        self.finished_before = status.finished_at is not None
        self.prev_conditions = list(status.conditions)
        self.actions: list[Action] = []
        self.events: list[EventNote] = []
        self.requeue: float | None = tun.poll_interval
        # Set by `enter_then_step`: the new phase's step runs in this pass too (machine._step).
        self.step_now = False

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
        if not self.s.run_outcome:
            # Once the run has ended, message keeps saying why; phase changes are in Events.
            self.s.message = message
        self.events.append(EventNote("Normal", str(phase), message))

    def enter_then_step(self, phase: Phase, message: str) -> None:
        """Enter `phase` and run its step in this pass (its row's step in machine.STEPS): how a
        step hands over to the next phase's without importing it."""
        self.enter(phase, message)
        self.step_now = True

    def phase_age(self) -> float:
        entered = self.s.phase_times.get(str(self.phase))
        kept = self.s.instance.keep_ended_at
        if self.phase == Phase.DELETED and entered and kept and kept > entered:
            entered = kept  # teardown's deletingSeconds counts from the end of a debugging keep
        return (self.now - entered).total_seconds() if entered else 0.0

    def timed_out(self) -> bool:
        limit = phase_timeout(self.spec, self.phase)
        return limit is not None and self.phase_age() > limit

    # -- outcome, trouble
    def end_run(self, outcome: Outcome, reason: str, message: str) -> None:
        """The run is over (or will never start): remember why; the tail takes over."""
        if self.s.run_outcome:
            return
        self.s.run_outcome = outcome
        self.s.reason = reason
        self.s.message = message = clip(message)
        self.s.retries = 0
        if self.s.attempts:  # none: nothing ran (ended while Pending)
            self.s.run.ended(self.now)
            # The run ends with its current attempt: every attempt says why it ended (issue 12).
            self.s.current.end(self.now, reason, message)
        kind = "Normal" if outcome == Outcome.SUCCEEDED else "Warning"
        self.events.append(EventNote(kind, reason, message))

    def backoff(self) -> None:
        self.requeue = exponential(self.s.retries, base=self.tun.backoff_base, cap=self.tun.backoff_max)

    def transient(self, failure: ActionFailure) -> None:
        """A failure to retry with backoff. Before the run ended it is the job's current problem
        (reason/message); after, the final reason/message stay and teardown.message says it."""
        self.s.retries += 1
        note = clip(f"{failure.action}: {failure.message}") + f" (attempt {self.s.retries}, will retry)"
        if self.s.run_outcome:
            self.s.teardown.waiting(note)
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
        if self.s.run_outcome:
            self.s.teardown.waiting(None)
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
        return bool(self.s.instance.created)

    @property
    def ephemeral(self) -> bool:
        return self.spec.instance.ephemeral is not None if self.spec is not None else self.owned

    @property
    def instance(self) -> str:
        return str(self.s.instance.name)

    @property
    def target(self) -> str:
        """What `brev delete` is given: the id once known (ids never repeat), else the name."""
        return self.s.instance.id or self.instance

    def deletes_instance(self) -> bool:
        if not self.owned:
            return False
        if superseded(self.s):
            return True  # recovery was deleting it: Retain keeps the run's instance, not this one
        # Without a parsed spec, delete what we created: a leak bills, a re-create is cheap.
        return self.spec is None or self.spec.instance.effective_on_completion() == OnCompletion.DELETE

    def asked_brev(self) -> bool:
        """Whether an instance of ours may exist at all: a create was sent that Brev did not
        definitely refuse (accepted, failed ambiguously or cut short by a crash), or it was seen."""
        return self.s.instance.create_requested_at is not None or self.s.instance.id is not None

    def settle_from(self) -> datetime | None:
        """Where the create settle time starts: the later of the last create sent and the last
        create call that came back (a create re-sent after the settle time is in flight while
        createReturnedAt still holds the earlier call's return)."""
        times = [
            t
            for t in (self.s.instance.create_requested_at, self.s.instance.create_returned_at)
            if t is not None
        ]
        return max(times) if times else None

    def seen(self, inst: Instance) -> None:
        self.s.instance.seen(inst.id, inst.gpu)

    def present(self) -> None:
        self.s.instance.absence.clear()

    def detect_new_listing(self) -> bool:
        """Whether this pass's listing is new evidence: taken at least a poll interval after the
        last one counted. By when the listing was taken, not when the pass ran: the directory
        serves one listing to every pass for up to listing_max_age, and the same omission seen
        again is no new evidence (one glitch counted three times deleted healthy instances;
        issue 25, scenario 4)."""
        listed_at = self.obs.listed_at or self.now
        last = self.s.instance.absence.checked_at
        return last is None or (listed_at - last).total_seconds() >= self.tun.poll_interval

    def process_absence(self) -> int:
        """Count this listing (without the instance) if it is new evidence; the count so far."""
        listed_at = self.obs.listed_at or self.now
        if self.detect_new_listing():
            self.s.instance.absence.count(listed_at)
        return self.s.instance.absence.listings or 0

    def exec_evidence(self) -> bool:
        done = set(self.obs.completed)
        return bool(done & _EXEC_EVIDENCE) or (self.obs.did(ProbeExec) and bool(self.obs.probe_ok))

    def detect_identity_change(self) -> bool:
        """The CLI is logged in as someone else than who asked for the instance. Listings (made
        with --all) and an accepted delete still count; a "not found" does not (brev resolves
        names and ids among the caller's own instances only)."""
        recorded, current = self.s.instance.identity, self.obs.identity
        return recorded is not None and current is not None and not same_reach(recorded, current)

    def process_identity(self) -> bool:
        """detect_identity_change, and the InstanceNotAccessible stall lifted once it is over."""
        differs = self.detect_identity_change()
        if not differs:
            self.unstall(reasons.INSTANCE_NOT_ACCESSIBLE)
        return differs

    def not_accessible(self) -> None:
        self.stall(
            reasons.INSTANCE_NOT_ACCESSIBLE,
            f"instance {self.instance} ({self.s.instance.id or 'id not yet seen'}) was requested by brev "
            f"identity {self.s.instance.identity!r}, but the operator is logged in as {self.obs.identity!r}, "
            "which cannot confirm it gone; restore the credential that created it (the operator's brev "
            "credentials Secret) — nothing is concluded about the instance until then",
        )

    def process_ambiguity(self) -> bool:
        if not self.obs.instance_ambiguous:
            self.unstall(reasons.INSTANCE_AMBIGUOUS)
            return False
        self.stall(
            reasons.INSTANCE_AMBIGUOUS,
            f"several instances named {self.instance} exist and none is recorded as this job's; "
            "delete the extra ones (`brev ls`, `brev delete <id>`) and the job adopts the remaining one",
        )
        return True


def superseded(status: TaoBrevJobStatus) -> bool:
    """The current instance belongs to an attempt recovery ended before the run did: it was being
    deleted for the next attempt when the job was cancelled, timed out or ran over budget (between
    attempts). It is deleted whatever onCompletion says, and never recorded as retained. The run's
    own end stamps its attempt at the same time as runEndedAt, so an earlier stamp marks one that
    ended alone."""
    last = status.current
    if last.ended_at is None:
        return False
    return last.run.ended_at is None or last.ended_at < last.run.ended_at
