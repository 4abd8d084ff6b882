"""The simulated world: one Kubernetes, one Brev org, one clock, shared by every replica.

The in-memory fakes of tests/fakes are reused as they are; the subclasses here only add what a
simulation of several processes needs:

* time that passes while other work runs: where a fake stands for time spent on Brev by moving
  the clock at once (a slow create, a pull, an exec that hangs until its timeout, `docker wait`),
  the time is owed instead and slept on the virtual loop, so other tasks run meanwhile;
* latency on every call (a request reaches Brev or the API server a little later than it was
  sent, and its answer comes back later still), drawn from the seed;
* the calling process: each call is attributed to the replica whose task made it (a context
  variable), a call from a crashed replica never lands, and every call that changes something is
  checked against the Lease at the moment it was sent;
* faults as declared knobs with rates (`Knobs`), fired by the seed's RNG at the call they hit.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from controller.api.errors import BrevTransientError, KubeUnavailable
from controller.brev import output
from controller.brev.client import CreateRequest, CreateResult, ExecResult, Instance
from controller.brev.logtail import TAIL_LINES
from controller.brev.runner import RunResult
from controller.brev.workload import ContainerNotFound, ExitInfo, Workload
from controller.effects.actions import ActionRunner, JobContext
from controller.effects.directory import InstanceDirectory
from controller.effects.lanes import Lanes
from controller.fleet.leadership import LeaseConflict, LeaseRecord
from controller.kube.access import redact_status
from tests.fakes.brev import FakeBrev
from tests.fakes.clock import FakeClock
from tests.fakes.kube import FakeKube
from tests.fakes.workload import FakeWorkload, epoch_progress

if TYPE_CHECKING:
    from tests.simulation.operator import Process
    from tests.simulation.run import Simulation

T = TypeVar("T")

# The replica (operator process) whose task is running: set in every task a process starts.
CURRENT: contextvars.ContextVar[Process | None] = contextvars.ContextVar("sim_process", default=None)


class Crashed(BaseException):
    """The calling process is dead: whatever it was doing never reaches the world. A
    BaseException, so no `except Exception` of the operator turns a dead process into a retry."""


# The results bucket of a job drawn with Knobs.missing_bucket: the simulated S3 has no such bucket.
MISSING_BUCKET = "no-such-results-bucket"


# Issue 32's knobs: drawn from a stream of their own (Knobs.draw).
LATER_KNOBS = frozenset({"late_secret", "missing_bucket"})
# Issue 27's: after those in the later stream (their draws stay as they were).
ISSUE_27_KNOBS = frozenset({"user_cancel", "keep_on_failure"})
# Issue 28 (workflows): drawn from a stream of its own, so every other knob of a seed stays put.
ISSUE_28_KNOBS = frozenset({"workflows"})
# A starved event loop (issue 30's failover froze a replica): a stream of its own too.
STALL_KNOBS = frozenset({"loop_stall_every"})


@dataclass(frozen=True)
class Knobs:
    """Every fault the simulation injects, with its rate (per call it can hit) or size. A seed
    draws a subset on (swarm testing: each seed stresses a few seams hard, not all of them a bit)."""

    latency_max: float = 0.5  # s, each way, on every Brev and Kubernetes call
    list_omit: float = 0.0  # per listing: one listed instance is left out of it
    listing_lag_max: float = 0.0  # s: a new instance is unlisted up to this long
    list_fail: float = 0.0  # per listing: `brev ls` fails
    create_slow: float = 0.0  # per create: the call takes 30-400 s (the instance exists at once)
    create_timeout: float = 0.0  # per create: accepted by Brev, but the call times out
    create_capacity: float = 0.0  # per create: no capacity (nothing created)
    delete_fail: float = 0.0  # per delete: 502, nothing deleted
    exec_hang: float = 0.0  # per remote call: hangs until its timeout
    exec_fail: float = 0.0  # per remote call: ssh refused
    crash: float = 0.0  # per call of a replica: it dies right before (or after) the call
    lease_partition: float = 0.0  # per Lease call: the replica is cut off for 5-60 s
    patch_conflict: float = 0.0  # per status patch: 409 / 5xx, nothing written
    print_secrets: float = 0.0  # per container: the training prints a secret it was given
    exit_nonzero: float = 0.0  # per container: exits 1 or 137
    unreachable_after_exit: float = 0.0  # per container: the instance stops answering once it exited
    watch_lag_max: float = 0.5  # s: how late a replica's watch sees a change
    cancel_soon: float = 0.0  # per job: `kubectl delete` 1-300 s after its create (mid-provisioning)
    tight_timeouts: float = 0.0  # per job: spec.timeouts.provisioningSeconds 120 (a slow create overruns it)
    near_budget: float = 0.0  # per job: a budget, and a run that exits 5-30 s before it runs out
    late_secret: float = 0.0  # per job: its NGC Secret is created 1-900 s after the job (GitOps)
    missing_bucket: float = 0.0  # per job: its results bucket never exists (a typo)
    # Issue 27 (drawn last from the later stream; each job's own draws come from Simulation.extra):
    user_cancel: float = 0.0  # per job: `kubectl taobrev cancel` (the annotation) at some point
    keep_on_failure: float = 0.0  # per Delete job: spec.debug.keepInstanceOnFailure, half its runs exit 2
    # Issue 28: per job, spec.steps (2-4 steps on one instance) instead of spec.task.
    workflows: float = 0.0
    # s: mean virtual time between stalls of the event loop, 0 off. A stall moves the clock 1-45 s
    # while callbacks are ready (a loop starved of CPU: deadlines pass before the task that would
    # meet them runs; the clock otherwise only moves when the loop is idle).
    loop_stall_every: float = 0.0

    @classmethod
    def draw(
        cls,
        rng: random.Random,
        later: random.Random,
        flows: random.Random | None = None,
        stalls: random.Random | None = None,
    ) -> Knobs:
        """Each fault on with probability 1/2, at a rate drawn for this seed. Knobs added after
        seeds were kept as tests (LATER_KNOBS) draw from `later`, so every kept seed's stream
        (knobs, then the run) stays as it was."""
        values: dict[str, float] = {}
        for f in fields(cls):
            if f.name in STALL_KNOBS:
                values[f.name] = (stalls or random.Random(0)).choice((0.0, 0.0, 120.0, 600.0))  # noqa: S311
            elif f.name in ISSUE_28_KNOBS:
                values[f.name] = (flows or random.Random(0)).choice((0.0, 0.0, 0.3, 0.7))  # noqa: S311
            elif f.name in ISSUE_27_KNOBS:
                values[f.name] = later.choice((0.0, 0.0, 0.25, 0.6))
            elif f.name in LATER_KNOBS:
                values[f.name] = later.choice((0.0, 0.0, 0.05, 0.2))
            elif f.name in ("latency_max", "watch_lag_max"):
                values[f.name] = rng.choice((0.05, 0.5, 3.0))
            elif f.name == "listing_lag_max":
                values[f.name] = rng.choice((0.0, 0.0, 30.0, 120.0))
            elif f.name == "crash":
                values[f.name] = rng.choice((0.0, 0.0, 0.002, 0.01))
            else:
                values[f.name] = rng.choice((0.0, 0.0, 0.05, 0.2))
        return cls(**values)

    def describe(self) -> str:
        return " ".join(f"{f.name}={getattr(self, f.name):g}" for f in fields(self) if getattr(self, f.name))


class SimClock(FakeClock):
    """The loop's clock. `advance` (a fake standing for time spent on Brev) only records a debt,
    which the calling coroutine then sleeps on the virtual loop (`World.pay`)."""

    def __init__(self) -> None:
        super().__init__()
        self.debt = 0.0

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"time only moves forward (advance({seconds}))")
        self.debt += seconds

    def take_debt(self) -> float:
        debt, self.debt = self.debt, 0.0
        return debt


def process() -> Process | None:
    return CURRENT.get()


class SimBrev(FakeBrev):
    """One Brev org, every replica of both deployments logged in with the same API key."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim.clock)
        self.sim = sim
        self.clock: SimClock = sim.clock
        self.exec_faulted_at = {}
        self.listing_log: list[tuple[float, str, frozenset[str]]] = []  # (taken at, by, ids shown)

    async def _call(self, op: str, target: str, call: Callable[[], Awaitable[T]], *, mutates: bool) -> T:
        sim = self.sim
        proc = sim.alive_caller()
        if mutates:
            sim.mutation_sent(proc, op, target)
        await sim.latency()
        sim.maybe_crash(proc, f"before brev {op} {target}")
        sim.alive_caller()
        try:
            return await call()
        finally:
            await sim.pay()
            await sim.latency()
            sim.alive_caller()

    async def list_instances(self) -> Sequence[Instance]:
        k = self.sim.knobs
        rng = self.sim.rng
        # Logged as taken when asked for, as the directory stamps it (listed_at): the call's
        # latency (up to latency_max) would otherwise bring two distinct listings closer than the
        # poll interval the operator measured between them (seed 15347).
        asked = self.clock.monotonic()

        async def call() -> Sequence[Instance]:
            self._settle()
            if rng.random() < k.list_fail:
                self.set_faults(list_failures=1)
            elif self.instances and rng.random() < k.list_omit:
                victim = rng.choice(sorted(self.instances))
                self._omit[victim] = max(1, self._omit.get(victim, 0))
                self.sim.trace(f"brev ls omits {victim}")
            listed = await FakeBrev.list_instances(self)
            caller = process()
            who = caller.deployment.name if caller is not None else ""
            self.listing_log.append((asked, who, frozenset(i.id for i in listed)))
            return listed

        return await self._call("ls", "", call, mutates=False)

    def omitted_listings(self, instance_id: str, deployment: str, since: float, spacing: float) -> int:
        """How many of `deployment`'s listings taken from `since` on left `instance_id` out,
        counting only listings `spacing` seconds after the last counted (distinct evidence; the
        count lives in the job's status, so every replica's listings count; one that showed it
        but that no pass of the job read resets nothing)."""
        count, last = 0, None
        for taken, who, shown in self.listing_log:
            if who != deployment or taken < since - 1e-6 or instance_id in shown:
                continue
            if last is None or taken - last >= spacing:
                count, last = count + 1, taken
        return count

    async def create_instance(self, request: CreateRequest) -> CreateResult:
        k = self.sim.knobs
        rng = self.sim.rng
        self.sim.create_sent(request.name)

        async def call() -> CreateResult:
            self.set_faults(
                create_s=rng.uniform(30, 400) if rng.random() < k.create_slow else 0.0,
                create_timeouts=1 if rng.random() < k.create_timeout else 0,
                capacity_errors=1 if rng.random() < k.create_capacity else 0,
                listing_lag_s=rng.uniform(0, k.listing_lag_max),
            )
            result = await FakeBrev.create_instance(self, request)
            self.sim.trace(f"brev create {request.name} -> {'adopted' if result.adopted else 'created'}")
            return result

        try:
            return await self._call("create", request.name, call, mutates=True)
        except BrevTransientError as exc:
            # What the CLI printed, classified by the operator's own parser (controller.brev.output),
            # as the real client does: the fallback's lines decide refusal vs "may exist" (scenario 7).
            raise _classified(request.name, exc, skipped_first=rng.random() < 0.5) from None
        finally:
            self.set_faults(create_s=0.0, create_timeouts=0, capacity_errors=0)

    async def delete_instance(self, name_or_id: str) -> None:
        k = self.sim.knobs
        rng = self.sim.rng

        async def call() -> None:
            self.set_faults(delete_failures=1 if rng.random() < k.delete_fail else 0)
            try:
                await FakeBrev.delete_instance(self, name_or_id)
            finally:
                record = self.deletes[-1] if self.deletes else None
                if record is not None and record.target == name_or_id:
                    self.sim.trace(f"brev delete {name_or_id} -> {record.outcome} {record.id or ''}")
                    if record.outcome == "accepted" and record.id is not None:
                        self.sim.delete_accepted(record.id)

        return await self._call("delete", name_or_id, call, mutates=True)

    async def start_instance(self, name: str) -> None:
        return await self._call("start", name, lambda: FakeBrev.start_instance(self, name), mutates=True)

    async def ssh_exec(
        self,
        instance: str,
        command: str,
        *,
        timeout: float,  # noqa: ASYNC109
        own_connection: bool = False,
    ) -> ExecResult:
        return await self._call(
            "exec",
            instance,
            lambda: FakeBrev.ssh_exec(self, instance, command, timeout=timeout),
            mutates=False,
        )

    async def put_file(
        self,
        instance: str,
        remote_path: str,
        content: bytes,
        *,
        mode: int = 0o600,
        timeout: float,  # noqa: ASYNC109
    ) -> None:
        return await self._call(
            "put",
            instance,
            lambda: FakeBrev.put_file(self, instance, remote_path, content, mode=mode, timeout=timeout),
            mutates=False,
        )

    def exec_gate(self, instance: str, op: str, timeout: float) -> Any:
        k = self.sim.knobs
        rng = self.sim.rng
        hang, fail = rng.random() < k.exec_hang, rng.random() < k.exec_fail
        self.set_faults(exec_hangs=int(hang), exec_failures=int(fail))
        try:
            inst = None
            for candidate in self._match(instance, self.instances.values()):
                inst = candidate
            if inst is not None and (hang or fail):
                self.exec_faulted_at[inst.id] = self.clock.monotonic()
            if inst is not None and self.sim.unreachable(inst):
                self.execs_refused += 1
                self.set_faults(exec_failures=1)
            return FakeBrev.exec_gate(self, instance, op, timeout)
        finally:
            self.set_faults(exec_hangs=0, exec_failures=0)

    execs_refused = 0
    exec_faulted_at: dict[str, float]  # instance id -> when an exec to it last hung or failed


