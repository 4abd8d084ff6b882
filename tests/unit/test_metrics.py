"""controller.observability.metrics.Recorder: series shapes as Prometheus scrapes them, over a
private registry."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controller.observability.job_metrics import JobGauges
from controller.observability.logs import forget_registered_secrets, register_secret
from controller.observability.metrics import PHASES, Recorder, RedactingRegistry
from controller.observability.node_costs import NodeCost


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


Labels = tuple[tuple[str, str], ...]


def scrape(registry: CollectorRegistry) -> dict[str, dict[Labels, float]]:
    """Sample name -> {sorted label pairs -> value}, parsed from the text exposition format."""
    samples: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def job_series(
    samples: dict[str, dict[Labels, float]], metric: str, namespace: str, name: str
) -> dict[str, float]:
    """phase (or other third label) -> value for one job's series of a per-job gauge."""
    out: dict[str, float] = {}
    for labels, value in samples.get(metric, {}).items():
        d = dict(labels)
        if d.get("namespace") == namespace and d.get("name") == name:
            rest = {k: v for k, v in d.items() if k not in ("namespace", "name")}
            out[next(iter(rest.values()))] = value
    return out


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def rec(registry: CollectorRegistry, clock: FakeClock) -> Recorder:
    return Recorder(registry, version="1.2.3", brev_cli_version="v0.6.327", clock=clock)


def test_exposed_names_types_and_labels(registry: CollectorRegistry, rec: Recorder) -> None:
    """Every metric family has the documented name, type and label names once it has a sample."""
    rec.phase_changed("ns", "job", None, "Pending", None, timeout_seconds=None)
    rec.phase_changed("ns", "job", "Pending", "Provisioning", 2.0, timeout_seconds=1800)
    rec.job_state("ns", "job", phase="Provisioning", timeout_seconds=1800, outcome="Failed", ended_at=5.0)
    rec.outcome("Failed", "ProvisioningTimeout")
    rec.brev_call("create", "ok", 12.5)
    rec.brev_paced(0.2)
    rec.brev_throttled("ls", "rate_limited", 0.8)
    rec.reconcile_error("BrevUnavailable")
    rec.reconcile_duration(0.02)
    rec.instance_uptime("ns", "job", "tbj-abc", 30.0)
    rec.job_billing("ns", "job", 30.0, 0.0125)
    rec.job_progress("ns", "job", 0.4, 1200.0, 0.21)
    rec.exit_to_teardown(42.0)
    rec.lane_slots("pull", 64)
    rec.lane_state("pull", in_flight=64, waiting=3)
    rec.lane_waited("pull", 12.0, obtained=False)
    rec.queued({("ns", "NamespaceInstanceLimit"): 2})
    rec.node_costs([NodeCost("i-1", "tbj-abc", "g6e.xlarge", "aws", 1, 1.86)], ["i-1"])

    node = {"instance", "node", "instance_type", "region", "provider_id", "provider"}  # OpenCost's + provider
    expected = {
        "taobrev_job_phase": ("gauge", {"namespace", "name", "phase"}),
        "taobrev_job_phase_entered_timestamp_seconds": ("gauge", {"namespace", "name", "phase"}),
        "taobrev_job_phase_timeout_seconds": ("gauge", {"namespace", "name", "phase"}),
        "taobrev_job_ended_timestamp_seconds": ("gauge", {"namespace", "name", "outcome"}),
        "taobrev_job_phase_transitions": ("counter", {"from_phase", "to_phase"}),
        "taobrev_job_phase_duration_seconds": ("histogram", {"phase"}),
        "taobrev_job_outcomes": ("counter", {"outcome", "reason"}),
        "taobrev_brev_cli_calls": ("counter", {"verb", "result"}),
        "taobrev_brev_cli_call_duration_seconds": ("histogram", {"verb"}),
        "taobrev_brev_api_pace_wait_seconds": ("histogram", set()),
        "taobrev_brev_api_throttled": ("counter", {"verb", "kind"}),
        "taobrev_reconcile_errors": ("counter", {"reason"}),
        "taobrev_reconcile_duration_seconds": ("histogram", set()),
        "taobrev_instance_uptime_seconds": ("gauge", {"namespace", "name", "instance"}),
        "taobrev_job_billed_seconds": ("gauge", {"namespace", "name"}),
        "taobrev_job_estimated_cost_dollars": ("gauge", {"namespace", "name"}),
        "taobrev_job_progress_ratio": ("gauge", {"namespace", "name"}),
        "taobrev_job_eta_seconds": ("gauge", {"namespace", "name"}),
        "taobrev_job_loss": ("gauge", {"namespace", "name"}),
        "taobrev_exit_to_teardown_seconds": ("histogram", set()),
        "taobrev_build_info": ("gauge", {"version", "brev_cli_version"}),
        "taobrev_leader": ("gauge", set()),
        "taobrev_lane_slots": ("gauge", {"lane"}),
        "taobrev_lane_in_flight": ("gauge", {"lane"}),
        "taobrev_lane_waiting": ("gauge", {"lane"}),
        "taobrev_lane_wait_seconds": ("histogram", {"lane"}),
        "taobrev_lane_busy": ("counter", {"lane"}),
        "taobrev_orphan_instances": ("gauge", {"state"}),
        "taobrev_orphans_deleted": ("counter", {"reason"}),
        "taobrev_orphan_sweeps": ("counter", {"result"}),
        "taobrev_queued_jobs": ("gauge", {"namespace", "reason"}),
        "node_total_hourly_cost": ("gauge", node),
        "node_gpu_hourly_cost": ("gauge", node),
        "node_gpu_count": ("gauge", node),
    }
    text = generate_latest(registry).decode()
    # prometheus_client also exposes <counter|histogram>_created gauges (the Deployment turns them
    # off with PROMETHEUS_DISABLE_CREATED_SERIES); they are not part of our contract.
    families = {f.name: f for f in text_string_to_metric_families(text) if not f.name.endswith("_created")}
    assert set(families) == set(expected)
    for name, (kind, labels) in expected.items():
        family = families[name]
        assert family.type == kind, name
        assert family.documentation, f"{name} has no help text"
        main = [s for s in family.samples if not s.name.endswith("_created")]
        assert main, name
        for sample in main:
            assert set(sample.labels) - {"le"} == labels, sample
    # Counters are exposed with the conventional _total suffix.
    for counter in ("taobrev_job_phase_transitions", "taobrev_job_outcomes", "taobrev_brev_cli_calls"):
        assert f"\n{counter}_total{{" in text
    assert "taobrev_reconcile_errors_total{" in text


