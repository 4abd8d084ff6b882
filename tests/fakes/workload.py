"""The remote job in memory: a `Workload` whose methods act on `FakeBrev`'s instances instead of
composing shell commands, and an `ActionRunner` that hands it out.

`FakeWorkload` subclasses the real `Workload` and overrides every method the `ActionRunner`
calls, with the same signatures (mypy checks the overrides, so a changed signature shows up
here). Every method passes `FakeBrev.exec_gate` first, so exec faults, readiness and identity
apply to it exactly as they would to a real `brev exec`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controller.actions import ActionRunner, JobContext
from controller.brev.workload import (
    SECRET_FILE_RE,
    SPEC_IN_CONTAINER,
    ContainerNotFound,
    StageInput,
    Workload,
    WorkloadSettings,
)
from controller.directory import InstanceDirectory
from controller.errors import BrevTransientError, EntitlementError, SpecError, TaoBrevError, TransientError
from tests.fakes.brev import ContainerStart, FakeBrev, FakeContainer, UploadRecord

STOPPED_EXIT = 143  # SIGTERM, as `docker stop` leaves a TAO container


class FakeWorkload(Workload):
    def __init__(
        self, world: FakeBrev, instance: str, job_id: str, *, settings: WorkloadSettings | None = None
    ) -> None:
        super().__init__(world, instance, job_id, settings=settings)
        self.world = world

    def _gate(self, op: str, timeout: float | None = None) -> str:
        inst = self.world.exec_gate(
            self.instance, op, timeout if timeout is not None else self.settings.command_timeout
        )
        return inst.id

    def _container(self) -> FakeContainer:
        inst = self.world.instances[self._gate("docker inspect")]
        container = inst.containers.get(self.job_id)
        if container is None:
            raise ContainerNotFound(f"container {self.job_id} is not on {self.instance}")
        return container

    async def probe(self, limit: float | None = None) -> bool:
        try:
            self._gate("probe", limit if limit is not None else self.settings.probe_timeout)
        except BrevTransientError as exc:
            if exc.reason == "BrevAuthFailed":
                raise
            return False
        return True

    async def deliver_secrets(self, files: Mapping[str, bytes]) -> None:
        for name, content in files.items():
            if not SECRET_FILE_RE.match(name) or name in (".", ".."):
                raise SpecError(f"secret file name {name!r} is invalid")
            await self.world.put_file(
                self.instance, f"{self.remote_dir}/secrets/{name}", content, timeout=self.settings.put_timeout
            )

    async def write_spec(self, content: str | bytes) -> None:
        data = content.encode() if isinstance(content, str) else content
        await self.world.put_file(
            self.instance,
            f"{self.remote_dir}/spec/spec.yaml",
            data,
            mode=0o644,
            timeout=self.settings.put_timeout,
        )

    async def registry_login(self) -> None:
        self._gate("docker login")
        if self.world.faults.entitlement_denied:
            raise EntitlementError(
                f"docker login to {self.settings.registry} was refused: check the NGC API key in the "
                "job's NGC Secret"
            )

    async def verify_entitlement(self, image: str) -> None:
        self._gate("docker manifest inspect")

    async def pull(self, image: str) -> None:
        self._gate("docker pull", self.settings.pull_timeout)
        self.world.clock.advance(self.world.faults.pull_s)

    async def stage_inputs(
        self,
        inputs: Sequence[StageInput | tuple[str, str]],
        s3_endpoint: str | None = None,
        region: str | None = None,
    ) -> int:
        self._gate("stage inputs", self.settings.transfer_timeout)
        return len(inputs)

    async def start_container(
        self,
        image: str,
        network_arch: str,
        action: str,
        *,
        spec_path: str = SPEC_IN_CONTAINER,
        gpus: int | None = None,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        shm_size: str | None = None,
    ) -> bool:
        inst = self.world.instances[self._gate("docker run")]
        if self.job_id in inst.containers:
            return False
        f = self.world.faults
        now = self.world.clock.monotonic()
        inst.containers[self.job_id] = FakeContainer(self.job_id, now, f.run_s, f.exit_code)
        self.world.container_starts.append(ContainerStart(inst.id, self.job_id, now, self.world.next_seq()))
        return True

    async def wait_exit_with_tail(self, timeout_s: int, tail: int) -> tuple[int | None, list[str]]:
        seconds = max(1, int(timeout_s))
        inst = self.world.instances[self._gate("docker wait", seconds + self.settings.wait_margin)]
        container = inst.containers.get(self.job_id)
        if container is None:
            raise ContainerNotFound(f"container {self.job_id} is not on {self.instance}")
        clock = self.world.clock
        if container.running:
            ends = container.started_at + container.run_s
            # `timeout N docker wait`: returns at the exit, or after N seconds.
            clock.advance(min(max(0.0, ends - clock.monotonic()), seconds))
            container.settle(clock.monotonic())
        lines = [f"epoch {k} loss 0.{k}" for k in range(1, 4)][-tail:]
        return (None if container.running else container.final_code), lines

    async def stop_container(self) -> None:
        inst = self.world.instances[
            self._gate("docker stop", self.settings.command_timeout + self.settings.stop_grace_s)
        ]
        container = inst.containers.get(self.job_id)
        if container is not None and container.running:
            container.exited_at = self.world.clock.monotonic()
            container.final_code = STOPPED_EXIT

    async def upload_results(
        self, results_uri: str, endpoint: str | None = None, region: str | None = None
    ) -> tuple[int, int]:
        world = self.world
        at = world.clock.monotonic()
        try:
            inst_id = self._gate("upload", self.settings.transfer_timeout)
        except TaoBrevError:
            # Attempted, whether the instance could not be reached or not be resolved.
            world.uploads.append(
                UploadRecord(world.id_of(self.instance), self.job_id, at, False, world.next_seq())
            )
            raise
        if world.faults.upload_failures > 0:
            world.set_faults(upload_failures=world.faults.upload_failures - 1)
            world.uploads.append(UploadRecord(inst_id, self.job_id, at, ok=False, seq=world.next_seq()))
            raise TransientError(
                f"uploading results to {results_uri} failed",
                reason="UploadFailed",
                cli_message="upload failed: An error occurred (SlowDown)",
            )
        world.uploads.append(UploadRecord(inst_id, self.job_id, at, ok=True, seq=world.next_seq()))
        return 3, 300

    async def remove_container(self) -> None:
        inst = self.world.instances[self._gate("docker rm")]
        inst.containers.pop(self.job_id, None)

    async def cleanup(self) -> None:
        inst = self.world.instances[self._gate("rm -rf job dir")]
        for path in [p for p in inst.files if p.startswith(f"{self.remote_dir}/")]:
            del inst.files[path]


class FakeActionRunner(ActionRunner):
    """The real ActionRunner; only the remote job is in memory."""

    def __init__(self, world: FakeBrev, directory: InstanceDirectory) -> None:
        super().__init__(world, directory, max_concurrent_calls=4, max_concurrent_waits=4)
        self.world = world

    def _workload(self, instance: str, job: JobContext) -> Workload:
        return FakeWorkload(self.world, instance, job.job_id, settings=self._wl_settings)
