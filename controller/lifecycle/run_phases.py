"""The steps of the phases before the run ends (PURE): Pending, Provisioning, WaitingExec,
Pulling and Running. Once the run has ended, controller/lifecycle/teardown.py takes over."""

from __future__ import annotations

import math
import zlib

from controller.api import naming, reasons
from controller.api.models import phase_timeout
from controller.api.status import PreflightProblem, PreflightStatus, ResultsSummary
from controller.api.vocabulary import Outcome
from controller.brev.client import DELETING, FAILURE, RUNNING, STOPPED, STOPPING, CreateRequest
from controller.fleet import admission
from controller.lifecycle import recovery, workflow
from controller.lifecycle.absence import process_instance_fate
from controller.lifecycle.backoff import exponential
from controller.lifecycle.decision_pass import Pass
from controller.lifecycle.phases import PHASES, Phase
from controller.lifecycle.progress import fold_progress, progress_due
from controller.lifecycle.release import instance_released
from controller.lifecycle.status_text import clip, log_lines
from controller.lifecycle.steps import (
    CreateInstance,
    EventNote,
    PrepareWorkload,
    ProbeExec,
    RestoreCheckpoints,
    StartInstance,
    StopContainer,
    UploadResults,
    Verdict,
    WaitForExit,
)
from controller.preflight.checks import MAX_PROBLEMS
from controller.preflight.plan import build_plan, priced
from controller.preflight.plan import summary as plan_summary


def pending(p: Pass, namespace: str, name: str, uid: str) -> None:
    if p.s.run_outcome:
        # Failed validation or canceled before anything existed (a queued job among them):
        # nothing to tear down, and no queue to stand in any more.
        p.s.queue.leave()
        p.enter_then_step(Phase.DELETED, f"finished before provisioning: {p.s.reason}")
        return
    if not p.obs.has_finalizer:
        # Nothing may exist on Brev that a delete without our finalizer could orphan.
        p.s.message = "waiting for the finalizer before creating anything"
        p.requeue = min(p.tun.poll_interval, 1.0)
        return
    if p.spec is not None and p.spec.dry_run:
        _plan_only(p)
        return
    if not _preflight_passed(p):
        if p.s.run_outcome:  # the problems outlived spec.timeouts.pendingSeconds
            pending(p, namespace, name, uid)
        return
    if not _admitted(p):
        if p.s.run_outcome:  # held by a quota longer than spec.timeouts.queuedSeconds
            pending(p, namespace, name, uid)
        return
    # Nothing exists on Brev yet: names follow the current spec (an edit may switch reuse and
    # ephemeral while Pending).
    assign_names(p, namespace, name, uid)
    reuse = p.spec.instance.reuse if p.spec is not None else None
    p.enter(Phase.PROVISIONING, f"{'creating' if reuse is None else 'reusing'} instance {p.instance}")
    p.requeue = 0.0


def _preflight_passed(p: Pass) -> bool:
    """Nothing is asked of Brev before what can be checked without a GPU was checked (issue 32):
    the reconciler's pre-flight verdict comes in the observation (None: no pre-flight wired).
    A failing check keeps the job Pending and out of the queue, with the problem as the Ready
    condition's reason (kstatus InProgress, not Stalled: a Secret, a bucket or an input may still
    arrive, and the spec may be edited while Pending), a Warning Event per new reason and a
    re-check with backoff. The job fails only when problems outlive spec.timeouts.pendingSeconds,
    counted from the first failure of the current streak."""
    verdict = p.obs.preflight
    if verdict is None or p.s.queue.admitted_at is not None or p.spec is None:
        return True
    record = _recorded(p, verdict)
    if verdict.passed:
        if record.failing_since is not None:
            p.events.append(EventNote("Normal", reasons.PREFLIGHT_PASSED, "pre-flight checks passed"))
        if record.failing_since is not None or p.s.reason == reasons.DRY_RUN:
            p.s.reason = None  # a problem, or a dry run turned off: nothing stands in the way now
            p.s.retries = 0
        record.failing_since = None
        record.problems = []
        record.passed_at = verdict.checked_at
        p.s.preflight = record
        return True
    first = verdict.problems[0]
    found = clip("; ".join(problem.message for problem in verdict.problems))
    if record.failing_since is None:
        record.failing_since = verdict.checked_at
    p.s.preflight = record
    p.s.queue.leave()  # out of the queue while it waits (it had a place if an earlier check passed)
    limit = p.spec.timeouts.pending_seconds
    waited = int((p.now - record.failing_since).total_seconds())
    if waited > limit:
        p.end_run(
            Outcome.FAILED,
            first.reason,
            f"{found}; still failing after {waited}s (spec.timeouts.pendingSeconds={limit}); "
            "nothing was created",
        )
        return False
    if p.s.reason != first.reason:
        p.events.append(EventNote("Warning", first.reason, found))
    p.s.reason = first.reason
    p.s.retries += 1
    p.requeue = exponential(p.s.retries, base=p.tun.backoff_base, cap=p.tun.backoff_max)
    p.s.message = clip(
        f"waiting, nothing created: {found} (checked again in {int(p.requeue)}s and when a missing "
        f"Secret appears; fails {limit - waited}s from now, spec.timeouts.pendingSeconds)"
    )
    return False


