"""Cost in OpenCost's terms, on the real control plane with the Brev simulator: while a job's
instance lives, the operator's /metrics carries OpenCost's node gauges for it (labels as
OpenCost's exporter has them, the simulator catalog's price), a real Prometheus scrapes them and
the dashboard's burn-rate-per-namespace panel evaluates to the price; once the instance is
deleted the series are gone from both; and `kubectl taobrev cost -o focus` bills the finished
attempt as one FOCUS row."""

from __future__ import annotations

import csv
import io
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.plugin.focus import MANDATORY
from tests.devenv.plugin import kubectl_taobrev
from tests.devenv.prometheus import PrometheusServer, Sample, running
from tests.fixtures.operator import Stack
from tests.fixtures.polling import until

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "monitoring" / "dashboards" / "taobrev-operator.json"
PRICE = 1.86  # g6e.xlarge in the simulator's catalog (tests/brevsim/catalog.py), 1 GPU, aws
NODE_GAUGES = ("node_total_hourly_cost", "node_gpu_hourly_cost", "node_gpu_count")


@pytest.fixture
def operator_env() -> dict[str, str]:
    # The node gauges follow the listing every half second (default 60 s) so the test sees them
    # within a poll or two of the instance appearing and going.
    return {"TAOBREV_NODE_COST_INTERVAL": "0.5"}


@pytest.fixture
def prometheus(stack: Stack, tmp_path: Path) -> Iterator[PrometheusServer]:
    with running(
        tmp_path / "prometheus", {"taobrev-operator": stack.operator.metrics_url}, scrape_interval="1s"
    ) as prom:
        yield prom


def node_gauges(url: str) -> dict[str, dict[str, tuple[dict[str, str], float]]]:
    """family -> provider_id -> (labels, value), from the operator's /metrics."""
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - the operator on loopback
        text = resp.read().decode()
    out: dict[str, dict[str, tuple[dict[str, str], float]]] = {f: {} for f in NODE_GAUGES}
    for family in text_string_to_metric_families(text):
        if family.name in out:
            for s in family.samples:
                out[family.name][s.labels["provider_id"]] = (dict(s.labels), s.value)
    return out


def panel_expr(title: str, namespace: str) -> str:
    panels: list[dict[str, Any]] = json.loads(DASHBOARD.read_text())["panels"]
    (panel,) = [p for p in panels if p["title"] == title]
    expr: str = panel["targets"][0]["expr"]
    return expr.replace("$namespace", namespace)


def by_namespace(samples: list[Sample]) -> dict[str, float]:
    return {s.labels["namespace"]: round(s.value, 4) for s in samples}


def test_node_gauges_follow_the_instance_and_focus_bills_the_attempt(
    stack: Stack, prometheus: PrometheusServer
) -> None:
    prometheus.wait_targets_up()
    ns = stack.namespace
    # ~40 s of Running at the simulator's speed: many scrapes, also on a loaded machine.
    stack.apply(stack.job_manifest("priced", simulation={"epochs": 2, "epoch_seconds": 2000}))
    obj = stack.wait_for(
        "priced",
        lambda o: bool(
            o
            and (o.get("status") or {}).get("phase") == "Running"
            and o["status"]["attempts"][-1]["instance"].get("id")
        ),
        "the job to be Running on a listed instance",
    )
    assert obj is not None
    inst = obj["status"]["attempts"][-1]["instance"]
    iid, name = inst["id"], inst["name"]

    # The operator's own /metrics: one series per gauge for the instance, OpenCost's labels.
    url = stack.operator.metrics_url

    def listed() -> dict[str, dict[str, tuple[dict[str, str], float]]] | None:
        g = node_gauges(url)
        return g if all(iid in g[f] for f in NODE_GAUGES) else None

    gauges = until(
        listed, "the node gauges of the job's instance on /metrics", guard=60, alive=stack.operator_death
    )
    labels, total = gauges["node_total_hourly_cost"][iid]
    assert labels == {
        "instance": name,
        "node": name,
        "instance_type": "g6e.xlarge",
        "region": "",
        "provider_id": iid,
        "provider": "aws",
    }
    assert total == PRICE
    assert gauges["node_gpu_count"][iid][1] == 1
    assert gauges["node_gpu_hourly_cost"][iid][1] == PRICE
    assert {f: set(g) for f, g in gauges.items()} == {
        f: {iid} for f in NODE_GAUGES
    }  # one instance, one series

    # A real Prometheus scrapes them, and the dashboard's per-namespace burn rate joins them to the job.
    (scraped,) = prometheus.wait_query(
        f'node_total_hourly_cost{{provider_id="{iid}"}}',
        lambda s: len(s) == 1,
        "Prometheus to scrape the node cost",
    )
    assert scraped.value == PRICE
    assert scraped.labels["instance"] == scraped.labels["node"] == name  # honor_labels, as the ServiceMonitor
    prometheus.wait_query(
        panel_expr("Burn rate per namespace ($/h)", ns),
        lambda s: by_namespace(s) == {ns: PRICE},
        "the burn-rate panel to show the namespace's instance price",
    )

    # The run ends and its instance is deleted: the series go, from /metrics and from Prometheus.
    status = stack.wait_finished("priced")
    assert status["outcome"] == "Succeeded"
    assert status["attempts"][-1]["instance"].get("deletedAt")
    until(
        lambda: all(iid not in g for g in node_gauges(url).values()),
        "the node gauges of the deleted instance to go",
        guard=30,
        alive=stack.operator_death,
    )
    # absent(): an instant query of a gone series is an empty (falsy) result, which a wait cannot return.
    prometheus.wait_query(
        f'absent(node_total_hourly_cost{{provider_id="{iid}"}})',
        lambda s: len(s) == 1,
        "the deleted instance's series to go stale in Prometheus",
    )

    # `kubectl taobrev cost -o focus`: one FOCUS row for the finished attempt, the status's dollars.
    done = kubectl_taobrev(stack.cp, "cost", "-n", ns, "--since", "1h", "-o", "focus")
    assert done.returncode == 0, done.stderr
    (row,) = list(csv.DictReader(io.StringIO(done.stdout)))
    assert set(MANDATORY) <= set(row)
    assert row["ResourceId"] == iid and row["ResourceName"] == name and row["SkuId"] == "g6e.xlarge"
    attempt = status["attempts"][-1]
    assert float(row["BilledCost"]) == pytest.approx(attempt["estimatedCostDollars"], abs=1e-6)
    assert float(row["ListUnitPrice"]) == PRICE
    assert row["ChargePeriodStart"] == attempt["instance"]["billedFrom"]
    assert row["ChargePeriodEnd"] == attempt["instance"]["deletedAt"]
    assert json.loads(row["Tags"])["taobrev.io/job"] == "priced"
