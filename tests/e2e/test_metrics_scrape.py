"""The operator's /metrics during real runs: scraped by a real Prometheus, and as documented.

- A Prometheus server (the `prometheus` binary, tests/devenv/prometheus.py) scrapes the
  operator every second while jobs run; PromQL through its HTTP API sees the jobs by phase and
  the brev CLI calls, and deploy/monitoring's alert rules evaluate on the real series.
- Every metric in docs/observability.md's table (the documentation's source of truth) is on /metrics
  with the documented type and labels, and nothing undocumented is.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.devenv.prometheus import PrometheusServer, Sample, running, write_rule_file
from tests.fixtures.operator import Stack

REPO = Path(__file__).resolve().parents[2]
METRICS_DOC = REPO / "docs" / "observability.md"
PROMETHEUS_RULE = REPO / "deploy" / "monitoring" / "prometheusrule.yaml"


@pytest.fixture
def prometheus(stack: Stack, tmp_path: Path) -> Iterator[PrometheusServer]:
    """Prometheus scraping the stack's operator every second, with deploy/monitoring's alerts loaded."""
    workdir = tmp_path / "prometheus"
    rules = write_rule_file(PROMETHEUS_RULE, workdir / "rules" / "taobrev-operator.rules.yaml")
    with running(
        workdir, {"taobrev-operator": stack.operator.metrics_url}, scrape_interval="1s", rule_files=[rules]
    ) as prom:
        yield prom


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - the operator on loopback
        text: str = resp.read().decode()
        return text


def brev_calls_by_verb(metrics_text: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "taobrev_brev_cli_calls":
            for s in family.samples:
                if s.name.endswith("_total"):
                    totals[s.labels["verb"]] = totals.get(s.labels["verb"], 0.0) + s.value
    return totals


def by_label(samples: list[Sample], label: str) -> dict[str, float]:
    return {s.labels[label]: s.value for s in samples}


def test_prometheus_scrapes_jobs_by_phase_and_brev_calls_during_a_run(
    stack: Stack, prometheus: PrometheusServer
) -> None:
    """While a succeeding and a failing job run, Prometheus scrapes the operator: afterwards
    `taobrev_job_phase == 1` shows both jobs Deleted (and earlier phases were scraped during
    the run), `sum by (verb)` of the brev call counter equals the operator's own counters with
    one successful create per job, outcomes are counted, and every alert rule evaluates cleanly."""
    targets = prometheus.wait_targets_up()
    assert [t["scrapeUrl"] for t in targets] == [stack.operator.metrics_url]

    stack.apply(stack.job_manifest("scraped-ok"))
    stack.apply(stack.job_manifest("scraped-fail", simulation={"exit_code": 3}))
    assert stack.wait_finished("scraped-ok")["outcome"] == "Succeeded"
    assert stack.wait_finished("scraped-fail")["outcome"] == "Failed"

    ns = stack.namespace
    prometheus.wait_query(
        f'taobrev_job_phase{{namespace="{ns}"}} == 1',
        lambda samples: (
            {(s.labels["name"], s.labels["phase"]) for s in samples}
            == {("scraped-ok", "Deleted"), ("scraped-fail", "Deleted")}
        ),
        "both jobs to be scraped in phase Deleted",
    )
    earlier_phases = f'taobrev_job_phase{{namespace="{ns}", phase!="Deleted"}}'
    during = prometheus.query(f"max by (name, phase) (max_over_time({earlier_phases}[10m]) == 1)")
    assert {s.labels["name"] for s in during} == {"scraped-ok", "scraped-fail"}, during

    # The operator makes no brev calls once both jobs are finished, so the counters settle and
    # Prometheus's view must become exactly the operator's own.
    calls = prometheus.wait_query(
        "sum by (verb) (taobrev_brev_cli_calls_total)",
        lambda samples: by_label(samples, "verb") == brev_calls_by_verb(scrape(stack.operator.metrics_url)),
        "Prometheus's brev call counts to equal the operator's /metrics",
    )
    # Remote commands go over the operator's own ssh (verb ssh_exec), not `brev exec`.
    assert {"create", "ssh_exec", "delete", "ls"} <= set(by_label(calls, "verb")), calls
    (created,) = prometheus.query('sum(taobrev_brev_cli_calls_total{verb="create", result="ok"})')
    assert created.value == stack.sim.created_count() == 2
    # The outcome is counted in the pass that ends the job, which a scrape can fall between: wait
    # for the next scrapes rather than read one instant (a fresh-clone run saw only Succeeded).
    prometheus.wait_query(
        "sum by (outcome) (taobrev_job_outcomes_total)",
        lambda samples: by_label(samples, "outcome") == {"Succeeded": 1.0, "Failed": 1.0},
        "Prometheus to count one Succeeded and one Failed outcome",
    )

    # deploy/monitoring's rules run against these real series without errors.
    def evaluated() -> list[dict[str, Any]] | None:
        # A rule not evaluated yet reports Go's zero time.
        rules = prometheus.rules()
        return rules if rules and all(not r["lastEvaluation"].startswith("0001-") for r in rules) else None

    rules: list[dict[str, Any]] = prometheus.wait_until(evaluated, "every alert rule to be evaluated")
    assert {r["name"] for r in rules} >= {"TaoBrevJobStuckInPhase", "TaoBrevOperatorAbsent"}
    for rule in rules:
        assert rule["health"] == "ok", rule
        assert rule["state"] != "firing", rule  # every alert has a `for:` of minutes
    (absent,) = [r for r in rules if r["name"] == "TaoBrevOperatorAbsent"]
    assert absent["state"] == "inactive", absent


@dataclass(frozen=True)
class Documented:
    type: str
    labels: frozenset[str]


def documented_metrics() -> dict[str, Documented]:
    """The metric table of docs/observability.md: name -> type and label names."""
    section = METRICS_DOC.read_text()
    rows = re.findall(r"^\| `(taobrev_[a-z_]+)` \| (\w+) \| ([^|]*) \|", section, re.MULTILINE)
    return {
        name: Documented(mtype, frozenset(x.strip() for x in labels.split(",") if x.strip() not in ("", "—")))
        for name, mtype, labels in rows
    }


@dataclass(frozen=True)
class Exposed:
    type: str
    labels: frozenset[str]
    samples: int


def exposed_metrics(metrics_text: str) -> dict[str, Exposed]:
    """taobrev_* families on /metrics, named as queried (counters with their `_total`)."""
    found: dict[str, Exposed] = {}
    for family in text_string_to_metric_families(metrics_text):
        # prometheus_client's <counter>_created gauges: the Deployment turns them off
        # (PROMETHEUS_DISABLE_CREATED_SERIES in deploy/base/config.yaml); the e2e operator does not.
        if not family.name.startswith("taobrev_") or family.name.endswith("_created"):
            continue
        name = f"{family.name}_total" if family.type == "counter" else family.name
        labels = frozenset(k for s in family.samples for k in s.labels) - {"le"}
        found[name] = Exposed(family.type, labels, len(family.samples))
    return found


def test_every_metric_in_the_deploy_readme_is_exposed_after_a_run(stack: Stack) -> None:
    """docs/observability.md's metric table and /metrics agree both ways: every documented metric is
    exposed with its documented type, its series (scraped while a job runs and after it ended)
    carry exactly the documented labels, and no taobrev_* metric is undocumented."""
    docs = documented_metrics()
    assert len(docs) >= 10, f"the metric table in {METRICS_DOC} did not parse: {docs}"

    # Running must last long enough to be seen: at the simulator's speed 0.01 the default 3 x 2 s
    # epochs run in 0.06 s, and one fresh-clone run polled past the whole Running phase (the job
    # was Deleted before `kubectl get` saw it Running). 2 x 1,000 nominal s = ~20 s of Running.
    stack.apply(stack.job_manifest("documented", simulation={"epochs": 2, "epoch_seconds": 1000}))
    stack.wait_for(
        "documented",
        lambda o: ((o or {}).get("status") or {}).get("phase") == "Running",
        "the job to be Running",
    )
    during = exposed_metrics(scrape(stack.operator.metrics_url))
    assert stack.wait_finished("documented")["outcome"] == "Succeeded"
    # A user reads the finished job's log once (the log API's request and byte counters).
    path = f"/apis/logs.taobrev.io/v1alpha1/namespaces/{stack.namespace}/taobrevjobs/documented/log"
    assert "Epoch" in stack.kubectl("get", "--raw", path).stdout
    after = exposed_metrics(scrape(stack.operator.metrics_url))

    assert set(after) == set(docs), {
        "undocumented": set(after) - set(docs),
        "missing": set(docs) - set(after),
    }
    for name, doc in docs.items():
        assert after[name].type == doc.type, (name, after[name].type, doc.type)
        seen = during[name].labels | after[name].labels
        if during[name].samples or after[name].samples:
            assert seen == doc.labels, (name, sorted(seen), sorted(doc.labels))
    # A clean run produces a series for every metric but those counting trouble or waiting — the
    # error counter, lanes out of slots, Brev refusing calls, jobs held by a quota (none is set
    # here) — the training
    # gauges, which exist only between an epoch's end and the run's (the default 30 s waits read no
    # epoch here; tests/e2e/test_progress.py scrapes them mid-run) — and the notifications (no
    # TaoBrevNotifier here). So the label check above covered all the others
    # (tests/unit/test_metrics.py and tests/unit/test_notify.py check those labels).
    silent = {n for n in docs if not (during[n].samples or after[n].samples)}
    quiet = {"taobrev_reconcile_errors_total", "taobrev_lane_busy_total", "taobrev_queued_jobs"}
    quiet |= {"taobrev_brev_api_throttled_total"}  # Brev never refuses here
    quiet |= {"taobrev_job_progress_ratio", "taobrev_job_eta_seconds", "taobrev_job_loss"}
    quiet |= {n for n in docs if n.startswith(("taobrev_notification_", "taobrev_notifications_"))}
    assert silent <= quiet, silent
