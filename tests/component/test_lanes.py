"""Lanes (issue 11.1) through the real ActionRunner and Workload over a fake Brev client whose long
calls (probes, pulls, uploads) hang until the test releases them — no sleeps, no wall time.

With every long-work slot held by hung calls, another job's teardown, create, container start and
the shared listing still complete; with the deprecated single pool the same delete queues behind
them (what the lanes fixed). A probe queued behind a full lane fails transiently at its phase
deadline (the lane's expiry is an injected sleep the test fires) instead of overrunning it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from controller.brev.client import CreateRequest, CreateResult, ExecResult, Instance, SearchResult
from controller.effects.actions import ActionRunner, JobContext
from controller.effects.directory import InstanceDirectory
from controller.effects.lanes import LANES, Lane, Lanes
from controller.lifecycle.steps import (
    Action,
    CleanupWorkload,
    CreateInstance,
    DeleteInstance,
    Observation,
    PrepareWorkload,
    ProbeExec,
    StartContainer,
    StopContainer,
    UploadResults,
    WaitForExit,
)
from tests.fixtures.polling import until_async
from tests.unit.fake_exec import GONE, FakeClient, healthy_answer
from tests.unit.test_actions_secrets import SECRETS, _spec

T = TypeVar("T")
SLOTS = 2
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
# A guard against a deadlock hanging the suite, not a speed assertion: everything here is
# in-memory and completes in milliseconds or never.
GUARD_S = 30.0


@dataclass
class HangingBrev:
    """A BrevClient: commands on `hung` instances never return until `release` is set; the rest
    answer at once as a healthy instance would."""

    hung: set[str] = field(default_factory=set)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    started: list[tuple[str, str]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    creates: list[str] = field(default_factory=list)
    listings: int = 0

    async def ssh_exec(
        self,
        instance: str,
        command: str,
        *,
        timeout: float,  # noqa: ASYNC109
        own_connection: bool = False,
    ) -> ExecResult:
        self.started.append((instance, command))
        if instance in self.hung:
            await self.release.wait()
        out = healthy_answer(command)
        marker = f"\n{GONE}\n" if GONE in command else ""
        return ExecResult(0, out + marker)

    async def put_file(
        self,
        instance: str,
        remote_path: str,
        content: bytes,
        *,
        mode: int = 0o600,
        timeout: float,  # noqa: ASYNC109
    ) -> None:
        return None

    async def ensure_login(self) -> None: ...

    async def version(self) -> str:
        return "v0"

    async def identity(self) -> str:
        return "fake-identity"

    async def list_instances(self) -> Sequence[Instance]:
        self.listings += 1
        return [Instance(name="tbj-e", id="i-e", status="RUNNING")]

    async def get_instance(self, name: str) -> Instance | None:
        return None

    async def create_instance(self, request: CreateRequest) -> CreateResult:
        self.creates.append(request.name)
        return CreateResult(request.name, False)

    async def delete_instance(self, name_or_id: str) -> None:
        self.deletes.append(name_or_id)

    async def start_instance(self, name: str) -> None: ...

    async def refresh(self) -> None: ...

    async def search(
        self, *, gpu_name: str | None = None, min_vram: float | None = None
    ) -> Sequence[SearchResult]:
        return []


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def job(name: str) -> JobContext:
    return JobContext("ns", name, f"job-{name}", _spec(), SECRETS)


async def guarded(aw: Awaitable[T]) -> T:
    return await asyncio.wait_for(aw, GUARD_S)


class World:
    """One runner, its lanes, and hung long work from other jobs filling every long lane."""

    def __init__(self, lanes: Lanes) -> None:
        self.brev = HangingBrev(hung={"tbj-a", "tbj-b", "tbj-c", "tbj-d", "tbj-u", "tbj-v"})
        self.lanes = lanes
        self.directory = InstanceDirectory(self.brev)
        self.runner = ActionRunner(self.brev, self.directory, lanes=lanes)
        self.hung: list[asyncio.Task[Observation]] = []

    def act(
        self, actions: Sequence[Action], name: str, deadline: datetime | None = None
    ) -> Awaitable[Observation]:
        return self.runner.run(actions, job(name), Observation(now=NOW), deadline=deadline)

    async def fill_long_lanes(self) -> None:
        long_work: list[tuple[Action, str]] = [
            (ProbeExec("tbj-a"), "a"),
            (ProbeExec("tbj-b"), "b"),
            (PrepareWorkload("tbj-c"), "c"),
            (PrepareWorkload("tbj-d"), "d"),
            (UploadResults("tbj-u"), "u"),
            (UploadResults("tbj-v"), "v"),
        ]
        self.hung = [asyncio.ensure_future(self.act([action], name)) for action, name in long_work]
        await until_async(lambda: len(self.brev.started) == len(long_work), "the long work started")

    async def finish(self) -> None:
        """Release the hung calls; each returns (what it returns is not this file's concern)."""
        self.brev.release.set()
        await guarded(asyncio.gather(*self.hung))


def test_teardown_create_start_and_listing_never_wait_behind_hung_probes_pulls_and_uploads() -> None:
    async def scenario() -> None:
        w = World(Lanes.uniform(SLOTS))
        await w.fill_long_lanes()
        for lane in (Lane.PROBE, Lane.PULL, Lane.UPLOAD):
            assert w.lanes.gate(lane).in_flight == SLOTS
        teardown: list[Action] = [
            StopContainer("tbj-e"),
            CleanupWorkload("tbj-e", must_succeed=True),
            DeleteInstance("i-e"),
        ]
        obs = await guarded(w.act(teardown, "e"))
        assert obs.failure is None
        assert obs.container_stopped
        assert obs.delete_requested
        created = await guarded(w.act([CreateInstance(CreateRequest(name="tbj-f"))], "f"))
        assert created.created
        started = await guarded(w.act([StartContainer("tbj-g")], "g"))
        assert started.container_started
        seen = await guarded(w.directory.find("tbj-e", None, max_age=0))
        assert seen.known
        # ... all while every long call is still hung.
        assert not any(t.done() for t in w.hung)
        assert w.brev.deletes == ["i-e"]
        await w.finish()
        for lane in LANES:
            assert w.lanes.gate(lane).in_flight == 0

    run(scenario())


def test_with_the_deprecated_single_pool_the_same_delete_queues_behind_them() -> None:
    # The behaviour the lanes replaced (TAOBREV_MAX_CONCURRENT_BREV_CALLS): one pool for all.
    async def scenario() -> None:
        sizes = {lane: (SLOTS, f"TAOBREV_LANE_{lane.upper()}") for lane in LANES}
        w = World(Lanes(sizes, shared=(3 * SLOTS, "TAOBREV_MAX_CONCURRENT_BREV_CALLS")))
        await w.fill_long_lanes()
        delete = asyncio.ensure_future(w.act([DeleteInstance("i-e")], "e"))
        await until_async(lambda: w.lanes.gate(Lane.DELETE).waiting == 1, "a queued delete")
        assert not delete.done()
        assert w.brev.deletes == []
        await w.finish()
        assert (await guarded(delete)).delete_requested

    run(scenario())


def test_a_probe_queued_behind_a_full_lane_fails_transiently_at_its_deadline() -> None:
    async def scenario() -> None:
        expiries: list[float] = []
        deadline_passed = asyncio.Event()

        async def sleep(seconds: float) -> None:
            expiries.append(seconds)
            await deadline_passed.wait()

        w = World(Lanes.uniform(SLOTS, sleep=sleep))
        await w.fill_long_lanes()
        deadline = datetime.now(UTC) + timedelta(seconds=600)
        probe = asyncio.ensure_future(w.act([ProbeExec("tbj-q")], "q", deadline))
        await until_async(lambda: bool(expiries), "an expiry")
        assert w.lanes.gate(Lane.PROBE).waiting == 1
        # It waits for a slot no longer than the phase has left.
        (expiry,) = expiries
        assert 590 < expiry <= 600
        deadline_passed.set()
        obs = await guarded(probe)
        assert obs.failure is not None
        assert obs.failure.action == "ProbeExec"
        assert obs.failure.reason == "LaneBusy"
        assert not obs.failure.permanent
        assert "probe lane" in obs.failure.message
        assert obs.probe_ok is None
        # Never started on the instance: no call runs past the phase's deadline.
        assert all(inst != "tbj-q" for inst, _ in w.brev.started)
        assert w.lanes.gate(Lane.PROBE).waiting == 0
        await w.finish()

    run(scenario())


def test_a_queued_call_whose_pass_is_cancelled_leaves_no_slot_behind() -> None:
    async def scenario() -> None:
        w = World(Lanes.uniform(SLOTS))
        await w.fill_long_lanes()
        queued = asyncio.ensure_future(
            w.act([ProbeExec("tbj-q")], "q", datetime.now(UTC) + timedelta(seconds=600))
        )
        await until_async(lambda: w.lanes.gate(Lane.PROBE).waiting == 1, "a queued probe")
        queued.cancel()
        await asyncio.wait({queued})
        assert w.lanes.gate(Lane.PROBE).waiting == 0
        await w.finish()
        assert w.lanes.gate(Lane.PROBE).in_flight == 0
        # Every slot is free again: a full lane's worth of probes gets in at once.
        w.brev.hung.clear()
        results = await guarded(
            asyncio.gather(*(w.act([ProbeExec(f"tbj-{i}")], f"p{i}") for i in range(SLOTS)))
        )
        assert all(r.probe_ok for r in results)

    run(scenario())


def test_a_restart_that_must_re_pull_never_holds_one_slot_while_queueing_for_another() -> None:
    """WaitForExit finds no container -> docker run finds no image -> pull -> docker run: three
    lanes, one after the other. With ONE slot shared by every lane, holding a slot while asking
    for the next would deadlock; the deadlock guard would then fail the test."""

    def answer(command: str) -> tuple[int, str]:
        if command.startswith("timeout "):
            return 1, "Error response from daemon: No such container: job-r\n"
        if "docker login" in command:
            pulled.append(True)
            return 0, "TAOBREV_STEP login\nLogin Succeeded\nTAOBREV_STEP manifest\nTAOBREV_STEP pull\n"
        if "docker run -d" in command and not pulled:
            return 3, "TAOBREV_IMAGE_MISSING\n"
        return 0, "0123abcd\n"

    async def scenario(lanes: Lanes) -> Observation:
        client = FakeClient(answer=answer)
        runner = ActionRunner(client, InstanceDirectory(client), lanes=lanes)
        action = WaitForExit("tbj-r", timeout_seconds=30)
        return await guarded(runner.run([action], job("r"), Observation(now=NOW)))

    one = {lane: (1, f"TAOBREV_LANE_{lane.upper()}") for lane in LANES}
    for lanes in (Lanes(one), Lanes(one, shared=(1, "TAOBREV_MAX_CONCURRENT_BREV_CALLS"))):
        pulled: list[bool] = []
        obs = run(scenario(lanes))
        assert obs.failure is None
        assert obs.container_started
        assert pulled == [True]
        assert lanes.gate(Lane.START).in_flight == 0
