"""The notifier against a real HTTP receiver on loopback (tests/fixtures/webhook.py) that is down,
slow or answers 500: every event arrives once it answers, signed, with one id per transition;
retries back off; a dead or slow receiver holds neither the passes nor another receiver; the
delivery record is written once per batch of confirmations, never per retry; a new process
sends only what the record does not hold, with the same ids."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from controller.api import reasons
from controller.api.status import ResultsSummary, TaoBrevJobStatus
from controller.api.vocabulary import Outcome, Transition
from controller.fleet.leadership import SoleLeader
from controller.notify.delivery import Notifier
from controller.notify.events import event_id
from controller.notify.metrics import NotifyMetrics
from controller.notify.sinks import SinkDirectory
from controller.notify.tuning import NotifyTuning
from tests.fixtures.webhook import Receiver

T = TypeVar("T")
NS, JOB, UID = "ml", "train-1", "5f1d9a3e-0c47-4c1b-8f6e-0d2b9c7a1e22"
GUARD = 30.0
FAST = NotifyTuning(backoff_base=0.05, backoff_max=0.2, flush_delay=0.05, status_interval=0.05)


class Writer:
    """The API server's side: job status patches and notifier status patches, recorded."""

    def __init__(self) -> None:
        self.job_patches: list[Mapping[str, Any]] = []
        self.notifier_patches: list[tuple[str, Mapping[str, Any]]] = []

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        self.job_patches.append(status)
        return True

    async def patch_notifier_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        self.notifier_patches.append((name, status))
        return True

    def stored(self) -> Mapping[str, Any] | None:
        """status.notifications as the API server holds it after the patches."""
        return self.job_patches[-1]["notifications"] if self.job_patches else None


def notifier_obj(name: str, secret: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": "2020-01-01T00:00:00Z"},
        "spec": {"secretRef": {"name": secret}, **spec},
    }


def directory(notifiers: list[dict[str, Any]], secrets: dict[str, dict[str, bytes]]) -> SinkDirectory:
    async def list_notifiers(namespace: str) -> list[dict[str, Any]]:
        return notifiers

    async def read_secret(namespace: str, name: str) -> Mapping[str, bytes] | None:
        return secrets.get(name)

    return SinkDirectory(list_notifiers, read_secret, max_age=0.0)


def build(
    sinks: SinkDirectory, writer: Writer, tuning: NotifyTuning = FAST
) -> tuple[Notifier, NotifyMetrics]:
    metrics = NotifyMetrics(CollectorRegistry())
    return Notifier(
        sinks=sinks, writer=writer, metrics=metrics, leadership=SoleLeader(), tuning=tuning
    ), metrics


def status_through(step: int) -> TaoBrevJobStatus:
    """The job's status after `step` transitions: 1 admitted, 2 running, 3 succeeded."""
    now = datetime.now(UTC) - timedelta(seconds=30)
    s = TaoBrevJobStatus()
    s.queue.admit(now)
    if step >= 2:
        s.start_attempt("tbj-x", created=True).run.started(now + timedelta(seconds=1))
    if step >= 3:
        s.run_outcome = s.outcome = Outcome.SUCCEEDED
        s.reason = reasons.SUCCEEDED
        s.current.end(now + timedelta(seconds=2), reasons.SUCCEEDED, "done")
        s.upload.uploaded(now + timedelta(seconds=3), ResultsSummary(uri="s3://b/x", objects=1, bytes=1))
    return s


async def running(notifier: Notifier, body: Callable[[], Awaitable[T]]) -> T:
    task = asyncio.create_task(notifier.run())
    try:
        return await asyncio.wait_for(body(), GUARD)
    finally:
        task.cancel()
        await asyncio.wait({task})


async def until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + GUARD
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def count(metrics: NotifyMetrics, name: str, **labels: str) -> float:
    for metric in (metrics.delivered, metrics.failed, metrics.retried, metrics.dropped):
        for family in metric.collect():
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
    return 0.0


def test_a_receiver_answering_500_gets_each_event_again_with_the_same_id_until_it_accepts(
    receiver: Receiver,
) -> None:
    receiver.mode = "fail"
    writer = Writer()
    sinks = directory(
        [notifier_obj("ops", "hook")], {"hook": {"url": receiver.url.encode(), "hmacKey": receiver.key}}
    )
    notifier, metrics = build(sinks, writer)

    async def body() -> None:
        notifier.observe(NS, JOB, UID, stored=None, status=status_through(1), spec=None)
        await asyncio.to_thread(receiver.wait_for, lambda r: len(r.requests) >= 3, "three failed tries")
        assert writer.job_patches == [], "no status write per retry"
        receiver.mode = "ok"
        await asyncio.to_thread(receiver.wait_for, lambda r: len(r.events) == 1, "the event accepted")
        await until(lambda: bool(writer.job_patches), "the delivery record")

    asyncio.run(running(notifier, body))
    ids = {r.json()["id"] for r in receiver.requests}
    assert ids == {event_id(UID, "admitted")}, "every try carries the one id"
    assert all(r.signed for r in receiver.requests), "every try is signed (a fresh timestamp each)"
    assert receiver.requests[0].headers["Content-Type"].startswith("application/cloudevents+json")
    assert writer.stored() == {"sinks": [{"notifier": "ops", "delivered": ["admitted"]}]}
    assert len(writer.job_patches) == 1
    assert count(metrics, "taobrev_notifications_failed_total", reason="http_5xx") >= 3
    assert count(metrics, "taobrev_notifications_retried_total") >= 3
    assert count(metrics, "taobrev_notifications_delivered_total", transition="Admitted") == 1