# `brev create`'s type fallback (tests/brevsim/cli.py, shared/design/brev-cli.md): a type the CLI's
# availability check skips sends no request; a request that reached Brev and failed may have made it.
_TYPES = ("g6e.xlarge", "g6e.2xlarge")
_SKIP = (
    'Skipping: instance type "{t}" is currently unavailable (no capacity); '
    "try again later or run 'brev search' to find another type\n\n"
    "Type {t} had failures, trying next type...\n"
)


def _classified(name: str, fake: BrevTransientError, *, skipped_first: bool) -> Exception:
    """The error the real client raises for the CLI output of a failed create: every type
    skipped for capacity (FakeBrev's refusal), or a request that failed after Brev took it (the
    fake's timeout), with the first type skipped for capacity before it or not."""
    lines = [f"Instance types to try: {', '.join(_TYPES)}\n"]
    if fake.reason == "InsufficientCapacity":
        lines += [_SKIP.format(t=t) for t in _TYPES]
    else:
        if skipped_first:
            lines.append(_SKIP.format(t=_TYPES[0]))
        t = _TYPES[1]
        lines += [
            f"[Worker 1] Trying {t} for instance '{name}'...\n",
            f"[Worker 1] {t} Failed: {fake.cli_message or 'context deadline exceeded'}\n",
        ]
    lines += ["Warning: Only created 0/1 instances\n", "Error: could only create 0/1 instances\n"]
    try:
        output.create_outcome(name, RunResult(1, "", "".join(lines), 0.0))
    except Exception as exc:  # whatever the parser makes of it is what the real client raises
        return exc
    return AssertionError(f"a failed create classified as a success: {lines}")