def _recorded(p: Pass, verdict: Verdict) -> PreflightStatus:
    """status.preflight updated with this verdict (the caller decides the streak and stores it)."""
    record = (p.s.preflight or PreflightStatus()).model_copy()
    record.checked_at = verdict.checked_at
    record.candidates = [priced(t, price) for t, price in verdict.candidates[:16]]
    record.problems = [
        PreflightProblem(field=pr.field, reason=pr.reason, message=clip(pr.message, 1024))
        for pr in verdict.problems[:MAX_PROBLEMS]
    ]
    return record


def _plan_only(p: Pass) -> None:
    """spec.dryRun: say what the job would do and create nothing (never admitted, never failed
    for its problems: a plan shows them). Re-planned every backoff_max while it stays a dry run."""
    assert p.spec is not None
    verdict = p.obs.preflight
    if verdict is not None:
        p.s.preflight = _recorded(p, verdict)
    first = p.s.plan is None
    p.s.plan = build_plan(p.spec, verdict)
    found = "; ".join(pr.message for pr in (verdict.problems if verdict else ()))
    state = f"pre-flight problems: {found}" if found else "pre-flight passed"
    if verdict is None:
        state = "pre-flight not run (TAOBREV_PREFLIGHT=false)"
    p.s.reason = reasons.DRY_RUN
    p.s.message = clip(
        f"dry run, nothing created: {plan_summary(p.s.plan)}; {state}; set spec.dryRun to false to run"
    )
    if first:
        p.events.append(EventNote("Normal", reasons.DRY_RUN, p.s.message))
    p.requeue = p.tun.backoff_max


def _admitted(p: Pass) -> bool:
    """The quota gate: admittedAt is written in the same status patch that leaves Pending, before
    any brev call, so a crash can neither lose the slot nor take a second one."""
    if p.s.queue.admitted_at is not None:
        return True
    verdict = p.obs.admission
    if verdict is not None and not verdict.admitted:
        if p.s.queue.reason != verdict.reason:
            p.events.append(EventNote("Normal", verdict.reason, verdict.message))
        held = verdict.reason in admission.LIMIT_REASONS
        p.s.queue.wait(verdict.reason, clip(verdict.message), verdict.position, p.now, held=held)
        p.s.message = p.s.queue.message
        _queue_deadline(p)
        return False
    p.s.queue.admit(p.now)
    message = verdict.message if verdict is not None else "admitted"
    p.events.append(EventNote("Normal", admission.ADMITTED, message))
    return True


def _queue_deadline(p: Pass) -> None:
    """spec.timeouts.queuedSeconds: a job a limit holds longer fails (failureClass Quota), having
    created nothing; the pass after it tears nothing down and goes to Deleted."""
    limit = p.spec.timeouts.queued_seconds if p.spec is not None else None
    since = p.s.queue.queued_at
    if limit is None or since is None:
        return
    waited = int((p.now - since).total_seconds())
    if waited > limit:
        held_by = f"{p.s.queue.reason}: {p.s.queue.message}"
        p.s.queue.leave()
        p.end_run(
            Outcome.FAILED,
            reasons.QUEUE_TIMEOUT,
            clip(
                f"not admitted within spec.timeouts.queuedSeconds={limit} (waited {waited}s, held by "
                f"{held_by}); nothing was created"
            ),
        )
    else:  # a pass when it is due, whatever else wakes the job
        p.requeue = min(p.requeue if p.requeue is not None else float(limit), float(limit - waited + 1))


