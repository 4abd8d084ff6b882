"""Waking a Pending job the moment a Secret it waits for appears.

With GitOps a Secret often lands seconds after the job that names it (sync waves, External
Secrets, Sealed Secrets). The job waits Pending (controller/preflight/checker.py) and must start by itself
as soon as the Secret exists, not at the end of a backoff.

The operator's grant in a job namespace is `get` on Secrets and nothing more (deploy/tools/
job_namespaces.py): a watch would need `list`, which hands over every Secret of the namespace.
So a missing Secret is looked for by name: one GET per `interval` per missing Secret, shared by
every job that waits for it, and only while one does. 1,000 jobs waiting for one Secret cost one
GET per interval; nothing is polled once it appeared or nobody waits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping

import structlog

from controller.api.errors import TaoBrevError
from controller.fleet.waiting import first_event

log = structlog.get_logger("taobrev.secret_arrivals")

SecretKey = tuple[str, str]  # (namespace, name)


class SecretArrivals:
    def __init__(
        self, read: Callable[[str, str], Awaitable[Mapping[str, bytes] | None]], interval: float = 2.0
    ) -> None:
        self._read = read
        self._interval = interval
        self._arrived: dict[SecretKey, asyncio.Event] = {}
        self._pollers: dict[SecretKey, asyncio.Task[None]] = {}
        self._waiters: dict[SecretKey, int] = {}
        self._interrupts: dict[str, asyncio.Event] = {}

    async def wait(self, keys: Iterable[SecretKey], seconds: float, uid: str) -> None:
        """Until one of these Secrets exists, `interrupt(uid)`, or `seconds` passed."""
        keys = tuple(dict.fromkeys(keys))
        for key in keys:
            self._waiters[key] = self._waiters.get(key, 0) + 1
            if key not in self._pollers:
                self._arrived[key] = asyncio.Event()
                self._pollers[key] = asyncio.create_task(self._poll(key), name=f"secret-arrival {key}")
        events = [self._arrived[k] for k in keys] + [self._interrupts.setdefault(uid, asyncio.Event())]
        try:
            await first_event(events, seconds)
        finally:
            self._interrupts.pop(uid, None)
            for key in keys:
                self._release(key)

    def interrupt(self, uid: str) -> None:
        """End this job's wait (it is being deleted: teardown must not wait for a Secret)."""
        event = self._interrupts.get(uid)
        if event is not None:
            event.set()

    def polled(self) -> list[SecretKey]:
        """The Secrets looked for right now (for tests and debugging)."""
        return sorted(self._pollers)

    async def close(self) -> None:
        tasks = list(self._pollers.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._pollers.clear()

    def _release(self, key: SecretKey) -> None:
        left = self._waiters.get(key, 0) - 1
        if left > 0:
            self._waiters[key] = left
            return
        self._waiters.pop(key, None)
        task = self._pollers.pop(key, None)
        if task is not None:
            task.cancel()
        self._arrived.pop(key, None)

    async def _poll(self, key: SecretKey) -> None:
        namespace, name = key
        while True:
            await asyncio.sleep(self._interval)
            try:
                found = await self._read(namespace, name)
            except TaoBrevError as exc:
                # Forbidden or the API server away: the job's own re-check reports it; keep looking.
                log.debug("secret not readable yet", namespace=namespace, secret=name, reason=exc.reason)
                continue
            if found is not None:
                log.info("awaited secret appeared", namespace=namespace, secret=name)
                event = self._arrived.get(key)
                if event is not None:
                    event.set()
                self._pollers.pop(key, None)
                return
