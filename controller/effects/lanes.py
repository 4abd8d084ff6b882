"""Bounded lanes for Brev calls: each kind of call waits only behind calls of its own kind.

One shared pool let a burst of probes (a first exec lasts 600 s and more) and pulls (up to an
hour) hold every slot while finished jobs waited to be deleted, still billing. Each lane is its
own semaphore, sized by its own setting (TAOBREV_LANE_*): teardown, create and start lanes are
short calls that never queue behind transfers; the long lanes are sized for throughput and bound
how many child processes the operator keeps (each call in flight is one `brev`/`ssh` process).

A caller with a phase budget (an aware `deadline`) waits for a slot only until that deadline: a
slot not obtained in time is a `LaneBusy` TransientError naming the lane, never a hang, and the
time spent waiting is deducted from the call's own timeout (the remote step computes its timeout
from the same deadline when it starts). The shared `brev ls` (controller/effects/directory.py) takes no
lane at all: it is single-flight, so at most one listing is ever in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol

from controller.api import reasons
from controller.api.errors import TransientError


class Lane(StrEnum):
    CREATE = "create"  # brev create / brev start of an instance
    START = "start"  # docker run of the training container
    PROBE = "probe"  # the exec probe of a new instance (a first exec takes 600 s and more)
    PULL = "pull"  # registry login + image pull + input staging
    UPLOAD = "upload"  # results + logs upload and its verification
    CHECKPOINT = "checkpoint"  # checkpoint sync/restore (issue 12)
    WAIT = "wait"  # the bounded blocking `docker wait` of a running job
    STOP = "stop"  # docker stop, docker rm + removing the job's files
    DELETE = "delete"  # brev delete
    # TAOBREV_MAX_CONCURRENT_BREV_CALLS (deprecated): every lane but WAIT shares one pool, the
    # behaviour before lanes existed (head-of-line blocking included); kept as a baseline.
    SHARED = "shared"


# Lanes whose calls fill a phase with a time budget: they get the phase's remaining time (for the
# slot and the call). The others keep their own bounds: a spent budget must never keep a
# container from being stopped or an instance from being deleted, and a create cut short by a
# deadline would be ambiguous (it may already have reached Brev).
BUDGETED: frozenset[Lane] = frozenset({Lane.PROBE, Lane.PULL, Lane.UPLOAD, Lane.CHECKPOINT, Lane.START})


# The settings' defaults (controller/settings.py): the short lanes (create, start, stop, delete)
# absorb a burst of a few dozen jobs at once; the long ones (probe, pull, upload) are sized so a
# burst of ~100 jobs runs its transfers side by side instead of in waves (the work is on the
# instances; the operator only holds one ssh mux client per call, counted in the per-job memory
# bound); WAIT holds one blocking wait per running job, so it is sized for ~1,000 running jobs.
DEFAULT_SLOTS: Mapping[Lane, int] = {
    Lane.CREATE: 16,
    Lane.START: 16,
    Lane.PROBE: 128,
    Lane.PULL: 128,
    Lane.UPLOAD: 64,
    Lane.CHECKPOINT: 16,
    Lane.WAIT: 1024,
    Lane.STOP: 32,
    Lane.DELETE: 16,
}
LANES: tuple[Lane, ...] = tuple(DEFAULT_SLOTS)


class LaneBusy(TransientError):
    reason = reasons.LANE_BUSY


class LaneObserver(Protocol):
    """Where lane occupancy goes (controller.observability.metrics.Recorder)."""

    def lane_slots(self, lane: str, slots: int) -> None: ...

    def lane_state(self, lane: str, *, in_flight: int, waiting: int) -> None: ...

    def lane_waited(self, lane: str, seconds: float, *, obtained: bool) -> None: ...


class _NoObserver:
    def lane_slots(self, lane: str, slots: int) -> None:
        return None

    def lane_state(self, lane: str, *, in_flight: int, waiting: int) -> None:
        return None

    def lane_waited(self, lane: str, seconds: float, *, obtained: bool) -> None:
        return None


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Gate:
    """One lane's semaphore with its occupancy, for the metrics and the error text."""

    def __init__(
        self,
        name: str,
        slots: int,
        setting: str,
        *,
        observer: LaneObserver,
        clock: Callable[[], datetime],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        if slots < 1:
            raise ValueError(f"{setting}={slots}: a lane needs at least 1 slot")
        self.name = name
        self.slots = slots
        self.setting = setting
        self.in_flight = 0
        self.waiting = 0
        self._sem = asyncio.Semaphore(slots)
        self._observer = observer
        self._clock = clock
        self._sleep = sleep
        observer.lane_slots(name, slots)
        self._report()

    def _report(self) -> None:
        self._observer.lane_state(self.name, in_flight=self.in_flight, waiting=self.waiting)

    @contextlib.asynccontextmanager
    async def hold(self, deadline: datetime | None = None) -> AsyncIterator[None]:
        """A slot for the body; waits at most until `deadline` (aware), else raises LaneBusy."""
        started = self._clock()
        self.waiting += 1
        self._report()
        try:
            obtained = await self._acquire(deadline)
        except BaseException:  # cancelled while queued (a pass cut short, leadership lost)
            self.waiting -= 1
            self._report()
            raise
        self.waiting -= 1
        waited = max(0.0, (self._clock() - started).total_seconds())
        self._observer.lane_waited(self.name, waited, obtained=obtained)
        if not obtained:
            self._report()
            raise LaneBusy(
                f"no free slot in the {self.name} lane before the phase's deadline (waited "
                f"{waited:.0f}s, {self.in_flight} of {self.slots} in flight); will retry while the "
                f"phase has time left — raise {self.setting} if this lane is often full "
                f"(taobrev_lane_busy)"
            )
        self.in_flight += 1
        self._report()
        try:
            yield
        finally:
            self.in_flight -= 1
            self._sem.release()
            self._report()

    async def _acquire(self, deadline: datetime | None) -> bool:
        if deadline is None or not self._sem.locked():
            await self._sem.acquire()
            return True
        remaining = (deadline - self._clock()).total_seconds()
        if remaining <= 0:
            return False
        acquire = asyncio.ensure_future(self._sem.acquire())
        expiry = asyncio.ensure_future(self._sleep(remaining))
        try:
            await asyncio.wait({acquire, expiry}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # Cancelled while queued: never leak a slot that was granted in the meantime.
            expiry.cancel()
            if acquire.done() and not acquire.cancelled():
                self._sem.release()
            acquire.cancel()
            raise
        expiry.cancel()
        if acquire.done():
            return True
        # Semaphore.acquire hands a slot granted at the same moment back when cancelled.
        acquire.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await acquire
        return False


class Lanes:
    """Every lane of one operator. `sizes` maps each lane to its slots and the setting naming it;
    `shared` (the deprecated single pool) puts every lane but WAIT behind one gate of that size."""

    def __init__(
        self,
        sizes: Mapping[Lane, tuple[int, str]],
        *,
        shared: tuple[int, str] | None = None,
        observer: LaneObserver | None = None,
        clock: Callable[[], datetime] = _utcnow,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        obs = observer or _NoObserver()
        missing = set(LANES) - set(sizes)
        if missing:
            raise ValueError(f"lane sizes missing for {sorted(missing)}")

        def gate(name: str, size: tuple[int, str]) -> Gate:
            return Gate(name, size[0], size[1], observer=obs, clock=clock, sleep=sleep)

        one = gate(Lane.SHARED, shared) if shared is not None else None
        self._gates: dict[Lane, Gate] = {
            lane: one if one is not None and lane != Lane.WAIT else gate(lane, size)
            for lane, size in sizes.items()
            if lane != Lane.SHARED
        }

    @classmethod
    def uniform(
        cls,
        slots: int,
        *,
        clock: Callable[[], datetime] = _utcnow,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> Lanes:
        """Every lane with the same number of slots (tests, fakes)."""
        return cls({lane: (slots, f"lane {lane}") for lane in LANES}, clock=clock, sleep=sleep)

    @classmethod
    def defaults(cls) -> Lanes:
        return cls({lane: (DEFAULT_SLOTS[lane], f"TAOBREV_LANE_{lane.upper()}") for lane in LANES})

    def gate(self, lane: Lane) -> Gate:
        return self._gates[lane]

    def hold(
        self, lane: Lane, deadline: datetime | None = None
    ) -> contextlib.AbstractAsyncContextManager[None]:
        return self._gates[lane].hold(deadline)
