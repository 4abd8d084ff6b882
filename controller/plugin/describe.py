"""`kubectl taobrev describe NAME`: one job in full: where it is, what each attempt did, the last
Events, whose move a failure is and what to do, where the results are, what it cost."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from controller.plugin import jobs
from controller.plugin.kubectl import Kubectl, PluginError, add_connection_flags
from controller.plugin.output import NONE, age, dollars, duration, parse_time, size, table

HELP = "show one TaoBrevJob: conditions, attempts, last Events, failure class and next step, results, cost"
EXAMPLES = """examples:
  kubectl taobrev describe train-7
  kubectl taobrev describe train-7 -n ml-team --events 30

exit codes: 0 ok, 1 error (e.g. no job of that name)
"""
LABEL = 16
LOG_LINES = 10


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "describe", help=HELP, description=f"kubectl taobrev describe: {HELP}.", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("name", help="the job")
    add_connection_flags(parser)
    parser.add_argument(
        "--events", type=int, default=10, metavar="N", help="how many of the last Events to show (default 10)"
    )
    parser.set_defaults(run=run)


def _field(label: str, value: str, indent: int = 0) -> str:
    pad = " " * indent
    return f"{pad}{label + ':':<{LABEL - indent}}{value}"


def _when(value: Any, now: datetime) -> str:
    at = parse_time(value)
    return f"{value} ({age(at, now)} ago)" if at else NONE


def _progress(st: Mapping[str, Any], now: datetime) -> list[str]:
    prog = jobs.progress(st)
    if not prog:
        return []
    parts = [jobs.progress_text(st)]
    eta = jobs.eta_text(st)
    if eta != NONE:
        parts.append(f"ETA {eta}")
    if prog.get("timePerEpochSeconds") is not None:
        parts.append(f"{duration(prog['timePerEpochSeconds'])} per epoch")
    if prog.get("loss") is not None:
        parts.append(f"loss {prog['loss']}")
    lines = [_field("Progress", ", ".join(parts))]
    metrics = prog.get("metrics")
    if isinstance(metrics, Mapping) and metrics:
        lines.append(_field("Metrics", ", ".join(f"{k}={v}" for k, v in sorted(metrics.items())), 2))
    if prog.get("readAt"):
        lines.append(_field("Read at", _when(prog["readAt"], now), 2))
    return lines


def _failure(st: Mapping[str, Any]) -> list[str]:
    klass = st.get("failureClass")
    if not klass:
        return []
    step = jobs.NEXT_STEP.get(str(klass), "read the message above")
    return [_field("Failure class", str(klass)), _field("What to do", step, 2)]


def _steps(st: Mapping[str, Any]) -> list[str]:
    """A workflow's steps (spec.steps), one line each: phase, attempt, exit code, results."""
    steps = [s for s in st.get("steps") or [] if isinstance(s, Mapping)]
    if not steps:
        return []
    lines = [_field("Steps", str(st.get("step") or f"{len(steps)} steps"))]
    for s in steps:
        code = f", exit {s['exitCode']}" if s.get("exitCode") is not None else ""
        where = ((s.get("results") or {}).get("uri") if isinstance(s.get("results"), Mapping) else None) or ""
        attempt = f" (attempt {s['attempt']})" if s.get("attempt") else ""
        text = f"{s.get('phase', '?')}{attempt}{code}" + (f"  {where}" if where else "")
        if s.get("phase") == "Failed" and s.get("message"):
            text += f"  {jobs.text(s.get('message'))}"
        lines.append(_field(str(s.get("name")), text, 2))
    if st.get("failedStep"):
        lines.append(_field("Failed step", str(st["failedStep"]), 2))
    return lines


def _results(st: Mapping[str, Any]) -> str:
    summary = jobs.results(st)
    if not summary:
        return "none uploaded yet" if not jobs.finished(st) else "none (nothing was uploaded)"
    return f"{summary['uri']} ({summary.get('objects', '?')} objects, {size(summary.get('bytes'))})"


def _cost(st: Mapping[str, Any]) -> str:
    billed = st.get("billedSeconds")
    count = len(jobs.attempts(st))
    over = f"{duration(billed)} billed over {count} attempt{'s' if count != 1 else ''}"
    return (
        f"{jobs.cost_text(st)} ({over})" if billed is not None else f"{jobs.cost_text(st)} (nothing billed)"
    )


def _conditions(st: Mapping[str, Any], now: datetime) -> list[str]:
    conds = [c for c in st.get("conditions") or () if isinstance(c, Mapping)]
    if not conds:
        return ["Conditions:     <none>"]
    rows = [
        [
            jobs.text(c.get("type")),
            jobs.text(c.get("status")),
            jobs.text(c.get("reason")),
            age(parse_time(c.get("lastTransitionTime")), now),
            jobs.text(c.get("message")),
        ]
        for c in conds
    ]
    body = table(("TYPE", "STATUS", "REASON", "AGE", "MESSAGE"), rows)
    return ["Conditions:", *("  " + line for line in body.splitlines())]


