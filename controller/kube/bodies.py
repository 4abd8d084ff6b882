"""What the operator keeps of each object kopf hands it.

kopf keeps every watched object's latest body for as long as its daemon runs, i.e. for the whole
life of a running job. `metadata.managedFields` (server-side field ownership: one entry per
writer, each listing every field it set) is more than half of a TaoBrevJob's decoded body
(~31 of ~55 KiB: measured with tracemalloc at 10 running jobs) and nothing in kopf or here reads
it. Dropping it from the body kopf holds, at every watch event, is ~30 MiB less at 1,000 running
jobs. The API server never sees this: kopf patches only what handlers and its own progress
storage change, never the whole body.

A finished job's body is emptied further (`shed_finished`): kopf keeps it although no daemon runs.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from datetime import datetime
from typing import Any

from controller.api.timestamps import parse_time

UNUSED_METADATA = ("managedFields",)
# What kopf reads of a finished job's kept body before its next event replaces it: the daemon's
# `when` filter (status.finishedAt, metadata.uid) and the finalizer bookkeeping (metadata).
FINISHED_STATUS_KEPT = ("finishedAt",)


def shed_unused(body: Mapping[str, Any]) -> None:
    """Remove what nobody reads from an object's own (mutable) metadata, in place."""
    meta = body.get("metadata")
    if isinstance(meta, MutableMapping):
        for key in UNUSED_METADATA:
            meta.pop(key, None)


def shed_finished(body: Mapping[str, Any]) -> None:
    """Empty a finished job's spec and status (but finishedAt), in place, in the body kopf keeps.

    kopf keeps every object's latest body from its first event on, daemon or not (it frees it
    only when a daemon ends on its own; a finished job never gets one), and the next event
    replaces it whole before any handler reads it. With 9,000 finished jobs that was their whole
    decoded spec and status, kept only to be replaced. Only for a body nothing else reads until
    then: not while a daemon of the job runs (it reads this body) or the job is being deleted (the
    delete handler reads this body in the same event)."""
    for key in ("spec", "status"):
        part = body.get(key)
        if isinstance(part, MutableMapping):
            kept = {k: part[k] for k in FINISHED_STATUS_KEPT if key == "status" and k in part}
            part.clear()
            part.update(kept)


def ttl_fields(body: Mapping[str, Any]) -> tuple[str, str, str, datetime | None, int | None]:
    """(namespace, name, uid, status.finishedAt, spec.ttlSecondsAfterFinished) of a watched body,
    read without parsing the whole spec (every watch event of every job passes here)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    ttl = spec.get("ttlSecondsAfterFinished") if isinstance(spec, Mapping) else None
    finished = status.get("finishedAt") if isinstance(status, Mapping) else None
    at: datetime | None = None
    if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 0:
        try:
            at = parse_time(finished)
        except ValueError:
            at = None
    return (
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
        at,
        ttl if at is not None else None,
    )
