"""`kubectl taobrev cost [NAME] [-A] [--since D] [--by namespace|job] [-o json|yaml|focus]`: billed
time and dollars per job or per namespace over a period, from the jobs' statuses
(controller/plugin/costing.py); `-o focus`: the finished attempts as FOCUS CSV rows
(controller/plugin/focus.py)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from controller.plugin import costing, focus
from controller.plugin.kubectl import Kubectl, PluginError, add_connection_flags
from controller.plugin.output import document, duration, format_time, table

HELP = "billed time and dollars per job or per namespace over a period"
EXAMPLES = """how it counts:
  From each job's status: every attempt bills from instance.billedFrom (the first brev create
  that may have made the instance) to instance.deletedAt, or while the instance lasts to
  billedFrom + billedSeconds as the operator last wrote it (it moves in 10-minute steps).
  The period runs from --since to now. An attempt wholly inside it counts its own
  estimatedCostDollars; an attempt that overlaps the period's start is prorated by billed time:
  dollars x (seconds inside the period / seconds billed). A price Brev's catalog did not have is
  shown as unknown (and a total with one as "$x + unknown"), never as $0. A reused instance is
  its owner's bill, not the job's. Jobs deleted from the cluster took their status with them:
  for those, read the taobrev_job_estimated_cost_dollars metric's history.

-o focus:
  A CSV of FOCUS 1.2 cost and usage rows (every Mandatory column), one per finished attempt
  that ended in the period, for FinOps tools: ChargePeriodStart/End = billedFrom/deletedAt,
  BilledCost = EffectiveCost = ListCost = the estimated dollars (list price, not Brev's
  invoice), PricingQuantity in Hours, ResourceId = Brev's instance id, SkuId = the instance
  type, Tags = {"taobrev.io/namespace": ..., "taobrev.io/job": ..., "taobrev.io/attempt": ...}.
  Attempts whose price is unknown have no row (stderr says how many). --by does not apply.

examples:
  kubectl taobrev cost                          # this namespace's jobs, last 7 days
  kubectl taobrev cost -A --by namespace --since 30d
  kubectl taobrev cost train-7 --since all
  kubectl taobrev cost -A --since 2026-12-01 -o json
  kubectl taobrev cost -A --since 30d -o focus > brev-focus.csv

exit codes: 0 ok (also when nothing billed), 1 error
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "cost", help=HELP, description=f"kubectl taobrev cost: {HELP}.", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("name", nargs="?", help="one job (default: every job in the namespace)")
    add_connection_flags(parser, all_namespaces=True)
    parser.add_argument(
        "--since",
        default="7d",
        help="period start: 24h, 7d, 2w, an RFC3339 time, a date, or all (default 7d)",
    )
    parser.add_argument("--by", choices=("job", "namespace"), default="job", help="one row per (default job)")
    parser.add_argument(
        "-o",
        "--output",
        choices=("json", "yaml", "focus"),
        help="output format (default: a table; focus: CSV)",
    )
    parser.set_defaults(run=run)


def report(items: list[dict[str, Any]], since: datetime | None, now: datetime, by: str) -> dict[str, Any]:
    rows = costing.bills(items, since, now, by)
    whole = costing.total(rows)
    return {
        "since": format_time(since) if since else None,
        "until": format_time(now),
        "by": by,
        "rows": [b.as_json(by) for b in rows],
        "total": {"billedSeconds": round(whole.seconds), **whole.money.as_json(), "jobs": whole.jobs},
    }


def render(items: list[dict[str, Any]], since: datetime | None, now: datetime, by: str) -> str:
    rows = costing.bills(items, since, now, by)
    period = f"from {format_time(since)} to {format_time(now)}" if since else f"up to {format_time(now)}"
    if not rows:
        return f"Nothing billed {period}."
    whole = costing.total(rows)
    if by == "job":
        headers = ["NAMESPACE", "NAME", "ATTEMPTS", "BILLED", "COST"]
        cells = [[b.namespace, b.name, str(b.attempts), duration(b.seconds), b.money.text()] for b in rows]
        cells.append(["TOTAL", "", str(whole.attempts), duration(whole.seconds), whole.money.text()])
    else:
        headers = ["NAMESPACE", "JOBS", "BILLED", "COST"]
        cells = [[b.namespace, str(b.jobs), duration(b.seconds), b.money.text()] for b in rows]
        cells.append(["TOTAL", str(whole.jobs), duration(whole.seconds), whole.money.text()])
    lines = [f"Billed {period}:", table(headers, cells)]
    if whole.money.unknown:
        lines.append(
            f"{whole.money.unknown} attempt(s) ran on an instance type whose price was not in Brev's "
            "catalog: their dollars are unknown (not counted as $0)."
        )
    return "\n".join(lines)


def run(args: argparse.Namespace, kubectl: Kubectl, now: datetime) -> int:
    if args.name and args.all_namespaces:
        raise PluginError("a job cannot be named across all namespaces: give -n NAMESPACE instead of -A")
    try:
        since = costing.parse_since(args.since, now)
    except costing.PeriodError as exc:
        raise PluginError(str(exc)) from exc
    items = [kubectl.job(args.name)] if args.name else kubectl.jobs(all_namespaces=args.all_namespaces)
    if args.output == "focus":
        out = focus.export(items, since, now)
        sys.stdout.write(focus.to_csv(out.rows))
        if out.unpriced:
            print(
                f"{out.unpriced} finished attempt(s) left out: their instance type's price was never "
                "known (FOCUS costs cannot be unknown, and unknown is not $0)",
                file=sys.stderr,
            )
    elif args.output in ("json", "yaml"):
        print(document(report(items, since, now, args.by), args.output))
    else:
        print(render(items, since, now, args.by))
    return 0
