"""`kubectl taobrev plan -f job.yaml`: what a job would do before it does anything.

    kubectl taobrev plan -f job.yaml [-n NAMESPACE] [--context CTX] [--kubeconfig FILE]
                         [-o text|json|yaml] [--keep] [--timeout SECONDS]

It creates a copy of the job with `spec.dryRun: true` (named `<name>-plan-<random>`), waits for
the operator's plan in its status, prints it, and deletes the copy. The operator makes the plan,
not this command: the pre-flight needs the job's Secrets, the S3 endpoint and Brev's catalog,
which the operator can reach and a user's laptop usually cannot — the user needs only the right
to create TaoBrevJobs.

Exit codes: 0 the job could start as planned; 2 the pre-flight found problems (listed); 1 the plan
could not be made (kubectl failed, no operator answered in time, bad manifest).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from controller.plugin.kubectl import RESOURCE, Kubectl, PluginError, add_connection_flags

KIND = "TaoBrevJob"
HELP = "show what a TaoBrevJob would do (pre-flight, instance types and prices, cost ceiling)"
EXAMPLES = """examples:
  kubectl taobrev plan -f job.yaml
  kubectl taobrev plan -f job.yaml -n ml-team -o yaml
  kubectl taobrev plan -f job.yaml --keep      # keep the dry-run copy (kubectl describe it)

exit codes: 0 the job could start as planned, 2 the pre-flight found problems, 1 no plan
"""


def register(sub: Any) -> None:
    plan = sub.add_parser(
        "plan", help=HELP, description=f"kubectl taobrev plan: {HELP}.", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    plan.add_argument(
        "-f", "--filename", required=True, help="the TaoBrevJob manifest (YAML or JSON; - for stdin)"
    )
    add_connection_flags(plan)
    plan.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    plan.add_argument("--keep", action="store_true", help="keep the dry-run copy instead of deleting it")
    plan.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for the plan (default 120)"
    )
    plan.set_defaults(run=run)


def _manifest(path: str) -> dict[str, Any]:
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    docs = [d for d in yaml.safe_load_all(text) if d]
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == KIND]
    if len(jobs) != 1:
        raise PluginError(f"{path}: expected exactly one {KIND}, found {len(jobs)}")
    return jobs[0]


def run(args: argparse.Namespace, kubectl: Kubectl, now: datetime) -> int:
    job = _manifest(args.filename)
    meta = dict(job.get("metadata") or {})
    name = str(meta.get("name") or "job")[:40].rstrip("-")
    kubectl.namespace = args.namespace = args.namespace or meta.get("namespace")
    copy = {
        "apiVersion": job.get("apiVersion", "taobrev.io/v1alpha1"),
        "kind": KIND,
        "metadata": {
            "generateName": f"{name}-plan-",
            "labels": {**(meta.get("labels") or {}), "taobrev.io/plan-of": name},
        },
        "spec": {**(job.get("spec") or {}), "dryRun": True},
    }
    created = json.loads(kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(copy)))
    made = created["metadata"]["name"]
    kubectl.namespace = args.namespace = created["metadata"].get("namespace") or args.namespace
    try:
        status = _wait_for_plan(kubectl, made, args.timeout)
    finally:
        if not args.keep:
            kubectl("delete", RESOURCE, made, "--wait=false", "--ignore-not-found")
    plan = status.get("plan") or {}
    problems = (status.get("preflight") or {}).get("problems") or []
    if args.output == "json":
        print(json.dumps({"plan": plan, "problems": problems}, indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump({"plan": plan, "problems": problems}, sort_keys=False), end="")
    else:
        print(
            render(
                f"{args.namespace or ''}/{name}".lstrip("/"), plan, problems, kept=made if args.keep else None
            )
        )
    return 0 if plan.get("ready") else 2


def _wait_for_plan(kubectl: Kubectl, name: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        obj = kubectl.job(name)
        status = obj.get("status") or {}
        if status.get("plan"):
            return dict(status)
        if time.monotonic() > deadline:
            raise PluginError(
                f"no plan for {name} within {timeout:.0f}s: is the operator running and does it "
                f"watch this namespace? (status: {status.get('message') or 'none yet'})"
            )
        time.sleep(1.0)


def _duration(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def render(job: str, plan: dict[str, Any], problems: list[dict[str, Any]], *, kept: str | None = None) -> str:
    lines = [f"Plan for TaoBrevJob {job} (nothing was created)"]
    if problems:
        lines.append(f"  pre-flight:   {len(problems)} problem(s) — the job would wait Pending until fixed")
        lines += [f"    - {p.get('field')}: {p.get('reason')}: {p.get('message')}" for p in problems]
    else:
        lines.append("  pre-flight:   passed (Secrets, S3, inputs, instance selection, image)")
    if plan.get("reuse"):
        lines.append(f"  instance:     reuse {plan['reuse']} (not created, not deleted)")
    else:
        types = plan.get("instanceTypes") or ["(unknown)"]
        lines.append(
            f"  instance:     {types[0]}" + "".join(f"\n                then {t}" for t in types[1:])
        )
    lines.append(f"  images:       {', '.join(plan.get('images') or [])}")
    for label, key in (("inputs:", "inputs"), ("uploads:", "uploads")):
        items = plan.get(key) or ["(none)"]
        lines.append(f"  {label:<13} {items[0]}" + "".join(f"\n                {i}" for i in items[1:]))
    billed = plan.get("maxBilledSeconds")
    if billed is not None:
        cost = plan.get("costCeilingDollars")
        ceiling = f", at most ${cost:.2f}" if cost is not None else ", cost unknown (a price is unknown)"
        lines.append(f"  most billed:  {_duration(int(billed))} ({billed} s){ceiling}")
    if kept:
        lines.append(f"  kept as:      taobrevjob/{kept} (spec.dryRun: true; delete it when done)")
    return "\n".join(lines)
