"""Conditions derived from status (PURE), kstatus-compatible.

- Ready: True once the job finished successfully and its instance is released (kstatus "Current").
- Reconciling: True while anything is left to do, teardown included (kstatus "InProgress").
- Stalled: True once the job finished without success (kstatus "Failed").
- Succeeded: the run's own result: Unknown until the run ends, then True/False.
- InstanceReleased: True once teardown is done (ephemeral instance deleted, or retained one left).

`kubectl wait --for=condition=Succeeded` waits for a successful run; `--for=condition=Ready`
additionally for teardown. Transition times only move when a condition's status changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from controller.timestamps import format_time

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"
SUCCEEDED = "Succeeded"
INSTANCE_RELEASED = "InstanceReleased"
TYPES = (READY, RECONCILING, STALLED, SUCCEEDED, INSTANCE_RELEASED)


def _cond(ctype: str, ok: bool | None, reason: str, message: str) -> dict[str, Any]:
    status = "Unknown" if ok is None else ("True" if ok else "False")
    return {"type": ctype, "status": status, "reason": reason, "message": message}


def derive(
    status: Mapping[str, Any], previous: Sequence[Mapping[str, Any]], generation: int, now: datetime
) -> list[dict[str, Any]]:
    phase = str(status.get("phase") or "Pending")
    outcome = status.get("outcome")
    reason = str(status.get("reason") or phase)
    message = str(status.get("message") or "")
    finished = bool(status.get("finishedAt"))
    succeeded = outcome == "Succeeded"

    new = [
        _cond(READY, finished and succeeded, "Succeeded" if finished and succeeded else reason, message),
        _cond(RECONCILING, not finished, phase if not finished else "Finished", message),
        _cond(
            STALLED,
            finished and not succeeded,
            reason if finished and not succeeded else "NotStalled",
            message,
        ),
        _cond(
            SUCCEEDED, None if not outcome else succeeded, reason if outcome else "RunNotFinished", message
        ),
        _cond(
            INSTANCE_RELEASED,
            finished,
            "Released" if finished else "InstanceInUse",
            "teardown complete"
            if finished
            else str(status.get("teardownMessage") or f"teardown not finished ({phase})"),
        ),
    ]
    stamp = format_time(now)
    old = {c.get("type"): c for c in previous}
    for c in new:
        prev = old.get(c["type"])
        same = prev is not None and prev.get("status") == c["status"]
        c["lastTransitionTime"] = prev.get("lastTransitionTime", stamp) if same and prev else stamp
        c["observedGeneration"] = generation
    return new
