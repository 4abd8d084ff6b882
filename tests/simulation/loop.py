"""An asyncio event loop on virtual time whose ready queue is ordered by a seeded RNG.

Time: `time()` is the simulation's clock; when nothing is ready the clock jumps to the next
timer (nothing ever blocks on a real selector, so a day of operator time takes milliseconds).
Order: every iteration's batch of ready callbacks runs in an order drawn from the RNG, so one
seed is one interleaving, and another seed another (the real loop promises no order between
tasks either). A run is a pure function of its seed.

A stall (`stalls`, Knobs.loop_stall_every) moves the clock while callbacks are ready, as a loop
starved of CPU lives it: a deadline passes before the task that would meet it runs.

Each callback runs in the contextvars context it was scheduled with; the simulation keeps the
operator process (replica) that owns a task there, and the loop swaps that process's private
state (its secret registry: controller.observability.logs is process-wide by design) in before the callback
runs and out after it, so two replicas in one Python process do not share what only one loaded.
"""

from __future__ import annotations

import asyncio
import heapq
import random
from collections.abc import Callable
from typing import Any, Protocol


class Deadlock(RuntimeError):
    """Nothing is ready and no timer is pending, yet the awaited work is not done."""


class Stalls(Protocol):
    """When the loop stalls next (virtual time; None: never) and by how much when it does."""

    at: float | None

    def stall(self) -> float: ...


class Clock(Protocol):
    elapsed: float


class ContextSwitch(Protocol):
    def enter(self, context: Any) -> None: ...

    def leave(self, context: Any) -> None: ...


class SimLoop(asyncio.BaseEventLoop):
    def __init__(self, clock: Clock, rng: random.Random, switch: ContextSwitch | None = None) -> None:
        super().__init__()
        self.sim_clock = clock
        self.rng = rng
        self.switch = switch
        self.iterations = 0
        self.after_iteration: Callable[[], None] | None = None
        self.stalls: Stalls | None = None

    # -- virtual time -------------------------------------------------------------------------

    def time(self) -> float:
        return self.sim_clock.elapsed

    def _process_events(self, event_list: Any) -> None:  # no I/O in the simulation
        return None

    def _write_to_self(self) -> None:
        return None

    def _run_once(self) -> None:
        scheduled = self._scheduled  # type: ignore[attr-defined]
        ready = self._ready  # type: ignore[attr-defined]
        while scheduled and scheduled[0]._cancelled:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
        if not ready and not self._stopping:  # type: ignore[attr-defined]
            if not scheduled:
                raise Deadlock("no callback is ready and no timer is pending")
            when = scheduled[0]._when
            self.sim_clock.elapsed = max(self.sim_clock.elapsed, when)
        now = self.sim_clock.elapsed
        while scheduled and scheduled[0]._when <= now:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            if not handle._cancelled:
                ready.append(handle)
        batch = list(ready)
        ready.clear()
        if len(batch) > 1:  # a shuffle of one draws nothing from the RNG: same seed, same run
            self.rng.shuffle(batch)
        switch = self.switch
        stalls = self.stalls
        for handle in batch:
            if handle._cancelled:
                continue
            if stalls is not None and stalls.at is not None and self.sim_clock.elapsed >= stalls.at:
                # Starved: time passes between two ready callbacks, and timers fall due meanwhile.
                self.sim_clock.elapsed += stalls.stall()
            if switch is None:
                handle._run()
                continue
            context = handle._context
            switch.enter(context)
            try:
                handle._run()
            finally:
                switch.leave(context)
        self.iterations += 1
        if self.after_iteration is not None:
            self.after_iteration()

    # Nothing here may touch threads or the OS.
    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> Any:  # type: ignore[override]
        raise RuntimeError(f"the simulation has no threads: {func!r} would run in an executor")
