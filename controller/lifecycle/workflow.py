"""Workflows (spec.steps): TAO actions chained on ONE instance (PURE).

A workflow is one run of the phase machine: one instance, one Pulling (every distinct image,
one registry login), one Running in which the steps' containers run one after another. The
step cursor lives here; the phases (run_phases.py) call in at four points:

- Pulling, before the first container: `plan` (the step records, spec.startAtStep's reused
  ones), and when earlier steps' outputs are not on this instance (a new attempt after a lost
  instance, or spec.startAtStep) `needs_restore` / `restore_action` put them back from S3.
- `start_container`: the container of the step under the cursor (records its start).
- Running, at a step's exit (`after_exit`): the step's results go to <resultsUri>/<step>/ and
  are verified BEFORE anything else happens on the instance; then the next step that may run
  (`when: OnSuccess` only if no earlier step failed, `Always` in any case) starts in the same
  pass, or the run ends (Failed names the step: status.failedStep, failureClass Program).
- `settle` (every pass, at the end): a step whose attempt ended (recovery.end_attempt retired
  its container) goes back to Pending; once the run ended, the step that was running is Failed
  and the ones that never ran are Skipped.

A step is done once its results are verified: an instance lost between its exit and that runs
it again on the next attempt; a step whose results are verified never runs again, on any
attempt.

A spec.task job (the single-action form) is a one-step workflow to the spec
(`TaoBrevJobSpec.workflow()`), but keeps its single-job layout and status: `on(p)` is False.
"""

from __future__ import annotations

from controller.api import reasons
from controller.api.models import StepSpec, StepWhen, phase_timeout
from controller.api.status import STEP_DONE, ResultsSummary, StepPhase, StepRecord
from controller.api.vocabulary import Outcome
from controller.lifecycle.decision_pass import Pass
from controller.lifecycle.phases import Phase
from controller.lifecycle.status_text import clip
from controller.lifecycle.steps import EventNote, RestoreCheckpoints, StartContainer, UploadResults


def on(p: Pass) -> bool:
    """The job is a workflow (spec.steps), and its spec parses."""
    return p.spec is not None and p.spec.is_workflow


def _steps(p: Pass) -> list[StepSpec]:
    return p.spec.workflow() if p.spec is not None else []


def plan(p: Pass) -> None:
    """The step records, once; steps before spec.startAtStep are Reused (never run)."""
    if not on(p) or p.s.steps:
        return
    assert p.spec is not None
    steps = _steps(p)
    p.s.plan_steps([(s.name, s.action) for s in steps])
    start = p.spec.start_at_step
    if start is None:
        return
    results = p.spec.data.results_uri.rstrip("/")
    for step in steps:
        if step.name == start:
            break
        p.s.step_record(step.name).reuse(
            f"spec.startAtStep={start}: results read from {results}/{step.name}/"
        )
        p.events.append(
            EventNote(
                "Normal",
                reasons.STEP_REUSED,
                f"step {step.name}: using its results in {results}/{step.name}/",
            )
        )


def cursor(p: Pass) -> tuple[int, StepSpec] | None:
    """The next step to run (index, spec): the first whose record is not done."""
    if not on(p):
        return None
    for i, step in enumerate(_steps(p)):
        rec = _record(p, step.name)
        if rec is None or rec.phase not in STEP_DONE:
            return i, step
    return None


def _record(p: Pass, name: str) -> StepRecord | None:
    try:
        return p.s.step_record(name)
    except KeyError:
        return None


def current(p: Pass) -> StepSpec | None:
    """The step whose container is the attempt's current one (None: no step container)."""
    name = p.s.run.step
    return next((s for s in _steps(p) if s.name == name), None) if name else None


def container_step(p: Pass) -> str | None:
    """The step name the current container's actions carry (None: the single job's)."""
    return p.s.run.step if on(p) else None


def action(p: Pass) -> str | None:
    """The TAO action of what runs now: the current step's, or spec.task's."""
    step = current(p)
    if step is not None:
        return step.action
    if p.spec is None:
        return None
    first = cursor(p)
    return first[1].action if first is not None else p.spec.workflow()[0].action


def _restorable(p: Pass, upto: int) -> tuple[str, ...]:
    """Earlier steps whose results are in S3 (verified, or reused from an earlier run)."""
    names = []
    for step in _steps(p)[:upto]:
        rec = _record(p, step.name)
        if rec is not None and (rec.results_verified or rec.phase == StepPhase.REUSED):
            names.append(step.name)
    return tuple(names)


