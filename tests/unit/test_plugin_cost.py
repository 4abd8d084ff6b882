"""`kubectl taobrev cost` arithmetic (controller/plugin/costing.py): the period `--since` names, an
attempt overlapping the period's start prorated by billed time, unknown prices kept unknown, and
totals that add up to the statuses' own figures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.plugin import costing
from controller.plugin.cost import render, report

NOW = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)


def at(hours_ago: float) -> str:
    return (NOW - timedelta(hours=hours_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def attempt(
    n: int,
    start_h: float,
    billed_s: int,
    *,
    price: float | None = 2.0,
    deleted: bool = True,
    created: bool = True,
) -> dict[str, Any]:
    inst: dict[str, Any] = {"name": f"i{n}", "created": created, "billedFrom": at(start_h)}
    if price is not None:
        inst["pricePerHour"] = price
    if deleted:
        inst["deletedAt"] = at(start_h - billed_s / 3600)
    out: dict[str, Any] = {"attempt": n, "instance": inst, "billedSeconds": billed_s}
    if price is not None:
        out["estimatedCostDollars"] = round(billed_s * price / 3600, 4)
    return out


def job(ns: str, name: str, *attempts: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name}, "status": {"attempts": list(attempts)}}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("24h", NOW - timedelta(hours=24)),
        ("7d", NOW - timedelta(days=7)),
        ("2w", NOW - timedelta(days=14)),
        ("1h30m", NOW - timedelta(minutes=90)),
        ("2026-12-01T06:30:00Z", datetime(2026, 12, 1, 6, 30, tzinfo=UTC)),
        ("2026-12-01T08:30:00+02:00", datetime(2026, 12, 1, 6, 30, tzinfo=UTC)),
        ("2026-12-01", datetime(2026, 12, 1, tzinfo=UTC)),
        ("all", None),
    ],
)
def test_since_takes_a_duration_back_from_now_a_time_a_date_or_all(
    text: str, expected: datetime | None
) -> None:
    assert costing.parse_since(text, NOW) == expected


@pytest.mark.parametrize("text", ["7x", "yesterday", "-1d", "1h 30m", "2027-01-01"])
def test_a_since_that_is_neither_or_in_the_future_is_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(costing.PeriodError, match="--since"):
        costing.parse_since(text, NOW)


def test_an_attempt_wholly_inside_the_period_counts_its_own_cost_exactly() -> None:
    share = costing.attempt_share(attempt(1, 5, 3600), NOW - timedelta(hours=24), NOW)
    assert share == (3600, costing.Money(known=2.0))


def test_an_attempt_overlapping_the_period_start_is_prorated_by_billed_time() -> None:
    """Billed 4 h from 10 h ago to 6 h ago; the period starts 7 h ago: 1 h of 4 is inside."""
    share = costing.attempt_share(attempt(1, 10, 4 * 3600), NOW - timedelta(hours=7), NOW)
    assert share is not None
    seconds, money = share
    assert seconds == 3600
    assert money.known == pytest.approx(8.0 / 4)
    assert money.unknown == 0


def test_an_attempt_that_ended_before_the_period_counts_nothing() -> None:
    assert costing.attempt_share(attempt(1, 30, 3600), NOW - timedelta(hours=24), NOW) is None


def test_a_running_attempt_counts_up_to_what_the_operator_last_wrote() -> None:
    running = attempt(1, 2, 1800, deleted=False)
    assert costing.interval(running) == (
        NOW - timedelta(hours=2),
        NOW - timedelta(hours=1.5),
        1800,
    )
    assert costing.attempt_share(running, None, NOW) == (1800, costing.Money(known=1.0))


def test_an_unknown_price_is_unknown_never_zero_and_its_time_still_counts() -> None:
    share = costing.attempt_share(attempt(1, 3, 600, price=None), None, NOW)
    assert share is not None
    assert share == (600, costing.Money(known=0.0, unknown=1))
    assert share[1].text() == "unknown"
    mixed = costing.Money(known=3.5, unknown=1)
    assert mixed.text() == "$3.50 + unknown"
    assert mixed.as_json() == {"costDollars": None, "knownCostDollars": 3.5, "costKnown": False}


def test_a_reused_instance_is_its_owners_bill_not_the_jobs() -> None:
    assert costing.attempt_share(attempt(1, 3, 600, created=False), None, NOW) is None


def test_per_job_and_per_namespace_totals_add_up_to_the_statuses() -> None:
    items = [
        job("ml", "a", attempt(1, 50, 3600), attempt(2, 10, 7200)),  # attempt 1 before the period
        job("ml", "b", attempt(1, 5, 1800, price=None)),
        job("cv", "c", attempt(1, 3, 900, price=4.0)),
        job("cv", "idle"),  # never billed: no row
    ]
    since = NOW - timedelta(hours=24)
    by_job = costing.bills(items, since, NOW, "job")
    assert [(b.namespace, b.name, b.seconds, b.money.text(), b.attempts) for b in by_job] == [
        ("cv", "c", 900, "$1.00", 1),
        ("ml", "a", 7200, "$4.00", 1),
        ("ml", "b", 1800, "unknown", 1),
    ]
    by_ns = costing.bills(items, since, NOW, "namespace")
    assert [(b.namespace, b.jobs, b.seconds, b.money.text()) for b in by_ns] == [
        ("cv", 1, 900, "$1.00"),
        ("ml", 2, 9000, "$4.00 + unknown"),
    ]
    whole = costing.total(by_ns)
    assert (whole.seconds, whole.money.known, whole.money.unknown) == (9900, 5.0, 1)
    # Without a start every attempt counts, and the sum is the statuses' own.
    assert costing.total(costing.bills(items, None, NOW, "job")).money.known == pytest.approx(2.0 + 4.0 + 1.0)


def test_the_report_says_the_period_and_flags_unknown_dollars() -> None:
    items = [job("ml", "a", attempt(1, 5, 3600)), job("ml", "b", attempt(1, 5, 60, price=None))]
    text = render(items, NOW - timedelta(days=7), NOW, "job")
    assert text.splitlines()[0] == "Billed from 2026-12-03T12:00:00Z to 2026-12-10T12:00:00Z:"
    assert text.splitlines()[1].split() == ["NAMESPACE", "NAME", "ATTEMPTS", "BILLED", "COST"]
    assert text.splitlines()[-2].split() == ["TOTAL", "2", "1h01m", "$2.00", "+", "unknown"]
    assert "their dollars are unknown (not counted as $0)" in text
    doc = report(items, None, NOW, "namespace")
    assert doc["since"] is None
    assert doc["rows"] == [
        {"namespace": "ml", "jobs": 2, "billedSeconds": 3660, "costDollars": None,
         "knownCostDollars": 2.0, "costKnown": False, "attempts": 2}
    ]  # fmt: skip
    assert render([], None, NOW, "job") == "Nothing billed up to 2026-12-10T12:00:00Z."
