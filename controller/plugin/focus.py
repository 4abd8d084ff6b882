"""`kubectl taobrev cost -o focus`: finished attempts as FOCUS 1.2 cost and usage rows (PURE).

FOCUS (the FinOps Open Cost and Usage Specification, focus.finops.org) is the column set FinOps
tools load. Every column the specification makes Mandatory is here (BilledCost, BillingAccountId,
BillingAccountName, BillingCurrency, BillingPeriodStart/End, ChargeCategory, ChargeClass,
ChargeDescription, ChargePeriodStart/End, ContractedCost, EffectiveCost, InvoiceIssuerName,
ListCost, PricingQuantity, PricingUnit, ProviderName, PublisherName, ServiceCategory,
ServiceName), with the Conditional ones we know (ConsumedQuantity/Unit, ListUnitPrice,
ContractedUnitPrice, ResourceId/Name/Type, RegionId, SkuId, Tags) and ChargeFrequency.

One row per finished attempt whose instance the job created (a reused instance is its owner's
bill): from `instance.billedFrom` to `instance.deletedAt` (or, for an instance kept after the
job, to billedFrom + billedSeconds as the operator last wrote it), the dollars the status holds
(billed time x the `brev search` list price). These are the operator's estimate at list price,
not Brev's invoice: every cost column carries the same figure. An attempt whose price was never
known has no row (FOCUS costs cannot be null, and unknown is never $0): `unpriced` counts them.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from controller.plugin import costing, jobs
from controller.plugin.output import format_time

# FOCUS 1.2, Mandatory (specification/columns/*.md, "Feature level").
MANDATORY: Final = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ContractedCost",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "ServiceCategory",
    "ServiceName",
)
COLUMNS: Final = (
    *MANDATORY,
    "ChargeFrequency",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedUnitPrice",
    "ListUnitPrice",
    "RegionId",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "SkuId",
    "Tags",
)
PROVIDER: Final = "Brev"  # Provider, Publisher and Invoice Issuer: Brev sells, runs and bills it
SERVICE: Final = "Brev GPU instances"
TAG_PREFIX: Final = "taobrev.io/"  # FOCUS: provider-defined tag keys carry the provider's prefix


@dataclass(frozen=True)
class Export:
    rows: list[dict[str, str]]
    unpriced: int  # finished attempts left out: their price was never known


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _month(at: datetime) -> tuple[datetime, datetime]:
    """The calendar month (UTC) holding `at`: FOCUS's billing period here."""
    start = at.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return start, end


def billing_account(identity: Any) -> str:
    """Brev bills the organisation: the org of an org API key login (`org-key:<org>:<digest>`),
    else the identity the operator recorded (`user:<id>`), else `unknown`."""
    text = str(identity or "")
    if text.startswith("org-key:"):
        return text.split(":")[1]
    return text or "unknown"


def _amount(value: float) -> str:
    return f"{value:.6f}".rstrip("0").rstrip(".") if value else "0"


def _finished_attempts(job: Mapping[str, Any]) -> Iterable[tuple[Mapping[str, Any], bool]]:
    """(attempt, finished): an attempt is finished once a later one started or the job ended."""
    st = jobs.status(job)
    every = jobs.attempts(st)
    done = jobs.finished(st) or bool(st.get("finishedAt"))
    for i, attempt in enumerate(every):
        deleted = bool(jobs.instance(attempt).get("deletedAt"))
        yield attempt, deleted or done or i < len(every) - 1


def row(job: Mapping[str, Any], attempt: Mapping[str, Any]) -> dict[str, str] | None:
    """The attempt's FOCUS row; None when it billed nothing to the job or its price is unknown."""
    span = costing.interval(attempt)
    if span is None:
        return None
    start, end, seconds = span
    inst = jobs.instance(attempt)
    price = _number(inst.get("pricePerHour"))
    cost = _number(attempt.get("estimatedCostDollars"))
    if cost is None and price is not None:
        cost = seconds * price / 3600
    if cost is None:
        if seconds > 0:
            return None
        cost = 0.0
    hours = seconds / 3600
    period_start, period_end = _month(start)
    ns, name, number = jobs.namespace(job), jobs.name(job), attempt.get("attempt")
    sku = str(inst.get("type") or "")
    described = f"{sku or 'Brev'} instance for TaoBrevJob {ns}/{name} attempt {number}"
    if price is not None:
        described += f" ({round(seconds)} s at ${price:g}/h)"
    tags = {f"{TAG_PREFIX}namespace": ns, f"{TAG_PREFIX}job": name, f"{TAG_PREFIX}attempt": str(number)}
    uid = jobs.metadata(job).get("uid")
    if uid:
        tags[f"{TAG_PREFIX}job-uid"] = str(uid)
    if inst.get("gpu"):
        tags[f"{TAG_PREFIX}gpu"] = str(inst["gpu"])
    money = _amount(cost)
    unit_price = _amount(price) if price is not None else ""
    return {
        "BilledCost": money,
        "BillingAccountId": billing_account(inst.get("identity")),
        "BillingAccountName": "",
        "BillingCurrency": "USD",
        "BillingPeriodEnd": format_time(period_end),
        "BillingPeriodStart": format_time(period_start),
        "ChargeCategory": "Usage",
        "ChargeClass": "",  # null: not a correction of an invoiced period
        "ChargeDescription": described,
        "ChargePeriodEnd": format_time(end),
        "ChargePeriodStart": format_time(start),
        "ContractedCost": money,
        "EffectiveCost": money,
        "InvoiceIssuerName": PROVIDER,
        "ListCost": money,
        "PricingQuantity": _amount(hours),
        "PricingUnit": "Hours",
        "ProviderName": PROVIDER,
        "PublisherName": PROVIDER,
        "ServiceCategory": "Compute",
        "ServiceName": SERVICE,
        "ChargeFrequency": "Usage-Based",
        "ConsumedQuantity": _amount(hours),
        "ConsumedUnit": "Hours",
        "ContractedUnitPrice": unit_price,
        "ListUnitPrice": unit_price,
        "RegionId": "",  # Brev reports no placement region
        "ResourceId": str(inst.get("id") or inst.get("name") or ""),
        "ResourceName": str(inst.get("name") or ""),
        "ResourceType": "GPU instance",
        "SkuId": sku,
        "Tags": json.dumps(tags, sort_keys=True, separators=(",", ":")),
    }


def export(items: Iterable[Mapping[str, Any]], since: datetime | None, until: datetime) -> Export:
    """The FOCUS rows of the finished attempts that ended inside [since, until], oldest first."""
    rows: list[dict[str, str]] = []
    unpriced = 0
    for job in items:
        for attempt, finished in _finished_attempts(job):
            span = costing.interval(attempt)
            if not finished or span is None:
                continue
            end = span[1]
            if end > until or (since is not None and end < since):
                continue
            out = row(job, attempt)
            if out is None:
                unpriced += 1
            else:
                rows.append(out)
    rows.sort(key=lambda r: (r["ChargePeriodStart"], r["ResourceName"]))
    return Export(rows, unpriced)


def to_csv(rows: Iterable[Mapping[str, str]]) -> str:
    """RFC 4180 CSV with a header of FOCUS column ids; null is an empty field."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