def assign_names(p: Pass, namespace: str, name: str, uid: str) -> None:
    # Names are written to status BEFORE any brev call, so a restart adopts, never duplicates.
    if p.spec is None:
        return
    job = naming.job_id(name, uid)
    reuse = p.spec.instance.reuse
    inst = (
        reuse.name
        if reuse
        else naming.instance_name(
            namespace, name, uid, cluster_id=p.tun.cluster_id, deployment=p.tun.deployment
        )
    )
    p.s.job_id = job
    if not p.s.attempts:
        p.s.start_attempt(inst, created=reuse is None)
    else:  # still Pending: nothing exists on Brev under the old name
        p.s.instance.assign(inst, created=reuse is None)
    p.s.backend_ref = naming.backend_ref(inst, job)


def _check_timeout(p: Pass) -> bool:
    if p.timed_out():
        limit = phase_timeout(p.spec, p.phase)
        p.end_run(
            Outcome.FAILED,
            reasons.timeout(p.phase),
            f"{p.phase} did not finish within {limit}s (spec.timeouts); tearing down",
        )
        return True
    return False


def process_instance_loss(p: Pass) -> bool:
    """The instance is confirmed lost, FAILURE or DELETING (or, when another attempt may follow,
    STOPPED by someone else): the run ends — or, with attempts left, only this attempt does
    (controller/lifecycle/recovery.py). Also True while a `brev delete` confirming a suspected loss is under
    way (the caller does nothing else)."""
    fate = process_instance_fate(p)
    retry = recovery.may_retry(p)
    if fate is None:
        # This job never stops an instance it created: someone did, and exec will not answer.
        fate = recovery.stopped_by_someone(p)
    if fate is None:
        return bool(p.actions)
    if retry:
        recovery.end_attempt(p, *fate)
    else:
        p.end_run(Outcome.FAILED, *fate)
    return True


def provisioning(p: Pass) -> None:
    if recovery.awaiting_readmission(p.s) and not _readmitted(p):
        return  # evicted by Kueue: nothing is created until it admits the job again
    if _check_timeout(p):
        _step_after_end(p)
        return
    if recovery.ended_not_switched(p):
        # The previous attempt's instance is deleted and confirmed before the next is created.
        released = p.s.instance.deleted_at is not None
        recovery.release_previous(p, released or instance_released(p))
        return
    if not p.obs.instance_known or p.process_ambiguity():
        return  # listing failed transiently, or it cannot tell which instance is ours: look again
    inst = p.obs.instance
    if p.obs.created:
        p.s.instance.create_returned(p.now)
    if inst is not None:
        p.seen(inst)
        if inst.status == RUNNING:
            p.enter(
                Phase.WAITING_EXEC, f"instance {p.instance} is RUNNING; waiting for it to accept commands"
            )
            p.actions.append(ProbeExec(p.instance))
        elif inst.status in (FAILURE, DELETING) or (inst.status in (STOPPED, STOPPING) and p.ephemeral):
            process_instance_loss(p)
            if p.s.run_outcome:
                _step_after_end(p)
        elif inst.status == STOPPED and not p.ephemeral:
            _start(p)
        return
    _provisioning_absent(p)


def _provisioning_absent(p: Pass) -> None:
    if p.s.instance.id is not None:
        # Seen before, missing now: suspected lost, like mid-run.
        if process_instance_loss(p) and p.s.run_outcome:
            _step_after_end(p)
        return
    if not p.ephemeral:
        n = p.process_absence()
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
    if p.s.instance.create_requested_at is None or p.since(p.settle_from()) > p.tun.create_settle:
        if p.process_identity():
            # The first create may have landed under the other identity: never a second one.
            p.not_accessible()
            return
        # Marker first (the status patch lands before the action runs), then create. A repeat after
        # the settle time reuses the same name, so brev answers "already exists" and we adopt.
        p.s.instance.create_sent(p.now, p.obs.identity, asked_before=p.asked_brev())
        p.actions.append(CreateInstance(_create_request(p)))
        p.events.append(EventNote("Normal", reasons.INSTANCE_CREATE_REQUESTED, f"brev create {p.instance}"))


