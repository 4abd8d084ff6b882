"""Delivery metrics of notifications, on the operator's registry. Labels are bounded: the
transition (8 values), the format (2), a failure reason (a fixed set); never a notifier's name,
URL or a job's name."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Why a request failed, and why an event was given up.
FAILURE_REASONS: Final = ("timeout", "connection", "http_4xx", "http_5xx", "http_other")
DROP_REASONS: Final = ("expired", "queue_full")
# One request: milliseconds on loopback, up to the notifier's timeout (60 s at most).
REQUEST_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# Transition -> confirmed delivery: about a second, up to the give-up age (a day).
LAG_BUCKETS: Final = (0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400)


class NotifyMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.delivered = Counter(
            "taobrev_notifications_delivered_total",
            "Events a receiver confirmed (2xx), by transition and notifier format.",
            ["transition", "format"],
            registry=registry,
        )
        self.failed = Counter(
            "taobrev_notifications_failed_total",
            "Delivery requests that failed (each try counts), by reason.",
            ["reason"],
            registry=registry,
        )
        self.retried = Counter(
            "taobrev_notifications_retried_total",
            "Deliveries scheduled again after a failed request (with backoff).",
            registry=registry,
        )
        self.dropped = Counter(
            "taobrev_notifications_dropped_total",
            "Events given up: older than TAOBREV_NOTIFY_GIVE_UP_AFTER (expired), or the queue was "
            "full (queue_full; sent again at the job's next pass or the operator's next start).",
            ["reason"],
            registry=registry,
        )
        self.unusable = Counter(
            "taobrev_notifications_unusable_total",
            "Times a notifier a job should use could not be used (missing, bad spec, unreadable Secret).",
            registry=registry,
        )
        self.queue_depth = Gauge(
            "taobrev_notifications_queue_depth",
            "Deliveries waiting (due, backing off, or in flight).",
            registry=registry,
        )
        self.request_seconds = Histogram(
            "taobrev_notification_request_seconds",
            "Duration of one delivery request, by result (ok or error).",
            ["result"],
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )
        self.lag_seconds = Histogram(
            "taobrev_notification_delivery_lag_seconds",
            "From the transition (its time in status) to the receiver's confirmation.",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        for reason in FAILURE_REASONS:
            self.failed.labels(reason)
        for reason in DROP_REASONS:
            self.dropped.labels(reason)
