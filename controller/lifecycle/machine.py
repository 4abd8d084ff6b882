"""The TaoBrevJob state machine (PURE: no I/O, time passed in).

    Pending -> Provisioning -> WaitingExec -> Pulling -> Running -> Uploading -> Deleted

`decide(spec, status, observation, tunables)` returns the next status (a typed
`TaoBrevJobStatus`; the reconciler parses and serialises it), the actions to perform, Events, and
when to look again. Once the run has ended (success, failure, timeout or cancellation) the common
tail follows: stop the container if it runs, upload results and logs if a container ever started,
then tear down in phase Deleted — remove the container and secret files, delete an instance this
job created and confirm it gone. Only then is the job finished (`finishedAt`), which releases the
finalizer.

The machine is split by what each part holds; every part is pure (the pure-core contract in
.importlinter):

- machine.py: `decide()`, which folds an action failure into status and dispatches on the phase.
- phases.py: `PHASES`, the phase table: each phase's allowed next phases, timeout field and
  flags (pre-run, holds a quota slot, needs secrets, budget judged, deadline-bound, workload on
  the instance); `STEPS` below binds each phase's step function.
- tunables.py: `Tunables`, the operator settings decide() reads.
- decision_pass.py: `Pass`, one decision being accumulated (status, actions, Events, requeue),
  with the helpers on phase changes, outcome, trouble and the instance that every step uses.
- run_phases.py: the steps of Pending, Provisioning, WaitingExec, Pulling and Running (with
  Running's stop grace after the run ended). A step hands over to the next phase's with
  `Pass.enter_then_step`, so run_phases and teardown never import each other.
- teardown.py: Uploading and Deleted (upload, cleanup, delete, confirmed release).
- release.py: how an owned instance is released (delete, then confirm it gone); used by
  teardown and by recovery between attempts.
- absence.py: how the instance's absence is suspected, then confirmed (never assumed).
- identities.py: `same_reach`, whether one brev identity reaches what another created.
- status_text.py: `clip` and `log_lines`, what status keeps of messages and log tails.

The bound within which every state after the run ended reaches `brev delete` of an owned
instance is stated per state in controller/lifecycle/teardown.py's docstring.

`TRANSITIONS`, `Tunables`, `phase_timeout`, `same_reach`, `clip`, `log_lines` and the status caps
are re-exported here for the modules and tests that use them as `machine.<name>`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from controller.api import reasons
from controller.api.errors import InstanceNotFound
from controller.api.models import TaoBrevJobSpec, phase_timeout
from controller.api.naming import CANCEL_ANNOTATION
from controller.api.status import CheckpointStatus, TaoBrevJobStatus
from controller.api.vocabulary import Outcome
from controller.lifecycle import conditions, recovery, workflow
from controller.lifecycle.decision_pass import Pass
from controller.lifecycle.failure_class import failure_class
from controller.lifecycle.identities import same_reach
from controller.lifecycle.phases import PHASES, TRANSITIONS, Phase
from controller.lifecycle.run_phases import (
    assign_names,
    evict,
    pending,
    process_silence,
    provisioning,
    pulling,
    running,
    waiting_exec,
)
from controller.lifecycle.status_text import (
    MAX_LOG_BYTES,
    MAX_LOG_LINE,
    MAX_LOG_LINES,
    MAX_MESSAGE,
    clip,
    log_lines,
)
from controller.lifecycle.steps import (
    ActionFailure,
    CleanupWorkload,
    CreateInstance,
    Decision,
    DeleteInstance,
    EventNote,
    Observation,
    StartInstance,
    SyncCheckpoints,
    UploadResults,
    WaitForExit,
)
from controller.lifecycle.teardown import teardown, upload_failed, upload_trouble, uploading
from controller.lifecycle.tunables import MIN_ABSENT_LISTINGS, Tunables

# Re-exported: the names other modules and the tests use as `machine.<name>`.
__all__ = [
    "MAX_LOG_BYTES",
    "MAX_LOG_LINE",
    "MAX_LOG_LINES",
    "MAX_MESSAGE",
    "MIN_ABSENT_LISTINGS",
    "TRANSITIONS",
    "Tunables",
    "clip",
    "decide",
    "log_lines",
    "phase_timeout",
    "same_reach",
]


# Failure reasons of a `brev create` that Brev answered with a definite "no" (nothing was created):
# transient ones listed here; every permanent create failure (a validation error) is one too.
# A timeout or any other failure may have created the instance all the same.
_CREATE_REFUSALS = frozenset({reasons.INSUFFICIENT_CAPACITY})


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
    p = Pass(spec, status, obs, tunables or Tunables())
    if p.s.finished_at:
        return _finish(p, generation, requeue=None)

    if spec is None:
        p.stall(reasons.INVALID_SPEC, clip(spec_error or "spec does not parse"))
        if not obs.deleting and obs.cancel_requested is None:
            return _finish(p, generation, requeue=p.requeue)
        if not p.s.phase:
            p.s.phase = Phase.PENDING
            p.s.phase_times = {str(Phase.PENDING): obs.now}
        p.end_run(Outcome.FAILED, reasons.INVALID_SPEC, spec_error or "spec does not parse")
    else:
        p.unstall(reasons.INVALID_SPEC)

    if not p.s.phase:
        # A first Pending (with the names every later step relies on), then move on. The
        # reconciler writes it with the next step's status when that follows at once.
        p.s.phase = Phase.PENDING
        p.s.phase_times = {str(Phase.PENDING): obs.now}
        p.s.message = "accepted"
        p.events.append(EventNote("Normal", str(Phase.PENDING), "accepted"))
        if obs.blocker is None and not obs.deleting:
            assign_names(p, namespace, name, uid)
            p.requeue = 0.0
            return _finish(p, generation, requeue=p.requeue)

    if p.phase != Phase.PENDING and not p.s.instance.name:
        # Status written by someone else (or an older version) without our names: they are
        # deterministic, so re-deriving them is safe and keeps teardown able to find the instance.
        assign_names(p, namespace, name, uid)
    if obs.blocker is not None:
        p.end_run(Outcome.FAILED, obs.blocker.reason, obs.blocker.message)
    if obs.deleting and not p.s.run_outcome:
        p.end_run(Outcome.CANCELED, reasons.CANCELED, f"the TaoBrevJob was deleted during {p.phase}")
    if obs.cancel_requested is not None and not p.s.run_outcome:
        # As a deletion, but the object stays: its status keeps the outcome and the results.
        p.end_run(
            Outcome.CANCELED,
            reasons.CANCELED_BY_USER,
            f"canceled during {p.phase} by the annotation {CANCEL_ANNOTATION}={obs.cancel_requested!r} "
            "(kubectl taobrev cancel)",
        )

    workflow.fold_upload(p)
    if not _handle_failure(p):
        recovery.track(p)
        recovery.check_budget(p)
        _evicted_or_step(p, namespace=namespace, name=name, uid=uid)
    return _finish(p, generation, requeue=p.requeue)


def _finish(p: Pass, generation: int, requeue: float | None) -> Decision:
    recovery.track(p)
    workflow.settle(p)
    p.s.outcome = conditions.shown_outcome(p.s)
    p.s.failure_class = failure_class(p.s.reason) if p.s.outcome == Outcome.FAILED else None
    p.s.observed_generation = generation
    p.s.conditions = conditions.derive(p.s, p.prev_conditions, generation, p.now)
    if p.s.finished_at:
        requeue = None
    return Decision(status=p.s, actions=tuple(p.actions), requeue_after=requeue, events=tuple(p.events))


def _handle_failure(p: Pass) -> bool:  # noqa: PLR0911, PLR0912 - one branch per failure kind, in order
    """Fold an action failure into status. True if the pass should stop here (backoff)."""
    f = p.obs.failure
    if p.exec_evidence():
        p.s.run.answered()
    if f is None:
        p.recovered()
        return False
    if f.of(SyncCheckpoints):
        # Never the job's problem: counted and shown, retried at the next interval, no backoff.
        recovery.sync_failed(p, p.s.checkpoint or CheckpointStatus(), f.message)
        return False
    if f.of(CreateInstance):
        _create_failed(p, f)
    if f.of(UploadResults):
        # Counted when it came back, not when asked: an attempt a crash cut short is no attempt.
        p.s.upload.tried()
    if f.of(StartInstance):
        p.s.instance.start_sent(None)  # the start did not happen: ask again after the backoff
    if f.of(CleanupWorkload) and p.deletes_instance():
        # The secrets go with the instance: a failed cleanup never holds up its delete.
        p.s.run.cleaned(p.now)
        note = clip(f"cleanup failed ({f.message}); deleting the instance anyway")
        p.s.teardown.waiting(note)
        p.events.append(EventNote("Warning", reasons.CLEANUP_FAILED, note))
        return False
    if f.reason == InstanceNotFound.reason and not f.of(DeleteInstance):
        # "Not found" from exec or start is no proof of loss (another identity, a lagging
        # backend): retry with backoff; listings and `brev delete` decide whether it is gone.
        f = ActionFailure(f.action, f.reason, f.message, permanent=False)
    if f.of(UploadResults) and f.permanent and p.phase == Phase.UPLOADING:
        upload_failed(p, f"upload failed: {f.message}")
        return False
    if f.permanent and not p.s.run_outcome:
        p.end_run(Outcome.FAILED, f.reason, f"{f.action}: {f.message}")
        return False
    if f.of(UploadResults) and p.phase == Phase.UPLOADING:
        # Said each streak: what is wrong, the fix, until when the results wait on the instance.
        f = ActionFailure(f.action, f.reason, upload_trouble(p, f.message), f.permanent)
    silent = f.of(WaitForExit) and f.reason in reasons.SILENCE and not f.permanent
    if silent and p.phase == Phase.RUNNING and not p.s.run_outcome and process_silence(p):
        return False  # the run or this attempt ended: the step goes on from there
    # Transient, or permanent after the run ended: back off (never hot-loop), keep the outcome.
    p.transient(f)
    if f.of(CleanupWorkload) and p.s.retries >= p.tun.cleanup_attempts:
        p.stall(
            reasons.SECRETS_MAY_REMAIN,
            f"could not remove container {p.s.job_id} and the job's files (with its secrets) from "
            f"reused instance {p.instance} after {p.s.retries} attempts ({clip(f.message, 300)}); "
            "still retrying — make the instance reachable (`brev start`, `brev exec` works) or "
            f"remove ~/taobrev/{p.s.job_id} on it by hand",
        )
    return True


def _evicted_or_step(p: Pass, *, namespace: str, name: str, uid: str) -> None:
    if not _evicted(p):
        _step(p, namespace=namespace, name=name, uid=uid)


def _evicted(p: Pass) -> bool:
    """Kueue evicted the admitted job while its attempt runs: stop it (run_phases.evict). True when
    that took the pass; before the run began the attempt ends here and the phase's step goes on."""
    why = p.obs.evicted
    if why is None or p.s.run_outcome or p.phase in (Phase.PENDING, Phase.UPLOADING, Phase.DELETED):
        return False
    if not p.s.attempts or p.s.current.ended_at is not None or recovery.awaiting_readmission(p.s):
        return False  # stopped already: its instance is being deleted, or it waits for Kueue
    if p.phase == Phase.RUNNING:
        evict(p, why)
        return True
    recovery.end_attempt(p, reasons.KUEUE_EVICTED, f"evicted by Kueue: {why}")
    return False