def needs_restore(p: Pass) -> bool:
    """Earlier steps' outputs are not on this attempt's instance yet: they ran on a lost one, or
    before spec.startAtStep (restored once per attempt, before the first container)."""
    at = cursor(p)
    if at is None or p.s.current.restored_at is not None:
        return False
    return bool(_restorable(p, at[0])) or p.s.current.attempt >= 2


def restore_action(p: Pass) -> RestoreCheckpoints:
    at = cursor(p)
    assert at is not None
    return RestoreCheckpoints(p.instance, step=at[1].name, outputs=_restorable(p, at[0]))


def start_container(p: Pass, resume_path: str | None) -> StartContainer:
    """Start the container of the step under the cursor (the single job's when not a workflow)."""
    at = cursor(p)
    if at is None:
        p.s.run.started(p.now)
        return StartContainer(p.instance, resume_path=resume_path)
    i, step = at
    total = len(_steps(p))
    p.s.run.started(p.now, step=step.name)
    p.s.step_record(step.name).start(p.now, p.s.current.attempt)
    p.s.step = f"{i + 1}/{total} {step.name}"
    p.events.append(
        EventNote(
            "Normal",
            reasons.STEP_STARTED,
            f"step {i + 1}/{total} {step.name}: {step.network_arch} {step.action}",
        )
    )
    resume = resume_path if step.action in ("train", "retrain") else None
    return StartContainer(p.instance, resume_path=resume, step=step.name)


def fold_upload(p: Pass) -> None:
    """A step's results verified in S3 (this pass's upload carried its name)."""
    got = p.obs.upload
    if got is None or got.step is None or not on(p):
        return
    rec = _record(p, got.step)
    if rec is None or rec.results_verified:
        return
    uri = f"{p.spec.data.results_uri.rstrip('/')}/{got.step}/" if p.spec is not None else None
    rec.verified(ResultsSummary(uri=uri, objects=got.objects, bytes=got.bytes))


def step_left(p: Pass) -> float | None:
    """Seconds left of the current step's timeoutSeconds (None: no step timeout)."""
    step = current(p)
    if step is None or step.timeout_seconds is None or p.s.run.started_at is None:
        return None
    return step.timeout_seconds - p.since(p.s.run.started_at)


def over_time(p: Pass) -> bool:
    left = step_left(p)
    return left is not None and left < 0


def timed_out_at_exit(p: Pass) -> bool:
    """The step ran past its timeoutSeconds, judged by its container's own times: the run ends."""
    step = current(p)
    started, exited = p.s.run.started_at, p.s.run.exited_at
    if step is None or step.timeout_seconds is None or started is None or exited is None:
        return False
    if (exited - started).total_seconds() <= step.timeout_seconds:
        return False
    end_timed_out(p, step, p.s.run.exit_code)
    return True


def end_timed_out(p: Pass, step: StepSpec, code: int | None) -> None:
    exit_text = f"; exit code {code}" if code is not None else ""
    p.end_run(
        Outcome.FAILED,
        reasons.STEP_TIMED_OUT,
        f"step {step.name} did not finish within {step.timeout_seconds}s "
        f"(spec.steps[].timeoutSeconds){exit_text}",
    )


