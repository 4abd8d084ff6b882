"""Billed time and dollars over a period, from the jobs' statuses (PURE).

Each attempt that created its instance bills over one interval: from `instance.billedFrom` (the
first `brev create` that may have made it) to `instance.deletedAt` (confirmed gone) or, while it
lasts, `billedFrom + billedSeconds` as the operator last wrote it (that figure moves in 10-minute
steps while the instance runs). A period [since, until] counts the part of each interval inside
it, and that part's dollars pro rata: an attempt wholly inside counts its own
`estimatedCostDollars` exactly (so the figures add up to the status's totals); one that overlaps
the period's start counts `estimatedCostDollars x seconds inside / seconds billed` (or, without
it, seconds inside x `pricePerHour` / 3600). An attempt whose price is unknown counts its time and
marks its dollars unknown; unknown is never added as 0. A reused instance (`created: false`) is
its owner's bill, not the job's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from controller.plugin import jobs
from controller.plugin.output import dollars, parse_duration, parse_time


class PeriodError(ValueError):
    """--since that is neither a duration nor a time."""


def parse_since(text: str, now: datetime) -> datetime | None:
    """`--since`: a duration back from now (`24h`, `7d`, `2w`, `90m`), an RFC3339 time
    (`2026-12-01T00:00:00Z`), a date (`2026-12-01`, midnight UTC) or `all` (None: no start)."""
    text = text.strip()
    if text == "all":
        return None
    seconds = parse_duration(text)
    if seconds is not None:
        return now - timedelta(seconds=seconds)
    at = parse_time(text if "T" in text else f"{text}T00:00:00Z")
    if at is None:
        raise PeriodError(
            f"--since {text!r}: give a duration (24h, 7d, 2w), an RFC3339 time "
            "(2026-12-01T00:00:00Z), a date (2026-12-01) or all"
        )
    if at > now:
        raise PeriodError(f"--since {text!r} is in the future")
    return at


@dataclass
class Money:
    """Dollars known so far, and how many billed attempts have no price (never read as 0)."""

    known: float = 0.0
    unknown: int = 0

    def add(self, other: Money) -> None:
        self.known += other.known
        self.unknown += other.unknown

    def text(self) -> str:
        if not self.unknown:
            return dollars(self.known)
        return "unknown" if self.known == 0 else f"{dollars(self.known)} + unknown"

    def as_json(self) -> dict[str, Any]:
        return {"costDollars": round(self.known, 4) if not self.unknown else None,
                "knownCostDollars": round(self.known, 4), "costKnown": not self.unknown}  # fmt: skip


@dataclass
class Bill:
    """What one job (or a group of jobs) billed inside the period."""

    namespace: str
    name: str
    seconds: float = 0.0
    money: Money = field(default_factory=Money)
    attempts: int = 0
    jobs: int = 0

    def add(self, other: Bill) -> None:
        self.seconds += other.seconds
        self.money.add(other.money)
        self.attempts += other.attempts
        self.jobs += other.jobs

    def as_json(self, by: str) -> dict[str, Any]:
        out: dict[str, Any] = {"namespace": self.namespace}
        if by == "job":
            out["name"] = self.name
        else:
            out["jobs"] = self.jobs
        return {
            **out,
            "billedSeconds": round(self.seconds),
            **self.money.as_json(),
            "attempts": self.attempts,
        }


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def interval(attempt: Mapping[str, Any]) -> tuple[datetime, datetime, float] | None:
    """(start, end, billed seconds) of one attempt's billing, or None if it billed nothing to the job."""
    inst = jobs.instance(attempt)
    if inst.get("created") is False:
        return None
    start = parse_time(inst.get("billedFrom"))
    billed = _number(attempt.get("billedSeconds"))
    if start is None:
        return None
    end = parse_time(inst.get("deletedAt"))
    if end is None:
        end = start + timedelta(seconds=billed or 0)
    if billed is None:
        billed = max((end - start).total_seconds(), 0.0)
    return start, max(end, start), billed


def attempt_share(
    attempt: Mapping[str, Any], since: datetime | None, until: datetime
) -> tuple[float, Money] | None:
    """Seconds and dollars of one attempt inside [since, until] (None: it billed nothing there)."""
    span = interval(attempt)
    if span is None:
        return None
    start, end, billed = span
    length = (end - start).total_seconds()
    if length <= 0:  # nothing billed yet: counted where it started
        if (since is not None and start < since) or start > until:
            return None
        inside, whole = 0.0, True
    else:
        lo, hi = max(start, since) if since else start, min(end, until)
        inside = (hi - lo).total_seconds()
        if inside <= 0:
            return None
        whole = inside >= length
    seconds = billed if whole else inside
    cost = _number(attempt.get("estimatedCostDollars"))
    price = _number(jobs.instance(attempt).get("pricePerHour"))
    if cost is not None:
        money = Money(known=cost if whole else cost * inside / length)
    elif price is not None:
        money = Money(known=seconds * price / 3600)
    elif seconds > 0:
        money = Money(unknown=1)
    else:
        money = Money()
    return seconds, money


def job_bill(job: Mapping[str, Any], since: datetime | None, until: datetime) -> Bill:
    bill = Bill(jobs.namespace(job), jobs.name(job), jobs=1)
    for attempt in jobs.attempts(jobs.status(job)):
        share = attempt_share(attempt, since, until)
        if share is not None:
            bill.seconds += share[0]
            bill.money.add(share[1])
            bill.attempts += 1
    return bill


def bills(items: Iterable[Mapping[str, Any]], since: datetime | None, until: datetime, by: str) -> list[Bill]:
    """One bill per job (`by="job"`) or per namespace (`by="namespace"`) that billed in the period,
    sorted by namespace and name."""
    per_job = [b for b in (job_bill(j, since, until) for j in items) if b.attempts]
    if by == "job":
        return sorted(per_job, key=lambda b: (b.namespace, b.name))
    grouped: dict[str, Bill] = {}
    for b in per_job:
        grouped.setdefault(b.namespace, Bill(b.namespace, "")).add(b)
    return [grouped[ns] for ns in sorted(grouped)]


def total(rows: Iterable[Bill]) -> Bill:
    out = Bill("", "")
    for b in rows:
        out.add(b)
    return out
