"""The TaoBrevJob state machine (PURE: no I/O, time passed in).

    Pending -> Provisioning -> WaitingExec -> Pulling -> Running -> Uploading -> Deleted

`decide(spec, status, observation, tunables)` returns the next status (a typed
`TaoBrevJobStatus`; the reconciler parses and serialises it), the actions to perform, Events, and
when to look again. Once the run has ended
(success, failure, timeout or cancellation) the common tail follows: stop the container if it
runs, upload results and logs if a container ever started, then tear down in phase Deleted —
remove the container and secret files, delete an ephemeral instance and observe it gone. Only
then is the job finished (`finishedAt`), which releases the finalizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from controller import conditions, naming, reasons
from controller.brev.client import DELETING, FAILURE, RUNNING, STOPPED, CreateRequest
from controller.models import OnCompletion, Outcome, Phase, ResultsSummary, TaoBrevJobSpec, TaoBrevJobStatus
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


@dataclass(frozen=True)
class Tunables:
    """Operator settings decide() needs (seconds)."""

    poll_interval: float = 5.0
    wait_timeout: float = 30.0
    # How long after a create request an absent instance still counts as "maybe being created".
    create_settle: float = 120.0
    backoff_base: float = 2.0
    backoff_max: float = 60.0


MAX_MESSAGE = 800


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    """Keep status readable: brev's errors carry trace fragments; the head says what failed and
    the tail says why, so keep both."""
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head]} … {text[-(limit - head - 3) :]}"


def phase_timeout(spec: TaoBrevJobSpec, phase: Phase) -> int | None:
    t = spec.timeouts
    return {
        Phase.PROVISIONING: t.provisioning_seconds,
        Phase.WAITING_EXEC: t.waiting_exec_seconds,
        Phase.PULLING: t.pulling_seconds,
        Phase.RUNNING: t.running_seconds,
        Phase.UPLOADING: t.uploading_seconds,
        Phase.DELETED: t.deleting_seconds,
    }.get(phase)


class _Pass:
    """Accumulates one decision; keeps decide() readable without hidden I/O."""

    def __init__(
        self, spec: TaoBrevJobSpec, status: TaoBrevJobStatus, obs: Observation, tun: Tunables
    ) -> None:
        self.spec = spec
        self.obs = obs
        self.tun = tun
        self.s = status.model_copy(deep=True)
        self.prev_conditions = list(status.conditions)
        self.actions: list[Action] = []
        self.events: list[EventNote] = []
        self.requeue: float | None = tun.poll_interval

    # -- helpers
    @property
    def phase(self) -> Phase:
        return self.s.phase or Phase.PENDING

    @property
    def now(self) -> datetime:
        return self.obs.now

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

    def end_run(self, outcome: Outcome, reason: str, message: str) -> None:
        """The run is over (or will never start): remember why; the tail takes over."""
        if self.s.outcome:
            return
        self.s.outcome = outcome
        self.s.reason = reason
        self.s.message = message = clip(message)
        kind = "Normal" if outcome == Outcome.SUCCEEDED else "Warning"
        self.events.append(EventNote(kind, reason, message))

    def transient(self, failure: ActionFailure) -> None:
        retries = self.s.retries + 1
        self.s.retries = retries
        self.s.reason = failure.reason
        message = clip(f"{failure.action}: {failure.message}") + f" (attempt {retries}, will retry)"
        self.s.message = message
        self.requeue = min(self.tun.backoff_base * 2 ** (retries - 1), self.tun.backoff_max)
        if retries == 1:
            self.events.append(EventNote("Warning", failure.reason, message))

    def handle_failure(self) -> bool:
        """Fold an action failure into status. True if the pass should stop here."""
        f = self.obs.failure
        if f is None:
            return False
        if f.permanent:
            self.end_run(Outcome.FAILED, f.reason, f"{f.action}: {f.message}")
            return False
        self.transient(f)
        return True

    @property
    def ephemeral(self) -> bool:
        return self.spec.instance.ephemeral is not None

    @property
    def instance(self) -> str:
        return str(self.s.instance_name)

    def deletes_instance(self) -> bool:
        return bool(self.s.instance_created) and (
            self.spec.instance.effective_on_completion() == OnCompletion.DELETE
        )


def decide(
    spec: TaoBrevJobSpec,
    status: TaoBrevJobStatus,
    obs: Observation,
    *,
    namespace: str,
    name: str,
    uid: str,
    generation: int,
    tunables: Tunables | None = None,
) -> Decision:
    p = _Pass(spec, status, obs, tunables or Tunables())
    if p.s.finished_at:
        return _finish(p, generation, requeue=None)

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

    stop = p.handle_failure()
    if not stop:
        _step(p, namespace=namespace, name=name, uid=uid)
    return _finish(p, generation, requeue=p.requeue)


def _finish(p: _Pass, generation: int, requeue: float | None) -> Decision:
    p.s.observed_generation = generation
    p.s.conditions = conditions.derive(p.s, p.prev_conditions, generation, p.now)
    if p.s.finished_at:
        requeue = None
    return Decision(status=p.s, actions=tuple(p.actions), requeue_after=requeue, events=tuple(p.events))


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
    if not p.s.instance_name:
        _assign_names(p, namespace, name, uid)
    reuse = p.spec.instance.reuse
    p.enter(Phase.PROVISIONING, f"{'creating' if reuse is None else 'reusing'} instance {p.instance}")
    p.requeue = 0.0


def _assign_names(p: _Pass, namespace: str, name: str, uid: str) -> None:
    # Names are written to status BEFORE any brev call, so a restart adopts, never duplicates.
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


def _instance_gone_or_failed(p: _Pass) -> bool:
    """Mid-run loss of the instance ends the job with a distinct reason."""
    inst = p.obs.instance
    if not p.obs.instance_known:
        return False
    if inst is None or inst.status == DELETING:
        p.end_run(
            Outcome.FAILED, reasons.INSTANCE_LOST, f"instance {p.instance} disappeared during {p.phase}"
        )
        return True
    if inst.status == FAILURE:
        p.end_run(
            Outcome.FAILED, reasons.INSTANCE_FAILED, f"instance {p.instance} went to FAILURE during {p.phase}"
        )
        return True
    return False


def _provisioning(p: _Pass) -> None:
    if _check_timeout(p):
        _step_after_end(p)
        return
    inst = p.obs.instance
    if not p.obs.instance_known:
        return  # listing failed transiently; look again
    if inst is not None:
        p.s.gpu = inst.gpu
        if inst.status == RUNNING:
            p.enter(
                Phase.WAITING_EXEC, f"instance {p.instance} is RUNNING; waiting until it accepts commands"
            )
            p.actions.append(ProbeExec(p.instance))
        elif inst.status == FAILURE:
            p.end_run(Outcome.FAILED, reasons.INSTANCE_FAILED, f"instance {p.instance} went to FAILURE")
            _step_after_end(p)
        elif inst.status == STOPPED and not p.ephemeral and not p.s.start_requested_at:
            p.s.start_requested_at = p.now
            p.actions.append(StartInstance(p.instance))
        elif inst.status == DELETING:
            p.end_run(Outcome.FAILED, reasons.INSTANCE_LOST, f"instance {p.instance} is being deleted")
            _step_after_end(p)
        return
    # Absent.
    if not p.ephemeral:
        p.end_run(
            Outcome.FAILED,
            reasons.REUSE_INSTANCE_NOT_FOUND,
            f"instance {p.instance} named in spec.instance.reuse.name does not exist; "
            "create it or use spec.instance.ephemeral",
        )
        _step_after_end(p)
        return
    requested = p.s.create_requested_at
    if p.obs.created:
        return  # just created; the listing catches up on the next pass
    if requested is None or (p.now - requested).total_seconds() > p.tun.create_settle:
        # Marker first (the status patch lands before the action runs), then create. A repeat after
        # the settle time reuses the same name, so brev answers "already exists" and we adopt.
        p.s.create_requested_at = p.now
        p.actions.append(CreateInstance(_create_request(p)))
        p.events.append(EventNote("Normal", reasons.INSTANCE_CREATE_REQUESTED, f"brev create {p.instance}"))


def _create_request(p: _Pass) -> CreateRequest:
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
        _step_after_end(p)
        return
    if p.obs.prepared:
        p.enter(Phase.RUNNING, f"starting container {p.s.job_id} on {p.instance}")
        p.s.container_started_at = p.now
        p.actions.append(StartContainer(p.instance))
        p.requeue = 0.0
        return
    p.actions.append(PrepareWorkload(p.instance))


def _running(p: _Pass) -> None:
    if p.obs.log_tail:
        p.s.last_log_lines = list(p.obs.log_tail)
    code = p.obs.exit_code
    if code is not None:
        p.s.exit_code = code
        p.s.container_exited_at = p.now
        if code == 0:
            p.end_run(Outcome.SUCCEEDED, reasons.SUCCEEDED, "training container exited 0")
        else:
            p.end_run(Outcome.FAILED, reasons.TRAINING_FAILED, f"training container exited with code {code}")
        p.enter(Phase.UPLOADING, f"uploading results and logs to {p.spec.data.results_uri}")
        p.actions.append(UploadResults(p.instance))
        p.requeue = 0.0
        return
    if not p.s.outcome:
        if _instance_gone_or_failed(p):
            _step_after_end(p)
            return
        _check_timeout(p)  # a timeout falls through to stopping the container below
    if p.s.outcome:
        if p.s.reason in (reasons.INSTANCE_LOST, reasons.INSTANCE_FAILED):
            # Nothing left to stop or upload from.
            p.enter(Phase.UPLOADING, "instance lost; nothing to upload")
            _uploading(p)
            return
        # Canceled or timed out while running: stop it; the exit is picked up by the wait.
        if not p.obs.container_stopped:
            p.actions.append(StopContainer(p.instance))
        p.actions.append(WaitForExit(p.instance, timeout_seconds=p.tun.wait_timeout, start_if_missing=False))
        p.requeue = 0.0
        return
    # A bounded blocking wait: returns as soon as the container exits, costs one brev call per
    # wait_timeout while it runs.
    p.actions.append(WaitForExit(p.instance, timeout_seconds=p.tun.wait_timeout))
    p.requeue = 0.0


def _lost_before_upload(p: _Pass) -> None:
    inst = p.obs.instance
    p.s.outcome = Outcome.FAILED
    p.s.reason = reasons.INSTANCE_LOST if inst is None or inst.status == DELETING else reasons.INSTANCE_FAILED
    p.s.message = f"instance {p.instance} disappeared before the results were uploaded"
    p.events.append(EventNote("Warning", p.s.reason, p.s.message))


def _uploading(p: _Pass) -> None:
    inst = p.obs.instance
    if p.obs.upload is None and p.obs.instance_known and (inst is None or inst.status in (DELETING, FAILURE)):
        # Nothing left to upload from: say so (the results are lost), whatever the run's outcome.
        _lost_before_upload(p)
    lost = p.s.reason in (reasons.INSTANCE_LOST, reasons.INSTANCE_FAILED)
    if p.obs.upload is not None:
        p.s.uploaded_at = p.now
        p.s.results = ResultsSummary(
            uri=p.spec.data.results_uri, objects=p.obs.upload.objects, bytes=p.obs.upload.bytes
        )
        p.enter(Phase.DELETED, f"uploaded {p.obs.upload.objects} objects; tearing down")
        _teardown(p)
        return
    if lost:
        p.enter(Phase.DELETED, "tearing down")
        _teardown(p)
        return
    if p.timed_out():
        limit = phase_timeout(p.spec, Phase.UPLOADING)
        # Billing must stop even if results cannot be saved: tear down, and say so.
        p.s.outcome = Outcome.FAILED
        p.s.reason = reasons.UPLOAD_FAILED
        p.s.message = f"upload did not finish within {limit}s (spec.timeouts.uploadingSeconds)"
        p.events.append(EventNote("Warning", reasons.UPLOAD_FAILED, p.s.message))
        p.enter(Phase.DELETED, "tearing down without results")
        _teardown(p)
        return
    p.actions.append(UploadResults(p.instance))
    p.requeue = 0.0


def _step_after_end(p: _Pass) -> None:
    """The run ended before a container existed: go straight to teardown."""
    if p.phase in (Phase.PROVISIONING, Phase.WAITING_EXEC, Phase.PULLING):
        p.enter(Phase.DELETED, f"tearing down after {p.s.reason}")
        _teardown(p)
    elif p.phase == Phase.RUNNING:
        _running(p)


def _teardown(p: _Pass) -> None:
    """Phase Deleted: remove what the job put on the instance, delete an instance we own, observe
    it gone, then finish. An ephemeral instance is never abandoned: past deletingSeconds we keep
    trying (with backoff) and report it, because giving up would leave it billing."""
    name = p.s.instance_name
    if name and not _cleanup_done(p):
        return
    if name and p.deletes_instance() and not _instance_released(p):
        return
    p.s.finished_at = p.now
    released = "deleted" if p.deletes_instance() else "left running (retained)"
    outcome = p.s.outcome or Outcome.CANCELED
    p.s.outcome = outcome
    results = f"; results in {p.spec.data.results_uri}" if p.s.uploaded_at else ""
    instance = f"; instance {name} {released}" if name else ""
    p.s.message = f"{outcome}: {p.s.message or ''}{results}{instance}"
    p.events.append(
        EventNote("Normal" if outcome == Outcome.SUCCEEDED else "Warning", reasons.FINISHED, p.s.message)
    )


def _cleanup_done(p: _Pass) -> bool:
    """Container and job directory (with the secret files) removed, or nothing to remove."""
    if p.s.cleaned_up_at:
        return True
    inst = p.obs.instance
    if p.obs.cleaned:
        p.s.cleaned_up_at = p.now
        return True
    if not p.obs.instance_known:
        return False
    if inst is not None and inst.status == RUNNING and _workload_may_exist(p):
        # On a retained instance the secrets must really go; on one we delete, best effort.
        p.actions.append(CleanupWorkload(p.instance, must_succeed=not p.deletes_instance()))
        p.requeue = 0.0
        return False
    # Unreachable, gone, or never prepared: nothing of ours on it, or it goes with the instance.
    p.s.cleaned_up_at = p.now
    return True


def _instance_released(p: _Pass) -> bool:
    """Ask brev to delete our instance, then observe until it is gone."""
    if not p.obs.instance_known:
        return False
    inst = p.obs.instance
    requested = p.s.delete_requested_at
    if inst is None:
        created = p.s.create_requested_at
        # A create was requested but never observed: make sure it is not still on its way
        # before walking away (an ambiguous create must never leak an instance).
        settling = created is not None and (p.now - created).total_seconds() <= p.tun.create_settle
        if settling and requested is None and not p.obs.delete_requested:
            # status.message keeps saying why the job ended; the InstanceReleased condition
            # says teardown is still in progress.
            p.s.teardown_message = f"waiting to confirm that instance {p.instance} was never created"
            return False
        return True
    stale = requested is None or (p.now - requested).total_seconds() > p.tun.create_settle
    if inst.status != DELETING and not p.obs.delete_requested and stale:
        p.s.delete_requested_at = p.now
        p.actions.append(DeleteInstance(p.instance))
        p.events.append(EventNote("Normal", reasons.INSTANCE_DELETE_REQUESTED, f"brev delete {p.instance}"))
        return False
    if p.timed_out():
        note = f"instance {p.instance} still exists {int(p.phase_age())}s after delete; still trying"
        if not (p.s.teardown_message or "").startswith(f"instance {p.instance} still exists"):
            p.events.append(EventNote("Warning", reasons.INSTANCE_NOT_RELEASED, note))
        p.s.teardown_message = note
        p.requeue = p.tun.backoff_max
    return False


def _workload_may_exist(p: _Pass) -> bool:
    """Secrets, spec or a container exist on the instance only from Pulling on."""
    return str(Phase.PULLING) in p.s.phase_times
