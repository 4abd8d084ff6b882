"""`kubectl taobrev cost -o focus` (controller/plugin/focus.py): a CSV that parses with every FOCUS
1.2 Mandatory column, one row per finished attempt the job billed for, the status's own dollars,
FOCUS's date/time format, and no row (but a word on stderr) for an unknown price."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.plugin import focus, main
from tests.unit.test_plugin_commands import FakeKubectl, tbj

NOW = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)
# FOCUS's DateTimeFormat: extended ISO 8601 in UTC, 'YYYY-MM-DDTHH:mm:ssZ'.
FOCUS_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
# FOCUS 1.2's Mandatory columns, read off specification/columns/*.md (Feature level: Mandatory).
SPEC_MANDATORY = {
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargePeriodEnd",
    "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost",
    "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "ServiceCategory", "ServiceName",
}  # fmt: skip
NOT_NULL = SPEC_MANDATORY - {"BillingAccountName", "ChargeClass", "ChargeDescription"}


def at(hours_ago: float) -> str:
    return (NOW - timedelta(hours=hours_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def attempt(n: int, start_h: float, billed_s: int, *, price: float | None = 2.0, deleted: bool = True,
            created: bool = True) -> dict[str, Any]:  # fmt: skip
    inst: dict[str, Any] = {
        "name": f"tbj-x-train-{n}",
        "id": f"inst-{n}",
        "created": created,
        "type": "g6e.xlarge",
        "gpu": "L40S",
        "identity": "org-key:org-42:abcd",
        "billedFrom": at(start_h),
    }
    if price is not None:
        inst["pricePerHour"] = price
    if deleted:
        inst["deletedAt"] = at(start_h - billed_s / 3600)
    out: dict[str, Any] = {"attempt": n, "instance": inst, "billedSeconds": billed_s}
    if price is not None:
        out["estimatedCostDollars"] = round(billed_s * price / 3600, 4)
    return out


def job(name: str, *attempts: dict[str, Any], phase: str = "Deleted") -> dict[str, Any]:
    obj = tbj(name, status={"phase": phase, "attempts": list(attempts)})
    if phase == "Deleted":
        obj["status"]["finishedAt"] = at(0)
    return obj


def parse(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def run(capsys: pytest.CaptureFixture[str], *objects: dict[str, Any], since: str = "7d") -> tuple[str, str]:
    assert (
        main(["cost", "-A", "--since", since, "-o", "focus"], runner=FakeKubectl(*objects), clock=lambda: NOW)
        == 0
    )
    got = capsys.readouterr()
    return got.out, got.err


def test_the_csv_has_every_mandatory_column_and_one_row_per_finished_attempt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    retried = job("retried", attempt(1, 30, 1800), attempt(2, 20, 3600, price=3.0))
    running = job("running", attempt(1, 5, 600), attempt(2, 1, 600, deleted=False), phase="Running")
    reused = job("reused", attempt(1, 10, 7200, created=False))
    out, err = run(capsys, retried, running, reused)

    assert set(focus.MANDATORY) == SPEC_MANDATORY
    header = next(csv.reader(io.StringIO(out)))
    assert set(header) >= SPEC_MANDATORY and len(header) == len(set(header))
    rows = parse(out)
    # retried: both attempts; running: only its first (the second bills on); reused: its owner's bill.
    tags = [json.loads(r["Tags"]) for r in rows]
    assert [(t["taobrev.io/job"], t["taobrev.io/attempt"]) for t in tags] == [
        ("retried", "1"), ("retried", "2"), ("running", "1"),
    ]  # fmt: skip
    assert err == ""
    for r in rows:
        assert all(r[c] != "" for c in NOT_NULL), r
        for c in ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"):
            assert FOCUS_TIME.match(r[c]), (c, r[c])
        assert r["BillingPeriodStart"] <= r["ChargePeriodStart"] < r["ChargePeriodEnd"]
        assert r["ChargeCategory"] == "Usage" and r["ChargeClass"] == "" and r["BillingCurrency"] == "USD"
        assert r["BilledCost"] == r["EffectiveCost"] == r["ListCost"] == r["ContractedCost"]
        assert r["BillingAccountId"] == "org-42"
        assert r["ProviderName"] == r["PublisherName"] == r["InvoiceIssuerName"] == "Brev"
        assert r["PricingUnit"] == r["ConsumedUnit"] == "Hours"
        assert r["ServiceCategory"] == "Compute"
        assert r["SkuId"] == "g6e.xlarge" and r["ResourceType"] == "GPU instance"

    second = rows[1]
    assert float(second["BilledCost"]) == 3.0  # one hour at $3/h, as the status says
    assert float(second["PricingQuantity"]) == float(second["ConsumedQuantity"]) == 1.0
    assert float(second["ListUnitPrice"]) == 3.0
    assert second["ResourceId"] == "inst-2" and second["ResourceName"] == "tbj-x-train-2"
    assert second["ChargePeriodStart"] == at(20) and second["ChargePeriodEnd"] == at(19)
    assert (second["BillingPeriodStart"], second["BillingPeriodEnd"]) == (
        "2026-12-01T00:00:00Z",
        "2027-01-01T00:00:00Z",
    )
    assert json.loads(second["Tags"]) == {
        "taobrev.io/namespace": "ml", "taobrev.io/job": "retried", "taobrev.io/attempt": "2",
        "taobrev.io/job-uid": "uid-retried", "taobrev.io/gpu": "L40S",
    }  # fmt: skip
    # The rows carry the statuses' own dollars.
    billed = [a["estimatedCostDollars"] for j in (retried, running) for a in j["status"]["attempts"]][:3]
    assert sum(float(r["BilledCost"]) for r in rows) == pytest.approx(sum(billed))


def test_an_unknown_price_has_no_row_and_stderr_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    out, err = run(capsys, job("odd", attempt(1, 3, 600, price=None), attempt(2, 2, 600)))
    assert [r["ResourceId"] for r in parse(out)] == ["inst-2"]
    assert "1 finished attempt(s) left out" in err


def test_the_period_keeps_attempts_that_ended_in_it(capsys: pytest.CaptureFixture[str]) -> None:
    old = job("old", attempt(1, 24 * 10, 3600), attempt(2, 24 * 3, 3600))
    out, _ = run(capsys, old)
    assert [r["ResourceId"] for r in parse(out)] == ["inst-2"]
    out, _ = run(capsys, old, since="all")
    assert [r["ResourceId"] for r in parse(out)] == ["inst-1", "inst-2"]


def test_nothing_finished_is_a_header_alone(capsys: pytest.CaptureFixture[str]) -> None:
    out, err = run(capsys)
    assert out.splitlines() == [",".join(focus.COLUMNS)] and err == ""


def test_a_december_charge_bills_in_december_and_an_identity_without_org_is_kept() -> None:
    a = attempt(1, 1, 60)
    a["instance"]["identity"] = "user:u-7"
    a["instance"]["billedFrom"] = "2026-12-31T23:59:00Z"
    a["instance"]["deletedAt"] = "2027-01-01T00:00:00Z"
    r = focus.row(job("nye", a), a)
    assert r is not None
    assert (r["BillingPeriodStart"], r["BillingPeriodEnd"]) == (
        "2026-12-01T00:00:00Z",
        "2027-01-01T00:00:00Z",
    )
    assert r["BillingAccountId"] == "user:u-7"
    assert focus.billing_account(None) == "unknown"
