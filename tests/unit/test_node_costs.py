"""OpenCost's node gauges (controller/observability/node_costs.py, fed by controller/fleet/node_cost_feed.py):
OpenCost's label set, one series per live instance of this operator, gone when the listing no
longer shows it or a job confirmed its deletion (a stale listing does not bring it back), none
on a standby, none for an unpriced type."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controller.api import naming
from controller.brev.client import Instance, SearchResult
from controller.effects.directory import InstanceDirectory
from controller.effects.pricing import PriceBook
from controller.fleet.leadership import SoleLeader
from controller.fleet.node_cost_feed import NodeCostFeed
from controller.observability.metrics import Recorder
from controller.observability.node_costs import LABELS, NodeCost, priced
from tests import status_paths
from tests.fakes.brev import FakeBrev
from tests.fakes.clock import FakeClock
from tests.fakes.harness import Harness

CLUSTER = "cluster-a"
DEPLOYMENT = naming.DEFAULT_DEPLOYMENT
FAMILIES = ("node_total_hourly_cost", "node_gpu_hourly_cost", "node_gpu_count")
# OpenCost's own exporter (opencost pkg/costmodel/metrics.go) labels its node gauges with these.
OPENCOST_LABELS = {"instance", "node", "instance_type", "region", "provider_id"}


def ours(job: str) -> str:
    return naming.instance_name("ml", job, f"uid-{job}", cluster_id=CLUSTER, deployment=DEPLOYMENT)


def series(registry: CollectorRegistry) -> dict[str, dict[str, tuple[dict[str, str], float]]]:
    """family -> provider_id -> (labels, value), as Prometheus scrapes it."""
    out: dict[str, dict[str, tuple[dict[str, str], float]]] = {f: {} for f in FAMILIES}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        if family.name in out:
            for s in family.samples:
                out[family.name][s.labels["provider_id"]] = (dict(s.labels), s.value)
    return out


class QuadBrev(FakeBrev):
    """A catalog with a 4-GPU type at $8/h next to the fakes' 1-GPU g6.xlarge at $1.50/h."""

    async def search(
        self, *, gpu_name: str | None = None, min_vram: float | None = None
    ) -> Sequence[SearchResult]:
        return [
            SearchResult("g6.xlarge", "aws", "L40S", 1, 48.0, 1.5),
            SearchResult("quad", "hyperstack", "H100", 4, 80.0, 8.0),
        ]


class World:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.brev = QuadBrev(self.clock)
        self.registry = CollectorRegistry()
        self.recorder = Recorder(self.registry, clock=self.clock.unix)
        self.directory = InstanceDirectory(self.brev, clock=self.clock.monotonic)
        self.feed = NodeCostFeed(
            directory=self.directory,
            prices=PriceBook(self.brev, clock=self.clock.monotonic),
            recorder=self.recorder,
            leadership=SoleLeader(),
            cluster_id=CLUSTER,
            deployment=DEPLOYMENT,
            interval=60,
        )

    def refresh(self, after: float = 61.0) -> int | None:
        self.clock.advance(after)
        return asyncio.run(self.feed.refresh_once())


def test_each_live_instance_of_this_operator_has_opencosts_series() -> None:
    w = World()
    mine = w.brev.add_instance(ours("train-1"))
    other_deployment = naming.instance_name("ml", "x", "uid-x", cluster_id=CLUSTER, deployment="b/other")
    w.brev.add_instance(other_deployment)  # another operator of the cluster exports its own
    w.brev.add_instance("my-workstation")  # a reused or a person's instance: its owner's bill
    assert w.refresh() == 1

    got = series(w.registry)
    assert {f: set(v) for f, v in got.items()} == {f: {mine.id} for f in FAMILIES}
    labels, total = got["node_total_hourly_cost"][mine.id]
    assert set(labels) == set(LABELS) and set(labels) >= OPENCOST_LABELS
    assert labels == {
        "instance": mine.name,
        "node": mine.name,
        "instance_type": "g6.xlarge",
        "region": "",
        "provider_id": mine.id,
        "provider": "aws",
    }
    assert total == 1.5
    assert got["node_gpu_hourly_cost"][mine.id][1] == 1.5
    assert got["node_gpu_count"][mine.id][1] == 1


def test_an_instance_leaves_with_the_listing_and_a_new_one_joins() -> None:
    w = World()
    first = w.brev.add_instance(ours("a"))
    w.refresh()
    second = w.brev.add_instance(ours("b"))
    w.brev.vanish(first.id)
    w.refresh()
    assert set(series(w.registry)["node_total_hourly_cost"]) == {second.id}
    w.brev.vanish(second.id)
    w.refresh()
    assert series(w.registry) == {f: {} for f in FAMILIES}  # no stale series


