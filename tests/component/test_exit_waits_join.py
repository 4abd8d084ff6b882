"""Exit waits outlive a cancelled pass and the job's next pass joins them (effects/exit_waits.py).

The failover bench's restart at 1,000 running lost its Lease twelve times while re-arming: each
loss cancelled every pass, killed its `docker wait` ssh and opened a new one in the next term,
and that CPU lost the Lease again. Here, through the real ActionRunner, Workload and lanes over a
Brev client whose waits hang until released: a cancelled pass leaves its wait running and the
next one joins it (one remote call), unless the wait could no longer be trusted or would overrun
the new pass's deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from controller.brev.client import ExecResult
from controller.effects.actions import ActionRunner
from controller.effects.directory import InstanceDirectory
from controller.effects.lanes import Lane, Lanes
from controller.lifecycle.steps import Action, DeleteInstance, Observation, StartContainer, WaitForExit
from tests.component.test_lanes import GUARD_S, HangingBrev, guarded, job
from tests.fixtures.polling import until_async

INSTANCE = "tbj-w"


@dataclass
class CountingBrev(HangingBrev):
    """HangingBrev that also counts the remote waits it was asked for and those cancelled."""

    cancelled: list[str] = field(default_factory=list)

    async def ssh_exec(
        self,
        instance: str,
        command: str,
        *,
        timeout: float,  # noqa: ASYNC109
        own_connection: bool = False,
    ) -> ExecResult:
        try:
            return await super().ssh_exec(instance, command, timeout=timeout, own_connection=own_connection)
        except asyncio.CancelledError:
            self.cancelled.append(command)
            raise

    def waits(self) -> list[str]:
        return [c for _, c in self.started if "docker wait" in c]


class World:
    def __init__(self, slots: int = 2) -> None:
        self.brev = CountingBrev(hung={INSTANCE})
        self.lanes = Lanes.uniform(slots)
        self.runner = ActionRunner(self.brev, InstanceDirectory(self.brev), lanes=self.lanes)

    def act(self, actions: list[Action], deadline: datetime | None = None) -> Awaitable[Observation]:
        return self.runner.run(actions, job("w"), Observation(now=datetime.now(UTC)), deadline=deadline)

    async def cancelled_wait(self, deadline: datetime | None = None) -> None:
        """A pass whose wait is in flight on the instance, cancelled (Lease lost, daemon restarted)."""
        before = len(self.brev.waits())
        first = asyncio.ensure_future(self.act([WaitForExit(INSTANCE, 300)], deadline))
        await until_async(lambda: len(self.brev.waits()) == before + 1, "the wait on the instance")
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)


def test_the_next_pass_joins_the_wait_a_cancelled_pass_left_running() -> None:
    async def scenario() -> None:
        w = World()
        await w.cancelled_wait()
        assert w.brev.cancelled == []  # the ssh carrying it was not killed
        second = asyncio.ensure_future(w.act([WaitForExit(INSTANCE, 300)]))
        for _ in range(50):
            await asyncio.sleep(0)
        assert len(w.brev.waits()) == 1  # joined: no second connection
        w.brev.release.set()
        obs = await guarded(second)
        assert obs.failure is None
        assert obs.exit_code == 0
        assert len(w.runner.exit_waits) == 0
        assert w.lanes.gate(Lane.WAIT).in_flight == 0

    asyncio.run(scenario())


def test_a_new_container_of_the_same_name_ends_the_older_wait() -> None:
    # Joining it would report the previous container's exit as the new one's.
    async def scenario() -> None:
        w = World()
        await w.cancelled_wait()
        w.brev.hung.discard(INSTANCE)  # the start answers at once
        started = await guarded(w.act([StartContainer(INSTANCE)]))
        assert started.container_started
        assert len(w.brev.cancelled) == 1
        assert "docker wait" in w.brev.cancelled[0]
        obs = await guarded(w.act([WaitForExit(INSTANCE, 300)]))
        assert obs.exit_code == 0
        assert len(w.brev.waits()) == 2

    asyncio.run(scenario())


def test_a_pass_whose_wait_must_end_sooner_starts_its_own() -> None:
    # decide() shortens the wait to what is left of the budget or until the next checkpoint
    # sync: the wait in flight would return later than that, so it is not joined.
    async def scenario() -> None:
        w = World()
        await w.cancelled_wait()
        second = asyncio.ensure_future(w.act([WaitForExit(INSTANCE, 100)]))
        await until_async(lambda: len(w.brev.waits()) == 2, "a second wait")
        await until_async(lambda: len(w.brev.cancelled) == 1, "the first wait cancelled")
        w.brev.release.set()
        assert (await guarded(second)).exit_code == 0

    asyncio.run(scenario())


def test_a_wait_that_reads_something_else_is_not_joined() -> None:
    async def scenario() -> None:
        w = World()
        await w.cancelled_wait()
        progress = WaitForExit(INSTANCE, 300, progress_of="train", progress=True)
        second = asyncio.ensure_future(w.act([progress]))
        await until_async(lambda: len(w.brev.waits()) == 2, "a second wait")
        w.brev.release.set()
        await guarded(second)
        assert len(w.brev.cancelled) == 1

    asyncio.run(scenario())


def test_a_wait_queued_for_its_lane_never_starts_once_its_pass_is_cancelled() -> None:
    async def scenario() -> None:
        w = World(slots=1)
        freed = asyncio.Event()

        async def occupy() -> None:  # another job's wait holds the lane's only slot
            async with w.lanes.hold(Lane.WAIT):
                await freed.wait()

        other = asyncio.ensure_future(occupy())
        await until_async(lambda: w.lanes.gate(Lane.WAIT).in_flight == 1, "the lane full")
        queued = asyncio.ensure_future(w.act([WaitForExit(INSTANCE, 300)]))
        await until_async(lambda: w.lanes.gate(Lane.WAIT).waiting == 1, "a queued wait")
        queued.cancel()
        await asyncio.gather(queued, return_exceptions=True)
        freed.set()
        await asyncio.wait_for(other, GUARD_S)
        for _ in range(50):
            await asyncio.sleep(0)
        assert w.brev.waits() == []
        assert len(w.runner.exit_waits) == 0

    asyncio.run(scenario())


def test_the_jobs_teardown_and_the_operators_cleanup_end_the_waits_left_running() -> None:
    async def scenario() -> None:
        w = World()
        await w.cancelled_wait()
        obs = await guarded(w.act([DeleteInstance("i-w")]))
        assert obs.delete_requested
        await until_async(lambda: len(w.brev.cancelled) == 1, "the wait cancelled by the delete")
        assert len(w.runner.exit_waits) == 0

        await w.cancelled_wait()
        await guarded(w.runner.exit_waits.close())  # kopf's cleanup handler at shutdown
        assert len(w.brev.cancelled) == 2
        assert len(w.runner.exit_waits) == 0

    asyncio.run(scenario())
