"""The shared Secret cache: found Secrets are kept for max_age, anything else is read again."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from controller.api.errors import SecretNotAllowed
from controller.kube.secret_cache import SecretCache


class Reads:
    def __init__(self) -> None:
        self.data: dict[tuple[str, str], Mapping[str, bytes] | None] = {}
        self.fail: dict[tuple[str, str], Exception] = {}
        self.count = 0

    async def __call__(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        self.count += 1
        if (namespace, name) in self.fail:
            raise self.fail[(namespace, name)]
        return self.data.get((namespace, name))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_found_secret_is_read_once_per_max_age_for_every_job() -> None:
    reads, clock = Reads(), Clock()
    reads.data[("ns", "ngc")] = {"key": b"v1"}
    cache = SecretCache(reads, 10.0, clock)

    async def many() -> list[Mapping[str, bytes] | None]:
        return [await cache.get("ns", "ngc") for _ in range(100)]

    assert asyncio.run(many()) == [{"key": b"v1"}] * 100
    assert reads.count == 1
    reads.data[("ns", "ngc")] = {"key": b"v2"}  # rotated
    clock.now += 10.5
    assert asyncio.run(cache.get("ns", "ngc")) == {"key": b"v2"}
    assert reads.count == 2


def test_missing_and_refused_secrets_are_read_again_on_every_pass() -> None:
    reads, clock = Reads(), Clock()
    cache = SecretCache(reads, 10.0, clock)
    assert asyncio.run(cache.get("ns", "ngc")) is None
    reads.data[("ns", "ngc")] = {"key": b"v"}  # created by the user: seen at once
    assert asyncio.run(cache.get("ns", "ngc")) == {"key": b"v"}
    assert reads.count == 2
    reads.fail[("ns", "hf")] = SecretNotAllowed("not labelled")
    for _ in range(2):
        try:
            asyncio.run(cache.get("ns", "hf"))
        except SecretNotAllowed:
            pass
        else:
            raise AssertionError("the refusal was not raised")
    assert reads.count == 4


def test_max_age_zero_reads_on_every_pass_and_keeps_nothing() -> None:
    reads, clock = Reads(), Clock()
    reads.data[("ns", "s3")] = {"id": b"x"}
    cache = SecretCache(reads, 0.0, clock)
    for _ in range(3):
        assert asyncio.run(cache.get("ns", "s3")) == {"id": b"x"}
    assert reads.count == 3


def test_a_deleted_secret_is_seen_once_max_age_passed() -> None:
    reads, clock = Reads(), Clock()
    reads.data[("ns", "ngc")] = {"key": b"v"}
    cache = SecretCache(reads, 10.0, clock)
    assert asyncio.run(cache.get("ns", "ngc")) is not None
    del reads.data[("ns", "ngc")]
    clock.now += 5
    assert asyncio.run(cache.get("ns", "ngc")) is not None  # within max_age: kept
    clock.now += 6
    assert asyncio.run(cache.get("ns", "ngc")) is None


def test_concurrent_first_reads_of_a_secret_send_one_read() -> None:
    gate = asyncio.Event()
    reads, clock = Reads(), Clock()
    reads.data[("ns", "ngc")] = {"key": b"v"}

    async def slow(namespace: str, name: str) -> Mapping[str, bytes] | None:
        await gate.wait()
        return await reads(namespace, name)

    cache = SecretCache(slow, 10.0, clock)

    async def burst() -> list[Mapping[str, bytes] | None]:
        tasks = [asyncio.ensure_future(cache.get("ns", "ngc")) for _ in range(50)]
        await asyncio.sleep(0)  # every task is waiting on the one read now
        gate.set()
        return list(await asyncio.gather(*tasks))

    assert asyncio.run(burst()) == [{"key": b"v"}] * 50
    assert reads.count == 1


def test_a_failed_shared_read_fails_every_waiter_and_is_not_kept() -> None:
    gate = asyncio.Event()
    reads, clock = Reads(), Clock()
    reads.fail[("ns", "hf")] = SecretNotAllowed("not labelled")

    async def slow(namespace: str, name: str) -> Mapping[str, bytes] | None:
        await gate.wait()
        return await reads(namespace, name)

    cache = SecretCache(slow, 10.0, clock)

    async def burst() -> list[object]:
        tasks = [asyncio.ensure_future(cache.get("ns", "hf")) for _ in range(3)]
        await asyncio.sleep(0)
        gate.set()
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    results = asyncio.run(burst())
    assert all(isinstance(r, SecretNotAllowed) for r in results)
    assert reads.count == 1
    del reads.fail[("ns", "hf")]
    reads.data[("ns", "hf")] = {"k": b"v"}
    assert asyncio.run(cache.get("ns", "hf")) == {"k": b"v"}  # the failure was not kept
