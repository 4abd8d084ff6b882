"""The notifier: turns the transitions a job's status shows into deliveries, and delivers them at
least once, off the job's passes.

- A pass hands its written status over (`observe`, synchronous, no I/O): the events it shows are
  derived (controller/notify/events.py); those this process has not handled yet wait for the
  resolver task, which finds the job's notifiers and queues one delivery per notifier and event
  the job's `status.notifications` does not record as delivered. A pass never waits for a
  receiver, the API server or the queue.
- Deliveries are POSTed by a fixed number of concurrent requests (`concurrency`), at most
  `per_sink` to one notifier, each bounded by the notifier's timeout: a dead or slow receiver
  holds at most `per_sink` slots, never the others' and never a job. A failed request (refused,
  timed out, any non-2xx answer) is tried again after an exponential backoff with jitter
  (controller/notify/schedule.py) until the event is older than `give_up_after`.
- Confirmed deliveries are written to the job's `status.notifications` (its own merge patch,
  which the reconciler's patches never touch), batched: one write per job per `flush_delay` at
  most, and only after a success, never per retry. A restarted operator derives the events again
  and sends what is not recorded, with the same ids: at least once, duplicates carry the id.
- Memory is bounded: at most `max_pending` deliveries wait; past it an event is dropped (counted)
  and derived again at the job's next pass.
- Only the leader sends: the dispatcher waits for leadership before each delivery and record write.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import aiohttp
import structlog

from controller.api.errors import TaoBrevError
from controller.api.models import NotifySpec, TaoBrevJobSpec
from controller.api.notifier import TaoBrevNotifierStatus
from controller.api.status import NotificationsRecord, TaoBrevJobStatus
from controller.fleet.leadership import Leadership
from controller.kube.access import redact_status
from controller.lifecycle.backoff import exponential
from controller.notify import payloads
from controller.notify.events import JobEvent, job_events, wanted
from controller.notify.metrics import NotifyMetrics
from controller.notify.schedule import expired, retry_delay
from controller.notify.signing import SIGNATURE_HEADER, signature
from controller.notify.sinks import Sink, SinkDirectory
from controller.notify.tuning import NotifyTuning

log = structlog.get_logger("taobrev.notify")

# A notifier created this long after an event's time still gets it (clock skew, second resolution).
_CREATED_SKEW = timedelta(seconds=5)


class StatusWriter(Protocol):
    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool: ...
    async def patch_notifier_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool: ...


@dataclass
class _Job:
    """What the resolver needs of one job: its events not handled yet, with their data."""

    namespace: str
    name: str
    uid: str
    notify: NotifySpec | None
    events: list[tuple[JobEvent, dict[str, Any]]]


@dataclass
class _Delivery:
    namespace: str
    name: str
    uid: str
    sink: Sink
    event: JobEvent
    data: dict[str, Any]
    failures: int = 0


@dataclass
class _SinkState:
    status: TaoBrevNotifierStatus = field(default_factory=TaoBrevNotifierStatus)
    in_flight: int = 0
    parked: list[_Delivery] = field(default_factory=list)
    pending: int = 0
    dirty: bool = False


class Notifier:
    def __init__(
        self,
        *,
        sinks: SinkDirectory,
        writer: StatusWriter,
        metrics: NotifyMetrics,
        leadership: Leadership,
        tuning: NotifyTuning | None = None,
        user_agent: str = "taobrev-operator",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._sinks = sinks
        self._writer = writer
        self._metrics = metrics
        self._leadership = leadership
        self._t = tuning or NotifyTuning()
        self._user_agent = user_agent
        self._clock = clock
        self._monotonic = monotonic
        self._rand = rand
        # uid -> event keys handled by this process (queued for the sinks resolved then, or delivered)
        self._settled: dict[str, set[str]] = {}
        # uid -> what is known delivered: the job's status.notifications, plus confirmations since
        self._records: dict[str, NotificationsRecord] = {}
        # uid -> (namespace, name) of jobs with confirmations not yet written
        self._unflushed: dict[str, tuple[str, str]] = {}
        self._resolving: dict[str, _Job] = {}
        self._due: list[tuple[float, int, _Delivery]] = []
        # (job uid, notifier) -> its deliveries in transition order: only the head is on the heap,
        # so a receiver sees a job's transitions in the order they happened, retries included.
        self._lines: dict[tuple[str, str], deque[_Delivery]] = {}
        self._seq = itertools.count()
        self._pending = 0
        self._state: dict[str, _SinkState] = {}
        self._resolve_wake = asyncio.Event()
        self._due_wake = asyncio.Event()
        self._flush_wake = asyncio.Event()
        self._slots = asyncio.Semaphore(self._t.concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None

    def follow(self, leadership: Leadership) -> None:
        """Send only while `leadership` says this replica leads (set once, at start-up)."""
        self._leadership = leadership

    # -- from the passes (synchronous, no I/O) ---------------------------------------------------

    def observe(
        self,
        namespace: str,
        name: str,
        uid: str,
        *,
        stored: Mapping[str, Any] | None,
        status: TaoBrevJobStatus,
        spec: TaoBrevJobSpec | None,
    ) -> None:
        """A status was written for the job: queue the events it shows that this process has not
        handled. `stored` is status.notifications as the pass read it from the API server."""
        settled = self._settled.setdefault(uid, set())
        fresh = [e for e in job_events(status) if e.key not in settled]
        if not fresh:
            return
        if stored:
            known = self._records.setdefault(uid, NotificationsRecord())
            try:
                record = NotificationsRecord.model_validate(stored)
            except ValueError:
                record = NotificationsRecord()
            for sink in record.sinks:
                known.confirm(sink.notifier, set(sink.delivered))
        # A spec this version cannot parse is a blank one (reconciler._teardown_only_spec).
        results = getattr(getattr(spec, "data", None), "results_uri", None)
        job = self._resolving.get(uid) or _Job(namespace, name, uid, None, [])
        job.notify = getattr(spec, "notify", None)
        for event in fresh:
            facts = payloads.event_data(
                status, event, namespace=namespace, name=name, uid=uid, results_uri=results
            )
            data = redact_status(facts)
            job.events.append((event, data))
            settled.add(event.key)
        self._resolving[uid] = job
        self._resolve_wake.set()

    def forget(self, uid: str) -> None:
        """The job is gone: what is queued for it is still delivered, nothing more is recorded."""
        self._settled.pop(uid, None)
        self._records.pop(uid, None)
        self._unflushed.pop(uid, None)

    # -- the tasks ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """The resolver, the dispatcher and the two status writers, until cancelled."""
        connector = aiohttp.TCPConnector(limit=self._t.concurrency)
        self._session = aiohttp.ClientSession(connector=connector, headers={"User-Agent": self._user_agent})
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(_forever(self._resolve_loop), name="notify resolver")
                group.create_task(_forever(self._dispatch_loop), name="notify dispatcher")
                group.create_task(_forever(self._flush_loop), name="notify records")
                group.create_task(_forever(self._status_loop), name="notify notifier status")
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(self._tasks)
            await self._session.close()

    async def _resolve_loop(self) -> None:
        failures = 0
        while True:
            await self._resolve_wake.wait()
            self._resolve_wake.clear()
            while self._resolving:
                uid, job = next(iter(self._resolving.items()))
                try:
                    sinks, unusable = await self._sinks.for_job(job.namespace, job.notify)
                except TaoBrevError as exc:
                    failures += 1
                    where = f"{job.namespace}/{job.name}"
                    log.warning("cannot list the job's notifiers; retrying", job=where, error=str(exc))
                    await asyncio.sleep(exponential(failures, base=1.0, cap=self._t.backoff_max))
                    continue
                failures = 0
                if self._resolving.get(uid) is job:
                    del self._resolving[uid]
                for bad in unusable:
                    self._metrics.unusable.inc()
                    log.warning("notifier not usable", notifier=f"{bad.namespace}/{bad.name}", why=bad.why)
                    self._state_of(f"{bad.namespace}/{bad.name}").status.failed(self._clock(), bad.why)
                    self._state_of(f"{bad.namespace}/{bad.name}").dirty = True
                self._queue(job, sinks)

    def _queue(self, job: _Job, sinks: list[Sink]) -> None:
        now = self._clock()
        record = self._records.get(job.uid)
        job_filter = list(job.notify.events) if job.notify is not None else []
        for sink in sinks:
            done = record.delivered_to(sink.name) if record is not None else frozenset()
            for event, data in job.events:
                if event.key in done or not wanted(event, list(sink.events), job_filter):
                    continue
                if sink.created_at is not None and event.time < sink.created_at - _CREATED_SKEW:
                    continue  # the notifier did not exist yet
                if expired(event.time, now, self._t.give_up_after):
                    self._metrics.dropped.labels("expired").inc()
                    continue
                if self._pending >= self._t.max_pending:
                    self._metrics.dropped.labels("queue_full").inc()
                    self._settled.get(job.uid, set()).discard(event.key)  # the next pass tries again
                    log.warning("notification queue full; event dropped for now", job=job.uid)
                    continue
                self._line_up(_Delivery(job.namespace, job.name, job.uid, sink, event, data))
                self._state_of(sink.label).pending += 1
                self._pending += 1
        self._metrics.queue_depth.set(self._pending)

    def _line_up(self, delivery: _Delivery) -> None:
        line = self._lines.setdefault((delivery.uid, delivery.sink.label), deque())
        line.append(delivery)
        if len(line) == 1:
            self._push(delivery, 0.0)

    def _push(self, delivery: _Delivery, delay: float) -> None:
        heapq.heappush(self._due, (self._monotonic() + delay, next(self._seq), delivery))
        self._due_wake.set()

    def _state_of(self, label: str) -> _SinkState:
        state = self._state.get(label)
        if state is None:
            state = self._state[label] = _SinkState()
        return state

    async def _dispatch_loop(self) -> None:
        while True:
            await self._leadership.wait_leading()
            if not self._due:
                self._due_wake.clear()
                await self._due_wake.wait()
                continue
            wait = self._due[0][0] - self._monotonic()
            if wait > 0:
                self._due_wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._due_wake.wait(), timeout=wait)
                continue
            _, _, delivery = heapq.heappop(self._due)
            state = self._state_of(delivery.sink.label)
            if state.in_flight >= self._t.per_sink:
                state.parked.append(delivery)  # back on the heap when one of its requests ends
                continue
            await self._slots.acquire()
            state.in_flight += 1
            task = asyncio.create_task(self._deliver(delivery, state), name="notify delivery")
            self._tasks.add(task)
            task.add_done_callback(self._delivered)

    def _delivered(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # A bug: say so (the delivery is derived again at the job's next pass or start).
            log.error("notification delivery crashed", exc_info=task.exception())

    async def _deliver(self, d: _Delivery, state: _SinkState) -> None:
        try:
            ok, error, reason = await self._post(d)
        finally:
            self._slots.release()
            state.in_flight -= 1
            if state.parked:
                self._push(state.parked.pop(0), 0.0)
        now = self._clock()
        event_id = d.event.id_for(d.uid)
        if ok:
            self._metrics.delivered.labels(d.event.transition.value, d.sink.format.value).inc()
            self._metrics.lag_seconds.observe(max(0.0, (now - d.event.time).total_seconds()))
            state.status.delivered(now, f"{event_id} {d.event.ce_type}")
            self._done(d, state)
            self._confirm(d)
            log.info(
                "notification delivered",
                notifier=d.sink.label,
                job=d.name,
                transition=d.event.key,
                id=event_id,
            )
            return
        self._metrics.failed.labels(reason).inc()
        state.status.failed(now, error)
        state.dirty = True
        d.failures += 1
        if expired(d.event.time, now, self._t.give_up_after):
            self._metrics.dropped.labels("expired").inc()
            self._done(d, state)
            log.warning(
                "notification given up",
                notifier=d.sink.label,
                job=d.name,
                transition=d.event.key,
                error=error,
            )
            return
        delay = retry_delay(d.failures, base=self._t.backoff_base, cap=self._t.backoff_max, rand=self._rand())
        self._metrics.retried.inc()
        log.info(
            "notification failed; retrying",
            notifier=d.sink.label,
            job=d.name,
            transition=d.event.key,
            error=error,
            attempt=d.failures,
            retry_in=round(delay, 2),
        )
        self._push(d, delay)

    def _done(self, d: _Delivery, state: _SinkState) -> None:
        key = (d.uid, d.sink.label)
        line = self._lines.get(key)
        if line and line[0] is d:
            line.popleft()
            if line:
                self._push(line[0], 0.0)  # the job's next transition for this receiver
            else:
                del self._lines[key]
        self._pending -= 1
        state.pending -= 1
        state.dirty = True
        self._metrics.queue_depth.set(self._pending)

    async def _post(self, d: _Delivery) -> tuple[bool, str, str]:
        """(delivered, why not, failure reason label). Never raises; the text holds no URL."""
        assert self._session is not None
        event_id = d.event.id_for(d.uid)
        body, content_type = payloads.render(d.sink.format, event_id, d.event, d.data)
        headers = {"Content-Type": content_type}
        if d.sink.key:
            headers[SIGNATURE_HEADER] = signature(d.sink.key, body, int(self._clock().timestamp()))
        started = self._monotonic()
        try:
            async with self._session.post(
                d.sink.url,
                data=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=d.sink.timeout),
                allow_redirects=False,
            ) as answer:
                code = answer.status
                answer.release()
        except TimeoutError:
            self._metrics.request_seconds.labels("error").observe(self._monotonic() - started)
            return False, f"no answer within {d.sink.timeout:g}s (spec.timeoutSeconds)", "timeout"
        except (aiohttp.ClientError, OSError) as exc:
            self._metrics.request_seconds.labels("error").observe(self._monotonic() - started)
            return False, f"connection failed ({type(exc).__name__})", "connection"
        ok = 200 <= code < 300
        self._metrics.request_seconds.labels("ok" if ok else "error").observe(self._monotonic() - started)
        if ok:
            return True, "", ""
        reason = "http_5xx" if code >= 500 else "http_4xx" if code >= 400 else "http_other"
        return False, f"the receiver answered HTTP {code}", reason

    def _confirm(self, d: _Delivery) -> None:
        if d.uid not in self._settled:
            return  # forgotten: the job is gone
        self._records.setdefault(d.uid, NotificationsRecord()).confirm(d.sink.name, {d.event.key})
        self._unflushed[d.uid] = (d.namespace, d.name)
        self._flush_wake.set()

    async def _flush_loop(self) -> None:
        """Confirmed deliveries into each job's status.notifications: batched, one patch per job."""
        failures = 0
        while True:
            await self._flush_wake.wait()
            await asyncio.sleep(self._t.flush_delay)  # let a burst of confirmations share one write
            self._flush_wake.clear()
            await self._leadership.wait_leading()
            for uid, (namespace, name) in list(self._unflushed.items()):
                record = self._records.get(uid)
                if record is None:
                    self._unflushed.pop(uid, None)
                    continue
                body = {"notifications": record.model_dump(by_alias=True, mode="json", exclude_none=True)}
                try:
                    await self._writer.patch_status(namespace, name, body)
                except TaoBrevError as exc:
                    failures += 1
                    log.warning("cannot record delivered notifications; retrying", job=name, error=str(exc))
                    await asyncio.sleep(exponential(failures, base=1.0, cap=self._t.backoff_max))
                    self._flush_wake.set()
                    break
                failures = 0
                if self._unflushed.get(uid) == (namespace, name):
                    del self._unflushed[uid]

    async def _status_loop(self) -> None:
        """Each notifier's status (last delivery, failures, pending), at most once per interval."""
        while True:
            await asyncio.sleep(self._t.status_interval)
            if not self._leadership.is_leading():
                continue
            for label, state in list(self._state.items()):
                if not state.dirty:
                    continue
                state.dirty = False
                state.status.waiting(state.pending)
                namespace, _, name = label.partition("/")
                body = state.status.model_dump(by_alias=True, mode="json", exclude_none=True)
                try:
                    gone = not await self._writer.patch_notifier_status(namespace, name, body)
                except TaoBrevError as exc:
                    state.dirty = True
                    log.warning("cannot write the notifier's status", notifier=label, error=str(exc))
                    continue
                if gone and not state.pending and not state.in_flight:
                    self._state.pop(label, None)  # the notifier was deleted: forget it


async def _forever(loop: Callable[[], Awaitable[None]]) -> None:
    """Run `loop` again after a bug (logged), so one bad notifier or job cannot end all delivery."""
    while True:
        try:
            await loop()
        except Exception:
            log.exception("notifier loop failed; restarting it")
            await asyncio.sleep(1.0)