SIM_EPOCHS = 10  # epochs a simulated run's status.json counts over its run time


class SimWorkload(FakeWorkload):
    """The fake remote job; every remote call pays its time on the loop, and `docker wait`
    waits on the loop (other passes run meanwhile) instead of moving the clock."""

    world: SimBrev

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
        world = self.world
        sim = world.sim
        seconds = self._wait_seconds(timeout_s, deadline)
        await sim.latency()
        sim.alive_caller()
        try:
            inst = self._gate("docker wait", seconds + self.settings.wait_margin, deadline)
        finally:
            await sim.pay()
        container = inst.containers.get(self.container)
        if container is None:
            raise ContainerNotFound(f"container {self.container} is not on {self.instance}")
        clock = world.clock
        if container.running:
            ends = container.started_at + container.run_s
            await asyncio.sleep(min(max(0.0, ends - clock.monotonic()), seconds))
            container.settle(clock.monotonic())
        if self.step is not None and container.exited_at is not None:
            world.step_outputs.add((inst.id, self.job_id, self.step))
        await sim.latency()
        sim.alive_caller()
        lines: tuple[str, ...] = tuple(f"epoch {k} loss 0.{k}" for k in range(1, 4))
        leaked = sim.printed_secret(self.job_id)
        if leaked is not None:
            lines = (*lines, f"DEBUG env dump: {leaked}")
        lines = lines[-tail:]
        progress = None
        if progress_of is not None and container.run_s > 0:
            # TAO's status.json: SIM_EPOCHS epochs over the run, one line at the end of each.
            epoch_s = container.run_s / SIM_EPOCHS
            ran = (container.exited_at or clock.monotonic()) - container.started_at
            progress = epoch_progress(int(ran // epoch_s), SIM_EPOCHS, epoch_s)
        if container.running or container.exited_at is None:
            return ExitInfo(
                None, None, lines if tail_while_running else (), progress if progress_while_running else None
            )
        finished = clock.now() - timedelta(seconds=clock.monotonic() - container.exited_at)
        return ExitInfo(container.final_code, finished, lines, progress)

    async def start_container(self, *args: Any, **kwargs: Any) -> bool:
        world = self.world
        sim = world.sim
        rng = sim.rng
        run_s = rng.choice((60.0, 300.0, 1800.0, 5000.0))
        world.set_faults(
            run_s=sim.run_near_budget(self.job_id, self.instance) or run_s,
            # 1 is in the jobs' retryOnExitCodes (upload, then the next attempt); 137 is not (the
            # operator asks whether the instance is lost or the training failed).
            exit_code=rng.choice((1, 137)) if rng.random() < sim.knobs.exit_nonzero else 0,
        )
        program_failure = sim.program_failure(self.job_id)
        if program_failure is not None:  # a job that keeps its instance on failure: fail it often
            world.set_faults(exit_code=program_failure)
        started: bool = await _paid(FakeWorkload.start_container)(self, *args, **kwargs)
        if started:
            sim.container_started(self.container, self.instance)
        return started


def _paid(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """A fake remote call made on the loop: latency both ways, time owed paid, dead callers
    stopped."""

    async def call(self: SimWorkload, *args: Any, **kwargs: Any) -> T:
        sim = self.world.sim
        sim.alive_caller()
        await sim.latency()
        sim.maybe_crash(process(), f"before {method.__name__} on {self.instance}")
        sim.alive_caller()
        try:
            return await method(self, *args, **kwargs)
        finally:
            await sim.pay()
            await sim.latency()
            sim.alive_caller()

    call.__name__ = method.__name__
    return call


for _name in (
    "probe",
    "write_spec",
    "pull_image",
    "pull_images",
    "restore_steps",
    "stage_inputs",
    "stop_container",
    "upload_results",
    "sync_checkpoints",
    "restore_checkpoints",
    "clear",
):
    setattr(SimWorkload, _name, _paid(getattr(FakeWorkload, _name)))


class SimRunner(ActionRunner):
    """The real ActionRunner with the lanes a deployment configures; the remote job in memory."""

    def __init__(self, world: SimBrev, directory: InstanceDirectory, lanes: Lanes) -> None:
        super().__init__(world, directory, lanes=lanes)
        self.world = world

    def _workload(self, instance: str, job: JobContext, step: str | None = None) -> Workload:
        return SimWorkload(self.world, instance, job.job_id, settings=self._wl_settings, step=step)


class SimKube(FakeKube):
    """One API server for every replica: status patches with latency and 409/5xx, watch events
    delivered to each replica late (and so coalesced: a replica reads the object as it is when
    the event arrives), Secrets, ConfigMaps, and the Events every replica posts."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__()
        self.sim = sim
        self.watchers: list[Callable[[str, str], None]] = []

    def changed(self, namespace: str, name: str) -> None:
        for watcher in list(self.watchers):
            watcher(namespace, name)

    def create(self, namespace: str, name: str, uid: str, spec: Mapping[str, Any], **kw: Any) -> Any:
        obj = super().create(namespace, name, uid, spec, **kw)
        self.changed(namespace, name)
        return obj

    def request_delete(self, namespace: str, name: str) -> None:
        super().request_delete(namespace, name)
        self.changed(namespace, name)

    def annotate(self, namespace: str, name: str, key: str, value: str) -> None:
        super().annotate(namespace, name, key, value)
        self.changed(namespace, name)

    def release(self, namespace: str, name: str) -> None:
        obj = self.objects.get((namespace, name))
        super().release(namespace, name)
        if obj is not None:
            self.sim.released(obj)
        self.changed(namespace, name)

    async def _api(self) -> None:
        sim = self.sim
        sim.alive_caller()
        await sim.latency()
        sim.alive_caller()

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        sim = self.sim
        proc = sim.alive_caller()
        await sim.latency()
        sim.maybe_crash(proc, f"before patching {namespace}/{name}")
        sim.alive_caller()
        if sim.rng.random() < sim.knobs.patch_conflict:
            sim.trace(f"kube patch {namespace}/{name} -> 503")
            raise KubeUnavailable(
                f"patching the status of TaoBrevJob {namespace}/{name}: 503 Service Unavailable"
            )
        obj = self.objects.get((namespace, name))
        before = None if obj is None else obj.status
        # What the operator's client sends (controller/kube/access.py redacts at the sink), not the raw
        # status: the fake stands for the API server, the sink is the operator's own code.
        ok = await super().patch_status(namespace, name, redact_status(status))
        if ok and obj is not None:
            sim.status_written(proc, obj, before or {}, obj.status)
            self.changed(namespace, name)
        await sim.latency()
        sim.alive_caller()
        return ok

    async def read_secret(
        self, namespace: str, name: str, *, operator_own: bool = False
    ) -> Mapping[str, bytes] | None:
        await self._api()
        return await super().read_secret(namespace, name, operator_own=operator_own)

    async def list_jobs(
        self, namespaces: Sequence[str] = (), *, page_size: int = 500, finished: bool | None = None
    ) -> list[dict[str, Any]]:
        await self._api()
        return await super().list_jobs(namespaces, page_size=page_size, finished=finished)

    async def read_config_map(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        await self._api()
        return await super().read_config_map(namespace, name)

    async def write_config_map(
        self, namespace: str, name: str, data: Mapping[str, str], resource_version: str | None
    ) -> None:
        await self._api()
        await super().write_config_map(namespace, name, data, resource_version)
        self.sim.trace(f"kube configmap {namespace}/{name} written ({len(data)} entries)")

    async def namespace_annotations(self, name: str) -> Mapping[str, str] | None:
        await self._api()
        return await super().namespace_annotations(name)

    def snapshot(self, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self.objects.get((namespace, name))
        # body() builds new metadata each time and statuses are replaced, never mutated
        # (tests/fakes/kube.py): a watch event's body needs no deep copy.
        return None if obj is None else obj.body()


class SimLeaseStore:
    """One deployment's Lease in the shared API server, as `KubeLeaseStore` reads and writes it.
    A replica cut off from the API server (`partitioned_until`) times out on every call."""

    def __init__(self, sim: Simulation, name: str) -> None:
        self.sim = sim
        self.name = name
        self.record: LeaseRecord | None = None
        self.version = 0

    async def _reach(self) -> None:
        sim = self.sim
        proc = sim.alive_caller()
        if proc is not None and sim.rng.random() < sim.knobs.lease_partition and not sim.healed:
            proc.partitioned_until = sim.clock.monotonic() + sim.rng.uniform(5, 60)
            sim.availability.cut_off(proc.name, sim.clock.monotonic(), proc.partitioned_until)
            sim.trace(f"{proc.name} cut off from the API server until {proc.partitioned_until:.1f}")
        await sim.latency()
        sim.alive_caller()
        if proc is not None and sim.clock.monotonic() < proc.partitioned_until:
            await asyncio.sleep(30)  # the request hangs; the elector's own timeout ends it first
            raise TimeoutError("lease request timed out")

    def _bump(self, record: LeaseRecord) -> LeaseRecord:
        self.version += 1
        previous = self.record
        self.record = LeaseRecord(
            record.holder,
            record.duration_seconds,
            record.acquire_time,
            record.renew_time,
            record.transitions,
            str(self.version),
        )
        if record.holder and (previous is None or previous.holder != record.holder):
            self.sim.trace(f"lease {self.name} held by {record.holder}")
        return self.record

    async def get(self) -> LeaseRecord | None:
        await self._reach()
        return self.record

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        await self._reach()
        if self.record is not None:
            raise LeaseConflict("exists")
        return self._bump(record)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        await self._reach()
        if self.record is None or self.record.resource_version != record.resource_version:
            raise LeaseConflict("stale resourceVersion")
        return self._bump(record)

    def held_by(self, holder: str, now: datetime) -> bool:
        """Whether `holder` holds the Lease at `now` as the API server records it."""
        rec = self.record
        if rec is None or rec.holder != holder or rec.renew_time is None:
            return False
        return now < rec.renew_time + timedelta(seconds=rec.duration_seconds)
