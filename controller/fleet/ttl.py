"""spec.ttlSecondsAfterFinished (the Kubernetes Job field, opt-in): a finished TaoBrevJob is
deleted that long after status.finishedAt. One heap and one task for the whole operator, fed by
the watch (every event passes `observe`): no timer, daemon or API call per finished job, so
10,000 finished objects cost a heap entry each for those that asked, and nothing for the rest.

Only the leader deletes, by uid (a new object of the same name is never taken for the old one).
Deleting goes through the finalizer like any `kubectl delete`: an instance a Retain job keeps
stays recorded in its retained record. GitOps users should leave the field unset: Argo CD or
Flux re-creates an object deleted from under them, and the new object is a new run.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

import structlog

from controller.api.errors import TransientError

log = structlog.get_logger("taobrev.ttl")

DeleteJob = Callable[[str, str, str], Awaitable[bool]]  # (namespace, name, uid) -> deleted (False: gone)
RETRY_S = 30.0  # after a failed delete (the API server away): try that one again then


@dataclass(frozen=True)
class _Due:
    at: float
    namespace: str
    name: str


class FinishedReaper:
    def __init__(
        self,
        delete: DeleteJob,
        is_leading: Callable[[], bool],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._delete = delete
        self._is_leading = is_leading
        self._clock = clock
        self._due: dict[str, _Due] = {}  # uid -> when
        self._heap: list[tuple[float, str]] = []  # (at, uid); stale entries are skipped
        self._changed = asyncio.Event()
        self.deleted = 0

    def observe(
        self, namespace: str, name: str, uid: str, finished_at: datetime | None, ttl: int | None
    ) -> None:
        """A watch event of the job: (re)schedule it, or drop it when it no longer qualifies
        (running again, or the field removed)."""
        if finished_at is None or ttl is None or not uid:
            self._due.pop(uid, None)
            return
        at = finished_at.timestamp() + ttl
        old = self._due.get(uid)
        if old is not None and old.at == at:
            return
        self._due[uid] = _Due(at, namespace, name)
        heapq.heappush(self._heap, (at, uid))
        if self._heap[0] == (at, uid):
            self._changed.set()  # earlier than what the task sleeps for

    def forget(self, uid: str) -> None:
        self._due.pop(uid, None)

    def pending(self) -> int:
        return len(self._due)

    async def run(self) -> None:
        """Forever: sleep until the earliest deadline (or a new earlier one), delete what is due."""
        while True:
            wait = self._next_wait()
            self._changed.clear()
            if wait is None or wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), wait)
                continue
            await self._reap_due()

    def _next_wait(self) -> float | None:
        while self._heap:
            at, uid = self._heap[0]
            due = self._due.get(uid)
            if due is None or due.at != at:
                heapq.heappop(self._heap)  # rescheduled or forgotten
                continue
            return max(0.0, at - self._clock())
        return None

    async def _reap_due(self) -> None:
        now = self._clock()
        while self._heap and self._heap[0][0] <= now:
            at, uid = heapq.heappop(self._heap)
            due = self._due.get(uid)
            if due is None or due.at != at:
                continue
            if not self._is_leading():
                # The leader deletes; this replica keeps the entry for when it leads.
                self._reschedule(uid, due, RETRY_S)
                continue
            try:
                await self._delete(due.namespace, due.name, uid)
            except TransientError as exc:
                log.warning("ttl_delete_failed", namespace=due.namespace, name=due.name, error=str(exc))
                self._reschedule(uid, due, RETRY_S)
                continue
            self._due.pop(uid, None)
            self.deleted += 1
            log.info("ttl_deleted_finished_job", namespace=due.namespace, name=due.name)

    def _reschedule(self, uid: str, due: _Due, after: float) -> None:
        later = _Due(self._clock() + after, due.namespace, due.name)
        self._due[uid] = later
        heapq.heappush(self._heap, (later.at, uid))
