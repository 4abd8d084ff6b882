"""The notifier's limits and timings (TAOBREV_NOTIFY_*, controller/settings.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NotifyTuning:
    concurrency: int = 8  # requests in flight
    per_sink: int = 2  # requests in flight to one notifier
    max_pending: int = 10000  # deliveries kept waiting at most
    backoff_base: float = 2.0  # first retry delay (s)
    backoff_max: float = 300.0  # retry delay cap (s)
    give_up_after: float = 86400.0  # an event older than this (from its transition) is given up
    flush_delay: float = 1.0  # confirmations within this share one status write
    status_interval: float = 10.0  # seconds between a notifier's status writes
