"""RFC 3339 timestamps as Kubernetes stores them in status (PURE): second resolution, UTC, `Z`."""

from __future__ import annotations

from datetime import UTC, datetime


def format_time(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(ts: object) -> datetime | None:
    if not isinstance(ts, str) or not ts:
        return None
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))
