"""Scenario 12 (issue 25): the retained-instance records outgrow one ConfigMap. The API server
caps a ConfigMap at 1 MiB (the fake enforces the same rule, tests/fakes/kube.py); past it a
Retain job's record cannot be written and the job never finishes. The store must hold 100,000
records, and still read (and expire) the ones an older operator wrote in the single ConfigMap."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
import yaml

from controller.api.errors import KubeUnavailable
from controller.api.naming import MAX_NAME
from controller.api.timestamps import parse_time
from controller.fleet.retained import RetainedStore
from controller.fleet.retained_record import CONFIG_MAP, SHARDS, RetainedRecord
from tests.fakes.kube import CONFIG_MAP_MAX_BYTES, FakeKube

OPERATOR_NS = "taobrev-system"
ROOT = Path(__file__).resolve().parents[2]
UNTIL = parse_time("2027-01-01T00:00:00Z")
# The longest job reference: a 63-character namespace, "/", a 253-character object name.
LONGEST_JOB = "n" * 63 + "/" + "j" * 253


def big_record(i: int) -> RetainedRecord:
    name = f"tbj-{i:08d}-".ljust(MAX_NAME, "x")
    return RetainedRecord(name, f"i-{i:032x}", LONGEST_JOB, UNTIL)


def test_more_than_one_config_map_of_records_is_kept_and_read_back() -> None:
    kube = FakeKube()
    store = RetainedStore(kube, OPERATOR_NS)
    records = [big_record(i) for i in range(3000)]
    size = sum(len(r.name) + len(r.value()) for r in records)
    assert size > CONFIG_MAP_MAX_BYTES  # the premise: one ConfigMap could not hold them

    async def scenario() -> dict[str, RetainedRecord]:
        for rec in records:
            await store.record(rec)  # on the single-ConfigMap store: 422 Too long at ~2,400
        return await store.read()

    assert asyncio.run(scenario()) == {r.name: r for r in records}


def test_a_hundred_thousand_worst_case_records_fit_the_shards() -> None:
    """The capacity claim, by arithmetic on the real shard function: 100,000 records of the largest
    size a record can have, hashed as the store hashes them, leave every shard under 1 MiB."""
    store = RetainedStore(FakeKube(), OPERATOR_NS)
    per_shard: Counter[str] = Counter()
    for i in range(100_000):
        rec = big_record(i)
        per_shard[store.shard_of(rec.name)] += len(rec.name.encode()) + len(rec.value().encode())
    assert len(per_shard) == SHARDS
    fullest = max(per_shard.values())
    assert fullest < 0.9 * CONFIG_MAP_MAX_BYTES, fullest


def test_records_of_the_single_config_map_still_protect_and_are_removed() -> None:
    """An operator upgraded with records in the old single ConfigMap keeps honouring them."""
    kube = FakeKube()
    store = RetainedStore(kube, OPERATOR_NS)
    old = RetainedRecord("tbj-old-1", "i-1", "ns/old", None)
    kube.config_maps[(OPERATOR_NS, CONFIG_MAP)] = ({old.name: old.value()}, 7)
    new = RetainedRecord("tbj-new-1", "i-2", "ns/new", UNTIL)

    asyncio.run(store.record(new))
    assert asyncio.run(store.read()) == {old.name: old, new.name: new}
    assert kube.config_maps[(OPERATOR_NS, CONFIG_MAP)][0] == {old.name: old.value()}  # not rewritten

    asyncio.run(store.remove(old.name))
    assert asyncio.run(store.read()) == {new.name: new}
    asyncio.run(store.remove(new.name))
    assert asyncio.run(store.read()) == {}


def test_a_shard_that_cannot_be_read_fails_the_whole_read() -> None:
    """A partial read would let the sweeper delete an instance an unread shard protects."""
    kube = FakeKube()
    store = RetainedStore(kube, OPERATOR_NS)
    asyncio.run(store.record(RetainedRecord("tbj-a", "i-1", "ns/a", None)))
    real_read = kube.read_config_map
    broken = store.shard_of("tbj-other")

    async def read(namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        if name == broken:
            raise KubeUnavailable(f"reading ConfigMap {namespace}/{name}: 503")
        return await real_read(namespace, name)

    kube.read_config_map = read  # type: ignore[method-assign]
    with pytest.raises(KubeUnavailable):
        asyncio.run(store.read())


def test_the_role_grants_every_config_map_the_store_reads_and_writes() -> None:
    """deploy/base/rbac.yaml names each shard (get/update by resourceName): a shard the Role
    misses would fail every sweep (403) once a record hashes to it."""
    role = next(
        d
        for d in yaml.safe_load_all((ROOT / "deploy/base/rbac.yaml").read_text())
        if d and d["kind"] == "Role" and d["metadata"]["name"] == "taobrev-operator-retained-instances"
    )
    named = {n for rule in role["rules"] for n in rule.get("resourceNames", [])}
    assert named == set(RetainedStore(FakeKube(), OPERATOR_NS).config_map_names())