def _attempt(attempt: Mapping[str, Any], now: datetime) -> list[str]:
    inst, run_, up = jobs.instance(attempt), jobs.run(attempt), jobs.upload(attempt)
    what = [f"{inst.get('name') or NONE}"]
    if inst.get("id"):
        what.append(f"id {inst['id']}")
    what += [str(inst[k]) for k in ("type", "gpu") if inst.get(k)]
    price = inst.get("pricePerHour")
    what.append(f"${price}/h" if price is not None else "price unknown")
    what.append("created by the job" if inst.get("created") else "reused (not billed to the job)")
    lines = [f"  Attempt {attempt.get('attempt', '?')}:", _field("Instance", ", ".join(what), 4)]
    if run_.get("startedAt"):
        ran = f"started {run_['startedAt']}"
        if run_.get("exitedAt") or run_.get("exitCode") is not None:
            ran += f", exited {run_.get('exitedAt') or '?'} with code {run_.get('exitCode', '?')}"
        elif run_.get("endedAt"):
            ran += f", ended {run_['endedAt']}"
        lines.append(_field("Run", ran, 4))
    summary = up.get("results") if isinstance(up.get("results"), Mapping) else None
    if summary:
        lines.append(
            _field(
                "Upload",
                f"{summary.get('uri')}: {summary.get('objects')} objects, {size(summary.get('bytes'))}",
                4,
            )
        )
    elif up.get("attempts"):
        lines.append(_field("Upload", f"{up['attempts']} attempt(s), nothing verified yet", 4))
    if attempt.get("endedReason"):
        lines.append(
            _field("Ended", f"{attempt['endedReason']}: {attempt.get('endedMessage') or ''}".rstrip(": "), 4)
        )
    if inst.get("deletedAt"):
        lines.append(_field("Deleted", str(inst["deletedAt"]), 4))
    billed, cost = attempt.get("billedSeconds"), attempt.get("estimatedCostDollars")
    if billed is not None:
        money = dollars(cost) if cost is not None else "cost unknown"
        lines.append(_field("Billed", f"{duration(billed)}, {money}", 4))
    return lines


def _log_tail(st: Mapping[str, Any]) -> list[str]:
    tail = jobs.run(jobs.current(st)).get("logTail") or []
    if not tail:
        return []
    return [
        f"Last log lines (attempt {jobs.attempt_text(st)}):",
        *(f"  {line}" for line in tail[-LOG_LINES:]),
    ]


def _event_time(event: Mapping[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or "")


def events_section(events: Sequence[Mapping[str, Any]] | str, now: datetime, last: int) -> list[str]:
    """The last `last` Events, oldest first (a string: why they could not be listed)."""
    if isinstance(events, str):
        return [f"Events:         <cannot list: {events}>"]
    if not events:
        return ["Events:         <none>"]
    ordered = sorted(events, key=_event_time)
    shown = ordered[-last:] if last > 0 else []
    rows = []
    for e in shown:
        when = age(parse_time(_event_time(e)), now)
        first, count = parse_time(e.get("firstTimestamp")), e.get("count") or 1
        if count > 1 and first:
            when += f" (x{count} over {age(first, now)})"
        source = e.get("reportingComponent") or (e.get("source") or {}).get("component") or NONE
        rows.append(
            [
                jobs.text(e.get("type")),
                jobs.text(e.get("reason")),
                when,
                str(source),
                jobs.text(e.get("message")),
            ]
        )
    head = "Events:" if len(shown) == len(ordered) else f"Events (last {len(shown)} of {len(ordered)}):"
    return [
        head,
        *("  " + line for line in table(("TYPE", "REASON", "AGE", "FROM", "MESSAGE"), rows).splitlines()),
    ]


def render(
    job: Mapping[str, Any], events: Sequence[Mapping[str, Any]] | str, now: datetime, *, last: int = 10
) -> str:
    st = jobs.status(job)
    outcome = st.get("outcome")
    lines = [
        _field("Name", jobs.name(job)),
        _field("Namespace", jobs.namespace(job)),
        _field(
            "Phase", jobs.phase(st) + (f" (attempt {jobs.attempt_text(st)})" if jobs.attempts(st) else "")
        ),
        _field("Outcome", f"{outcome} ({st.get('reason')})" if outcome else NONE),
    ]
    if not outcome and st.get("reason"):
        lines.append(_field("Reason", str(st["reason"])))
    lines.append(_field("Message", jobs.text(st.get("message"))))
    lines += _failure(st)
    lines += _progress(st, now)
    lines += [
        _field("Results", _results(st)),
        _field("Cost", _cost(st)),
        _field("Created", _when(jobs.metadata(job).get("creationTimestamp"), now)),
    ]
    if st.get("finishedAt"):
        lines.append(_field("Finished", _when(st["finishedAt"], now)))
    lines += _conditions(st, now)
    lines += _steps(st)
    every = jobs.attempts(st)
    lines += (
        ["Attempts:", *(line for a in every for line in _attempt(a, now))]
        if every
        else ["Attempts:       <none>"]
    )
    lines += _log_tail(st)
    lines += events_section(events, now, last)
    return "\n".join(lines)


def events_of(kubectl: Kubectl, job: Mapping[str, Any]) -> list[dict[str, Any]] | str:
    """Events about this object (by uid: a job deleted and applied again under the same name is a
    new object); a user who may not list Events still gets the rest of the description."""
    uid, ns = jobs.metadata(job).get("uid"), jobs.namespace(job)
    if not uid:
        return []
    scoped = dataclasses.replace(kubectl, namespace=ns or kubectl.namespace)
    try:
        listed = scoped.json("get", "events", "--field-selector", f"involvedObject.uid={uid}")
    except PluginError as exc:
        return str(exc).splitlines()[0] if str(exc) else "kubectl failed"
    return [e for e in listed.get("items") or [] if isinstance(e, dict)]


def run(args: argparse.Namespace, kubectl: Kubectl, now: datetime) -> int:
    job = kubectl.job(args.name)
    print(render(job, events_of(kubectl, job), now, last=args.events))
    return 0
