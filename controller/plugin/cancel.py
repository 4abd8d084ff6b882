"""`kubectl taobrev cancel NAME [--wait]`: ask the operator to stop the run and keep the object.

The request is the annotation `taobrev.io/cancel` (its value: when it was asked, RFC3339), not a
delete: the operator stops the container, uploads the results, deletes the instance and ends the
job with outcome Canceled, and the TaoBrevJob stays for `describe`, `cost` and GitOps. An
annotation is metadata, so it is not `spec` drift for Argo CD or Flux."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from controller.api.naming import CANCEL_ANNOTATION  # the one spelling the operator watches
from controller.plugin import jobs
from controller.plugin.kubectl import RESOURCE, Kubectl, PluginError, add_connection_flags
from controller.plugin.output import format_time, parse_duration, size

HELP = "stop a job's run and keep the object (outcome Canceled, results uploaded, instance deleted)"
EXAMPLES = f"""what happens:
  The annotation {CANCEL_ANNOTATION}=<now> asks the operator to end the run: it stops the container
  (SIGTERM, SIGKILL after the stop grace), uploads the results to spec.data.resultsUri, deletes
  the instance and ends the job with outcome Canceled. A Pending job ends at once (nothing was
  created). The TaoBrevJob stays: `kubectl delete` removes it (and cancels it the same way).
  Cancelling a job twice keeps the first request; a finished job is left as it is.

examples:
  kubectl taobrev cancel train-7
  kubectl taobrev cancel train-7 -n ml-team --wait --timeout 20m

exit codes: 0 requested (with --wait: the job finished), 1 error or --timeout passed
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "cancel", help=HELP, description=f"kubectl taobrev cancel: {HELP}.", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("name", help="the job")
    add_connection_flags(parser)
    parser.add_argument("--wait", action="store_true", help="wait until the job has finished (phase Deleted)")
    parser.add_argument(
        "--timeout", default="30m", help="how long --wait waits: 90s, 20m, 1h30m (default 30m)"
    )
    parser.set_defaults(run=run)


def cancel_patch(now: datetime) -> dict[str, Any]:
    """The merge patch that asks for the cancel: the annotation, valued with the request time."""
    return {"metadata": {"annotations": {CANCEL_ANNOTATION: format_time(now)}}}


def requested_at(job: Mapping[str, Any]) -> str | None:
    notes = jobs.metadata(job).get("annotations")
    value = notes.get(CANCEL_ANNOTATION) if isinstance(notes, Mapping) else None
    return str(value) if value else None


def next_steps(job: Mapping[str, Any]) -> str:
    st = jobs.status(job)
    data = jobs.spec(job).get("data")
    results = data.get("resultsUri") if isinstance(data, Mapping) else None
    if not jobs.admitted(st):
        return "Nothing was created yet: the job ends Canceled without billing anything."
    return (
        "The operator stops the container (SIGTERM, then SIGKILL after the stop grace), uploads the "
        f"results to {results or 'spec.data.resultsUri'}, deletes the instance and ends the job with "
        "outcome Canceled. The TaoBrevJob stays (kubectl delete removes it).\n"
        f"Follow it: kubectl taobrev get {jobs.name(job)} -n {jobs.namespace(job)} (phase Deleted when done)"
    )


def finished_line(job: Mapping[str, Any]) -> str:
    st = jobs.status(job)
    summary = jobs.results(st)
    where = f"; results in {summary['uri']} ({size(summary.get('bytes'))})" if summary else ""
    outcome = f"outcome {st.get('outcome') or '-'} ({st.get('reason') or '-'})"
    return f"taobrevjob/{jobs.name(job)} finished: {outcome}{where}"


def run(args: argparse.Namespace, kubectl: Kubectl, now: datetime) -> int:
    limit = parse_duration(args.timeout)
    if limit is None:
        raise PluginError(f"--timeout {args.timeout!r}: give a duration such as 90s, 20m or 1h30m")
    job = kubectl.job(args.name)
    if jobs.finished(jobs.status(job)):
        print(f"taobrevjob/{args.name} has already finished; nothing to cancel")
        print(finished_line(job))
        return 0
    earlier = requested_at(job)
    if earlier:
        print(f"taobrevjob/{args.name} cancel already requested at {earlier}")
    else:
        job = kubectl.merge_patch(args.name, cancel_patch(now))
        print(f"taobrevjob/{args.name} cancel requested")
    print(next_steps(job))
    if not args.wait:
        return 0
    try:
        kubectl(
            "wait", f"{RESOURCE}/{args.name}", "--for=jsonpath={.status.phase}=Deleted",
            f"--timeout={limit}s", timeout=limit + 30,
        )  # fmt: skip
    except PluginError as exc:
        raise PluginError(
            f"taobrevjob/{args.name} had not finished within {args.timeout} ({exc}); an operator "
            f"older than the cancel annotation ignores it: `kubectl delete` stops the run too"
        ) from exc
    print(finished_line(kubectl.job(args.name)))
    return 0
