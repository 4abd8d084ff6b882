"""One shared `brev ls --json` for all jobs (single-flight, bounded staleness).

Twenty jobs polling their instances must not mean twenty listings: every reconcile pass asks the
directory, which serves a listing no older than the caller allows and coalesces concurrent
refreshes into one CLI call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from controller.brev.client import BrevClient, Instance
from controller.errors import TransientError


class InstanceDirectory:
    def __init__(self, brev: BrevClient, clock: Callable[[], float] = time.monotonic) -> None:
        self._brev = brev
        self._clock = clock
        self._instances: dict[str, Instance] | None = None
        self._taken_at = float("-inf")
        self._inflight: asyncio.Task[bool] | None = None
        self.listings = 0

    def invalidate(self) -> None:
        """After we changed something (create/delete), the next lookup must list again."""
        self._taken_at = float("-inf")

    async def lookup(self, name: str, *, max_age: float) -> tuple[bool, Instance | None]:
        """(known, instance): known is False when brev could not be listed right now."""
        if self._instances is None or self._clock() - self._taken_at > max_age:
            if self._inflight is None or self._inflight.done():
                self._inflight = asyncio.create_task(self._refresh())
            if not await asyncio.shield(self._inflight):
                return False, None
        assert self._instances is not None
        return True, self._instances.get(name)

    async def _refresh(self) -> bool:
        started = self._clock()
        try:
            listing: Sequence[Instance] = await self._brev.list_instances()
        except TransientError:
            return False
        self._instances = {i.name: i for i in listing}
        self._taken_at = started
        self.listings += 1
        return True
