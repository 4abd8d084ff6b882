"""The remote job in memory: a `Workload` whose methods act on `FakeBrev`'s instances instead of
composing shell commands, and an `ActionRunner` that hands it out.

`FakeWorkload` subclasses the real `Workload` and overrides every method the `ActionRunner`
calls, with the same signatures (mypy checks the overrides, so a changed signature shows up
here). Every method passes `FakeBrev.exec_gate` first, so exec faults, readiness and identity
apply to it exactly as they would to a real `brev exec`.

Secrets follow the real workload's lifetime: a step that reads one delivers it with `put_file`
(through the same gate, so a delivery can fail like a real one) and removes it before it returns,
whether the step succeeded or not; `FakeInstance.files` never keeps a secret file after a step.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from controller.api.container_paths import SPEC_MOUNT_PATH, step_container
from controller.api.errors import (
    BrevTransientError,
    EntitlementError,
    SpecError,
    TaoBrevError,
    TransientError,
)
from controller.brev.envfile import S3Credentials
from controller.brev.logtail import TAIL_LINES
from controller.brev.progress_parse import TaoProgress, clock_text
from controller.brev.workload import (
    CONTAINER_ENV_FILE,
    NGC_KEY_FILE,
    S3_ENV_FILE,
    ContainerNotFound,
    ExitInfo,
    ImageNotPresent,
    RestoreReport,
    StageInput,
    SyncReport,
    Workload,
    WorkloadSettings,
)
from controller.effects.actions import ActionRunner, JobContext
from controller.effects.directory import InstanceDirectory
from controller.effects.lanes import Lanes
from tests.fakes.brev import (
    ContainerStart,
    FakeBrev,
    FakeContainer,
    FakeInstance,
    SyncRecord,
    UploadRecord,
)

STOPPED_EXIT = 143  # SIGTERM, as `docker stop` leaves a TAO container
_RESUME = re.compile(r"^train\.resume_training_checkpoint_path=.*_epoch_(\d+)\.pth$")


def epoch_progress(done: int, epochs: int, epoch_s: float) -> TaoProgress | None:
    """What the operator's parser makes of TAO's status.json after `done` of `epochs` epochs of
    `epoch_s` seconds each (None before the first epoch line)."""
    if done < 1 or epochs < 1:
        return None
    done = min(done, epochs)
    eta = round((epochs - done) * epoch_s)
    loss = round(1.0 / done**0.5, 4)
    return TaoProgress(
        epoch=done,
        max_epoch=epochs,
        percent=done * 100 // epochs,
        eta=clock_text(eta),
        eta_seconds=eta,
        time_per_epoch_seconds=round(epoch_s, 3),
        loss=loss,
        metrics=(("train_loss", loss),),
    )


class FakeWorkload(Workload):
    def __init__(
        self,
        world: FakeBrev,
        instance: str,
        job_id: str,
        *,
        settings: WorkloadSettings | None = None,
        step: str | None = None,
    ) -> None:
        super().__init__(world, instance, job_id, settings=settings, clock=world.clock.now, step=step)
        self.world = world

    def _gate(self, op: str, timeout: float | None = None, deadline: datetime | None = None) -> FakeInstance:
        """The instance a remote call reaches; the call's timeout is cut to the phase budget
        (`Workload._limit`, which refuses a call with less than a second left) like a real one."""
        limit = self._limit(timeout if timeout is not None else self.settings.command_timeout, deadline, op)
        return self.world.exec_gate(self.instance, op, limit)

    async def _deliver(self, name: str, content: bytes, deadline: datetime | None) -> str:
        path = f"{self.remote_dir}/secrets/{name}"
        await self.world.put_file(
            self.instance,
            path,
            content,
            mode=0o600,
            timeout=self._limit(self.settings.put_timeout, deadline, f"delivering {name}"),
        )
        return path

    def _remove(self, path: str) -> None:
        """The step's EXIT trap: its secret file goes, whatever happened to the step."""
        for inst in self.world.instances.values():
            inst.files.pop(path, None)

    async def probe(self, limit: float | None = None, *, deadline: datetime | None = None) -> bool:
        try:
            self._gate("probe", limit if limit is not None else self.settings.probe_timeout, deadline)
        except BrevTransientError as exc:
            if exc.reason == "BrevAuthFailed":
                raise
            return False
        return True

    async def write_spec(self, content: str | bytes, *, deadline: datetime | None = None) -> None:
        data = content.encode() if isinstance(content, str) else content
        await self.world.put_file(
            self.instance,
            f"{self.remote_dir}/{self.work + '/' if self.work else ''}spec/spec.yaml",
            data,
            mode=0o644,
            timeout=self._limit(self.settings.put_timeout, deadline, "writing the spec"),
        )

    async def pull_images(
        self, images: Sequence[str], *, ngc_api_key: bytes, deadline: datetime | None = None
    ) -> None:
        # One delivery and one login for all of them, like the real one.
        path = await self._deliver(NGC_KEY_FILE, ngc_api_key, deadline)
        try:
            inst = self._gate("docker pull", self.settings.pull_timeout * len(images), deadline)
            if self.world.faults.entitlement_denied:
                raise EntitlementError(
                    f"docker login to {self.settings.registry} was refused: check the NGC API key in "
                    "the job's NGC Secret"
                )
            for image in images:
                if image not in inst.images:
                    self.world.clock.advance(self.world.faults.pull_s)
                    inst.images.add(image)
                    self.world.pulls.append((inst.id, image))
        finally:
            self._remove(path)

    async def pull_image(self, image: str, *, ngc_api_key: bytes, deadline: datetime | None = None) -> None:
        path = await self._deliver(NGC_KEY_FILE, ngc_api_key, deadline)
        try:
            inst = self._gate("docker pull", self.settings.pull_timeout, deadline)
            if self.world.faults.entitlement_denied:
                raise EntitlementError(
                    f"docker login to {self.settings.registry} was refused: check the NGC API key in "
                    "the job's NGC Secret"
                )
            if image not in inst.images:
                self.world.clock.advance(self.world.faults.pull_s)
                inst.images.add(image)
                self.world.pulls.append((inst.id, image))
        finally:
            self._remove(path)

    async def stage_inputs(
        self,
        inputs: Sequence[StageInput | tuple[str, str]],
        s3_endpoint: str | None = None,
        region: str | None = None,
        *,
        credentials: S3Credentials,
        deadline: datetime | None = None,
    ) -> int:
        if not inputs:
            return 0
        path = await self._deliver(S3_ENV_FILE, credentials.access_key_id, deadline)
        try:
            self._gate("stage inputs", self.settings.transfer_timeout * len(inputs), deadline)
        finally:
            self._remove(path)
        return len(inputs)

    async def start_container(
        self,
        image: str,
        network_arch: str,
        action: str,
        *,
        spec_path: str = SPEC_MOUNT_PATH,
        gpus: int | None = None,
        env: Mapping[str, str] | None = None,
        secret_env: Mapping[str, bytes | str] | None = None,
        args: Sequence[str] = (),
        shm_size: str | None = None,
        inputs: Sequence[tuple[str, str | None]] = (),
        deadline: datetime | None = None,
    ) -> bool:
        path = None
        if secret_env:
            content = b"".join(
                f"{k}=".encode() + (v.encode() if isinstance(v, str) else v) + b"\n"
                for k, v in secret_env.items()
            )
            path = await self._deliver(CONTAINER_ENV_FILE, content, deadline)
        try:
            inst = self._gate("docker run", deadline=deadline)
            if self.container in inst.containers:
                return False
            if image not in inst.images:
                raise ImageNotPresent(f"image {image} is not on {self.instance}; it must be pulled first")
            f = self.world.faults
            now = self.world.clock.monotonic()
            resumed = [int(m.group(1)) for a in args if (m := _RESUME.match(a))]
            first = resumed[-1] + 1 if resumed else 1
            run_s = max(0, f.epochs - first + 1) * f.epoch_s if f.epoch_s > 0 else f.run_s
            # A workflow step's own exit code (Faults.step_exit_codes), and its inputs: an
            # earlier step's results missing from this instance fail it as TAO would (exit 1).
            code = f.step_exit_codes.get(self.step or "", f.exit_code)
            if any((inst.id, self.job_id, src) not in self.world.step_outputs for src, _ in inputs):
                code, run_s = 1, 0.0
            inst.containers[self.container] = FakeContainer(
                self.container,
                now,
                run_s,
                code,
                epoch_s=f.epoch_s,
                first_epoch=first,
                carries_secrets=bool(secret_env),
            )
            self.world.container_starts.append(
                ContainerStart(inst.id, self.container, now, self.world.next_seq(), first_epoch=first)
            )
            return True
        finally:
            if path is not None:
                self._remove(path)

    async def wait_exit_with_tail(
        self,
        timeout_s: int,
        tail: int = TAIL_LINES,
        *,
        deadline: datetime | None = None,
        tail_while_running: bool = True,
        progress_of: str | None = None,
        progress_while_running: bool = True,
    ) -> ExitInfo:
        seconds = self._wait_seconds(timeout_s, deadline)
        inst = self._gate("docker wait", seconds + self.settings.wait_margin, deadline)
        container = inst.containers.get(self.container)
        if container is None:
            raise ContainerNotFound(f"container {self.container} is not on {self.instance}")
        clock = self.world.clock
        if container.running:
            ends = container.started_at + container.run_s
            # `timeout N docker wait`: returns at the exit, or after N seconds.
            clock.advance(min(max(0.0, ends - clock.monotonic()), seconds))
            container.settle(clock.monotonic())
        lines = tuple(f"epoch {k} loss 0.{k}" for k in range(1, 4))[-tail:]
        progress = None
        if progress_of is not None and container.epoch_s > 0:
            done = container.epoch_at(clock.monotonic())
            progress = epoch_progress(done, self.world.faults.epochs, container.epoch_s)
        if container.running or container.exited_at is None:
            return ExitInfo(
                None, None, lines if tail_while_running else (), progress if progress_while_running else None
            )
        if self.step is not None:
            # What the step wrote is on this instance's disk now (later steps read it).
            self.world.step_outputs.add((inst.id, self.job_id, self.step))
        # docker's State.FinishedAt: when it really exited, not when we looked.
        finished = clock.now() - timedelta(seconds=clock.monotonic() - container.exited_at)
        return ExitInfo(container.final_code, finished, lines, progress)

    async def stop_container(self, grace_s: int | None = None, *, deadline: datetime | None = None) -> None:
        grace = max(0, int(self.settings.stop_grace_s if grace_s is None else grace_s))
        inst = self._gate("docker stop", grace + self.settings.stop_margin, deadline)
        container = inst.containers.get(self.container)
        if container is not None and container.running:
            container.exited_at = self.world.clock.monotonic()
            container.final_code = STOPPED_EXIT

    async def upload_results(
        self,
        results_uri: str,
        endpoint: str | None = None,
        region: str | None = None,
        *,
        credentials: S3Credentials,
        deadline: datetime | None = None,
    ) -> tuple[int, int]:
        world = self.world
        at = world.clock.monotonic()
        path: str | None = None
        try:
            path = await self._deliver(S3_ENV_FILE, credentials.secret_access_key, deadline)
            inst_id = self._gate(
                "upload", self.settings.transfer_timeout + self.settings.command_timeout, deadline
            ).id
        except TaoBrevError:
            # Attempted, whether the instance could not be reached or not be resolved.
            world.uploads.append(
                UploadRecord(world.id_of(self.instance), self.job_id, at, False, world.next_seq())
            )
            raise
        finally:
            if path is not None:
                self._remove(path)
        if world.faults.upload_failures > 0:
            world.set_faults(upload_failures=world.faults.upload_failures - 1)
            world.uploads.append(UploadRecord(inst_id, self.job_id, at, ok=False, seq=world.next_seq()))
            raise TransientError(
                f"uploading results to {results_uri} failed",
                reason="UploadFailed",
                cli_message="upload failed: An error occurred (SlowDown)",
            )
        world.uploads.append(
            UploadRecord(inst_id, self.job_id, at, ok=True, seq=world.next_seq(), step=self.step)
        )
        if self.step is not None:
            world.stored_steps.add((results_uri, self.step))
        epoch = self._disk_epoch(world.instances[inst_id])
        world.results_epochs[self.job_id] = max(epoch, world.results_epochs.get(self.job_id, 0))
        return 3, 300

    def _disk_epoch(self, inst: FakeInstance) -> int:
        """The latest checkpoint in this job's results directory on `inst`."""
        container = inst.containers.get(self.container)
        now = self.world.clock.monotonic()
        running = container.epoch_at(now) if container is not None else 0
        return max(running, inst.disk_epochs.get(self.job_id, 0))

    async def sync_checkpoints(
        self,
        results_uri: str,
        endpoint: str | None = None,
        region: str | None = None,
        *,
        credentials: S3Credentials,
        deadline: datetime | None = None,
    ) -> SyncReport:
        world = self.world
        path = await self._deliver(S3_ENV_FILE, credentials.secret_access_key, deadline)
        try:
            inst = self._gate("checkpoint sync", deadline=deadline)
        finally:
            self._remove(path)
        now = world.clock.monotonic()
        prev = next(
            (r for r in reversed(world.syncs) if (r.instance_id, r.job_id) == (inst.id, self.job_id)), None
        )
        if prev is not None and now < prev.lands_at:
            return SyncReport("running", started=False, message="the previous sync is still copying")
        if prev is None:
            report = SyncReport("none", started=True)
        elif prev.ok:
            report = SyncReport("ok", started=True, epoch=prev.epoch or None, objects=prev.epoch)
        else:
            report = SyncReport(
                "failed", started=True, message="aws s3 sync exited 1: upload failed: SlowDown"
            )
        ok = world.faults.sync_failures <= 0
        if not ok:
            world.set_faults(sync_failures=world.faults.sync_failures - 1)
        record = SyncRecord(inst.id, self.job_id, self._disk_epoch(inst), now, now + world.faults.sync_s, ok)
        world.syncs.append(record)

        def land() -> None:
            # Detached: the copy lands only if its instance is still there to finish it.
            alive = world.instances.get(record.instance_id)
            if record.ok and alive is not None and alive.delete_accepted_at is None:
                world.checkpoints[record.job_id] = max(record.epoch, world.checkpoints.get(record.job_id, 0))

        world.schedule(world.faults.sync_s, land)
        return report

    async def restore_checkpoints(
        self,
        results_uri: str,
        endpoint: str | None = None,
        region: str | None = None,
        *,
        credentials: S3Credentials,
        deadline: datetime | None = None,
    ) -> RestoreReport:
        world = self.world
        path = await self._deliver(S3_ENV_FILE, credentials.secret_access_key, deadline)
        try:
            inst = self._gate("checkpoint restore", self.settings.transfer_timeout, deadline)
        finally:
            self._remove(path)
        epoch = max(world.checkpoints.get(self.job_id, 0), world.results_epochs.get(self.job_id, 0))
        if epoch <= 0:
            return RestoreReport(objects=0, latest=None, epoch=None)
        inst.disk_epochs[self.job_id] = max(epoch, inst.disk_epochs.get(self.job_id, 0))
        return RestoreReport(objects=epoch, latest=f"results/train/model_epoch_{epoch:03d}.pth", epoch=epoch)

    async def restore_steps(
        self,
        results_uri: str,
        endpoint: str | None = None,
        region: str | None = None,
        *,
        outputs: Sequence[str],
        credentials: S3Credentials,
        deadline: datetime | None = None,
    ) -> RestoreReport:
        world = self.world
        path = await self._deliver(S3_ENV_FILE, credentials.secret_access_key, deadline)
        try:
            inst = self._gate("steps restore", self.settings.transfer_timeout, deadline)
        finally:
            self._remove(path)
        for name in outputs:
            if (results_uri, name) not in world.stored_steps:
                raise SpecError(f"no results of step {name} under {results_uri}/{name}/")
            world.step_outputs.add((inst.id, self.job_id, name))
        world.restores.append((inst.id, self.job_id, tuple(outputs)))
        return RestoreReport(objects=len(outputs), latest=None, epoch=None)

    async def clear(
        self,
        *,
        deadline: datetime | None = None,
        keep: bool = False,
        keep_container: bool = False,
        steps: Sequence[str] = (),
    ) -> None:
        inst = self._gate("cleanup", deadline=deadline)  # one remote call, like the real one
        if not (keep and keep_container):
            inst.containers.pop(self.job_id, None)
            for step in steps:
                inst.containers.pop(step_container(self.job_id, step), None)
        # Kept for debugging: only the secrets directory goes (keep_for_debug.sh).
        gone = f"{self.remote_dir}/secrets/" if keep else f"{self.remote_dir}/"
        for path in [p for p in inst.files if p.startswith(gone)]:
            del inst.files[path]


class FakeActionRunner(ActionRunner):
    """The real ActionRunner; only the remote job is in memory."""

    def __init__(self, world: FakeBrev, directory: InstanceDirectory) -> None:
        super().__init__(world, directory, lanes=Lanes.uniform(4, clock=world.clock.now))
        self.world = world

    def _workload(self, instance: str, job: JobContext, step: str | None = None) -> Workload:
        return FakeWorkload(self.world, instance, job.job_id, settings=self._wl_settings, step=step)
