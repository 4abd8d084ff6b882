"""SecretArrivals: a Pending job waiting for a missing Secret is woken when it appears, with one
GET per interval per missing Secret however many jobs wait, and nothing polled once nobody waits."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from controller.kube.secret_arrivals import SecretArrivals

KEY = ("ml", "ngc")


class FakeSecrets:
    def __init__(self) -> None:
        self.present: set[tuple[str, str]] = set()
        self.reads = 0

    async def read(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        self.reads += 1
        return {"k": b"v"} if (namespace, name) in self.present else None


def test_every_waiter_wakes_when_the_secret_appears_and_polling_is_shared_and_stops() -> None:
    async def scenario() -> None:
        secrets = FakeSecrets()
        arrivals = SecretArrivals(secrets.read, interval=0.01)
        waits = [asyncio.create_task(arrivals.wait([KEY], 30, f"uid-{i}")) for i in range(50)]
        await asyncio.sleep(0.1)
        assert arrivals.polled() == [KEY]
        assert 1 <= secrets.reads <= 15  # one poller for 50 waiters, ~1 read per interval
        secrets.present.add(KEY)
        await asyncio.wait_for(asyncio.gather(*waits), timeout=5)
        assert arrivals.polled() == []

    asyncio.run(scenario())


def test_a_wait_ends_at_its_timeout_or_its_interrupt_and_leaves_no_poller() -> None:
    async def scenario() -> None:
        secrets = FakeSecrets()
        arrivals = SecretArrivals(secrets.read, interval=0.01)
        await arrivals.wait([KEY], 0.05, "uid-1")
        assert arrivals.polled() == []
        reads = secrets.reads
        await asyncio.sleep(0.05)
        assert secrets.reads == reads  # nobody waits: nothing is read
        task = asyncio.create_task(arrivals.wait([KEY], 30, "uid-2"))
        await asyncio.sleep(0.02)
        arrivals.interrupt("uid-2")  # the job is being deleted
        await asyncio.wait_for(task, timeout=5)
        assert arrivals.polled() == []

    asyncio.run(scenario())
