"""Exit waits that outlive the pass which started them, so the job's next pass joins them.

A running job's pass spends its life in one `docker wait` over an ssh connection of its own. When
the pass is cancelled (the Lease was lost, kopf restarted the daemon), killing that ssh and
opening a new one in the next pass costs a connection per job: at 1,000 running, a leader that
lost its Lease for a moment and took it back re-armed every wait again, and the CPU that took
made it lose the Lease again (twelve times in one restart on the failover bench). A wait only
reads, so a replica without the Lease may let it finish: it ends by its own remote timeout.

The next pass of the same job joins a wait still in flight if it would return no later than the
one the pass would start and reads the same things; otherwise that wait is cancelled and a new
one starts. A wait that has not got its lane slot when its pass is cancelled never starts. A new
container of the same name makes a wait older than it meaningless (`forget_job`), and so does
the job's teardown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from controller.brev.workload import ExitInfo

# job (namespace, name, uid), instance, workflow step: one wait at a time reads one container
Key = tuple[str, str, str, str, str | None]
# what the wait reads besides the exit: (tail while running, progress of, progress while running)
Shape = tuple[bool, str | None, bool]


@dataclass
class _Held:
    task: asyncio.Task[ExitInfo]
    shape: Shape
    ends: datetime  # the latest it returns (its remote timeout plus the transport margin)
    started: asyncio.Event  # set once it holds its lane slot


class ExitWaits:
    def __init__(self) -> None:
        self._held: dict[Key, _Held] = {}

    def __len__(self) -> int:
        return len(self._held)

    async def join_or_start(
        self,
        key: Key,
        shape: Shape,
        ends: datetime,
        wait: Callable[[asyncio.Event], Coroutine[Any, Any, ExitInfo]],
    ) -> ExitInfo:
        """The wait for `key`: the one in flight if it reads `shape` and returns by `ends`, else
        a new `wait(started)`, which sets `started` once it holds its lane slot. Cancelling the
        caller leaves a started wait running for the next pass to join."""
        held = self._held.get(key)
        if held is None or held.task.done() or held.shape != shape or held.ends > ends:
            if held is not None:
                held.task.cancel()
            held = self._start(key, shape, ends, wait)
        try:
            return await asyncio.shield(held.task)
        except asyncio.CancelledError:
            if not held.started.is_set():
                held.task.cancel()  # still queued for its lane: it never starts
            raise

    def _start(
        self,
        key: Key,
        shape: Shape,
        ends: datetime,
        wait: Callable[[asyncio.Event], Coroutine[Any, Any, ExitInfo]],
    ) -> _Held:
        started = asyncio.Event()
        task = asyncio.ensure_future(wait(started))
        held = _Held(task, shape, ends, started)
        self._held[key] = held

        def forget(done: asyncio.Task[ExitInfo]) -> None:
            current = self._held.get(key)
            if current is not None and current.task is done:
                del self._held[key]
            if not done.cancelled():
                done.exception()  # retrieved: a cancelled pass no longer awaits it

        task.add_done_callback(forget)
        return held

    def forget_job(self, namespace: str, name: str, instance: str | None = None) -> None:
        """Cancel the job's waits (on `instance` only, if given): a new container was started
        under the same name, or the job tears down."""
        for key, held in list(self._held.items()):
            if key[:2] == (namespace, name) and (instance is None or key[3] == instance):
                held.task.cancel()
                del self._held[key]

    async def close(self) -> None:
        """At shutdown: no wait outlives the process's own cleanup (each kills its ssh)."""
        tasks = [held.task for held in self._held.values()]
        self._held.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
