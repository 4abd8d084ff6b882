"""How the plugin prints (PURE): kubectl's table layout and AGE, durations (and how they are
typed: `90s`, `20m`, `1h30m`, `7d`), dollars, and `-o json|yaml` documents. Nothing here reads the
clock: `now` is passed in."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import yaml

NONE = "-"
# kubectl's printers: a tabwriter with 3 spaces of padding between columns.
PADDING = 3


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns as `kubectl get` lays them out: upper-case headers, left-aligned, 3 spaces apart,
    no trailing blanks."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = []
    for cells in [list(headers), *rows]:
        line = "".join(c.ljust(w + PADDING) for c, w in zip(cells, widths, strict=True))
        lines.append(line.rstrip())
    return "\n".join(lines)


def parse_time(value: Any) -> datetime | None:
    """An RFC3339 timestamp as the API server stores it (`2026-12-05T10:13:11Z`), or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def format_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def age(since: datetime | None, now: datetime) -> str:  # noqa: PLR0911 - HumanDuration's branches, one by one
    """kubectl's AGE (k8s.io/apimachinery duration.HumanDuration): 45s, 3m20s, 5h2m, 3d4h, 400d."""
    if since is None:
        return "<unknown>"
    seconds = int((now - since).total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m" if seconds % 60 == 0 else f"{minutes}m{seconds % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24 % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def duration(seconds: float | None) -> str:
    """Billed time: 45s, 12m05s, 3h07m, 2d04h (hours and minutes are what a bill is read in)."""
    if seconds is None:
        return NONE
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> int | None:
    """`90s`, `20m`, `1h30m`, `7d`, `2w` (or plain seconds) in seconds; None if it is not one."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)


def dollars(value: float) -> str:
    """$12.34; a cost above zero never reads as $0.00."""
    if 0 < value < 0.005:
        return "<$0.01"
    return f"${value:,.2f}"


def document(value: Any, fmt: str) -> str:
    """`-o json` (kubectl's 4-space indent) or `-o yaml`."""
    if fmt == "json":
        return json.dumps(value, indent=4)
    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False).rstrip("\n")


def as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Several objects, as `kubectl get -o json` prints a listing."""
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


def size(count: Any) -> str:
    """Bytes as a person reads them: 1744 B, 1.7 KiB, 3.2 GiB."""
    if not isinstance(count, int | float):
        return NONE
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    value, step = float(count), 0
    while value >= 1024 and step < len(units) - 1:
        value, step = value / 1024, step + 1
    return f"{int(count)} B" if step == 0 else f"{value:.1f} {units[step]}"
