"""`kubectl taobrev get [NAME]`: TaoBrevJobs with their progress, ETA, attempt and cost."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from controller.plugin import jobs
from controller.plugin.kubectl import Kubectl, PluginError, add_connection_flags
from controller.plugin.output import age, as_list, document, table

HELP = "list TaoBrevJobs with phase, progress, ETA, attempt and cost"
EXAMPLES = """columns:
  PROGRESS  epoch/maxEpoch and percent done, from TAO's status.json (status.progress)
  ETA       the time left TAO reported with its last epoch (while the job runs)
  ATTEMPT   the current attempt (recovery starts a new one on a new instance)
  COST      billed dollars so far, all attempts (`unknown` while an instance type's price is)
  -o wide adds INSTANCE, GPU, FAILURE (status.failureClass) and REASON

examples:
  kubectl taobrev get                        # the jobs in the context's namespace
  kubectl taobrev get train-7 -n ml-team
  kubectl taobrev get -A -o wide             # every namespace, with instance and failure class
  kubectl taobrev get train-7 -o yaml        # the whole object, as kubectl get -o yaml

exit codes: 0 ok (also when no job is found in a listing), 1 error (e.g. no job of that name)
"""
HEADERS = ("NAME", "PHASE", "PROGRESS", "ETA", "ATTEMPT", "COST", "AGE")
WIDE = ("INSTANCE", "GPU", "FAILURE", "REASON")


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "get", help=HELP, description=f"kubectl taobrev get: {HELP}.", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("name", nargs="?", help="one job (default: all in the namespace)")
    add_connection_flags(parser, all_namespaces=True)
    parser.add_argument("-o", "--output", choices=("wide", "json", "yaml"), help="output format")
    parser.set_defaults(run=run)


def row(job: Mapping[str, Any], now: datetime, *, wide: bool, with_namespace: bool) -> list[str]:
    st = jobs.status(job)
    attempt = jobs.current(st)
    cells = [
        jobs.name(job),
        jobs.phase(st),
        jobs.progress_text(st),
        jobs.eta_text(st),
        jobs.attempt_text(st),
        jobs.cost_text(st),
        age(jobs.created(job), now),
    ]
    if wide:
        inst = jobs.instance(attempt)
        cells += [
            jobs.text(inst.get("name")),
            jobs.text(inst.get("gpu")),
            jobs.text(st.get("failureClass")),
            jobs.text(st.get("reason")),
        ]
    return [jobs.namespace(job), *cells] if with_namespace else cells


def render(items: Sequence[Mapping[str, Any]], now: datetime, *, wide: bool, with_namespace: bool) -> str:
    headers = [*HEADERS, *(WIDE if wide else ())]
    if with_namespace:
        headers = ["NAMESPACE", *headers]
    rows = [row(j, now, wide=wide, with_namespace=with_namespace) for j in items]
    return table(headers, rows)


def run(args: argparse.Namespace, kubectl: Kubectl, now: datetime) -> int:
    if args.name and args.all_namespaces:
        raise PluginError(
            "a job cannot be got by name across all namespaces: give -n NAMESPACE instead of -A"
        )
    if args.name:
        items = [kubectl.job(args.name)]
    else:
        items = sorted(
            kubectl.jobs(all_namespaces=args.all_namespaces), key=lambda j: (jobs.namespace(j), jobs.name(j))
        )
    if args.output in ("json", "yaml"):
        print(document(items[0] if args.name else as_list(items), args.output))
        return 0
    if not items:
        where = "" if args.all_namespaces else f" in {args.namespace} namespace" if args.namespace else ""
        print(f"No resources found{where}.", file=sys.stderr)
        return 0
    print(render(items, now, wide=args.output == "wide", with_namespace=args.all_namespaces))
    return 0
