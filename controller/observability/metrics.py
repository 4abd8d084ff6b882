"""Prometheus metrics of the operator, recorded through one `Recorder` over an injected registry.

The registry is passed in (never prometheus_client's global one) so tests and a second operator in
the same process each see only their own series. Names follow Prometheus conventions and the shapes
kube-state-metrics (per-object one-hot state gauges) and controller-runtime (reconcile counters and
histograms) made familiar; deploy/monitoring/ holds the alerts and dashboard built on them.

Per-job series (labels namespace, name) are dropped by `job_forgotten` when the object is gone, so
their cardinality follows the number of TaoBrevJob objects in the cluster, not the history.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from threading import Thread
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics_core import Metric

from controller.lifecycle.phases import Phase
from controller.observability.job_metrics import JobGauges
from controller.observability.logs import redact_text
from controller.observability.node_costs import NodeCost, NodeCosts

# The status.phase values of the TaoBrevJob API, in lifecycle order (SPEC.md).
PHASES: Final = tuple(str(p) for p in Phase)
BREV_RESULTS: Final = ("ok", "error", "timeout")
# Label values of the orphan sweeper's series (controller/fleet/orphans.py State and Why).
ORPHAN_STATES: Final = ("pending_grace", "reported", "deleting")
ORPHAN_REASONS: Final = ("orphan", "retention_expired", "finished_job")
ORPHAN_SWEEP_RESULTS: Final = ("done", "skipped")
# `from_phase` of a job's first transition: there was no phase before it.
NO_PHASE: Final = "none"

# A phase lasts from about a second (Pending) to a day (Running, the default runningSeconds).
PHASE_BUCKETS: Final = (1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400)
# brev CLI calls: ~0.1 s (ls) .. minutes (create waits for the instance; exec of a docker pull).
BREV_CALL_BUCKETS: Final = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200)
# One reconcile pass: milliseconds when nothing changes, up to a long brev call when acting.
PACE_BUCKETS: Final = (0.001, 0.01, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
RECONCILE_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# Waiting for a lane slot: none at all normally; up to a long call when a lane is full.
LANE_WAIT_BUCKETS: Final = (0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600)
# Container exit -> instance deleted: upload + brev delete + confirmation, seconds to an hour.
TEARDOWN_BUCKETS: Final = (5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600)


class RedactingRegistry(CollectorRegistry):
    """A registry whose every exposed label value passes the operator's one redaction step.

    Masking at exposition (the sink) covers every label, present and future, whatever a caller
    passed: reasons and instance names can come from brev's output.
    """

    def collect(self) -> Iterable[Metric]:
        for metric in super().collect():
            # collect() builds fresh Metric objects on each scrape, so rewriting them is safe.
            metric.samples = [
                sample._replace(labels={k: redact_text(v) for k, v in sample.labels.items()})
                for sample in metric.samples
            ]
            yield metric


class Recorder:
    """Every metric the operator exposes; one instance per operator, built at startup.

    `clock` returns Unix time in seconds; tests pass a fake one. Methods are cheap and thread-safe
    (prometheus_client locks each metric).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        version: str = "unknown",
        brev_cli_version: str = "unknown",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock

        # Per-job series (namespace, name): one small record per job
        # (controller/observability/job_metrics.py).
        self._jobs = JobGauges(registry, PHASES)
        # OpenCost's node gauges, one series per live instance (controller/observability/node_costs.py).
        self._nodes = NodeCosts(registry)
        self._phase_transitions = Counter(
            "taobrev_job_phase_transitions",
            f"Phase transitions of TaoBrevJobs; from_phase={NO_PHASE!r} for a job's first phase.",
            ["from_phase", "to_phase"],
            registry=registry,
        )
        self._phase_duration = Histogram(
            "taobrev_job_phase_duration_seconds",
            "Time TaoBrevJobs spent in a phase, observed when they leave it.",
            ["phase"],
            buckets=PHASE_BUCKETS,
            registry=registry,
        )
        self._outcomes = Counter(
            "taobrev_job_outcomes",
            "Finished TaoBrevJob runs by outcome (Succeeded, Failed, Canceled) and reason.",
            ["outcome", "reason"],
            registry=registry,
        )
        self._brev_calls = Counter(
            "taobrev_brev_cli_calls",
            "brev CLI invocations by verb (ls, create, exec, delete ...) and result (ok, error, timeout).",
            ["verb", "result"],
            registry=registry,
        )
        self._brev_call_duration = Histogram(
            "taobrev_brev_cli_call_duration_seconds",
            "Wall-clock duration of brev CLI invocations by verb.",
            ["verb"],
            buckets=BREV_CALL_BUCKETS,
            registry=registry,
        )
        self._brev_paced = Histogram(
            "taobrev_brev_api_pace_wait_seconds",
            "Time calls to Brev's API waited for the operator's pace (TAOBREV_BREV_RATE, and the "
            "shared cool-down after a 429 or 5xx).",
            buckets=PACE_BUCKETS,
            registry=registry,
        )
        self._brev_throttled = Counter(
            "taobrev_brev_api_throttled",
            "Calls Brev answered with a rate limit (429) or a server error (5xx), by verb and kind; "
            "each starts a shared cool-down.",
            ["verb", "kind"],
            registry=registry,
        )
        self._reconcile_errors = Counter(
            "taobrev_reconcile_errors",
            "Reconcile passes that ended in an error, by error reason.",
            ["reason"],
            registry=registry,
        )
        self._reconcile_time = Histogram(
            "taobrev_reconcile_duration_seconds",
            "Duration of one reconcile pass of one TaoBrevJob.",
            buckets=RECONCILE_BUCKETS,
            registry=registry,
        )
        self._exit_teardown = Histogram(
            "taobrev_exit_to_teardown_seconds",
            "Time from the training container's exit to the confirmed deletion of its instance.",
            buckets=TEARDOWN_BUCKETS,
            registry=registry,
        )
        self._build = Gauge(
            "taobrev_build_info",
            "Always 1; labels carry the operator version and the brev CLI version it runs.",
            ["version", "brev_cli_version"],
            registry=registry,
        )
        self._leader = Gauge(
            "taobrev_leader",
            "1 while this replica holds the leader Lease and acts on jobs; 0 on a standby.",
            registry=registry,
        )
        self._lane_slots = Gauge(
            "taobrev_lane_slots",
            "Slots of each lane of brev calls (TAOBREV_LANE_*; lane=shared: the deprecated single pool).",
            ["lane"],
            registry=registry,
        )
        self._lane_in_flight = Gauge(
            "taobrev_lane_in_flight",
            "Brev calls holding a slot of each lane now (each is one child process).",
            ["lane"],
            registry=registry,
        )
        self._lane_waiting = Gauge(
            "taobrev_lane_waiting",
            "Brev calls queued for a slot of each lane now.",
            ["lane"],
            registry=registry,
        )
        self._lane_wait = Histogram(
            "taobrev_lane_wait_seconds",
            "Time a brev call waited for a slot of its lane, whether it got one or not.",
            ["lane"],
            buckets=LANE_WAIT_BUCKETS,
            registry=registry,
        )
        self._lane_busy = Counter(
            "taobrev_lane_busy",
            "Calls that got no slot of their lane before their phase deadline (LaneBusy).",
            ["lane"],
            registry=registry,
        )
        # The orphan sweeper (controller/fleet/sweeper.py). Every label value is created up front, so
        # the series exist (at 0) from the first scrape and alerts see 0, not "no data".
        self._orphans = Gauge(
            "taobrev_orphan_instances",
            "Instances carrying this operator's mark that no unfinished TaoBrevJob references, by state: "
            "pending_grace (within the grace), reported (left alone), deleting (delete sent).",
            ["state"],
            registry=registry,
        )
        self._orphans_deleted = Counter(
            "taobrev_orphans_deleted",
            "Orphaned or expired retained instances the sweeper deleted (delete confirmed not-found).",
            ["reason"],
            registry=registry,
        )
        self._orphan_sweeps = Counter(
            "taobrev_orphan_sweeps",
            "Orphan sweeps by result: done, or skipped (listing, job list or record unreadable).",
            ["result"],
            registry=registry,
        )
        for state in ORPHAN_STATES:
            self._orphans.labels(state=state).set(0)
        for reason in ORPHAN_REASONS:
            self._orphans_deleted.labels(reason=reason)
        for result in ORPHAN_SWEEP_RESULTS:
            self._orphan_sweeps.labels(result=result)
        self._queued = Gauge(
            "taobrev_queued_jobs",
            "TaoBrevJobs waiting for admission under the quotas, by namespace and reason (a limit, or "
            "Suspended), as of the operator's last admission decision.",
            ["namespace", "reason"],
            registry=registry,
        )
        self._queued_keys: set[tuple[str, str]] = set()
        self.build_info(version, brev_cli_version)

    # -- process ---------------------------------------------------------------------------------

    def queued(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Set the queue gauge to `counts` ((namespace, reason) -> jobs); series not in it go."""
        for namespace, reason in self._queued_keys - set(counts):
            self._queued.remove(namespace, reason)
        for (namespace, reason), n in counts.items():
            self._queued.labels(namespace=namespace, reason=reason).set(n)
        self._queued_keys = set(counts)

    def build_info(self, version: str, brev_cli_version: str) -> None:
        """(Re)set build info, e.g. once `brev --version` has been read at startup."""
        self._build.clear()
        self._build.labels(version=version, brev_cli_version=brev_cli_version).set(1)

    def leader(self, leading: bool) -> None:
        self._leader.set(1 if leading else 0)
        if not leading:
            self._nodes.clear()  # only the leader exports them: two replicas would double sums

    # -- OpenCost node gauges (controller/fleet/node_cost_feed.py) -------------------------------

    def node_costs(self, rows: Iterable[NodeCost], listed: Iterable[str]) -> None:
        """The live instances from one listing (`listed`: every id it showed)."""
        self._nodes.replace(rows, listed)

    def node_deleted(self, instance_id: str) -> None:
        self._nodes.drop(instance_id)

    def node_ids(self) -> set[str]:
        return self._nodes.ids()

    # -- brev CLI and reconcile loop -------------------------------------------------------------

    def brev_call(self, verb: str, result: str, seconds: float) -> None:
        if result not in BREV_RESULTS:
            raise ValueError(f"brev_call result must be one of {BREV_RESULTS}, got {result!r}")
        self._brev_calls.labels(verb=verb, result=result).inc()
        self._brev_call_duration.labels(verb=verb).observe(seconds)

    def brev_paced(self, seconds: float) -> None:
        self._brev_paced.observe(seconds)

    def brev_throttled(self, verb: str, kind: str, cool_down: float) -> None:
        self._brev_throttled.labels(verb=verb, kind=kind).inc()

    def reconcile_error(self, reason: str) -> None:
        self._reconcile_errors.labels(reason=reason).inc()

    def reconcile_duration(self, seconds: float) -> None:
        self._reconcile_time.observe(seconds)

    # -- lanes (controller.effects.lanes.LaneObserver) ---------------------------------------------------

    def lane_slots(self, lane: str, slots: int) -> None:
        self._lane_slots.labels(lane=lane).set(slots)

    def lane_state(self, lane: str, *, in_flight: int, waiting: int) -> None:
        self._lane_in_flight.labels(lane=lane).set(in_flight)
        self._lane_waiting.labels(lane=lane).set(waiting)

    def lane_waited(self, lane: str, seconds: float, *, obtained: bool) -> None:
        self._lane_wait.labels(lane=lane).observe(seconds)
        if not obtained:
            self._lane_busy.labels(lane=lane).inc()

    # -- jobs ------------------------------------------------------------------------------------

    def phase_changed(
        self,
        namespace: str,
        name: str,
        old: str | None,
        new: str,
        seconds_in_old: float | None,
        *,
        entered_at: float | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        """Count a transition, observe the time spent in `old`, and point the job's gauges at `new`.

        `entered_at` (Unix seconds, default: now) and `timeout_seconds` (the new phase's timeout,
        None for phases without one) feed the stuck-job alert.
        """
        _check_phase(new)
        if old is not None:
            _check_phase(old)
        self._phase_transitions.labels(from_phase=old or NO_PHASE, to_phase=new).inc()
        if old is not None and seconds_in_old is not None:
            self._phase_duration.labels(phase=old).observe(seconds_in_old)
        self.job_state(
            namespace,
            name,
            phase=new,
            entered_at=self._clock() if entered_at is None else entered_at,
            timeout_seconds=timeout_seconds,
        )

    def job_state(
        self,
        namespace: str,
        name: str,
        *,
        phase: str,
        entered_at: float | None = None,
        timeout_seconds: float | None = None,
        outcome: str | None = None,
        ended_at: float | None = None,
    ) -> None:
        """Set the job's per-job gauges from its status, counting nothing.

        Idempotent: call it on every pass (and after an operator restart, when no transition is
        seen) with the job's whole state, so the gauges follow status even when spec.timeouts
        changes. `entered_at` comes from status.phaseTimes (None keeps the recorded value);
        `timeout_seconds` None means the phase has no timeout; `ended_at` from status.finishedAt
        (default: now) once `outcome` is set.
        """
        _check_phase(phase)
        with self._jobs.update(namespace, name) as s:
            if s.phase != phase:
                s.phase, s.entered = phase, None  # one entered/timeout series: the current phase's
            if entered_at is not None:
                s.entered = entered_at
            s.timeout = timeout_seconds
            if outcome is not None:
                s.outcome, s.ended = outcome, self._clock() if ended_at is None else ended_at

    def outcome(self, outcome: str, reason: str) -> None:
        self._outcomes.labels(outcome=outcome, reason=reason).inc()

    def job_forgotten(self, namespace: str, name: str) -> None:
        """Drop every series labelled with this job (the object is gone from the cluster)."""
        self._jobs.forget(namespace, name)

    def job_billing(
        self, namespace: str, name: str, billed_seconds: float, cost_dollars: float | None
    ) -> None:
        """Per-job billing gauges from status (every pass); cost None drops the cost series."""
        with self._jobs.update(namespace, name) as s:
            s.billed, s.cost = billed_seconds, cost_dollars

    def job_progress(
        self, namespace: str, name: str, ratio: float | None, eta_seconds: float | None, loss: float | None
    ) -> None:
        """Per-job training gauges from status.progress (every pass); None drops a series (all
        three once the run ended)."""
        with self._jobs.update(namespace, name) as s:
            s.progress, s.eta, s.loss = ratio, eta_seconds, loss

    # -- instances -------------------------------------------------------------------------------

    def instance_uptime(self, namespace: str, name: str, instance: str, seconds: float) -> None:
        with self._jobs.update(namespace, name) as s:
            if s.uptime is None:
                s.uptime = {}
            s.uptime[instance] = seconds

    def instance_released(self, namespace: str, name: str, instance: str) -> None:
        """The instance is confirmed deleted, or retained and no longer billed to this job."""
        self._jobs.release_instance(namespace, name, instance)

    def exit_to_teardown(self, seconds: float) -> None:
        self._exit_teardown.observe(seconds)

    # -- orphan sweeper --------------------------------------------------------------------------

    def orphan_counts(self, counts: Mapping[str, int]) -> None:
        for state in ORPHAN_STATES:
            self._orphans.labels(state=state).set(counts.get(state, 0))

    def orphan_deleted(self, reason: str) -> None:
        if reason not in ORPHAN_REASONS:
            raise ValueError(f"orphan_deleted reason must be one of {ORPHAN_REASONS}, got {reason!r}")
        self._orphans_deleted.labels(reason=reason).inc()

    def orphan_sweep(self, result: str) -> None:
        if result not in ORPHAN_SWEEP_RESULTS:
            raise ValueError(f"orphan_sweep result must be one of {ORPHAN_SWEEP_RESULTS}, got {result!r}")
        self._orphan_sweeps.labels(result=result).inc()


def _check_phase(phase: str) -> None:
    # A typo here would silently break the one-hot invariant the alerts rely on.
    if phase not in PHASES:
        raise ValueError(f"unknown TaoBrevJob phase {phase!r}; expected one of {PHASES}")


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> tuple[WSGIServer, Thread]:
    """Serve /metrics for `registry` on host:port in a daemon thread; returns (server, thread).

    Stop it with `server.shutdown(); server.server_close()`.
    """
    return start_http_server(port, addr=host, registry=registry)
