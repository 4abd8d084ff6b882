"""What the log API says, on the wire (PURE): discovery documents, the query a log request may
carry, and Kubernetes `Status` answers. The names follow `kubectl logs` (PodLogOptions): follow,
tailLines, sinceSeconds, timestamps, limitBytes; plus `attempt` and `step` (a workflow's step)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GROUP = "logs.taobrev.io"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
RESOURCE = "taobrevjobs"
SUBRESOURCE = "log"
API_SERVICE = f"{VERSION}.{GROUP}"
LOG_PATH = re.compile(
    rf"^/apis/{re.escape(GROUP)}/{VERSION}/namespaces/(?P<namespace>[a-z0-9]([-a-z0-9]*[a-z0-9])?)"
    rf"/{RESOURCE}/(?P<name>[a-z0-9]([-.a-z0-9]*[a-z0-9])?)/{SUBRESOURCE}$"
)
# spec.steps[].name (models.STEP_NAME_PATTERN; this module imports nothing of the API).
STEP_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
# A single line longer than this is cut (a tqdm run of `\r` redraws is one line to docker).
MAX_LINE_BYTES = 64 * 1024


class QueryError(ValueError):
    """A bad query parameter: answered 400 with the parameter's name and the fix."""


@dataclass(frozen=True)
class LogQuery:
    follow: bool = False
    attempt: int | None = None
    tail_lines: int | None = None
    since_seconds: int | None = None
    timestamps: bool = False
    limit_bytes: int = 0  # after parse_query: never 0, the server's cap applies
    step: str | None = None  # a workflow's step (spec.steps[].name); None: the current one


def _bool(params: Mapping[str, str], key: str) -> bool:
    value = params.get(key, "false").lower()
    if value in ("true", "1", ""):
        return True
    if value in ("false", "0"):
        return False
    raise QueryError(f"{key}={value!r} is not a boolean: use {key}=true or {key}=false")


def _int(params: Mapping[str, str], key: str, low: int) -> int | None:
    if key not in params:
        return None
    try:
        value = int(params[key])
    except ValueError:
        raise QueryError(f"{key}={params[key]!r} is not an integer") from None
    if value < low:
        raise QueryError(f"{key}={value} must be at least {low}")
    return value


def parse_query(params: Mapping[str, str], max_bytes: int) -> LogQuery:
    """The request's log options; `limitBytes` is capped at the server's `max_bytes` (one viewer
    never gets more than that per request: ask again with sinceSeconds/tailLines for more)."""
    known = {"follow", "attempt", "tailLines", "sinceSeconds", "timestamps", "limitBytes", "step"}
    unknown = sorted(set(params) - known)
    if unknown:
        raise QueryError(f"unknown parameter {unknown[0]!r}: the log API takes {', '.join(sorted(known))}")
    limit = _int(params, "limitBytes", 1)
    step = params.get("step")
    if step is not None and not STEP_NAME.match(step):
        raise QueryError(f"step={step!r} is not a step name: give one of the job's spec.steps[].name")
    return LogQuery(
        step=step,
        follow=_bool(params, "follow"),
        attempt=_int(params, "attempt", 1),
        tail_lines=_int(params, "tailLines", 0),
        since_seconds=_int(params, "sinceSeconds", 1),
        timestamps=_bool(params, "timestamps"),
        limit_bytes=min(limit, max_bytes) if limit is not None else max_bytes,
    )


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A metav1.Status, the body kubectl prints for a failed request (`Error from server (...)`)."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def group_document() -> dict[str, Any]:
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    }


def group_list_document() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group_document()]}


def resource_list_document() -> dict[str, Any]:
    """Only the subresource: `kubectl get` lists nothing here (the jobs live in taobrev.io), and
    discovery clients skip a resource with a slash, so no client caches a kind it cannot list."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {
                "name": f"{RESOURCE}/{SUBRESOURCE}",
                "singularName": "",
                "namespaced": True,
                "kind": "TaoBrevJobLog",
                "verbs": ["get"],
            }
        ],
    }


def split_timestamp(line: bytes) -> tuple[bytes, bytes]:
    """`docker logs -t`'s `<RFC3339Nano> <text>` as (time, text); a line without one (a partial
    first line, a writer that did not stamp) has an empty time."""
    stamp, sep, rest = line.partition(b" ")
    if sep and len(stamp) >= 20 and stamp[:4].isdigit() and stamp[4:5] == b"-" and stamp.endswith(b"Z"):
        return stamp, rest
    return b"", line


def shape_line(line: bytes, *, timestamps: bool) -> bytes:
    """One stamped line as the viewer asked for it: the time kept or dropped, cut to MAX_LINE_BYTES."""
    stamp, text = split_timestamp(line)
    if len(text) > MAX_LINE_BYTES:
        text = text[: MAX_LINE_BYTES - 8] + b" ...[cut]" + (b"\n" if text.endswith(b"\n") else b"")
    return (stamp + b" " + text) if (timestamps and stamp) else text
