"""The per-job gauges (labels namespace, name), kept as one small record per job and turned into
samples only when Prometheus scrapes.

prometheus_client's labelled Gauge keeps a child per label set — an object, two dicts, a value and
a lock, about 1 KiB — and a job has a dozen series (the one-hot phase alone is seven): ~13 KiB per
job, 13 MiB of the operator's memory at 1,000 running jobs for numbers that are read every 30 s.
This collector holds one slotted `JobSeries` per job instead and yields the same families, names,
help, labels and values a set of Gauges would (tests/unit/test_metrics.py scrapes both shapes).

Updates come from the event loop, scrapes from the metrics server's thread: one lock guards the
table, and a scrape copies each record under it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

# name -> (help, the label after namespace/name, or None)
FAMILIES: Final = {
    "taobrev_job_phase": (
        "Current phase of each TaoBrevJob: 1 for the phase the job is in, 0 for the others.",
        "phase",
    ),
    "taobrev_job_phase_entered_timestamp_seconds": (
        "Unix time at which the job entered its current phase (status.phaseTimes).",
        "phase",
    ),
    "taobrev_job_phase_timeout_seconds": (
        "Timeout of the job's current phase from spec.timeouts; absent for phases without one.",
        "phase",
    ),
    "taobrev_job_ended_timestamp_seconds": (
        "Unix time at which the job's run ended (status.outcome set); absent while it runs.",
        "outcome",
    ),
    "taobrev_instance_uptime_seconds": (
        "Billed time so far of the Brev instance a job uses; removed once the instance is released.",
        "instance",
    ),
    "taobrev_job_billed_seconds": (
        "Billed instance seconds of the job over all attempts (create request to confirmed deletion).",
        None,
    ),
    "taobrev_job_progress_ratio": (
        "Training progress of a running job, 0-1: epochs finished / epochs in the run (TAO's "
        "status.json); absent before the first epoch and once the run ended.",
        None,
    ),
    "taobrev_job_eta_seconds": (
        "Training time left as TAO estimated it at the last epoch; absent when unknown and once the "
        "run ended.",
        None,
    ),
    "taobrev_job_loss": (
        "The last training loss TAO reported in status.json; absent when none and once the run ended.",
        None,
    ),
    "taobrev_job_estimated_cost_dollars": (
        "Estimated cost of the job over all attempts (billed time x hourly price from `brev "
        "search`); absent while a price is unknown.",
        None,
    ),
}


class JobSeries:
    """What one job's gauges say; None: that series is absent."""

    __slots__ = (
        "billed",
        "cost",
        "ended",
        "entered",
        "eta",
        "loss",
        "outcome",
        "phase",
        "progress",
        "timeout",
        "uptime",
    )

    def __init__(self) -> None:
        self.phase: str | None = None
        self.entered: float | None = None  # for `phase`
        self.timeout: float | None = None  # for `phase`
        self.outcome: str | None = None
        self.ended: float | None = None  # for `outcome`
        self.billed: float | None = None
        self.cost: float | None = None
        self.progress: float | None = None
        self.eta: float | None = None
        self.loss: float | None = None
        # instance -> seconds: an instance's series stays until it is released
        self.uptime: dict[str, float] | None = None

    def copy(self) -> JobSeries:
        out = JobSeries()
        for slot in JobSeries.__slots__:
            setattr(out, slot, getattr(self, slot))
        out.uptime = dict(self.uptime) if self.uptime else None
        return out


class JobGauges:
    """A prometheus_client collector of every job's `JobSeries`."""

    def __init__(self, registry: CollectorRegistry, phases: tuple[str, ...]) -> None:
        self._phases = phases
        self._jobs: dict[tuple[str, str], JobSeries] = {}
        self._lock = threading.Lock()
        registry.register(self)

    @contextmanager
    def update(self, namespace: str, name: str) -> Iterator[JobSeries]:
        """`with gauges.update(ns, name) as s:` — the job's record (created if new), locked."""
        with self._lock:
            yield self._jobs.setdefault((namespace, name), JobSeries())

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._jobs.pop((namespace, name), None)

    def release_instance(self, namespace: str, name: str, instance: str) -> None:
        with self._lock:
            series = self._jobs.get((namespace, name))
            if series is not None and series.uptime:
                series.uptime.pop(instance, None)

    def describe(self) -> Iterable[Metric]:
        # The names, so registering a second collector of the same names fails loudly.
        return [self._family(name) for name in FAMILIES]

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            rows = [(key, s.copy()) for key, s in self._jobs.items()]
        fams = {name: self._family(name) for name in FAMILIES}
        phase, entered, timeout = (
            fams["taobrev_job_phase"],
            fams["taobrev_job_phase_entered_timestamp_seconds"],
            fams["taobrev_job_phase_timeout_seconds"],
        )
        for (ns, name), s in rows:
            if s.phase is not None:
                for candidate in self._phases:
                    phase.add_metric([ns, name, candidate], 1 if candidate == s.phase else 0)
                if s.entered is not None:
                    entered.add_metric([ns, name, s.phase], s.entered)
                if s.timeout is not None:
                    timeout.add_metric([ns, name, s.phase], s.timeout)
            if s.outcome is not None and s.ended is not None:
                fams["taobrev_job_ended_timestamp_seconds"].add_metric([ns, name, s.outcome], s.ended)
            for instance, seconds in (s.uptime or {}).items():
                fams["taobrev_instance_uptime_seconds"].add_metric([ns, name, instance], seconds)
            if s.billed is not None:
                fams["taobrev_job_billed_seconds"].add_metric([ns, name], s.billed)
            if s.cost is not None:
                fams["taobrev_job_estimated_cost_dollars"].add_metric([ns, name], s.cost)
            for family, value in (
                ("taobrev_job_progress_ratio", s.progress),
                ("taobrev_job_eta_seconds", s.eta),
                ("taobrev_job_loss", s.loss),
            ):
                if value is not None:
                    fams[family].add_metric([ns, name], value)
        yield from fams.values()

    @staticmethod
    def _family(name: str) -> GaugeMetricFamily:
        doc, extra = FAMILIES[name]
        return GaugeMetricFamily(name, doc, labels=["namespace", "name", *([extra] if extra else [])])
