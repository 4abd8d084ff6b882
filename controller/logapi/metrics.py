"""The log API's metrics: open streams and viewers (read from the hub at scrape time), requests
by source and HTTP code, bytes served. Label values are fixed sets: no job or user names."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from controller.logapi.hub import LogHub

SOURCES = ("live", "archive", "none")


class LogApiMetrics:
    def __init__(self, registry: CollectorRegistry, hub: LogHub) -> None:
        streams = Gauge(
            "taobrev_log_api_streams",
            "Remote log streams this replica holds open (one per followed job, shared by its viewers).",
            registry=registry,
        )
        streams.set_function(lambda: hub.followers)
        viewers = Gauge(
            "taobrev_log_api_viewers",
            "Log API requests this replica is serving a live log to.",
            registry=registry,
        )
        viewers.set_function(lambda: hub.viewers)
        self.requests = Counter(
            "taobrev_log_api_requests",
            "Log API requests by where the log came from (live, archive, none) and HTTP status code.",
            ["source", "code"],
            registry=registry,
        )
        self.bytes = Counter(
            "taobrev_log_api_bytes",
            "Log bytes served, by source (live, archive).",
            ["source"],
            registry=registry,
        )

    def answered(self, source: str, code: int) -> None:
        self.requests.labels(source=source, code=str(code)).inc()

    def served(self, source: str, n: int) -> None:
        self.bytes.labels(source=source).inc(n)
