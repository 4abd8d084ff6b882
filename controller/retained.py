"""The durable record of instances released on purpose (`onCompletion: Retain`).

Why a ConfigMap: `brev ls` carries nothing but name, id and status, and brev has no rename or
labels, so once its TaoBrevJob is deleted a retained instance looks exactly like an orphan. The
fact "released on purpose, keep until T" must therefore live somewhere that outlives both the job
object and the operator process. ConfigMaps in the operator's namespace are the simplest such
place (sharded by instance name, see RetainedStore): written by the reconciler BEFORE the job's
status says finished (a failed write fails the pass, so no Retain job finishes unrecorded and
its finalizer is never released without the record), read by the sweeper on every sweep
(unreadable = no sweep), and survive restarts and leader changes. The record is keyed by
instance name (unique: names carry the object's uid) and holds the Brev id and the retain-until time from
`spec.instance.ephemeral.retainFor` (none = kept until a human deletes the instance). The sweeper
deletes an instance whose retain-until has passed (confirmed like any delete) and then drops its
entry. Size: one ConfigMap is capped at 1 MiB, so the records are sharded over 64 of them
(RetainedStore says why and how many that holds).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from controller.errors import KubeUnavailable
from controller.kube import KubeAccess
from controller.models import OnCompletion, TaoBrevJobSpec, TaoBrevJobStatus
from controller.timestamps import format_time, parse_time

log = structlog.get_logger("taobrev.retained")

CONFIG_MAP = "taobrev-retained"  # the pre-shard map; shards are taobrev-retained-00 .. -3f
SHARDS = 64
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
    """The records, sharded over `SHARDS` ConfigMaps by a hash of the instance name.

    Why shards: one ConfigMap is capped by the API server at 1 MiB (keys + values), a few thousand
    records; past it every write fails and no Retain job can finish. Fixed shard names (not one
    object per record, not a label list) keep the Role's least privilege (get/update by
    resourceName, no `list` of the namespace's ConfigMaps), make a sweep's read a fixed 65 GETs
    rather than 100,000 objects, and keep concurrent writers of different records apart (each
    read-modify-write touches one shard's resourceVersion). 64 shards of worst-case ~450-byte
    records hold ~150,000 records; at the ~150 bytes of a typical record, ~440,000.
    The pre-shard ConfigMap (`CONFIG_MAP`) is still read, and a record is removed from it too, so
    records written by an older operator keep protecting their instances and still expire."""

    def __init__(self, kube: KubeAccess, namespace: str, name: str = CONFIG_MAP) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name

    def shard_of(self, instance_name: str) -> str:
        """The ConfigMap that holds (or will hold) the record of `instance_name`."""
        return shard_name(instance_name, self._name)

    def config_map_names(self) -> list[str]:
        """Every ConfigMap the store reads: the pre-shard map, then the shards."""
        return [self._name, *(shard_name_at(i, self._name) for i in range(SHARDS))]

    async def read(self) -> dict[str, RetainedRecord]:
        """Every record; raises TransientError when any shard cannot be read (a sweep that saw
        part of the records could delete an instance another shard protects)."""
        found = await asyncio.gather(
            *(self._kube.read_config_map(self._namespace, cm) for cm in self.config_map_names())
        )
        records: dict[str, RetainedRecord] = {}
        for shard in found:  # the legacy map first: a shard's newer record of a name wins
            for name, value in (shard[0] if shard is not None else {}).items():
                records[name] = RetainedRecord.parse(name, value)
        return records

    async def record(self, rec: RetainedRecord) -> None:
        await self._update(self.shard_of(rec.name), lambda data: {**data, rec.name: rec.value()})
        log.info("instance_retained_recorded", instance=rec.name, job=rec.job, until=str(rec.until))

    async def remove(self, name: str) -> None:
        def drop(data: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in data.items() if k != name}

        await self._update(self.shard_of(name), drop)
        await self._update(self._name, drop)  # a record an older operator wrote

    async def _update(self, config_map: str, change: Callable[[dict[str, str]], dict[str, str]]) -> None:
        last: KubeUnavailable | None = None
        for _ in range(_WRITE_TRIES):
            found = await self._kube.read_config_map(self._namespace, config_map)
            if found is None and config_map == self._name:
                return  # no legacy map: nothing to drop, and never create it again
            data: Mapping[str, str] = found[0] if found is not None else {}
            new = change(dict(data))
            if new == dict(data) and (found is not None or not new):
                return
            try:
                await self._kube.write_config_map(
                    self._namespace, config_map, new, found[1] if found is not None else None
                )
                return
            except KubeUnavailable as exc:  # a 409 (someone wrote in between): read again
                last = exc
        assert last is not None
        raise last


def shard_name_at(index: int, base: str = CONFIG_MAP) -> str:
    return f"{base}-{index:02x}"


def shard_name(instance_name: str, base: str = CONFIG_MAP) -> str:
    """A stable hash (not Python's salted hash(): every replica and restart must agree)."""
    digest = hashlib.sha256(instance_name.encode()).digest()
    return shard_name_at(int.from_bytes(digest[:4], "big") % SHARDS, base)