def test_build_info_is_one_with_versions(registry: CollectorRegistry, rec: Recorder) -> None:
    """taobrev_build_info is 1 with the versions as labels; build_info() replaces the series."""
    assert scrape(registry)["taobrev_build_info"] == {
        (("brev_cli_version", "v0.6.327"), ("version", "1.2.3")): 1.0
    }
    rec.build_info(version="1.2.4", brev_cli_version="v0.6.328")
    assert scrape(registry)["taobrev_build_info"] == {
        (("brev_cli_version", "v0.6.328"), ("version", "1.2.4")): 1.0
    }


def test_phase_gauge_is_one_hot_across_all_seven_phases(registry: CollectorRegistry, rec: Recorder) -> None:
    """After each transition the job has 7 phase series: 1 for the current phase, 0 for the rest."""
    path = ["Pending", "Provisioning", "WaitingExec", "Pulling", "Running", "Uploading", "Deleted"]
    old: str | None = None
    for phase in path:
        rec.phase_changed("team-a", "train-1", old, phase, None if old is None else 3.0)
        series = job_series(scrape(registry), "taobrev_job_phase", "team-a", "train-1")
        assert series == {p: (1.0 if p == phase else 0.0) for p in PHASES}
        old = phase


def test_transitions_and_phase_durations_are_counted(registry: CollectorRegistry, rec: Recorder) -> None:
    """Transitions count by (from, to), a first phase counts from 'none', durations go to the old phase."""
    rec.phase_changed("ns", "a", None, "Pending", None)
    rec.phase_changed("ns", "a", "Pending", "Provisioning", 4.0)
    rec.phase_changed("ns", "b", "Pending", "Provisioning", 6.0)
    s = scrape(registry)
    transitions = s["taobrev_job_phase_transitions_total"]
    assert transitions[(("from_phase", "none"), ("to_phase", "Pending"))] == 1
    assert transitions[(("from_phase", "Pending"), ("to_phase", "Provisioning"))] == 2
    assert s["taobrev_job_phase_duration_seconds_count"] == {(("phase", "Pending"),): 2.0}
    assert s["taobrev_job_phase_duration_seconds_sum"] == {(("phase", "Pending"),): 10.0}


