"""RFC 3339 timestamps as Kubernetes stores them in status (PURE): second resolution, UTC, `Z`."""

from __future__ import annotations

import functools
from datetime import UTC, datetime


# Memoised: every status write serialises each of its ~30 timestamps again, nearly all of them
# unchanged since the last write, and strftime was most of the cost of a status patch. Equal
# instants hash alike whatever their zone, and format alike (in UTC).
@functools.lru_cache(maxsize=4096)
def format_time(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(ts: object) -> datetime | None:
    if not isinstance(ts, str) or not ts:
        return None
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))
