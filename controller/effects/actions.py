"""Performs a Decision's actions against Brev and folds their results into the Observation.

The only module of the reconciler that causes side effects on Brev. Each action is idempotent
(re-running it after a crash is safe); the first failing action stops the list and is reported
as an `ActionFailure` for decide() to judge (transient: retry with backoff; permanent: fail).
Every remote step runs in its lane (`lane_of`, controller/effects/lanes.py), so teardown, create and
start calls never queue behind probes or transfers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property

from controller.api import reasons
from controller.api.container_paths import SPEC_MOUNT_PATH, container_path, resume_arg
from controller.api.errors import (
    InstanceNotFound,
    NotLeading,
    PermanentError,
    TaoBrevError,
    TransientError,
)
from controller.api.models import StepSpec, TaoBrevJobSpec
from controller.brev.client import BrevClient
from controller.brev.envfile import JobSecrets
from controller.brev.logtail import TAIL_LINES
from controller.brev.workload import ContainerNotFound, ExitInfo, ImageNotPresent, Workload, WorkloadSettings
from controller.effects.directory import InstanceDirectory
from controller.effects.exit_waits import ExitWaits
from controller.effects.lanes import BUDGETED, Lane, Lanes
from controller.lifecycle.steps import (
    Action,
    ActionFailure,
    CheckpointRestore,
    CheckpointSync,
    CleanupWorkload,
    CreateInstance,
    DeleteInstance,
    Observation,
    PrepareWorkload,
    ProbeExec,
    RestoreCheckpoints,
    StartContainer,
    StartInstance,
    StopContainer,
    SyncCheckpoints,
    UploadResults,
    UploadSummary,
    WaitForExit,
)

LOG_TAIL_LINES = TAIL_LINES
# The longest a `brev create`/`brev start` waits for a create-lane slot, counted from the
# observation its decision was made on (= status.createRequestedAt). A create not started by then
# never starts (LaneBusy; the next pass re-sends it by name), so a create is in flight at most
# this plus the CLI's create timeout after its marker: Tunables.create_in_flight_max (issue 25, 1).
CREATE_LANE_WAIT = 60.0
# Reported as the exit code when a container we were stopping does not exist (never started).
CONTAINER_MISSING_EXIT = -1


@dataclass(frozen=True)
class JobContext:
    namespace: str
    name: str
    job_id: str
    # The parsed spec, or how to parse it: a running job's pass lives in its exit wait, which
    # reads no spec, and 1,000 waiting jobs holding ~10 KiB of parsed spec each is 10 MiB.
    spec_source: TaoBrevJobSpec | Callable[[], TaoBrevJobSpec] = field(repr=False)
    secrets: JobSecrets | None = field(repr=False)

    @cached_property
    def spec(self) -> TaoBrevJobSpec:
        """Parsed when an action first reads it, then kept for the rest of the pass's actions."""
        source = self.spec_source
        return source if isinstance(source, TaoBrevJobSpec) else source()


def _step_of(job: JobContext, step: str | None) -> StepSpec:
    """The spec of a workflow step by name (None: the single-action job's one step)."""
    steps = job.spec.workflow()
    if step is None:
        return steps[0]
    for candidate in steps:
        if candidate.name == step:
            return candidate
    raise PermanentError(f"spec.steps has no step {step!r} any more", reason=reasons.INVALID_SPEC)


def _step_names(job: JobContext) -> tuple[str, ...]:
    """A workflow's step names (their containers are removed at cleanup); () for a single job or
    a spec that does not parse (its steps are unknown; the job's own container still goes)."""
    try:
        spec = job.spec
    except TaoBrevError:
        return ()
    return tuple(s.name for s in spec.workflow()) if spec.is_workflow else ()


def _secrets(job: JobContext, action: type[Action]) -> JobSecrets:
    if job.secrets is None:
        # The reconciler loads them in every phase whose actions deliver one, so this is an
        # operator bug; transient so that it backs off and the phase timeout still ends the job.
        raise TransientError(
            f"{action.__name__} needs the job's secrets, which were not loaded for this pass",
            reason=reasons.SECRETS_NOT_LOADED,
        )
    return job.secrets


