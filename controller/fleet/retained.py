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
from collections.abc import Callable, Mapping

import structlog

from controller.api.errors import KubeUnavailable
from controller.fleet.retained_record import CONFIG_MAP, SHARDS, RetainedRecord, shard_name, shard_name_at
from controller.kube.access import KubeAccess

log = structlog.get_logger("taobrev.retained")

_WRITE_TRIES = 3


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
                records[name] = record = RetainedRecord.parse(name, value)
                if not record.readable:
                    log.warning("retained_record_unreadable_kept_forever", instance=name)
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