def _readmitted(p: Pass) -> bool:
    """After a Kueue eviction (its instance confirmed deleted): has Kueue admitted the job again?
    Then the next attempt's create follows, its Provisioning deadline counted from now; until then
    the job waits with no deadline of ours (Kueue's queue holds it). None: no Kueue wired."""
    verdict = p.obs.admission
    if verdict is not None and not verdict.admitted:
        evicted = p.s.attempts[-2].ended_message or "evicted by Kueue"
        p.s.reason = reasons.KUEUE_EVICTED
        p.s.message = clip(
            f"{evicted}; instance deleted, nothing created until admitted again: {verdict.message}"
        )
        return False
    p.s.phase_times = {**p.s.phase_times, str(Phase.PROVISIONING): p.now}
    p.s.reason = reasons.RECOVERING
    message = verdict.message if verdict is not None else "admitted"
    p.s.message = clip(f"{message}; attempt {p.s.current.attempt}: creating instance {p.instance}")
    again = clip(f"admitted again after an eviction: {message}")
    p.events.append(EventNote("Normal", admission.ADMITTED, again))
    return True


def evict(p: Pass, why: str) -> None:
    """Kueue evicted the running job: stop the container within the grace, upload what it made
    (one attempt, as a retried exit code does: the next attempt's restore reads results and
    checkpoints back), then this attempt ends. Its instance is deleted and confirmed in
    Provisioning before the quota goes back to Kueue, and the next attempt waits for Kueue there."""
    message = f"evicted by Kueue: {why}"
    if p.obs.exit_code is not None and p.s.run.exit_code is None:
        p.s.run.exited(p.obs.exit_code, p.obs.exit_finished_at or p.now)
    stopped = p.s.run.exit_code is not None or p.obs.container_stopped
    if not stopped and p.s.run.started_at is not None:
        if p.s.run.ended_at is None:
            p.events.append(EventNote("Warning", reasons.KUEUE_EVICTED, clip(f"{message}; stopping the run")))
        p.s.run.ended(p.now)
        if p.since(p.s.run.ended_at) <= p.tun.grace:
            p.s.reason = reasons.KUEUE_EVICTED
            p.s.message = clip(f"{message}; stopping container {p.s.job_id}")
            p.actions.append(StopContainer(p.instance))
            left = p.tun.grace - p.since(p.s.run.ended_at)
            bound = max(min(1.0, p.tun.wait_timeout), min(p.tun.wait_timeout, left))
            p.actions.append(WaitForExit(p.instance, timeout_seconds=bound, start_if_missing=False))
            p.requeue = 0.0
            return
    if p.s.run.started_at is not None and p.obs.upload is None and not p.s.upload.attempts:
        p.s.message = clip(f"{message}; uploading results and checkpoints before the instance goes")
        p.actions.append(UploadResults(p.instance))
        p.requeue = 0.0
        return
    if p.obs.upload is not None:  # recorded on the attempt: what the next one restores from
        uri = p.spec.data.results_uri if p.spec is not None else None
        p.s.upload.uploaded(
            p.now, ResultsSummary(uri=uri, objects=p.obs.upload.objects, bytes=p.obs.upload.bytes)
        )
    recovery.end_attempt(p, reasons.KUEUE_EVICTED, message)


def _start(p: Pass) -> None:
    """A STOPPED reused instance: `brev start` it, again if it is still STOPPED after the settle."""
    if p.obs.start_requested:
        return
    if (
        p.s.instance.start_requested_at is None
        or p.since(p.s.instance.start_requested_at) > p.tun.create_settle
    ):
        p.s.instance.start_sent(p.now)
        p.actions.append(StartInstance(p.instance))
        p.events.append(EventNote("Normal", reasons.INSTANCE_START_REQUESTED, f"brev start {p.instance}"))


def _create_request(p: Pass) -> CreateRequest:
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