def test_unknown_phase_is_rejected(rec: Recorder) -> None:
    """A phase outside the API's seven values raises instead of breaking the one-hot invariant."""
    with pytest.raises(ValueError, match="unknown TaoBrevJob phase 'Runing'"):
        rec.phase_changed("ns", "a", "Pending", "Runing", 1.0)


def test_entered_timestamp_and_timeout_follow_the_current_phase_only(
    registry: CollectorRegistry, rec: Recorder, clock: FakeClock
) -> None:
    """The stuck-job alert inputs: one entered/timeout series per job, for its current phase."""
    rec.phase_changed("ns", "a", None, "Provisioning", None, timeout_seconds=1800)
    s = scrape(registry)
    assert job_series(s, "taobrev_job_phase_entered_timestamp_seconds", "ns", "a") == {
        "Provisioning": clock.now
    }
    assert job_series(s, "taobrev_job_phase_timeout_seconds", "ns", "a") == {"Provisioning": 1800.0}

    clock.now += 120
    rec.phase_changed("ns", "a", "Provisioning", "WaitingExec", 120.0, timeout_seconds=900)
    s = scrape(registry)
    assert job_series(s, "taobrev_job_phase_entered_timestamp_seconds", "ns", "a") == {
        "WaitingExec": clock.now
    }
    assert job_series(s, "taobrev_job_phase_timeout_seconds", "ns", "a") == {"WaitingExec": 900.0}

    # Deleted has no timeout: its timeout series disappears, the entered one stays.
    rec.phase_changed("ns", "a", "WaitingExec", "Deleted", 5.0, entered_at=42.0)
    s = scrape(registry)
    assert job_series(s, "taobrev_job_phase_timeout_seconds", "ns", "a") == {}
    assert job_series(s, "taobrev_job_phase_entered_timestamp_seconds", "ns", "a") == {"Deleted": 42.0}


def test_job_state_sets_gauges_without_counting(registry: CollectorRegistry, rec: Recorder) -> None:
    """job_state (restart / every pass) sets the per-job gauges but counts no transition."""
    rec.job_state("ns", "a", phase="Running", entered_at=100.0, timeout_seconds=86400)
    rec.job_state("ns", "a", phase="Running", entered_at=100.0, timeout_seconds=7200)  # timeout edited
    s = scrape(registry)
    assert job_series(s, "taobrev_job_phase", "ns", "a")["Running"] == 1
    assert job_series(s, "taobrev_job_phase_timeout_seconds", "ns", "a") == {"Running": 7200.0}
    assert "taobrev_job_phase_transitions_total" not in s


def test_job_ended_keeps_one_series_per_job(registry: CollectorRegistry, rec: Recorder) -> None:
    """The ended timestamp carries the outcome; a later outcome replaces the series."""
    rec.job_state("ns", "a", phase="Uploading", outcome="Succeeded", ended_at=50.0)
    rec.job_state("ns", "a", phase="Uploading", outcome="Canceled", ended_at=60.0)
    s = scrape(registry)
    assert job_series(s, "taobrev_job_ended_timestamp_seconds", "ns", "a") == {"Canceled": 60.0}