# The lane each action kind waits in (controller/effects/lanes.py). Every kind must be here (a unit test
# checks it): a new action — e.g. issue 12's checkpoint sync and restore, Lane.CHECKPOINT — adds
# its row. Teardown, create and start kinds never share a lane with probes or transfers.
ACTION_LANES: Mapping[type[Action], Lane] = {
    CreateInstance: Lane.CREATE,
    StartInstance: Lane.CREATE,
    ProbeExec: Lane.PROBE,
    PrepareWorkload: Lane.PULL,
    StartContainer: Lane.START,
    WaitForExit: Lane.WAIT,
    StopContainer: Lane.STOP,
    CleanupWorkload: Lane.STOP,
    UploadResults: Lane.UPLOAD,
    DeleteInstance: Lane.DELETE,
    SyncCheckpoints: Lane.CHECKPOINT,
    RestoreCheckpoints: Lane.CHECKPOINT,
}


def lane_of(action: Action) -> Lane:
    lane = ACTION_LANES.get(type(action))
    if lane is None:
        raise AssertionError(f"no lane for action {type(action).__name__}: add it to ACTION_LANES")
    return lane


def _always() -> bool:
    return True


class ActionRunner:
    def __init__(
        self,
        brev: BrevClient,
        directory: InstanceDirectory,
        *,
        lanes: Lanes | None = None,
        exec_timeout: float = 900.0,
        pull_timeout: float = 3600.0,
        stop_grace_s: int = 30,
    ) -> None:
        self._brev = brev
        self._directory = directory
        self._wl_settings = WorkloadSettings(
            probe_timeout=exec_timeout, pull_timeout=pull_timeout, stop_grace_s=stop_grace_s
        )
        self._lanes = lanes if lanes is not None else Lanes.defaults()
        # Whether this replica's term still holds, asked right before a change is sent to Brev
        # (set to the elector's is_leading once it exists). A pass learns that its term ended only
        # when the election loop runs, which a starved event loop runs late: meanwhile the pass
        # (or its shielded create) would send a delete or create with the Lease expired.
        self.fence: Callable[[], bool] = _always
        # Creates that started, by job: a pass cancelled mid-create leaves its call running (it may
        # already have reached Brev), and the job's next pass awaits it before acting (below).
        self._creating: dict[tuple[str, str], asyncio.Task[Observation]] = {}
        # Exit waits of cancelled passes, still running for the job's next pass to join.
        self.exit_waits = ExitWaits()

    def _workload(self, instance: str, job: JobContext, step: str | None = None) -> Workload:
        return Workload(self._brev, instance, job.job_id, settings=self._wl_settings, step=step)

    def _fenced(self, verb: str, instance: str) -> None:
        if not self.fence():
            raise NotLeading(f"brev {verb} {instance} not sent: this replica's leader term has ended")

    async def run(
        self,
        actions: Sequence[Action],
        job: JobContext,
        obs: Observation,
        *,
        deadline: datetime | None = None,
    ) -> Observation:
        """Perform `actions` in order. `deadline` (aware), when given, is the end of the phase
        budget: the actions of budgeted lanes wait for a slot and run their remote calls only
        within the time left; the others (stop, cleanup, delete, create) keep their own bounds."""
        earlier = self._creating.get((job.namespace, job.name))
        if earlier is not None:
            # A create this process started for the job is still in flight (its pass was
            # cancelled): no delete or other step may conclude anything before it came back.
            await asyncio.wait({earlier})
        for action in actions:
            try:
                obs = await self._one(action, job, obs, deadline)
            except TaoBrevError as exc:
                failure = ActionFailure(
                    action=type(action).__name__,
                    reason=exc.reason,
                    message=str(exc),
                    permanent=isinstance(exc, PermanentError),
                )
                return obs.with_(failure=failure)
        return obs

    async def _one(
        self, action: Action, job: JobContext, obs: Observation, deadline: datetime | None
    ) -> Observation:
        lane = lane_of(action)
        budget = deadline if lane in BUDGETED else None
        # These two may need a second lane (a re-pull, a restart): they take their slots
        # themselves, one at a time, so no call ever holds a slot while queueing for another.
        if isinstance(action, WaitForExit):
            return await self._wait(action, job, obs, budget)
        if isinstance(action, StartContainer):
            wl = self._workload(action.instance, job, action.step)
            await self._start(wl, job, budget, action.resume_path)
            # A new container (a workflow's next step): what a wait earlier in this pass saw of the
            # previous one is not its exit, log or progress.
            return obs.with_(
                container_started=True, exit_code=None, exit_finished_at=None, log_tail=(), progress=None
            )
        if lane == Lane.CREATE:
            return await self._create(action, job, obs)
        async with self._lanes.hold(lane, budget):
            return await self._call(action, job, obs, budget)

    @staticmethod
    async def _probe(wl: Workload, limit: float | None, deadline: datetime | None) -> bool:
        try:
            return await wl.probe(limit, deadline=deadline)
        except InstanceNotFound:
            # Exec's "not found" is no proof of loss (listings and `brev delete` decide that),
            # but it is a probe that did not answer.
            return False

    async def _call(  # noqa: PLR0911 - one case per action kind
        self, action: Action, job: JobContext, obs: Observation, deadline: datetime | None
    ) -> Observation:
        match action:
            case CreateInstance(request=req):
                self._fenced("create", req.name)
                await self._brev.create_instance(req)
                self._directory.invalidate()
                return obs.with_(created=True)
            case StartInstance(name=name):
                self._fenced("start", name)
                await self._brev.start_instance(name)
                self._directory.invalidate()
                return obs.with_(start_requested=True)
            case ProbeExec(instance=inst, limit=limit):
                return obs.with_(probe_ok=await self._probe(self._workload(inst, job), limit, deadline))
            case PrepareWorkload(instance=inst):
                await self._prepare(self._workload(inst, job), job, deadline)
                return obs.with_(prepared=True)
            case StopContainer(instance=inst, step=step):
                await self._workload(inst, job, step).stop_container(deadline=deadline)
                return obs.with_(container_stopped=True)
            case UploadResults(instance=inst, step=step):
                data = job.spec.data
                objects, size = await self._workload(inst, job, step).upload_results(
                    data.results_uri,
                    data.s3_endpoint_url,
                    data.s3_region,
                    credentials=_secrets(job, UploadResults).s3,
                    deadline=deadline,
                )
                return obs.with_(upload=UploadSummary(objects=objects, bytes=size, step=step))
            case CleanupWorkload(instance=inst, must_succeed=must, keep=keep, keep_container=keep_container):
                self.exit_waits.forget_job(job.namespace, job.name)
                wl = self._workload(inst, job)
                try:
                    steps = _step_names(job)
                    await wl.clear(deadline=deadline, keep=keep, keep_container=keep_container, steps=steps)
                except TransientError:
                    if must:
                        raise
                return obs.with_(cleaned=True, kept_for_debug=keep)
            case SyncCheckpoints() | RestoreCheckpoints():
                return await self._checkpoints(action, job, obs, deadline)
            case DeleteInstance(name=name):
                self.exit_waits.forget_job(job.namespace, job.name)
                self._fenced("delete", name)
                try:
                    await self._brev.delete_instance(name)
                except InstanceNotFound:
                    # Gone: what we wanted, and decide() needs to know it was an answer, not a guess.
                    self._directory.invalidate()
                    return obs.with_(delete_not_found=True)
                self._directory.invalidate()
                return obs.with_(delete_requested=True)
        raise AssertionError(f"unhandled action {action!r}")

    async def _create(self, action: Action, job: JobContext, obs: Observation) -> Observation:
        """A create (or start) waits for its slot cancellably and at most CREATE_LANE_WAIT past its
        decision: a pass cancelled while it queues (job deleted, Lease lost) never starts it. Once
        it holds a slot the call is shielded — it may already have reached Brev — and it keeps its
        slot until it returns; the job's next pass in this process awaits it (see `run`)."""
        slot = self._lanes.hold(Lane.CREATE, obs.now + timedelta(seconds=CREATE_LANE_WAIT))
        await slot.__aenter__()

        async def call() -> Observation:
            try:
                return await self._call(action, job, obs, None)
            finally:
                await slot.__aexit__(None, None, None)

        key = (job.namespace, job.name)
        task = asyncio.ensure_future(call())
        self._creating[key] = task

        def forget(done: asyncio.Task[Observation]) -> None:
            if self._creating.get(key) is done:
                del self._creating[key]
            if not done.cancelled():
                done.exception()  # retrieved: a cancelled pass's caller no longer awaits it

        task.add_done_callback(forget)
        return await asyncio.shield(task)

    async def _checkpoints(
        self,
        action: SyncCheckpoints | RestoreCheckpoints,
        job: JobContext,
        obs: Observation,
        deadline: datetime | None,
    ) -> Observation:
        """Checkpoint sync (starts a detached copy; one short call) and restore (before start)."""
        data = job.spec.data
        wl = self._workload(action.instance, job, action.step)
        creds = _secrets(job, type(action)).s3
        if isinstance(action, RestoreCheckpoints) and action.step is not None:
            got = await wl.restore_steps(
                data.results_uri,
                data.s3_endpoint_url,
                data.s3_region,
                outputs=action.outputs,
                credentials=creds,
                deadline=deadline,
            )
        elif isinstance(action, SyncCheckpoints):
            report = await wl.sync_checkpoints(
                data.results_uri, data.s3_endpoint_url, data.s3_region, credentials=creds, deadline=deadline
            )
            sync = CheckpointSync(report.state, report.started, report.epoch, report.objects, report.message)
            return obs.with_(checkpoint_sync=sync)
        else:
            got = await wl.restore_checkpoints(
                data.results_uri, data.s3_endpoint_url, data.s3_region, credentials=creds, deadline=deadline
            )
        path = container_path(got.latest) if got.latest else None
        skipped = tuple(container_path(u) for u in got.unreadable)
        return obs.with_(restored=CheckpointRestore(got.objects, path, got.epoch, skipped))

    async def _wait(
        self, action: WaitForExit, job: JobContext, obs: Observation, deadline: datetime | None
    ) -> Observation:
        wl = self._workload(action.instance, job, action.step)
        timeout = int(action.timeout_seconds)

        async def wait(started: asyncio.Event) -> ExitInfo:
            async with self._lanes.hold(Lane.WAIT, deadline):
                started.set()
                return await wl.wait_exit_with_tail(
                    timeout,
                    LOG_TAIL_LINES,
                    deadline=deadline,
                    tail_while_running=action.tail,
                    progress_of=action.progress_of,
                    progress_while_running=action.progress,
                )

        try:
            info = await self.exit_waits.join_or_start(
                (job.namespace, job.name, job.job_id, action.instance, action.step),
                (action.tail, action.progress_of, action.progress),
                wl.wait_ends(timeout, deadline),
                wait,
            )
        except ContainerNotFound:
            if not action.start_if_missing:
                # Stopping a container that is not there: nothing will ever exit; say so.
                return obs.with_(exit_code=CONTAINER_MISSING_EXIT)
            # Crashed between writing containerStartedAt and `docker run`: start it (idempotent),
            # in the start lane (the wait's slot is released by now).
            await self._start(wl, job, deadline, action.resume_path)
            return obs.with_(exit_code=None, container_started=True)
        # The container's own FinishedAt: operator downtime is never counted as the job's run time.
        return obs.with_(
            exit_code=info.code, log_tail=info.tail, exit_finished_at=info.finished_at, progress=info.progress
        )

    async def _prepare(self, wl: Workload, job: JobContext, deadline: datetime | None) -> None:
        spec, secrets = job.spec, _secrets(job, PrepareWorkload)
        for step in spec.workflow():
            if step.spec_content is not None:
                # A workflow step's spec goes to its own work directory (steps/<name>/spec/).
                target = wl if not spec.is_workflow else self._workload(wl.instance, job, step.name)
                await target.write_spec(step.spec_content, deadline=deadline)
        # Every distinct image, after ONE registry login, before the first step runs.
        await wl.pull_images(spec.images(), ngc_api_key=secrets.ngc_api_key, deadline=deadline)
        if spec.data.inputs:
            await wl.stage_inputs(
                [(i.uri, i.path) for i in spec.data.inputs],
                spec.data.s3_endpoint_url,
                spec.data.s3_region,
                credentials=secrets.s3,
                deadline=deadline,
            )

    async def _start(
        self, wl: Workload, job: JobContext, deadline: datetime | None, resume_path: str | None = None
    ) -> None:
        task, secrets = _step_of(job, wl.step), _secrets(job, StartContainer)
        # A wait older than this container (same name) would report the previous one's exit.
        self.exit_waits.forget_job(job.namespace, job.name, wl.instance)
        image = task.image_or(job.spec.images()[0])
        # Attempt >= 2: TAO's key=value override resumes from the restored checkpoint.
        args = [*(task.args or ()), *([resume_arg(resume_path)] if resume_path else [])]

        async def start() -> None:
            await wl.start_container(
                image=image,
                network_arch=task.network_arch,
                action=task.action,
                spec_path=task.spec_path or SPEC_MOUNT_PATH,
                args=args,
                env={e.name: e.value for e in task.env or ()},
                secret_env=dict(sorted(secrets.extra_env.items())),
                gpus=task.gpus,
                shm_size=task.shm_size,
                inputs=[(i.from_step, i.path) for i in task.inputs],
                deadline=deadline,
            )

        try:
            async with self._lanes.hold(Lane.START, deadline):
                await start()
            return
        except ImageNotPresent:
            pass
        # The image went away since Pulling (a replaced or pruned disk): the registry login was
        # removed after the pull, so deliver it again for this pull only — in the pull lane, so a
        # re-pull never holds a start slot.
        async with self._lanes.hold(Lane.PULL, deadline):
            await wl.pull_image(image, ngc_api_key=secrets.ngc_api_key, deadline=deadline)
        async with self._lanes.hold(Lane.START, deadline):
            await start()