def waiting_exec(p: Pass) -> None:
    if process_instance_loss(p):
        if p.s.run_outcome:
            _step_after_end(p)
        return
    # A probe that succeeded counts even if it came back after the deadline (it was given the
    # time left, and waiting for its lane counts too): the result first, then the timeout.
    if p.obs.probe_ok:
        p.enter(Phase.PULLING, "instance accepts commands; logging in to the registry and pulling the image")
        p.actions.append(PrepareWorkload(p.instance))
        return
    if p.timed_out() and recovery.may_retry(p):
        # Never exec-ready: another instance may be.
        limit = phase_timeout(p.spec, p.phase)
        recovery.end_attempt(
            p, reasons.timeout(p.phase), f"instance {p.instance} did not accept commands within {limit}s"
        )
        return
    if _check_timeout(p):
        _step_after_end(p)
        return
    if p.obs.probe_ok is False:
        # Look again later, not in this pass: each probe is a call. Back off with the time already
        # waited, but never past the phase's deadline (the last probe comes before it).
        p.s.message = f"instance {p.instance} does not accept commands yet"
        p.requeue = p.tun.probe_interval(p.phase_age())
        left = _phase_left(p)
        if left is not None:
            p.requeue = min(p.requeue, max(p.tun.poll_interval, left))
        return
    p.actions.append(ProbeExec(p.instance))


def _phase_left(p: Pass) -> float | None:
    limit = phase_timeout(p.spec, p.phase)
    return None if limit is None else limit - p.phase_age()


_MIN_WAIT_S = 1.0  # a call's floor (see wait_bound)


def wait_bound(p: Pass) -> float:
    """The blocking wait's bound: up to wait_timeout (see _wait_grid), but no later than the next
    checkpoint sync, the Running deadline or the budget's end, so none is overrun by a whole wait
    (never under 1 s: a call's floor)."""
    bound = _wait_grid(p.tun.wait_timeout, p.s.job_id or "", p.now.timestamp())
    due = recovery.sync_due_in(p)
    if due is not None:
        bound = min(bound, due)
    for left in (_phase_left(p), recovery.budget_left(p), workflow.step_left(p)):
        if left is not None:
            bound = min(bound, left)
    return max(min(1.0, p.tun.wait_timeout), bound)


def _wait_grid(period: float, job_id: str, now: float) -> float:
    """Seconds from `now` to the job's next wait end, in (0, period]: its waits end at
    offset + k x period, the offset hashed from the job id (crc32, not hash(): it survives an
    operator restart) over the whole period.

    Jobs applied together, or resumed together after a restart, would otherwise re-arm in
    lockstep: a hundred ssh sessions and passes in the same second every period instead of a
    steady trickle. The first wait is shorter (one extra call per job); from then on one wait
    per period. Whole seconds, rounded up: the remote `timeout` takes whole seconds, and a wait
    cut short of its grid point would make the next one a few seconds long."""
    left = period - (now - _grid_offset(period, job_id)) % period
    if left < _MIN_WAIT_S:
        left += period
    return float(math.ceil(left))


def tail_due(p: Pass) -> bool:
    """Does this wait read the log tail while the container still runs? The first wait after a
    start does; then one wait in every log_tail_interval / wait_timeout of the job's grid
    (_wait_grid), so consecutive waits take turns without any state. An exit always brings it."""
    period, every = p.tun.wait_timeout, p.tun.log_tail_interval
    started = p.s.run.started_at
    if every <= period or started is None or p.since(started) < period:
        return True
    offset = _grid_offset(period, p.s.job_id or "")
    return math.floor((p.now.timestamp() - offset) / period) % round(every / period) == 0


def _grid_offset(period: float, job_id: str) -> float:
    """Where in the period the job's waits end (crc32, not hash(): it survives a restart)."""
    return zlib.crc32(job_id.encode()) / 2**32 * period


def pulling(p: Pass) -> None:
    if process_instance_loss(p):
        if p.s.run_outcome:
            _step_after_end(p)
        return
    workflow.plan(p)
    # Like the probe: a pull + staging that succeeded counts even past the deadline.
    if p.obs.prepared:
        if _needs_restore(p):
            if p.obs.restored is None:
                p.actions.append(_restore(p))
                return
            recovery.fold_restore(p)
        p.enter(Phase.RUNNING, f"starting container {p.s.job_id} on {p.instance}")
        p.actions.append(workflow.start_container(p, recovery.resume_path(p)))
        p.requeue = 0.0
        return
    if _check_timeout(p):
        _step_after_end(p)
        return
    p.actions.append(PrepareWorkload(p.instance))
    if _needs_restore(p):
        # Checkpoints (a workflow: earlier steps' outputs too) go back before the container starts.
        p.actions.append(_restore(p))