def test_job_forgotten_drops_only_that_jobs_series(registry: CollectorRegistry, rec: Recorder) -> None:
    """Forgetting a job removes its phase, entered, timeout, ended and uptime series; others stay."""
    for job in ("a", "b"):
        rec.phase_changed("ns", job, None, "Running", None, timeout_seconds=60)
        rec.job_state("ns", job, phase="Running", timeout_seconds=60, outcome="Failed", ended_at=1.0)
        rec.instance_uptime("ns", job, f"tbj-{job}", 10.0)
        rec.job_progress("ns", job, 0.5, 60.0, 0.3)
    rec.outcome("Failed", "ContainerFailed")

    rec.job_forgotten("ns", "a")
    s = scrape(registry)
    for metric in (
        "taobrev_job_phase",
        "taobrev_job_phase_entered_timestamp_seconds",
        "taobrev_job_phase_timeout_seconds",
        "taobrev_job_ended_timestamp_seconds",
        "taobrev_instance_uptime_seconds",
    ):
        assert job_series(s, metric, "ns", "a") == {}, metric
        assert job_series(s, metric, "ns", "b") != {}, metric
    for metric in ("taobrev_job_progress_ratio", "taobrev_job_eta_seconds", "taobrev_job_loss"):
        assert (("name", "a"), ("namespace", "ns")) not in s[metric], metric
        assert s[metric][(("name", "b"), ("namespace", "ns"))] > 0, metric
    # Aggregates are history, not per-job state: they stay.
    assert s["taobrev_job_outcomes_total"][(("outcome", "Failed"), ("reason", "ContainerFailed"))] == 1
    assert s["taobrev_job_phase_transitions_total"][(("from_phase", "none"), ("to_phase", "Running"))] == 2


def test_progress_gauges_follow_status_and_go_when_the_run_ends(
    registry: CollectorRegistry, rec: Recorder
) -> None:
    """Ratio, ETA and loss per job; None drops a series (no loss reported, or the run ended)."""
    rec.job_progress("ns", "a", 0.3, 840.0, None)
    s = scrape(registry)
    key = (("name", "a"), ("namespace", "ns"))
    assert (s["taobrev_job_progress_ratio"][key], s["taobrev_job_eta_seconds"][key]) == (0.3, 840.0)
    assert key not in s.get("taobrev_job_loss", {})
    rec.job_progress("ns", "a", None, None, None)
    s = scrape(registry)
    for metric in ("taobrev_job_progress_ratio", "taobrev_job_eta_seconds", "taobrev_job_loss"):
        assert key not in s.get(metric, {}), metric


def test_instance_uptime_is_set_and_released(registry: CollectorRegistry, rec: Recorder) -> None:
    """Uptime is a gauge per (job, instance); releasing the instance removes its series."""
    rec.instance_uptime("ns", "a", "tbj-a", 10.0)
    rec.instance_uptime("ns", "a", "tbj-a", 70.0)
    key = (("instance", "tbj-a"), ("name", "a"), ("namespace", "ns"))
    assert scrape(registry)["taobrev_instance_uptime_seconds"] == {key: 70.0}
    rec.instance_released("ns", "a", "tbj-a")
    assert "taobrev_instance_uptime_seconds" not in scrape(registry)
    rec.instance_released("ns", "a", "tbj-a")  # releasing twice is harmless


def test_brev_calls_count_and_time_by_verb(registry: CollectorRegistry, rec: Recorder) -> None:
    """brev_call counts (verb, result) and observes the duration per verb; results are validated."""
    rec.brev_call("exec", "ok", 1.5)
    rec.brev_call("exec", "timeout", 600.0)
    rec.brev_call("ls", "error", 0.2)
    s = scrape(registry)
    calls = s["taobrev_brev_cli_calls_total"]
    assert calls[(("result", "ok"), ("verb", "exec"))] == 1
    assert calls[(("result", "timeout"), ("verb", "exec"))] == 1
    assert calls[(("result", "error"), ("verb", "ls"))] == 1
    assert s["taobrev_brev_cli_call_duration_seconds_sum"][(("verb", "exec"),)] == 601.5
    with pytest.raises(ValueError, match=r"result must be one of .*got 'failed'"):
        rec.brev_call("ls", "failed", 0.1)


