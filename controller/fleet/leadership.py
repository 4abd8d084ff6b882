"""Leader election on a `coordination.k8s.io/v1` Lease, the way controller-runtime (client-go's
leaderelection package) does it, so two operator replicas never act on the same jobs.

- Every replica tries to acquire or renew the Lease every `retry_period`. The holder writes
  `renewTime`; the others take it over only once it has EXPIRED: `leaseDurationSeconds` after they
  last SAW the record change, measured on their own monotonic clock (like client-go's
  observedTime), so clock skew between nodes cannot make a lease look expired early.
- Every write carries the `resourceVersion` that was read: two replicas racing for an expired
  Lease both send an update, the API server accepts one and answers 409 to the other.
- The leader stops acting once it has not renewed for `renew_deadline` (< lease duration): the
  gap between the two is the time in-flight work has to be cancelled before anyone else may act.
  "Stops acting" means: its term ends, every pass running under `while_leading` is cancelled
  (brev subprocesses are killed with their process group) and new passes wait for the next term.
- A clean shutdown releases the Lease (empty holder, duration 1 s, as client-go's
  ReleaseOnCancel does), so the standby takes over at its next retry instead of after expiry.

`LeaderElector` holds the logic with an injected clock and `LeaseStore` (unit-tested without I/O);
`KubeLeaseStore` is the API-server store, every call bounded by a request timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import structlog
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

# Defined below the layers that raise it too (effects, brev: the fence of changes sent to Brev).
from controller.api.errors import NotLeading
from controller.lifecycle.tunables import Timing

log = structlog.get_logger("taobrev.leadership")
# A run of failed Lease requests is warned about once per this many (~1 min at the default
# 2 s retry period), the first included.
FAILURES_PER_WARNING = 30
T = TypeVar("T")


class LeaseConflict(Exception):
    """Another replica wrote the Lease first (409 on create or on a stale resourceVersion)."""


@dataclass(frozen=True)
class LeaseRecord:
    holder: str  # "" once released
    duration_seconds: int
    acquire_time: datetime | None
    renew_time: datetime | None
    transitions: int
    resource_version: str | None = None

    def same_as(self, other: LeaseRecord | None) -> bool:
        return other is not None and (self.holder, self.renew_time, self.resource_version) == (
            other.holder,
            other.renew_time,
            other.resource_version,
        )


class LeaseStore(Protocol):
    async def get(self) -> LeaseRecord | None: ...

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        """Raises LeaseConflict if the Lease exists already."""
        ...

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        """Write `record` only if the stored resourceVersion is `record.resource_version`;
        raises LeaseConflict otherwise."""
        ...


class Leadership(Protocol):
    """What the kopf handlers need: is this replica allowed to act, and a way to wait for it."""

    def is_leading(self) -> bool: ...

    async def wait_leading(self, timeout: float | None = None) -> bool: ...  # noqa: ASYNC109

    async def while_leading(self, work: Awaitable[T]) -> T: ...


class SoleLeader:
    """Leader election disabled (TAOBREV_LEADER_ELECTION=false): one replica, always acting."""

    def is_leading(self) -> bool:
        return True

    async def wait_leading(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        return True

    async def while_leading(self, work: Awaitable[T]) -> T:
        return await work


async def lead_or_stop(leadership: Leadership, stopped: Callable[[], Awaitable[object]]) -> bool:
    """Wait until this replica leads (True) or `stopped()` completes (False), with no periodic
    wake-up: a standby holding 1,000 jobs' daemons would otherwise wake 1,000 times a second."""
    if leadership.is_leading():
        return True

    async def stop() -> None:
        await stopped()

    lead = asyncio.ensure_future(leadership.wait_leading())
    halt = asyncio.ensure_future(stop())
    try:
        done, _ = await asyncio.wait({lead, halt}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        lead.cancel()
        halt.cancel()
    # Stopped wins a tie: a daemon being stopped must not start a pass.
    return halt not in done and bool(lead.result())


@dataclass
class _Term:
    number: int
    lost: asyncio.Event


class LeaderElector:
    """One replica's side of the election. `run()` loops forever; `release()` after it stops.

    `clock` is monotonic seconds (expiry and deadlines), `now` the wall time written into the Lease
    (informational for humans and other tools; no decision reads it), `sleep` waits between tries.
    `on_change(leading)` is called on every transition, synchronously, before passes are cancelled.
    """

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        timing: Timing,
        *,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.identity = identity
        self.timing = timing
        self._store = store
        self._clock = clock
        self._now = now
        self._sleep = sleep
        self._on_change = on_change
        self._observed: LeaseRecord | None = None
        self._own_record = False
        # Whether the current term re-took this replica's own Lease (see _begin).
        self.resumed = False
        self._observed_at = 0.0
        self._renewed_at: float | None = None  # clock() when the last successful write was SENT
        self._term: _Term | None = None
        self._terms = 0
        self._acquired = asyncio.Event()
        self._failing = 0  # requests failed in a row (a partitioned standby fails every retry)

    # -- what the handlers ask -------------------------------------------------------------------

    def is_leading(self) -> bool:
        """True only inside a term AND within renew_deadline of the last renewal, so a stuck
        election loop can never leave this replica acting on an expired lease."""
        return (
            self._term is not None
            and self._renewed_at is not None
            and self._clock() - self._renewed_at < self.timing.renew_deadline
        )

    async def wait_leading(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait until this replica leads; False on timeout. No I/O: it waits for run().

        A term past its renew deadline that run() has not ended yet (a starved event loop) still
        has `_acquired` set: waiting on that returned at once, and the loops that go
        wait_leading -> NotLeading -> wait_leading (the sweeper's, the node cost feed's) spun
        without ever yielding to run(), freezing the replica (failover bench at 1,000 running).
        Here such a term is waited out until run() ends or renews it."""
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        while not self.is_leading():
            left = None if end is None else end - loop.time()
            if left is not None and left <= 0:
                return False
            term, retry = self._term, self.timing.retry_period
            waiting: Coroutine[Any, Any, object]
            if not self._acquired.is_set():
                step, waiting = left, self._acquired.wait()
            else:  # a term past its deadline: until run() ends it, or a retry period
                step = retry if left is None else min(left, retry)
                live = term is not None and not term.lost.is_set()
                waiting = term.lost.wait() if live and term is not None else asyncio.sleep(step)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiting, step)
        return True

    async def while_leading(self, work: Awaitable[T]) -> T:
        """Run `work` within the current term; cancel it and raise NotLeading if the term ends."""
        term = self._term
        if term is None or not self.is_leading():
            if asyncio.iscoroutine(work):
                work.close()  # never started: no "coroutine was never awaited" warning
            raise NotLeading(f"{self.identity} does not hold the leader Lease")
        task = asyncio.ensure_future(work)
        lost = asyncio.ensure_future(term.lost.wait())
        try:
            await asyncio.wait({task, lost}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()  # our caller is being cancelled (kopf stopping a daemon): take work along
            raise
        finally:
            lost.cancel()
        if task.done():
            return task.result()
        task.cancel()
        await asyncio.wait({task})  # let it unwind (locks released, subprocess groups killed)
        raise NotLeading(f"{self.identity} lost the leader Lease during the pass")

    # -- the election loop -----------------------------------------------------------------------

    async def run(self) -> None:
        """Acquire, then renew, every retry_period until cancelled; leadership ends with the loop."""
        try:
            while True:
                await self.tick()
                await self._sleep(self._next_delay())
        finally:
            self._lose("election loop stopped")

    def _next_delay(self) -> float:
        delay = self.timing.retry_period
        left = self._renew_left(self._clock())
        if self._term is not None and left is not None:
            # Wake at the deadline at the latest, so a failing renewal ends the term on time.
            delay = min(delay, max(0.0, left))
        return delay

    def _renew_left(self, now: float) -> float | None:
        """Seconds left of the renew deadline at `now` (None: no renewal yet). The one expression
        every check uses: `now - renewed >= deadline` and `renewed + deadline - now <= 0` can
        disagree in floating point, and then the loop would wake at once forever."""
        if self._renewed_at is None:
            return None
        return self._renewed_at + self.timing.renew_deadline - now

    async def tick(self) -> bool:
        """One acquire-or-renew attempt; returns whether this replica leads afterwards."""
        started = self._clock()
        budget = self.timing.request_timeout * 2
        left = self._renew_left(started)
        if self._term is not None and left is not None:
            budget = left
        ok = False
        if budget > 0:
            try:
                async with asyncio.timeout(budget):
                    ok = await self._try_acquire_or_renew(started)
            except LeaseConflict:
                log.info("leader lease changed under us; will re-read", identity=self.identity)
            except TimeoutError:
                self._failed("leader lease request timed out", budget=budget)
            except Exception as exc:
                self._failed("leader lease request failed", error=str(exc))
            else:
                if self._failing:
                    # Said at info after a long run only: short runs (a slow request) are common.
                    long_run = self._failing >= FAILURES_PER_WARNING
                    emit = log.info if long_run else log.debug
                    emit("leader lease requests answered again", identity=self.identity, failed=self._failing)
                self._failing = 0
        if ok:
            self._renewed_at = started
            if self._term is None:
                self._begin()
        elif self._term is not None:
            left = self._renew_left(self._clock())
            if left is None or left <= 0:
                self._lose(f"lease not renewed within {self.timing.renew_deadline:g} s")
        return self.is_leading()

    def _failed(self, event: str, **fields: object) -> None:
        """A failed request: warned at the first of a run of failures and then once a minute or
        so (every FAILURES_PER_WARNING), not at every retry: a standby cut off from the API server
        would otherwise log a warning every retry period for as long as the cut lasts."""
        self._failing += 1
        emit = log.warning if (self._failing - 1) % FAILURES_PER_WARNING == 0 else log.debug
        emit(event, identity=self.identity, failed_in_a_row=self._failing, **fields)

    async def _try_acquire_or_renew(self, started: float) -> bool:
        wall = self._now()
        current = await self._store.get()
        if current is None:
            fresh = LeaseRecord(self.identity, self.timing.lease_duration, wall, wall, 0)
            self._observe(await self._store.create(fresh), started)
            self._own_record = False
            return True
        self._observe(current, started)
        if current.holder != self.identity:
            if self._term is not None:
                self._lose(f"lease taken by {current.holder or 'nobody'}")
            expired = self._observed_at + current.duration_seconds <= self._clock()
            if current.holder and not expired:
                return False
        ours = current.holder == self.identity
        self._own_record = ours
        wanted = replace(
            current,
            holder=self.identity,
            duration_seconds=self.timing.lease_duration,
            renew_time=wall,
            acquire_time=current.acquire_time if ours else wall,
            transitions=current.transitions if ours else current.transitions + 1,
        )
        self._observe(await self._store.update(wanted), started)
        return True

    def _observe(self, record: LeaseRecord, at: float) -> None:
        if not record.same_as(self._observed):
            self._observed = record
            self._observed_at = at

    def _begin(self) -> None:
        # Re-taken while the Lease still named us: every acquisition writes its holder, so no
        # other replica led since our last renewal, and what this replica remembers is current.
        self.resumed = self._own_record
        self._terms += 1
        self._term = _Term(self._terms, asyncio.Event())
        self._acquired.set()
        log.info("became leader", identity=self.identity, term=self._terms)
        if self._on_change is not None:
            self._on_change(True)

    def _lose(self, why: str) -> None:
        term, self._term = self._term, None
        self._renewed_at = None
        self._acquired.clear()
        if term is None:
            return
        log.warning("stopped leading", identity=self.identity, term=term.number, reason=why)
        if self._on_change is not None:
            self._on_change(False)
        term.lost.set()  # cancels every pass running under while_leading

    async def release(self) -> bool:
        """After run() has stopped: hand the Lease back so a standby takes over at once.

        Written only if the Lease still names us at the resourceVersion we last saw; True if it was.
        """
        self._lose("releasing the lease")
        record = self._observed
        if record is None or record.holder != self.identity:
            return False
        wall = self._now()
        released = replace(record, holder="", duration_seconds=1, renew_time=wall, acquire_time=wall)
        try:
            self._observed = await asyncio.wait_for(self._store.update(released), self.timing.request_timeout)
        except Exception as exc:
            log.warning("could not release the leader lease", identity=self.identity, error=str(exc))
            return False
        log.info("released the leader lease", identity=self.identity)
        return True


def identity(pod_name: str | None) -> str:
    """controller-runtime's id: the pod (host) name plus a random suffix, unique per process."""
    return f"{pod_name or 'taobrev-operator'}_{uuid.uuid4()}"


class KubeLeaseStore:
    """The Lease `namespace/name` in the API server; every call bounded by `request_timeout`.

    Calls run on two threads of their own, not the loop's shared executor: a renewal must never
    queue behind hundreds of jobs' status patches (give it its own ApiClient, too, for the same
    reason: its own connection pool).
    """

    def __init__(self, api: k8s.ApiClient, namespace: str, name: str, request_timeout: float) -> None:
        self._api = k8s.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self._timeout = request_timeout
        self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="leader-lease")

    async def _call(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._threads, fn)

    async def get(self) -> LeaseRecord | None:
        def _get() -> LeaseRecord | None:
            try:
                lease = self._api.read_namespaced_lease(
                    self.name, self.namespace, _request_timeout=self._timeout
                )
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise
            return _record(lease)

        return await self._call(_get)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        def _create() -> LeaseRecord:
            try:
                lease = self._api.create_namespaced_lease(
                    self.namespace, self._body(record), _request_timeout=self._timeout
                )
            except ApiException as exc:
                if exc.status == 409:
                    raise LeaseConflict(f"Lease {self.namespace}/{self.name} exists already") from None
                raise
            return _record(lease)

        return await self._call(_create)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        def _update() -> LeaseRecord:
            try:
                lease = self._api.replace_namespaced_lease(
                    self.name, self.namespace, self._body(record), _request_timeout=self._timeout
                )
            except ApiException as exc:
                if exc.status == 409:
                    raise LeaseConflict(f"Lease {self.namespace}/{self.name} changed meanwhile") from None
                raise
            return _record(lease)

        return await self._call(_update)

    def _body(self, record: LeaseRecord) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {"app.kubernetes.io/name": "taobrev-operator"},
        }
        if record.resource_version is not None:
            meta["resourceVersion"] = record.resource_version  # optimistic concurrency
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": record.holder,
                "leaseDurationSeconds": record.duration_seconds,
                "acquireTime": _micro_time(record.acquire_time),
                "renewTime": _micro_time(record.renew_time),
                "leaseTransitions": record.transitions,
            },
        }


def _micro_time(value: datetime | None) -> str | None:
    # metav1.MicroTime is RFC 3339 with exactly six fractional digits.
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") if value is not None else None


def _record(lease: k8s.V1Lease) -> LeaseRecord:
    spec = lease.spec or k8s.V1LeaseSpec()
    return LeaseRecord(
        holder=spec.holder_identity or "",
        duration_seconds=int(spec.lease_duration_seconds or 0),
        acquire_time=spec.acquire_time,
        renew_time=spec.renew_time,
        transitions=int(spec.lease_transitions or 0),
        resource_version=lease.metadata.resource_version if lease.metadata else None,
    )