def _needs_restore(p: Pass) -> bool:
    return workflow.needs_restore(p) if workflow.on(p) else recovery.needs_restore(p)


def _restore(p: Pass) -> RestoreCheckpoints:
    return workflow.restore_action(p) if workflow.on(p) else RestoreCheckpoints(p.instance)


def _exited(p: Pass, code: int) -> None:
    """The container exited: judge the run by its own FinishedAt (operator downtime is not the
    job's fault); without it, by now."""
    p.s.run.exited(code, p.obs.exit_finished_at or p.now)
    _judge_exit(p)


def _judge_exit(p: Pass) -> None:
    code = p.s.run.exit_code
    exited = p.s.run.exited_at
    assert code is not None
    assert exited is not None
    limit = phase_timeout(p.spec, Phase.RUNNING)
    started = p.s.phase_times.get(str(Phase.RUNNING)) if workflow.on(p) else p.s.run.started_at
    budget = recovery.over_budget(p, at=exited)  # billed up to the exit, however late it is seen
    if workflow.timed_out_at_exit(p):
        pass  # ended the run: StepTimedOut
    elif limit is not None and started is not None and (exited - started).total_seconds() > limit:
        p.end_run(
            Outcome.FAILED,
            reasons.timeout(Phase.RUNNING),
            f"Running did not finish within {limit}s (spec.timeouts); exit code {code}",
        )
    elif budget is not None:
        p.end_run(Outcome.FAILED, reasons.BUDGET_EXCEEDED, f"{budget}; exit code {code}")
    elif recovery.retries_exit_code(p, code):
        _upload_then_retry(p)
        return
    elif workflow.on(p):
        if code != 0 and recovery.may_retry(p) and not _answers_after_exit(p):
            return  # as below: a failure, or the instance going away?
        if process_instance_loss(p) or workflow.after_exit(p, code):
            return  # lost before its results were verified, uploading them, or the next step runs
    elif code == 0:
        # Not Succeeded yet: that takes the results verified in S3 (teardown.uploading).
        p.end_run(
            Outcome.SUCCEEDED,
            reasons.RUN_COMPLETED,
            "training exited 0; uploading results (Succeeded once they are verified in S3)",
        )
    elif recovery.may_retry(p) and not _answers_after_exit(p):
        return  # a failure, or the instance going away? asked, see _answers_after_exit
    else:
        p.end_run(Outcome.FAILED, reasons.TRAINING_FAILED, f"training container exited with code {code}")
    results = p.spec.data.results_uri if p.spec is not None else "(spec unknown)"
    p.enter_then_step(Phase.UPLOADING, f"uploading results and logs to {results}")


def _answers_after_exit(p: Pass) -> bool:
    """A non-zero exit while another attempt may follow: a VM that is going away stops docker
    first, so `docker wait` can report 137 just before the instance vanishes (and ssh may still
    answer for a moment). Judge the exit a training failure only once the instance is still
    listed `absent_listings` poll intervals after the exit and answers a probe then (or the
    Running timeout passed); if it is lost instead, this attempt ends and the next one resumes.
    Listed but silent for `exit_answer_timeout` past that: the run ends InstanceUnresponsive."""
    if p.timed_out():
        return True
    if process_instance_loss(p):
        return False  # a loss being confirmed, or this attempt ended
    exited = p.s.run.exited_at
    settle = p.tun.absent_listings * p.tun.poll_interval
    waited = p.since(exited)
    p.s.message = f"container exited with code {p.s.run.exit_code}; checking that instance {p.instance} stays"
    if not p.obs.instance_known or p.obs.instance is None:
        return False  # absence is being counted (listings only: a probe proves nothing here)
    if waited < settle:
        p.requeue = min(p.tun.poll_interval, settle - waited)
        return False
    if p.obs.probe_ok:
        return True
    _probe_until_bound(p, waited, settle + p.tun.exit_answer_timeout)
    return False