def test_reconcile_and_teardown_histograms(registry: CollectorRegistry, rec: Recorder) -> None:
    """Reconcile errors count by reason; reconcile and exit-to-teardown durations are histograms."""
    rec.reconcile_error("BrevUnavailable")
    rec.reconcile_error("BrevUnavailable")
    rec.reconcile_duration(0.3)
    rec.exit_to_teardown(95.0)
    s = scrape(registry)
    assert s["taobrev_reconcile_errors_total"] == {(("reason", "BrevUnavailable"),): 2.0}
    assert s["taobrev_reconcile_duration_seconds_count"] == {(): 1.0}
    assert s["taobrev_exit_to_teardown_seconds_bucket"][(("le", "120.0"),)] == 1.0
    assert s["taobrev_exit_to_teardown_seconds_bucket"][(("le", "60.0"),)] == 0.0


def test_phase_duration_buckets_span_a_second_to_a_day(registry: CollectorRegistry, rec: Recorder) -> None:
    """Phase duration buckets go from 1 s to 1 day (the default runningSeconds)."""
    rec.phase_changed("ns", "a", "Running", "Uploading", 3600.0)
    buckets = {
        float(dict(labels)["le"]) for labels in scrape(registry)["taobrev_job_phase_duration_seconds_bucket"]
    }
    finite = sorted(b for b in buckets if b != float("inf"))
    assert finite[0] == 1.0
    assert finite[-1] == 86400.0


def test_recorders_use_their_own_registry_not_the_global_one() -> None:
    """Two recorders coexist (separate registries) and nothing lands in prometheus_client.REGISTRY."""
    first, second = CollectorRegistry(), CollectorRegistry()
    Recorder(first).outcome("Succeeded", "Completed")
    Recorder(second)
    assert "taobrev_job_outcomes_total" in scrape(first)
    assert "taobrev_job_outcomes_total" not in scrape(second)
    assert (
        REGISTRY.get_sample_value("taobrev_build_info", {"version": "unknown", "brev_cli_version": "unknown"})
        is None
    )


def test_redacting_registry_masks_secrets_in_every_label_value() -> None:
    """Label values can carry brev text (reasons, instance names): the registry masks them at
    exposition, registered Secret values and credential shapes alike."""
    forget_registered_secrets()
    register_secret("registered-secret-xyz")
    try:
        registry = RedactingRegistry()
        rec = Recorder(registry, version="1.0", brev_cli_version="v1")
        rec.reconcile_error("Failed registered-secret-xyz")
        rec.outcome("Failed", "nvapi-ABCDEFGHIJKLMNOPQRSTUV")
        rec.instance_uptime("ns", "job", "AKIAIOSFODNN7EXAMPLE", 5)
        text = generate_latest(registry).decode()
        for leaked in ("registered-secret-xyz", "nvapi-ABCDEFGHIJKLMNOPQRSTUV", "AKIAIOSFODNN7EXAMPLE"):
            assert leaked not in text
        assert 'reason="Failed ***"' in text
        # Ordinary labels are untouched, and a second scrape gives the same text.
        assert 'namespace="ns"' in text
        assert generate_latest(registry).decode() == text
    finally:
        forget_registered_secrets()


def test_a_scrape_waits_for_a_per_job_update_in_progress(registry: CollectorRegistry) -> None:
    """The metrics server scrapes from its own thread while the event loop updates jobs: a scrape
    never reads the table (or a record) in the middle of an update."""
    gauges = JobGauges(registry, PHASES)
    scraped = threading.Event()

    def scraper() -> None:
        generate_latest(registry)
        scraped.set()

    with gauges.update("ns", "a") as series:
        series.phase = "Running"
        thread = threading.Thread(target=scraper)
        thread.start()
        # Nothing to observe while the scrape (correctly) waits: a bounded wait is the check.
        assert not scraped.wait(0.3), "a scrape read the per-job table during an update"
        series.entered = 5.0
    assert scraped.wait(10)
    thread.join()
    samples = scrape(registry)
    assert job_series(samples, "taobrev_job_phase_entered_timestamp_seconds", "ns", "a") == {"Running": 5.0}


def test_per_job_families_cannot_be_registered_twice(registry: CollectorRegistry, rec: Recorder) -> None:
    """The per-job collector declares its names, so a second Recorder on the same registry fails
    instead of exposing every job series twice."""
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Recorder(registry)