def test_a_receiver_that_is_down_gets_every_event_once_it_is_back(receiver: Receiver) -> None:
    receiver.down()
    writer = Writer()
    sinks = directory(
        [notifier_obj("ops", "hook")], {"hook": {"url": receiver.url.encode(), "hmacKey": receiver.key}}
    )
    notifier, metrics = build(sinks, writer)

    async def body() -> None:
        for step in (1, 2, 3):
            notifier.observe(NS, JOB, UID, stored=writer.stored(), status=status_through(step), spec=None)
        await until(
            lambda: count(metrics, "taobrev_notifications_failed_total", reason="connection") >= 6, "refusals"
        )
        receiver.start()  # the same port
        await asyncio.to_thread(receiver.wait_for, lambda r: len(r.events) == 3, "all three events")

    asyncio.run(running(notifier, body))
    assert sorted(receiver.types()) == sorted(
        ["io.taobrev.job.admitted", "io.taobrev.job.running", "io.taobrev.job.succeeded"]
    )
    assert len(receiver.requests) == 3, "each delivered once when the receiver came back"


def test_a_slow_receiver_times_out_and_holds_neither_the_passes_nor_another_receiver(
    receiver: Receiver,
) -> None:
    fast = Receiver(key=b"other-key-0123456789")
    fast.start()
    receiver.mode, receiver.slow_seconds = "slow", 5.0
    writer = Writer()
    sinks = directory(
        [notifier_obj("slow", "slow", timeoutSeconds=1), notifier_obj("fast", "fast")],
        {
            "slow": {"url": receiver.url.encode(), "hmacKey": receiver.key},
            "fast": {"url": fast.url.encode(), "hmacKey": fast.key},
        },
    )
    notifier, metrics = build(sinks, writer, NotifyTuning(**{**FAST.__dict__, "per_sink": 1}))
    observe_took: list[float] = []

    async def body() -> None:
        for step in (1, 2, 3):
            started = time.monotonic()
            notifier.observe(NS, JOB, UID, stored=None, status=status_through(step), spec=None)
            observe_took.append(time.monotonic() - started)
        # The fast receiver has everything while the slow one still holds its first request.
        await asyncio.to_thread(fast.wait_for, lambda r: len(r.events) == 3, "the fast receiver's events")
        assert not receiver.requests, "the slow receiver has not answered anything yet"
        await until(
            lambda: count(metrics, "taobrev_notifications_failed_total", reason="timeout") >= 1, "a timeout"
        )

    try:
        asyncio.run(running(notifier, body))
    finally:
        fast.down()
    assert max(observe_took) < 0.05, "a pass hands its status over without waiting for anything"


def test_a_new_process_sends_only_what_the_record_lacks_with_the_same_ids(receiver: Receiver) -> None:
    writer = Writer()
    sinks = directory(
        [notifier_obj("ops", "hook")], {"hook": {"url": receiver.url.encode(), "hmacKey": receiver.key}}
    )
    first, _ = build(sinks, writer)

    async def deliver_two() -> None:
        first.observe(NS, JOB, UID, stored=None, status=status_through(2), spec=None)
        await until(
            lambda: (
                writer.stored() == {"sinks": [{"notifier": "ops", "delivered": ["admitted", "running/1"]}]}
            ),
            "both recorded",
        )

    asyncio.run(running(first, deliver_two))
    before = len(receiver.requests)
    second, _ = build(sinks, writer)  # a restarted operator: nothing in memory, the record in status

    async def after_restart() -> None:
        second.observe(NS, JOB, UID, stored=writer.stored(), status=status_through(3), spec=None)
        await asyncio.to_thread(receiver.wait_for, lambda r: len(r.events) == 3, "the third event")

    asyncio.run(running(second, after_restart))
    resent = [r.json() for r in receiver.requests[before:]]
    assert [e["id"] for e in resent] == [event_id(UID, "succeeded/1")], "only the unconfirmed event"


def test_notifier_filters_formats_and_unusable_notifiers(receiver: Receiver) -> None:
    """A Slack notifier gets a Slack message; events are filtered by the notifier and by the job;
    a Named notifier serves only jobs naming it; a notifier whose Secret is missing is reported
    in its status without its URL ever being known."""
    from controller.api.models import NotifySpec, TaoBrevJobSpec

    writer = Writer()
    url = receiver.url.encode()
    sinks = directory(
        [
            notifier_obj("slack", "hook", format="Slack", events=["Succeeded", "Failed"]),
            notifier_obj("named", "hook", jobs="Named"),
            notifier_obj("broken", "missing"),
        ],
        {"hook": {"url": url, "hmacKey": receiver.key}},
    )
    notifier, metrics = build(sinks, writer)
    only_these: dict[str, Any] = {"notify": NotifySpec(events=[Transition.RUNNING, Transition.SUCCEEDED])}
    spec = TaoBrevJobSpec.model_construct(**only_these)

    async def body() -> None:
        notifier.observe(NS, JOB, UID, stored=None, status=status_through(3), spec=spec)
        await asyncio.to_thread(receiver.wait_for, lambda r: len(r.requests) >= 1, "the Slack message")
        await until(
            lambda: any(n == "broken" for n, _ in writer.notifier_patches), "the broken notifier's status"
        )

    asyncio.run(running(notifier, body))
    (only,) = receiver.requests
    assert only.headers["Content-Type"].startswith("application/json")
    assert ":white_check_mark:" in only.json()["text"], "Slack: the succeeded message only"
    broken = next(s for n, s in writer.notifier_patches if n == "broken")
    assert "does not exist" in broken["lastError"]
    assert (
        count(metrics, "taobrev_notifications_delivered_total", transition="Succeeded", format="Slack") == 1
    )
