"""spec.ttlSecondsAfterFinished (controller/fleet/ttl.py): one heap fed by the watch deletes
finished jobs when their TTL has passed, by uid, on the leader only; nothing per unfinished or
TTL-less job."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from controller.api.errors import KubeUnavailable
from controller.fleet.ttl import RETRY_S, FinishedReaper
from controller.kube.bodies import ttl_fields

FINISHED = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)
T0 = FINISHED.timestamp()


class World:
    def __init__(self) -> None:
        self.now = T0
        self.leading = True
        self.deleted: list[tuple[str, str, str]] = []
        self.fail = 0

    def clock(self) -> float:
        return self.now

    async def delete(self, namespace: str, name: str, uid: str) -> bool:
        if self.fail:
            self.fail -= 1
            raise KubeUnavailable("the API server is away")
        self.deleted.append((namespace, name, uid))
        return True


def reaper(w: World) -> FinishedReaper:
    return FinishedReaper(w.delete, lambda: w.leading, clock=w.clock)


def reap(r: FinishedReaper) -> None:
    asyncio.run(r._reap_due())


def test_a_finished_job_is_deleted_by_uid_once_its_ttl_passed() -> None:
    w = World()
    r = reaper(w)
    r.observe("ml", "a", "uid-a", FINISHED, 60)
    r.observe("ml", "b", "uid-b", None, 60)  # still running: nothing to do
    r.observe("ml", "c", "uid-c", FINISHED, None)  # no TTL: kept
    assert r.pending() == 1
    w.now = T0 + 59
    reap(r)
    assert w.deleted == []
    assert r._next_wait() == pytest.approx(1.0)
    w.now = T0 + 60
    reap(r)
    assert w.deleted == [("ml", "a", "uid-a")]
    assert r.pending() == 0 and r._next_wait() is None


def test_a_job_running_again_or_with_its_ttl_removed_is_dropped() -> None:
    w = World()
    r = reaper(w)
    r.observe("ml", "a", "uid-a", FINISHED, 10)
    r.observe("ml", "a", "uid-a", None, 10)  # a rerun: finishedAt went away
    r.observe("ml", "b", "uid-b", FINISHED, 10)
    r.observe("ml", "b", "uid-b", FINISHED, None)  # the field removed
    w.now = T0 + 100
    reap(r)
    assert w.deleted == [] and r.pending() == 0


def test_a_standby_keeps_the_entry_and_a_failed_delete_is_tried_again() -> None:
    w = World()
    r = reaper(w)
    r.observe("ml", "a", "uid-a", FINISHED, 0)
    w.leading = False
    reap(r)
    assert w.deleted == [] and r.pending() == 1
    w.leading, w.fail = True, 1
    w.now += RETRY_S
    reap(r)
    assert w.deleted == [] and r.pending() == 1  # the API server was away
    w.now += RETRY_S
    reap(r)
    assert w.deleted == [("ml", "a", "uid-a")]


def test_the_task_wakes_for_an_earlier_deadline_than_it_sleeps_for() -> None:
    w = World()
    r = reaper(w)

    async def main() -> None:
        task = asyncio.create_task(r.run())
        r.observe("ml", "late", "uid-late", FINISHED, 3600)
        await asyncio.sleep(0.05)
        r.observe("ml", "now", "uid-now", FINISHED, 0)  # due already: must not wait an hour
        for _ in range(100):
            if w.deleted:
                break
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(main())
    assert w.deleted == [("ml", "now", "uid-now")]


def test_the_watch_body_is_read_without_parsing_the_spec() -> None:
    body = {
        "metadata": {"namespace": "ml", "name": "a", "uid": "u"},
        "spec": {"ttlSecondsAfterFinished": 30},
        "status": {"finishedAt": "2026-12-05T12:00:00Z"},
    }
    assert ttl_fields(body) == ("ml", "a", "u", FINISHED, 30)
    assert ttl_fields({**body, "status": {}})[3:] == (None, None)
    assert ttl_fields({**body, "spec": {"ttlSecondsAfterFinished": True}})[3:] == (None, None)
    assert ttl_fields({**body, "spec": {}})[3:] == (None, None)
