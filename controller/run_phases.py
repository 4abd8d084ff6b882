"""The steps of the phases before the run ends (PURE): Pending, Provisioning, WaitingExec,
Pulling and Running. Once the run has ended, controller/teardown.py takes over."""

from __future__ import annotations

from controller import naming, reasons
from controller.absence import instance_gone_or_failed
from controller.brev.client import DELETING, FAILURE, RUNNING, STOPPED, CreateRequest
from controller.decision_pass import Pass
from controller.models import Outcome, Phase
from controller.status_text import log_lines
from controller.steps import (
    CreateInstance,
    EventNote,
    PrepareWorkload,
    ProbeExec,
    StartContainer,
    StartInstance,
    WaitForExit,
)
from controller.teardown import stopping, teardown, uploading
from controller.transitions import phase_timeout


def pending(p: Pass, namespace: str, name: str, uid: str) -> None:
    if p.s.outcome:
        # Failed validation or canceled before anything existed: nothing to tear down.
        p.enter(Phase.DELETED, f"finished before provisioning: {p.s.reason}")
        teardown(p)
        return
    if not p.obs.has_finalizer:
        # Nothing may exist on Brev that a delete without our finalizer could orphan.
        p.s.message = "waiting for the finalizer before creating anything"
        p.requeue = min(p.tun.poll_interval, 1.0)
        return
    # Nothing exists on Brev yet: names follow the current spec (an edit may switch reuse and
    # ephemeral while Pending).
    assign_names(p, namespace, name, uid)
    reuse = p.spec.instance.reuse if p.spec is not None else None
    p.enter(Phase.PROVISIONING, f"{'creating' if reuse is None else 'reusing'} instance {p.instance}")
    p.requeue = 0.0


def assign_names(p: Pass, namespace: str, name: str, uid: str) -> None:
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


def provisioning(p: Pass) -> None:
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
            instance_gone_or_failed(p)
            _step_after_end(p)
        elif inst.status == STOPPED and not p.ephemeral:
            _start(p)
        return
    _provisioning_absent(p)


def _provisioning_absent(p: Pass) -> None:
    if p.s.instance_id is not None:
        # Seen before, missing now: suspected lost, like mid-run.
        if instance_gone_or_failed(p) and p.s.outcome:
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


def _start(p: Pass) -> None:
    """A STOPPED reused instance: `brev start` it, again if it is still STOPPED after the settle."""
    if p.obs.start_requested:
        return
    if p.s.start_requested_at is None or p.since(p.s.start_requested_at) > p.tun.create_settle:
        p.s.start_requested_at = p.now
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
    if instance_gone_or_failed(p):
        if p.s.outcome:
            _step_after_end(p)
        return
    # A probe that succeeded counts even if it came back after the deadline (it was given the
    # time left, and waiting for its lane counts too): the result first, then the timeout.
    if p.obs.probe_ok:
        p.enter(Phase.PULLING, "instance accepts commands; logging in to the registry and pulling the image")
        p.actions.append(PrepareWorkload(p.instance))
        return
    if _check_timeout(p):
        _step_after_end(p)
        return
    if p.obs.probe_ok is False:
        # Look again after poll_interval, not in this pass: each probe is a brev call.
        p.s.message = f"instance {p.instance} does not accept commands yet"
        return
    p.actions.append(ProbeExec(p.instance))


def pulling(p: Pass) -> None:
    if instance_gone_or_failed(p):
        if p.s.outcome:
            _step_after_end(p)
        return
    # Like the probe: a pull + staging that succeeded counts even past the deadline.
    if p.obs.prepared:
        p.enter(Phase.RUNNING, f"starting container {p.s.job_id} on {p.instance}")
        p.s.container_started_at = p.now
        p.actions.append(StartContainer(p.instance))
        p.requeue = 0.0
        return
    if _check_timeout(p):
        _step_after_end(p)
        return
    p.actions.append(PrepareWorkload(p.instance))


def _exited(p: Pass, code: int) -> None:
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
    uploading(p)


def running(p: Pass) -> None:
    if p.obs.log_tail:
        p.s.last_log_lines = log_lines(p.obs.log_tail)
    if p.obs.exit_code is not None:
        _exited(p, p.obs.exit_code)
        return
    if p.spec is None:
        # Deleted with a spec we cannot read: nothing to upload to; cleanup removes the container.
        p.enter(Phase.UPLOADING, "spec does not parse; tearing down")
        uploading(p)
        return
    if not p.s.outcome and instance_gone_or_failed(p) and not p.s.outcome:
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
        stopping(p)
        return
    # A bounded blocking wait: returns as soon as the container exits, costs one brev call per
    # wait_timeout while it runs.
    p.actions.append(WaitForExit(p.instance, timeout_seconds=p.tun.wait_timeout))
    p.requeue = 0.0


def _step_after_end(p: Pass) -> None:
    """The run ended before a container existed: go straight to teardown."""
    if p.phase in (Phase.PROVISIONING, Phase.WAITING_EXEC, Phase.PULLING):
        p.enter(Phase.DELETED, f"tearing down after {p.s.reason}")
        teardown(p)
    elif p.phase == Phase.RUNNING:
        running(p)
