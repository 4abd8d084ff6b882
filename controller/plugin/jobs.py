"""What the plugin reads off a TaoBrevJob (PURE): phase, progress and ETA, attempt, cost, the
current instance, where the results are, and what to do after a failure.

It reads the object as kubectl prints it (a dict), never through the operator's models: the
plugin may face a status written by another release. A status stored flat by releases before the
sub-records is read through `status_legacy`; a field this release does not know is ignored, and a
missing one reads `-`. `status.progress` (epoch, maxEpoch, percent, eta, etaSeconds,
timePerEpochSeconds, loss, metrics, readAt) is read when present.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from controller.api import status_legacy
from controller.plugin.output import NONE, dollars, parse_time

FINISHED = "Deleted"

# status.failureClass -> what the person reading it does next (docs/jobs.md has the same table).
NEXT_STEP: dict[str, str] = {
    "Infrastructure": (
        "nothing in the job is wrong (Brev, the instance, the network or S3 failed); recovery "
        "already retried what spec.recovery allows: apply the job again"
    ),
    "Program": (
        "the training itself failed: read the log (the last lines below; the whole log is under "
        "the results' logs/), fix the code, data or spec parameters, then apply again"
    ),
    "Configuration": (
        "fix what the message names (spec, a Secret, S3, NGC or Brev credentials), then apply again"
    ),
    "Quota": "the namespace's instance quota annotation is invalid: ask the platform team to fix it",
    "Budget": "spec.budget was spent: raise the budget or shorten the run, then apply again",
}


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def status(job: Mapping[str, Any]) -> Mapping[str, Any]:
    """The job's status in the current shape (flat status of older releases moved into attempts)."""
    return _map(status_legacy.status_from_flat(dict(_map(job.get("status")))))


def metadata(job: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(job.get("metadata"))


def spec(job: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(job.get("spec"))


def name(job: Mapping[str, Any]) -> str:
    return str(metadata(job).get("name") or "")


def namespace(job: Mapping[str, Any]) -> str:
    return str(metadata(job).get("namespace") or "")


def created(job: Mapping[str, Any]) -> datetime | None:
    return parse_time(metadata(job).get("creationTimestamp"))


def phase(st: Mapping[str, Any]) -> str:
    return str(st.get("phase") or "Pending")


def finished(st: Mapping[str, Any]) -> bool:
    return st.get("phase") == FINISHED


def admitted(st: Mapping[str, Any]) -> bool:
    """Admitted under the quotas: from then on spec.suspend no longer holds the job back."""
    return bool(_map(st.get("queue")).get("admittedAt"))


def attempts(st: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [a for a in st.get("attempts") or () if isinstance(a, Mapping)]


def current(st: Mapping[str, Any]) -> Mapping[str, Any]:
    """The current (last) attempt, or {} before the first."""
    every = attempts(st)
    return every[-1] if every else {}


def instance(attempt: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(attempt.get("instance"))


def run(attempt: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(attempt.get("run"))


def upload(attempt: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(attempt.get("upload"))


def progress(st: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(st.get("progress"))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def progress_text(st: Mapping[str, Any]) -> str:
    """`3/10 30%` (epoch/maxEpoch and how much of the run is done), `30%`, or `-`."""
    prog = progress(st)
    epoch, most, percent = (
        _number(prog.get("epoch")),
        _number(prog.get("maxEpoch")),
        _number(prog.get("percent")),
    )
    if percent is None and epoch is not None and most:
        percent = 100 * epoch / most
    share = f"{percent:.0f}%" if percent is not None else ""
    if epoch is not None and most:
        return f"{epoch:.0f}/{most:.0f} {share}".rstrip()
    return share or NONE


def clock(seconds: float) -> str:
    """H:MM:SS, as TAO writes its ETA."""
    total = max(int(seconds), 0)
    return f"{total // 3600}:{total % 3600 // 60:02d}:{total % 60:02d}"


def eta_text(st: Mapping[str, Any]) -> str:
    """The ETA TAO reported with its last epoch, while the run lasts (after it, `-`)."""
    if finished(st) or run(current(st)).get("endedAt") or phase(st) != "Running":
        return NONE
    prog = progress(st)
    if isinstance(prog.get("eta"), str) and prog["eta"]:
        return str(prog["eta"])
    seconds = _number(prog.get("etaSeconds"))
    return clock(seconds) if seconds is not None else NONE


def attempt_text(st: Mapping[str, Any]) -> str:
    number = current(st).get("attempt")
    return str(number) if number is not None else NONE


def cost_text(st: Mapping[str, Any]) -> str:
    """Billed dollars so far (as the operator last wrote them); `unknown` while a price is."""
    cost = _number(st.get("estimatedCostDollars"))
    if st.get("costKnown") is False:
        return "unknown" if cost is None else f"{dollars(cost)} + unknown"
    return dollars(cost) if cost is not None else NONE


def results(st: Mapping[str, Any]) -> Mapping[str, Any]:
    """What the last upload put where (the newest attempt that uploaded)."""
    for attempt in reversed(attempts(st)):
        summary = _map(upload(attempt).get("results"))
        if summary.get("uri"):
            return summary
    return {}


def text(value: Any) -> str:
    return NONE if value is None or value == "" else str(value)
