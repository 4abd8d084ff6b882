"""Keeps OpenCost's node gauges (controller/observability/node_costs.py) on the live instances: leader
only, every `interval` seconds.

Each refresh reads the shared `brev ls` (controller/effects/directory.py: the listing the jobs'
passes already take, so while jobs run this costs no call of its own) and the cached `brev
search` catalog (controller/effects/pricing.py), keeps the instances named with this operator's
mark (controller/api/naming.py; a reused instance is its owner's) and replaces the table. A
listing that failed changes nothing: unknown is not "no instances".

Only the leader exports: every replica is scraped, and the same instance from two replicas
would be two series that OpenCost's `sum(node_total_hourly_cost)` adds. A standby (and a
replica that loses the Lease, through `Recorder.leader(False)`) exports none.
"""

from __future__ import annotations

import asyncio

import structlog

from controller.api import naming
from controller.api.errors import NotLeading, TaoBrevError
from controller.effects.directory import InstanceDirectory
from controller.effects.pricing import PriceBook
from controller.fleet.leadership import Leadership
from controller.observability.metrics import Recorder
from controller.observability.node_costs import priced

log = structlog.get_logger("taobrev.node_costs")


class NodeCostFeed:
    def __init__(
        self,
        *,
        directory: InstanceDirectory,
        prices: PriceBook,
        recorder: Recorder,
        leadership: Leadership,
        cluster_id: str,
        deployment: str,
        interval: float,
    ) -> None:
        self._directory = directory
        self._prices = prices
        self._recorder = recorder
        self._leadership = leadership
        self._mark = naming.owner_mark(cluster_id, deployment)
        self._interval = interval
        self._unpriced = 0  # said once per change, not every refresh

    def _ours(self, name: str) -> bool:
        return naming.mark_of(name) == self._mark

    async def run(self) -> None:
        """Forever: refresh while leading, idle as a standby; a crash in one refresh is logged."""
        while True:
            if not self._leadership.is_leading():
                await self._leadership.wait_leading()
            try:
                await self._leadership.while_leading(self.refresh_once())
            except NotLeading:
                continue
            except Exception:
                log.exception("node_costs_refresh_crashed")
            await asyncio.sleep(self._interval)

    async def refresh_once(self) -> int | None:
        """One refresh; the number of instances exported, or None when brev could not be listed."""
        # A listing up to one interval old serves: the jobs' passes keep it much fresher.
        listing = await self._directory.listing(max_age=self._interval)
        if listing is None:
            return None
        try:
            catalog = await self._prices.catalog()
        except TaoBrevError as exc:
            log.warning("node_costs_without_prices", error=str(exc))
            catalog = ()
        rows = priced(listing, catalog, self._ours)
        unpriced = sum(1 for i in listing if self._ours(i.name)) - len(rows)
        if unpriced != self._unpriced:
            log.info(
                "node_costs_unpriced_instances", count=unpriced, hint="no price in `brev search`: no series"
            )
            self._unpriced = unpriced
        self._recorder.node_costs(rows, (i.id for i in listing))
        return len(rows)
