"""OpenCost's node cost gauges for the live Brev instances of this operator.

OpenCost's dashboards and recording rules read `node_total_hourly_cost`, `node_gpu_hourly_cost`
and `node_gpu_count`, labelled as OpenCost's own exporter labels them (opencost
pkg/costmodel/metrics.go: instance, node, instance_type, region, provider_id). A Brev instance
is the node here: `instance` and `node` are its name, `provider_id` Brev's instance id; we add
`provider`, the cloud behind the instance type in `brev search` (aws, hyperstack ...). Brev
prices a whole instance per hour, so the whole price is the GPUs' (`node_gpu_hourly_cost` =
price / GPUs, and no CPU or RAM share): gpu_count x gpu_hourly_cost = total, as in OpenCost's
own formula. Brev reports no placement region: `region` is empty, as OpenCost leaves it when
a node has none.

One series per live instance: the table is replaced from each listing (an instance no longer
listed loses its series), and an instance whose deletion a job confirmed loses it at once. An
instance whose type has no price in the catalog has no series (an unknown price is never $0).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from controller.brev.client import Instance, SearchResult

# OpenCost's label set of its node gauges, in its order, then ours.
LABELS: Final = ("instance", "node", "instance_type", "region", "provider_id", "provider")
FAMILIES: Final = {
    "node_total_hourly_cost": "Hourly price of a live Brev instance of this operator (OpenCost's node "
    "cost; `brev search` price).",
    "node_gpu_hourly_cost": "Hourly price per GPU of a live Brev instance (the whole price over its "
    "GPUs; 0 for an instance without GPUs).",
    "node_gpu_count": "GPUs of a live Brev instance (from `brev search`).",
}


@dataclass(frozen=True)
class NodeCost:
    """One live instance, priced."""

    instance_id: str
    name: str
    instance_type: str
    provider: str
    gpus: int
    hourly: float
    region: str = ""

    @property
    def gpu_hourly(self) -> float:
        return self.hourly / self.gpus if self.gpus > 0 else 0.0

    def labels(self) -> list[str]:
        return [self.name, self.name, self.instance_type, self.region, self.instance_id, self.provider]


def priced(
    listing: Iterable[Instance], catalog: Sequence[SearchResult], ours: Callable[[str], bool]
) -> list[NodeCost]:
    """The listed instances `ours` claims (by name), each with its type's catalog entry; those
    without an id yet or without a known price are left out."""
    by_type = {r.type: r for r in catalog if r.price_per_hour > 0}
    out: list[NodeCost] = []
    for inst in listing:
        entry = by_type.get(inst.instance_type)
        if not inst.id or entry is None or not ours(inst.name):
            continue
        out.append(
            NodeCost(
                instance_id=inst.id,
                name=inst.name,
                instance_type=inst.instance_type,
                provider=entry.provider,
                gpus=max(entry.gpu_count, 0),
                hourly=entry.price_per_hour,
            )
        )
    return out


class NodeCosts:
    """A prometheus_client collector of the live instances' `NodeCost`s, keyed by instance id."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._rows: dict[str, NodeCost] = {}
        # Ids whose deletion was confirmed: a listing taken before the confirmation (the shared
        # one may be seconds old) must not bring them back. Dropped once a listing omits them.
        self._gone: set[str] = set()
        self._lock = threading.Lock()
        registry.register(self)

    def replace(self, rows: Iterable[NodeCost], listed: Iterable[str]) -> None:
        """The whole table from one listing: `rows` (priced, ours), `listed` every id it showed."""
        shown = set(listed)
        with self._lock:
            self._gone &= shown
            self._rows = {r.instance_id: r for r in rows if r.instance_id not in self._gone}

    def drop(self, instance_id: str) -> None:
        """The instance's deletion is confirmed: its series go now, not at the next listing."""
        with self._lock:
            self._rows.pop(instance_id, None)
            self._gone.add(instance_id)

    def clear(self) -> None:
        """No series at all (a standby: the leader's replica exports them, once)."""
        with self._lock:
            self._rows = {}

    def ids(self) -> set[str]:
        with self._lock:
            return set(self._rows)

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(name, doc, labels=LABELS) for name, doc in FAMILIES.items()]

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            rows = list(self._rows.values())
        total, per_gpu, count = (GaugeMetricFamily(n, d, labels=LABELS) for n, d in FAMILIES.items())
        for r in rows:
            labels = r.labels()
            total.add_metric(labels, r.hourly)
            per_gpu.add_metric(labels, r.gpu_hourly)
            count.add_metric(labels, r.gpus)
        yield from (total, per_gpu, count)
