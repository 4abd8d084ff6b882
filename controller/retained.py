"""The durable record of instances released on purpose (`onCompletion: Retain`).

Why a ConfigMap: `brev ls` carries nothing but name, id and status, and brev has no rename or
labels, so once its TaoBrevJob is deleted a retained instance looks exactly like an orphan. The
fact "released on purpose, keep until T" must therefore live somewhere that outlives both the job
object and the operator process. One ConfigMap `taobrev-retained` in the operator's namespace is
the simplest such place: it is written by the reconciler BEFORE the job's status says finished
(a failed write fails the pass, so no Retain job finishes unrecorded and its finalizer is never
released without the record), read by the sweeper on every sweep (unreadable = no sweep), and
survives restarts and leader changes. The record is keyed by instance name (unique: names carry
the object's uid) and holds the Brev id and the retain-until time from
`spec.instance.ephemeral.retainFor` (none = kept until a human deletes the instance). The sweeper
deletes an instance whose retain-until has passed (confirmed like any delete) and then drops its
entry. Size: an entry is ~150 bytes, so the 1 MiB ConfigMap limit holds ~6,000 retained instances.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from controller.errors import KubeUnavailable
from controller.kube import KubeAccess
from controller.models import OnCompletion, TaoBrevJobSpec, TaoBrevJobStatus
from controller.timestamps import format_time, parse_time

log = structlog.get_logger("taobrev.retained")

CONFIG_MAP = "taobrev-retained"
_WRITE_TRIES = 3


@dataclass(frozen=True)
class RetainedRecord:
    name: str
    instance_id: str | None
    job: str  # namespace/name of the job that retained it
    until: datetime | None  # None: kept until deleted by hand

    def value(self) -> str:
        until = format_time(self.until) if self.until is not None else None
        return json.dumps({"id": self.instance_id, "job": self.job, "until": until}, sort_keys=True)

    @classmethod
    def parse(cls, name: str, value: str) -> RetainedRecord:
        """An entry as stored. An entry that does not parse still protects its instance (kept
        forever): a corrupted record must never turn into a delete."""
        try:
            raw: Any = json.loads(value)
            until = parse_time(raw.get("until"))
            if until is not None and until.tzinfo is None:
                raise ValueError("retain-until without a time zone")
            return cls(
                name=name, instance_id=raw.get("id") or None, job=str(raw.get("job") or "?"), until=until
            )
        except (ValueError, TypeError, AttributeError):
            log.warning("retained_record_unreadable_kept_forever", instance=name)
            return cls(name=name, instance_id=None, job="?", until=None)

    def expired(self, now: datetime) -> bool:
        return self.until is not None and now >= self.until


def record_for(
    namespace: str, name: str, spec: TaoBrevJobSpec | None, status: TaoBrevJobStatus
) -> RetainedRecord | None:
    """The record a finishing job must leave (PURE): only for an instance the job created and
    keeps (`ephemeral` + `onCompletion: Retain`); a reused instance was never ours to sweep."""
    if spec is None or spec.instance.ephemeral is None or not status.instance_name:
        return None
    if spec.instance.effective_on_completion() != OnCompletion.RETAIN or not status.instance_created:
        return None
    ttl = spec.instance.ephemeral.retain_for_seconds()
    finished = status.finished_at
    until = finished + timedelta(seconds=ttl) if ttl is not None and finished is not None else None
    return RetainedRecord(status.instance_name, status.instance_id, f"{namespace}/{name}", until)


class RetainedStore:
    """Read-modify-write of the ConfigMap with optimistic concurrency (resourceVersion)."""

    def __init__(self, kube: KubeAccess, namespace: str, name: str = CONFIG_MAP) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name

    async def read(self) -> dict[str, RetainedRecord]:
        """Every record; raises TransientError when the ConfigMap cannot be read."""
        found = await self._kube.read_config_map(self._namespace, self._name)
        data = found[0] if found is not None else {}
        return {name: RetainedRecord.parse(name, value) for name, value in data.items()}

    async def record(self, rec: RetainedRecord) -> None:
        await self._update(lambda data: {**data, rec.name: rec.value()})
        log.info("instance_retained_recorded", instance=rec.name, job=rec.job, until=str(rec.until))

    async def remove(self, name: str) -> None:
        await self._update(lambda data: {k: v for k, v in data.items() if k != name})

    async def _update(self, change: Any) -> None:
        last: KubeUnavailable | None = None
        for _ in range(_WRITE_TRIES):
            found = await self._kube.read_config_map(self._namespace, self._name)
            data: Mapping[str, str] = found[0] if found is not None else {}
            new = change(dict(data))
            if found is not None and new == dict(data):
                return
            try:
                await self._kube.write_config_map(
                    self._namespace, self._name, new, found[1] if found is not None else None
                )
                return
            except KubeUnavailable as exc:  # a 409 (someone wrote in between): read again
                last = exc
        assert last is not None
        raise last