def after_exit(p: Pass, code: int) -> bool:
    """The current step's container exited with `code` (judged: no timeout, budget or retry).
    True while the workflow goes on (its results uploading, or the next step started); False when
    the run ended with this step (the caller goes on to Uploading)."""
    step = current(p)
    assert step is not None
    rec = p.s.step_record(step.name)
    exited = p.s.run.exited_at or p.now
    rec.exited(code, exited)
    if not rec.results_verified:
        tried = p.s.upload.attempts or 0
        limit = phase_timeout(p.spec, Phase.UPLOADING) or 0
        if tried and p.since(exited) > limit:
            # As teardown bounds its upload: at least one attempt, then uploadingSeconds from the
            # exit (a lost instance is found by the listings well before, and recovery follows).
            note = (
                f"step {step.name}: its results could not be uploaded within {limit}s of its exit "
                f"(spec.timeouts.uploadingSeconds; {tried} attempts)"
            )
            rec.end(p.now, StepPhase.FAILED, note, p.s.progress)
            p.end_run(Outcome.FAILED, reasons.STEP_UPLOAD_FAILED, note)
            return False
        p.s.message = clip(f"step {step.name} exited {code}; uploading its results")
        p.actions.append(UploadResults(p.instance, step=step.name))
        p.requeue = 0.0
        return True
    results = rec.results.uri if rec.results is not None else step.name
    if code == 0:
        rec.end(p.now, StepPhase.SUCCEEDED, f"exited 0; results in {results}", p.s.progress)
        p.events.append(
            EventNote("Normal", reasons.STEP_SUCCEEDED, f"step {step.name} exited 0; results in {results}")
        )
    else:
        rec.end(p.now, StepPhase.FAILED, f"exited {code}; results in {results}", p.s.progress)
        p.events.append(
            EventNote("Warning", reasons.STEP_FAILED, f"step {step.name} exited {code}; results in {results}")
        )
    if _skip_to_next(p):
        p.s.current.next_step()
        p.s.progress.clear()
        p.actions.append(start_container(p, None))
        p.requeue = 0.0
        return True
    failed = [r for r in p.s.steps if r.phase == StepPhase.FAILED]
    if failed:
        first = failed[0]
        p.end_run(
            Outcome.FAILED,
            reasons.STEP_FAILED,
            f"step {first.name} failed: container exited with code {first.exit_code}",
        )
    else:
        done = sum(1 for r in p.s.steps if r.phase == StepPhase.SUCCEEDED)
        p.end_run(
            Outcome.SUCCEEDED,
            reasons.RUN_COMPLETED,
            f"{done} steps exited 0, results verified under {p.spec.data.results_uri if p.spec else ''}; "
            "uploading logs (Succeeded once verified in S3)",
        )
    return False


def _skip_to_next(p: Pass) -> bool:
    """Skip the steps that may not run (`when: OnSuccess` after a failure); True when one that
    may run is now under the cursor."""
    while (at := cursor(p)) is not None:
        _, step = at
        failed = any(r.phase == StepPhase.FAILED for r in p.s.steps)
        if step.when == StepWhen.ALWAYS or not failed:
            return True
        first = next(r.name for r in p.s.steps if r.phase == StepPhase.FAILED)
        note = f"not run: step {first} failed (when: OnSuccess)"
        p.s.step_record(step.name).end(p.now, StepPhase.SKIPPED, note)
        p.events.append(EventNote("Normal", reasons.STEP_SKIPPED, f"step {step.name} {note}"))
    return False


def _interrupt(p: Pass) -> None:
    """The attempt ended (its instance lost or unresponsive; recovery.end_attempt retired its
    run) while a step had not finished: it runs again on the next attempt (steps with verified
    results do not). Told by a Running step that is not the current container's."""
    why = p.s.current.ended_reason or "attempt ended"
    for rec in p.s.steps:
        if rec.phase == StepPhase.RUNNING and rec.name != p.s.run.step:
            rec.interrupt(
                clip(f"attempt {p.s.current.attempt} ended ({why}); runs again on the next attempt")
            )
            p.events.append(
                EventNote("Warning", reasons.STEP_INTERRUPTED, f"step {rec.name} interrupted: {why}")
            )


def settle(p: Pass) -> None:
    """Once the run ended: the step that was running failed with it (its results are uploaded by
    teardown when they can be), the ones that never ran are Skipped; failedStep names the step."""
    if not on(p):
        return
    if not p.s.run_outcome:
        _interrupt(p)
        return
    for rec in p.s.steps:
        if rec.phase == StepPhase.RUNNING:
            rec.end(p.now, StepPhase.FAILED, clip(f"the run ended while it ran: {p.s.reason}"), p.s.progress)
        elif rec.phase == StepPhase.PENDING:
            rec.end(p.now, StepPhase.SKIPPED, clip(f"not run: the run ended ({p.s.reason})"))
    if p.s.run_outcome == Outcome.FAILED and p.s.failed_step is None:
        failed = next((r.name for r in p.s.steps if r.phase == StepPhase.FAILED), None)
        p.s.failed_step = failed


def upload_step(p: Pass) -> str | None:
    """What teardown's upload carries: the step whose container ran last, unless its results are
    verified already (then only the job's logs/ go up: nothing is copied twice)."""
    name = container_step(p)
    if name is None:
        return None
    rec = _record(p, name)
    return None if rec is not None and rec.results_verified else name