def _probe_until_bound(p: Pass, waited: float, bound: float) -> None:
    """One probe per pass, bounded by what is left of the wait: with the first-exec limit
    (900 s) one hung ssh held the decision far past the bound (simulation seeds 14331, 15595,
    16327). Past the bound, a failed probe ends the run unreached."""
    if p.obs.probe_ok is False:
        if waited >= bound:
            _unanswered_after_exit(p, waited)
        else:
            p.requeue = min(p.tun.poll_interval, bound - waited)
        return
    floor = min(p.tun.answer_probe_min, p.tun.exit_answer_timeout)  # scaled runs scale it too
    p.actions.append(ProbeExec(p.instance, limit=max(floor, bound - waited)))
    p.requeue = 0.0


def _unanswered_after_exit(p: Pass, waited: float) -> None:
    """The instance stays listed but has not answered since the exit (the probe in this pass
    failed too): waiting longer only bills. The run ends; the upload and the cleanup, which need
    the instance to answer, are skipped and said so; teardown deletes it (issue 25, scenario 5)."""
    deletes = p.deletes_instance()
    note = (
        f"training container exited with code {p.s.run.exit_code}; instance {p.instance} is listed but "
        f"did not answer for {int(waited)}s after the exit (bound: {int(p.tun.exit_answer_timeout)}s "
        "past the settle listings): results and logs not uploaded"
        + ("; no cleanup, deleting it" if deletes else "")
    )
    p.end_run(Outcome.FAILED, reasons.INSTANCE_UNRESPONSIVE, note)
    p.s.teardown.waiting(note)
    if deletes:
        # The job's files and secrets go with the instance; a cleanup would hang as the probes did.
        p.s.run.cleaned(p.now)
    p.enter_then_step(Phase.UPLOADING, note)  # nothing to upload from it: Deleted follows


def _upload_then_retry(p: Pass) -> None:
    """A listed exit code on a live instance: upload its results and logs (one attempt, as at the
    end of a run: nothing the attempt made is lost, and the restore reads them back), then the
    attempt ends and its instance is deleted."""
    if p.obs.upload is None and not p.s.upload.attempts:
        p.actions.append(UploadResults(p.instance, step=workflow.container_step(p)))
        p.requeue = 0.0
        return
    recovery.end_attempt(
        p,
        reasons.EXIT_CODE_RETRIED,
        f"training container exited with code {p.s.run.exit_code} (spec.recovery.retryOnExitCodes)",
    )


def running(p: Pass) -> None:
    recovery.fold_sync(p)
    if p.obs.log_tail:
        p.s.run.tail(log_lines(p.obs.log_tail))
    fold_progress(p)
    if p.obs.exit_code is not None:
        _exited(p, p.obs.exit_code)
        return
    if p.s.run.exit_code is not None and not p.s.run_outcome and p.s.run.exited_at is not None:
        _judge_exit(p)  # exited: uploading before the next attempt, or confirming the instance
        return
    if p.spec is None:
        # Deleted with a spec we cannot read: nothing to upload to; cleanup removes the container.
        p.enter_then_step(Phase.UPLOADING, "spec does not parse; tearing down")
        return
    if not p.s.run_outcome and process_instance_loss(p) and not p.s.run_outcome:
        return  # confirming a suspected loss with brev delete first, or this attempt ended
    budget = None if p.s.run_outcome else recovery.over_budget(p)
    late = workflow.over_time(p)
    if not p.s.run_outcome and (p.timed_out() or budget is not None or late):
        if p.obs.did(WaitForExit):
            # Looked in this pass and it still runs: now it really is over time (or budget).
            step = workflow.current(p)
            if not _check_timeout(p) and budget is not None:
                p.end_run(Outcome.FAILED, reasons.BUDGET_EXCEEDED, budget)
            elif late and step is not None and not p.s.run_outcome:
                workflow.end_timed_out(p, step, None)
        else:
            # After downtime the container may have exited long ago: look before judging.
            # A short look (docker wait returns at once for an exited container).
            p.actions.append(
                WaitForExit(
                    p.instance,
                    timeout_seconds=min(1.0, p.tun.wait_timeout),
                    start_if_missing=False,
                    step=workflow.container_step(p),
                )
            )
            p.requeue = 0.0
            return
    if p.s.run_outcome:
        stopping(p)
        return
    # Starting a detached checkpoint sync is one short call; the copy never holds up the wait.
    recovery.schedule_sync(p)
    # A bounded blocking wait: returns as soon as the container exits, costs one brev call per
    # wait_timeout while it runs.
    p.actions.append(
        WaitForExit(
            p.instance,
            timeout_seconds=wait_bound(p),
            resume_path=recovery.resume_path(p),
            tail=tail_due(p),
            progress_of=workflow.action(p),
            progress=progress_due(p),
            step=workflow.container_step(p),
        )
    )
    p.requeue = 0.0


