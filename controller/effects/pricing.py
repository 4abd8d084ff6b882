"""Hourly prices of instance types from `brev search --json`, cached per operator.

One search returns the whole catalog, so one call prices every type; prices change rarely, so
the catalog is read again only after `refresh_seconds`. A type the catalog does not list (or a
search that failed) is "unknown" (None) and asked again after `retry_seconds`, never assumed to
cost nothing.

The pre-flight (controller/preflight/checker.py) reads the same cached catalog to check a job's instance
selection before `brev create`: one search serves both, and a burst of new jobs shares one read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import structlog

from controller.api.errors import TaoBrevError
from controller.brev.client import BrevClient, SearchResult

log = structlog.get_logger("taobrev.pricing")


class PriceBook:
    def __init__(
        self,
        brev: BrevClient,
        *,
        refresh_seconds: float = 6 * 3600,
        retry_seconds: float = 600,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._brev = brev
        self._refresh = refresh_seconds
        self._retry = retry_seconds
        self._clock = clock
        self._prices: dict[str, float] = {}
        self._catalog: Sequence[SearchResult] | None = None
        self._read_at: float | None = None
        self._missing_at: dict[str, float] = {}
        self._reading: asyncio.Lock | None = None
        self._last_error: str = ""

    async def price(self, instance_type: str) -> float | None:
        """The hourly price of `instance_type`, or None when unknown."""
        now = self._clock()
        stale = self._read_at is None or now - self._read_at >= self._refresh
        missing = instance_type not in self._prices
        retry_due = now - self._missing_at.get(instance_type, float("-inf")) >= self._retry
        if stale or (missing and retry_due):
            await self._read(now)
            if instance_type not in self._prices:
                self._missing_at[instance_type] = now
        return self._prices.get(instance_type)

    async def catalog(self) -> Sequence[SearchResult]:
        """The whole `brev search --json` catalog, read at most once per `refresh_seconds` (and
        again after `retry_seconds` while no read ever succeeded). Raises TaoBrevError when it
        was never read, so a caller never judges against an empty catalog."""
        now = self._clock()
        if self._read_at is None or now - self._read_at >= self._refresh:
            await self._read(now)
        if self._catalog is None:
            raise TaoBrevError(f"`brev search --json` could not be read: {self._last_error}")
        return self._catalog

    async def _read(self, now: float) -> None:
        # One search at a time: a burst of new jobs (each pre-flight asks) shares the first.
        self._reading = self._reading or asyncio.Lock()
        read_before = self._read_at
        async with self._reading:
            if self._read_at != read_before:
                return  # another caller read it while this one waited
            await self._search(now)

    async def _search(self, now: float) -> None:
        try:
            results = await self._brev.search()
        except TaoBrevError as exc:
            # Prices are an estimate: a failed search leaves what we knew, and says so.
            log.warning("brev search for prices failed", reason=exc.reason, error=str(exc))
            self._last_error = str(exc)
            self._read_at = self._read_at if self._read_at is not None else now - self._refresh + self._retry
            return
        self._prices.update({r.type: r.price_per_hour for r in results if r.price_per_hour > 0})
        self._catalog = tuple(results)
        self._read_at = now