def _create_failed(p: Pass, f: ActionFailure) -> None:
    """A `brev create` came back with an error. A definite refusal (no capacity, a validation
    error) of the only create that could have made our instance leaves nothing to confirm: the
    job is back to "never asked Brev" (no settle time, and the identity recorded for that create
    no longer matters). Any other failure, or a refusal of a create re-sent after an earlier one
    that may have succeeded, keeps the create pending confirmation under its identity."""
    # createReturnedAt is still unset while the first create that may have made something is in
    # flight (a re-send keeps the earlier call's return there).
    first = p.s.instance.create_returned_at is None and p.s.instance.id is None
    if first and (f.permanent or f.reason in _CREATE_REFUSALS):
        p.s.instance.create_refused()
        return
    p.s.instance.create_returned(p.now)


Step = Callable[[Pass, str, str, str], None]  # (pass, namespace, name, uid)


def _only(step: Callable[[Pass], None]) -> Step:
    return lambda p, _namespace, _name, _uid: step(p)


# Each phase's step function; what the phase means is its row in controller.lifecycle.phases.PHASES.
STEPS: Mapping[Phase, Step] = {
    Phase.PENDING: pending,
    Phase.PROVISIONING: _only(provisioning),
    Phase.WAITING_EXEC: _only(waiting_exec),
    Phase.PULLING: _only(pulling),
    Phase.RUNNING: _only(running),
    Phase.UPLOADING: _only(uploading),
    Phase.DELETED: _only(teardown),
}


def _step(p: Pass, *, namespace: str, name: str, uid: str) -> None:
    phase = p.phase
    if p.s.run_outcome and phase != Phase.PENDING and PHASES[phase].pre_run:
        # Nothing ran, so nothing to upload: go straight to teardown.
        p.enter(Phase.DELETED, f"tearing down after {p.s.reason}")
        phase = Phase.DELETED
    STEPS[phase](p, namespace, name, uid)
    # A step that handed over (Pass.enter_then_step) has the new phase's step run now; phases
    # only move on within a pass, so this ends within len(PHASES) steps.
    for _ in PHASES:
        if not p.step_now:
            return
        p.step_now = False
        STEPS[p.phase](p, namespace, name, uid)
    raise AssertionError(f"steps handed over more than {len(PHASES)} times in one pass")
