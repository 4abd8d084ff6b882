"""Billed time and budgets (PURE), from a status alone: what recovery, the Running step and a
debugging keep judge the budget by, and what the billing gauges show between stored steps.

Billed time per attempt runs from the first `brev create` request to the confirmed deletion (or
the job's finish for a retained instance, or now); cost = billed x the type's hourly price from
`brev search` (unknown prices make the total unknown, never zero).
"""

from __future__ import annotations

from datetime import datetime

from controller.api.models import TaoBrevJobSpec
from controller.api.status import AttemptRecord, TaoBrevJobStatus


def billed_seconds(rec: AttemptRecord, now: datetime, finished_at: datetime | None) -> float:
    inst = rec.instance
    if inst.billed_from is None:
        return 0.0
    recorded_end = inst.deleted_at or finished_at
    # Recorded times at the resolution status stores them (whole seconds): a closed attempt's
    # figure is then the same before and after a round trip through the API server (a restart or
    # an upgrade rewrote finished jobs' billedSeconds by a second; found by tests/e2e/test_upgrade).
    start = _stored(inst.billed_from)
    end = _stored(recorded_end) if recorded_end is not None else now
    return max(0.0, (end - start).total_seconds())


def _stored(t: datetime) -> datetime:
    return t.replace(microsecond=0)


def exact_totals(status: TaoBrevJobStatus, now: datetime) -> tuple[float, float | None]:
    """`totals` from a status alone (the billing gauges, between the stored steps)."""
    secs, cost, known = 0.0, 0.0, True
    for rec in status.attempts or ():
        b = billed_seconds(rec, now, status.finished_at)
        secs += b
        if rec.instance.price_per_hour is not None:
            cost += b * rec.instance.price_per_hour / 3600
        elif b > 0:
            known = False
    return secs, (cost if known else None)


def over_budget(spec: TaoBrevJobSpec | None, status: TaoBrevJobStatus, at: datetime) -> str | None:
    """The budget message once billed time or cost (all attempts, exact) reached a limit at `at`."""
    if spec is None or not status.attempts:
        return None
    budget = spec.budget
    secs, cost = exact_totals(status, at)
    if budget.max_billed_seconds is not None and secs >= budget.max_billed_seconds:
        return (
            f"billed time {int(secs)}s over {len(status.attempts)} attempt(s) reached "
            f"spec.budget.maxBilledSeconds={budget.max_billed_seconds}"
            + (f" (estimated cost ${cost:.2f})" if cost is not None else "")
        )
    if budget.max_cost_dollars is not None and cost is not None and cost >= budget.max_cost_dollars:
        return (
            f"estimated cost ${cost:.2f} ({int(secs)}s billed over {len(status.attempts)} attempt(s)) "
            f"reached spec.budget.maxCostDollars={budget.max_cost_dollars}"
        )
    return None


def budget_left(spec: TaoBrevJobSpec | None, status: TaoBrevJobStatus, now: datetime) -> float | None:
    """Seconds until the budget is reached at the current attempt's rate (None: no budget, or a
    cost budget with an unknown price)."""
    if spec is None or not status.attempts:
        return None
    budget = spec.budget
    secs, cost = exact_totals(status, now)
    lefts: list[float] = []
    if budget.max_billed_seconds is not None:
        lefts.append(budget.max_billed_seconds - secs)
    price = status.instance.price_per_hour
    if budget.max_cost_dollars is not None and cost is not None and price:
        lefts.append((budget.max_cost_dollars - cost) * 3600 / price)
    return max(0.0, min(lefts)) if lefts else None
