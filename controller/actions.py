"""Performs a Decision's actions against Brev and folds their results into the Observation.

The only module of the reconciler that causes side effects on Brev. Each action is idempotent
(re-running it after a crash is safe); the first failing action stops the list and is reported
as an `ActionFailure` for decide() to judge (transient: retry with backoff; permanent: fail).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controller.brev.client import BrevClient
from controller.brev.workload import ContainerNotFound, Workload, WorkloadSettings
from controller.directory import InstanceDirectory
from controller.errors import InstanceNotFound, PermanentError, TaoBrevError, TransientError
from controller.models import SPEC_MOUNT_PATH, TaoBrevJobSpec
from controller.steps import (
    Action,
    ActionFailure,
    CleanupWorkload,
    CreateInstance,
    DeleteInstance,
    Observation,
    PrepareWorkload,
    ProbeExec,
    StartContainer,
    StartInstance,
    StopContainer,
    UploadResults,
    UploadSummary,
    WaitForExit,
)

LOG_TAIL_LINES = 20
# Reported as the exit code when a container we were stopping does not exist (never started).
CONTAINER_MISSING_EXIT = -1


@dataclass(frozen=True)
class JobSecrets:
    """Secret values for one job, read from Kubernetes Secrets; never logged or put on argv."""

    ngc_api_key: bytes
    s3_access_key_id: bytes
    s3_secret_access_key: bytes
    extra_env: Mapping[str, bytes] = field(default_factory=dict)

    def values(self) -> list[bytes]:
        return [self.ngc_api_key, self.s3_access_key_id, self.s3_secret_access_key, *self.extra_env.values()]


@dataclass(frozen=True)
class JobContext:
    namespace: str
    name: str
    job_id: str
    spec: TaoBrevJobSpec
    secrets: JobSecrets | None


def _env_file(pairs: Sequence[tuple[str, bytes]]) -> bytes:
    # docker's --env-file takes NAME=VALUE lines verbatim; a newline would split a value.
    lines = []
    for key, value in pairs:
        if b"\n" in value or b"\r" in value:
            raise PermanentError(
                f"the Secret value for {key} contains a newline, which an env file cannot hold"
            )
        lines.append(key.encode() + b"=" + value)
    return b"\n".join(lines) + b"\n"


class ActionRunner:
    def __init__(
        self,
        brev: BrevClient,
        directory: InstanceDirectory,
        *,
        max_concurrent_calls: int,
        max_concurrent_waits: int,
        exec_timeout: float = 900.0,
        pull_timeout: float = 3600.0,
    ) -> None:
        self._brev = brev
        self._directory = directory
        self._wl_settings = WorkloadSettings(probe_timeout=exec_timeout, pull_timeout=pull_timeout)
        # Short calls share a tight bound; blocking waits (up to wait_timeout each) have their own,
        # so twenty running jobs cannot starve provisioning of the others.
        self._calls = asyncio.Semaphore(max_concurrent_calls)
        self._waits = asyncio.Semaphore(max_concurrent_waits)

    def _workload(self, instance: str, job: JobContext) -> Workload:
        return Workload(self._brev, instance, job.job_id, settings=self._wl_settings)

    async def run(self, actions: Sequence[Action], job: JobContext, obs: Observation) -> Observation:
        for action in actions:
            try:
                obs = await self._one(action, job, obs)
            except TaoBrevError as exc:
                failure = ActionFailure(
                    action=type(action).__name__,
                    reason=exc.reason,
                    message=str(exc),
                    permanent=isinstance(exc, PermanentError),
                )
                return obs.with_(failure=failure)
        return obs

    async def _one(self, action: Action, job: JobContext, obs: Observation) -> Observation:
        if isinstance(action, WaitForExit):
            async with self._waits:
                return await self._wait(action, job, obs)
        async with self._calls:
            return await self._short(action, job, obs)

    async def _short(  # noqa: PLR0911 - one return per action kind
        self, action: Action, job: JobContext, obs: Observation
    ) -> Observation:
        match action:
            case CreateInstance(request=req):
                await self._brev.create_instance(req)
                self._directory.invalidate()
                return obs.with_(created=True)
            case StartInstance(name=name):
                await self._brev.start_instance(name)
                self._directory.invalidate()
                return obs.with_(start_requested=True)
            case ProbeExec(instance=inst):
                return obs.with_(probe_ok=await self._workload(inst, job).probe())
            case PrepareWorkload(instance=inst):
                await self._prepare(self._workload(inst, job), job)
                return obs.with_(prepared=True)
            case StartContainer(instance=inst):
                await self._start(self._workload(inst, job), job)
                return obs.with_(container_started=True)
            case StopContainer(instance=inst):
                await self._workload(inst, job).stop_container()
                return obs.with_(container_stopped=True)
            case UploadResults(instance=inst):
                data = job.spec.data
                objects, size = await self._workload(inst, job).upload_results(
                    data.results_uri, data.s3_endpoint_url, data.s3_region
                )
                return obs.with_(upload=UploadSummary(objects=objects, bytes=size))
            case CleanupWorkload(instance=inst, must_succeed=must):
                wl = self._workload(inst, job)
                try:
                    await wl.remove_container()
                    await wl.cleanup()
                except TransientError:
                    if must:
                        raise
                return obs.with_(cleaned=True)
            case DeleteInstance(name=name):
                try:
                    await self._brev.delete_instance(name)
                except InstanceNotFound:
                    # Gone: what we wanted, and decide() needs to know it was an answer, not a guess.
                    self._directory.invalidate()
                    return obs.with_(delete_not_found=True)
                self._directory.invalidate()
                return obs.with_(delete_requested=True)
        raise AssertionError(f"unhandled action {action!r}")

    async def _wait(self, action: WaitForExit, job: JobContext, obs: Observation) -> Observation:
        wl = self._workload(action.instance, job)
        try:
            code, tail = await wl.wait_exit_with_tail(int(action.timeout_seconds), LOG_TAIL_LINES)
        except ContainerNotFound:
            if not action.start_if_missing:
                # Stopping a container that is not there: nothing will ever exit; say so.
                return obs.with_(exit_code=CONTAINER_MISSING_EXIT)
            # Crashed between writing containerStartedAt and `docker run`: start it (idempotent).
            await self._start(wl, job)
            return obs.with_(exit_code=None, container_started=True)
        return obs.with_(exit_code=code, log_tail=tuple(tail))

    async def _prepare(self, wl: Workload, job: JobContext) -> None:
        if job.secrets is None:
            raise PermanentError("job secrets were not loaded")
        spec, secrets = job.spec, job.secrets
        files = {
            "ngc_api_key": secrets.ngc_api_key,
            "s3.env": _env_file(
                [
                    ("AWS_ACCESS_KEY_ID", secrets.s3_access_key_id),
                    ("AWS_SECRET_ACCESS_KEY", secrets.s3_secret_access_key),
                    ("AWS_DEFAULT_REGION", spec.data.s3_region.encode()),
                ]
            ),
            "container.env": _env_file(sorted(secrets.extra_env.items())),
        }
        await wl.deliver_secrets(files)
        if spec.task.spec_content is not None:
            await wl.write_spec(spec.task.spec_content)
        await wl.registry_login()
        await wl.verify_entitlement(spec.task.image)
        await wl.pull(spec.task.image)
        if spec.data.inputs:
            await wl.stage_inputs(
                [(i.uri, i.path) for i in spec.data.inputs],
                spec.data.s3_endpoint_url,
                spec.data.s3_region,
            )

    async def _start(self, wl: Workload, job: JobContext) -> None:
        task = job.spec.task
        spec_path = task.spec_path or SPEC_MOUNT_PATH
        await wl.start_container(
            image=task.image,
            network_arch=task.network_arch,
            action=task.action,
            spec_path=spec_path,
            args=list(task.args or ()),
            env={e.name: e.value for e in task.env or ()},
            gpus=task.gpus,
            shm_size=task.shm_size,
        )