def test_a_failed_listing_keeps_what_was_known() -> None:
    w = World()
    inst = w.brev.add_instance(ours("a"))
    w.refresh()
    w.brev.set_faults(list_failures=1)
    assert w.refresh() is None
    assert set(series(w.registry)["node_total_hourly_cost"]) == {inst.id}


def test_a_confirmed_deletion_drops_the_series_at_once_and_a_stale_listing_does_not_revive_it() -> None:
    w = World()
    inst = w.brev.add_instance(ours("a"))
    w.refresh()
    w.recorder.node_deleted(inst.id)  # a job's teardown confirmed it (reconciler._account)
    assert series(w.registry)["node_total_hourly_cost"] == {}
    # The shared listing was taken before the deletion and still shows the instance.
    assert w.refresh(after=0) == 1
    assert series(w.registry)["node_total_hourly_cost"] == {}
    w.brev.vanish(inst.id)
    w.refresh()
    assert w.recorder.node_ids() == set()


def test_a_standby_exports_none() -> None:
    w = World()
    w.brev.add_instance(ours("a"))
    w.refresh()
    w.recorder.leader(False)  # the Lease is lost: the new leader exports them, once
    assert series(w.registry) == {f: {} for f in FAMILIES}


def test_gpu_price_splits_the_whole_price_and_unpriced_types_have_no_series() -> None:
    listing = [
        Instance(name=ours("quad"), id="i-4", status="RUNNING", instance_type="quad"),
        Instance(name=ours("cpu"), id="i-0", status="RUNNING", instance_type="cpu-only"),
        Instance(name=ours("odd"), id="i-x", status="RUNNING", instance_type="not-in-catalog"),
        Instance(name=ours("new"), id="", status="DEPLOYING", instance_type="quad"),
    ]
    catalog = [
        SearchResult("quad", "hyperstack", "H100", 4, 80.0, 8.0),
        SearchResult("cpu-only", "aws", "", 0, 0.0, 0.25),
    ]
    rows = {r.instance_id: r for r in priced(listing, catalog, lambda n: True)}
    assert set(rows) == {"i-4", "i-0"}  # unknown price: no series, never $0; no id yet: not yet
    assert (rows["i-4"].hourly, rows["i-4"].gpus, rows["i-4"].gpu_hourly) == (8.0, 4, 2.0)
    assert (rows["i-0"].hourly, rows["i-0"].gpus, rows["i-0"].gpu_hourly) == (0.25, 0, 0.0)
    assert rows["i-4"].labels() == [ours("quad"), ours("quad"), "quad", "", "i-4", "hyperstack"]


def test_series_stay_bounded_over_many_instances() -> None:
    registry = CollectorRegistry()
    recorder = Recorder(registry)
    for wave in range(5):
        rows = [NodeCost(f"i-{wave}-{n}", f"tbj-{wave}-{n}", "quad", "hyperstack", 4, 8.0) for n in range(20)]
        recorder.node_costs(rows, (r.instance_id for r in rows))
    assert {f: len(v) for f, v in series(registry).items()} == dict.fromkeys(FAMILIES, 20)


def test_the_metrics_reference_documents_the_node_gauges_as_exposed() -> None:
    """docs/observability.md's OpenCost table names each node gauge with its exposed type and labels."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text()
    rows = re.findall(r"^\| `(node_[a-z_]+)` \| (\w+) \| ([^|]*) \|", doc, re.MULTILINE)
    documented = {name: (kind, {x.strip() for x in labels.split(",")}) for name, kind, labels in rows}
    registry = CollectorRegistry()
    Recorder(registry).node_costs([NodeCost("i-1", "tbj-a", "quad", "hyperstack", 4, 8.0)], ["i-1"])
    exposed = {
        f.name: (f.type, {k for s in f.samples for k in s.labels})
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        if f.name.startswith("node_")
    }
    assert documented == exposed


def test_a_jobs_confirmed_deletion_drops_its_instances_series_without_waiting_for_a_listing() -> None:
    """The real Reconciler over the fakes, with no feed running: only the pass that records
    `deletedAt` can take the series away."""
    h = Harness()

    async def drive() -> str:
        await h.run_until(lambda h: bool(status_paths.instance(h.status).get("id")))
        inst = status_paths.instance(h.status)
        iid = str(inst["id"])
        h.recorder.node_costs([NodeCost(iid, str(inst["name"]), "g6.xlarge", "aws", 1, 1.5)], [iid])
        assert h.recorder.node_ids() == {iid}
        await h.run(seconds=7200)
        return str(status_paths.instance(h.status).get("deletedAt") or "")

    deleted_at = asyncio.run(drive())
    assert h.finished and deleted_at
    assert h.recorder.node_ids() == set()