def _step_after_end(p: Pass) -> None:
    """The run ended before a container existed: go straight to teardown."""
    if p.phase != Phase.PENDING and PHASES[p.phase].pre_run:
        p.enter_then_step(Phase.DELETED, f"tearing down after {p.s.reason}")
    elif p.phase == Phase.RUNNING:
        running(p)


def stopping(p: Pass) -> None:
    """Canceled, timed out or lost while running: stop the container, bounded by the grace."""
    if p.s.reason in reasons.UNREACHABLE:
        p.enter_then_step(Phase.UPLOADING, "instance lost; nothing to upload")
        return
    if p.s.reason == reasons.INSTANCE_NOT_LISTED:
        # No stop through an exec that may not answer: straight to the one upload attempt.
        p.enter_then_step(Phase.UPLOADING, "instance not listed; uploading what can be reached")
        return
    p.s.run.ended(p.now)
    if p.since(p.s.run.ended_at) > p.tun.grace:
        note = (
            f"container {p.s.job_id} did not stop within {int(p.tun.grace)}s; uploading what is there, "
            "then deleting"
        )
        p.s.teardown.waiting(note)
        p.events.append(EventNote("Warning", reasons.STOP_GRACE_EXPIRED, note))
        p.enter_then_step(Phase.UPLOADING, note)
        return
    step = workflow.container_step(p)
    if not p.obs.container_stopped:
        p.actions.append(StopContainer(p.instance, step=step))
    # Bounded by the grace left, so the grace is never overrun by a whole wait.
    left = p.tun.grace - p.since(p.s.run.ended_at)
    bound = max(min(1.0, p.tun.wait_timeout), min(p.tun.wait_timeout, left))
    p.actions.append(WaitForExit(p.instance, timeout_seconds=bound, start_if_missing=False, step=step))
    p.requeue = 0.0


def process_silence(p: Pass) -> bool:
    """Running, no exit seen, and a wait failed because the instance did not answer: since when
    it has been silent (status.unansweredSince). Past `exit_answer_timeout` while it is still
    listed RUNNING, it is treated as unresponsive: this attempt ends (another may follow on a new
    instance) or the run ends InstanceUnresponsive; nothing on it is reached and teardown deletes
    it. Without this bound a listed instance that never answered again billed until the Running
    timeout (24 h; found by the simulation, seed 735). True when the run or attempt ended."""
    bound = p.tun.exit_answer_timeout
    # Silence is shown by failed waits spread over the bound, not by two at its ends: across a
    # gap nobody asked (the operator was down, the Lease elsewhere), and it may have answered.
    silent = p.s.run.unanswered(p.now, bound)
    inst = p.obs.instance
    if silent < bound or not p.obs.instance_known or inst is None or inst.status != RUNNING:
        return False  # absence and loss are judged by the listings (process_instance_loss)
    note = (
        f"instance {p.instance} is listed RUNNING but has not answered for {int(silent)}s while the "
        f"training ran (bound: {int(bound)}s): its container cannot be reached"
    )
    if recovery.may_retry(p):
        recovery.end_attempt(p, reasons.INSTANCE_UNRESPONSIVE, note)
        return True
    p.end_run(Outcome.FAILED, reasons.INSTANCE_UNRESPONSIVE, note)
    p.s.teardown.waiting(note)
    if p.deletes_instance():
        # The job's files and secrets go with the instance; a cleanup would hang as the waits did.
        p.s.run.cleaned(p.now)
    return True
