"""The retained-instance record (PURE): what a Retain job leaves so the sweeper keeps its
instance until the retain-until time, and which shard of the store holds it. The store that reads
and writes the records (ConfigMaps) is `controller.fleet.retained`; the sweeper's pure planning
(`controller.fleet.orphans`) reads only this."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from controller.api.models import OnCompletion, TaoBrevJobSpec
from controller.api.status import TaoBrevJobStatus
from controller.api.timestamps import format_time, parse_time

CONFIG_MAP = "taobrev-retained"  # the pre-shard map; shards are taobrev-retained-00 .. -3f
SHARDS = 64


@dataclass(frozen=True)
class RetainedRecord:
    name: str
    instance_id: str | None
    job: str  # namespace/name of the job that retained it
    until: datetime | None  # None: kept until deleted by hand
    readable: bool = True  # False: the stored entry did not parse (kept forever, logged by the store)

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
            return cls(name=name, instance_id=None, job="?", until=None, readable=False)

    def expired(self, now: datetime) -> bool:
        return self.until is not None and now >= self.until


def record_for(
    namespace: str, name: str, spec: TaoBrevJobSpec | None, status: TaoBrevJobStatus
) -> RetainedRecord | None:
    """The record a finishing job must leave (PURE): only for an instance the job created and
    keeps (`ephemeral` + `onCompletion: Retain`); a reused instance was never ours to sweep."""
    if spec is None or spec.instance.ephemeral is None or not status.instance.name:
        return None
    if spec.instance.effective_on_completion() != OnCompletion.RETAIN or not status.instance.created:
        return None
    ttl = spec.instance.ephemeral.retain_for_seconds()
    finished = status.finished_at
    until = finished + timedelta(seconds=ttl) if ttl is not None and finished is not None else None
    return RetainedRecord(status.instance.name, status.instance.id, f"{namespace}/{name}", until)


def shard_name_at(index: int, base: str = CONFIG_MAP) -> str:
    return f"{base}-{index:02x}"


def shard_name(instance_name: str, base: str = CONFIG_MAP) -> str:
    """A stable hash (not Python's salted hash(): every replica and restart must agree)."""
    digest = hashlib.sha256(instance_name.encode()).digest()
    return shard_name_at(int.from_bytes(digest[:4], "big") % SHARDS, base)
