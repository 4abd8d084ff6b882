"""The fleet (controller/fleet/ledger.py): one ledger for concurrent passes, built from a listing and
kept current by each pass's own writes; namespace annotations with fallbacks; the reconciler
asks it for a Pending job's verdict and a queued job costs no Secret read and no brev call."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from controller.api.errors import KubeUnavailable
from controller.api.status import TaoBrevJobStatus
from controller.fleet import admission
from controller.fleet.admission import JobFacts, NamespaceLimits, Quotas
from controller.fleet.ledger import Fleet, quotas_from
from controller.reconciler import JobRef
from tests.fakes.clock import FakeClock
from tests.fakes.harness import NAMESPACE, Harness, job_spec
from tests.fakes.kube import FakeKube
from tests.status_paths import instance, queue

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class YieldingKube(FakeKube):
    """A FakeKube whose calls give the event loop away (as real API calls in threads do), so
    concurrent verdicts really interleave."""

    async def list_jobs(
        self, namespaces: Sequence[str] = (), *, page_size: int = 500, finished: bool | None = None
    ) -> list[dict[str, Any]]:
        for _ in range(3):
            await asyncio.sleep(0)
        return await super().list_jobs(namespaces, page_size=page_size, finished=finished)

    async def namespace_annotations(self, name: str) -> Mapping[str, str] | None:
        await asyncio.sleep(0)
        return await super().namespace_annotations(name)


def facts(name: str, *, ns: str = NAMESPACE, priority: int = 0, at: int = 0) -> JobFacts:
    return JobFacts(
        namespace=ns,
        name=name,
        uid=f"uid-{name}",
        created=T0.replace(second=at),
        priority=priority,
    )


def add(kube: FakeKube, f: JobFacts, status: dict[str, Any] | None = None) -> None:
    obj = kube.create(
        f.namespace, f.name, f.uid, job_spec(), created=f.created.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    obj.status = dict(status or {"phase": "Pending"})


def test_concurrent_passes_never_both_take_the_last_slot() -> None:
    kube = YieldingKube()
    jobs = [facts(f"j{i}", at=i) for i in range(8)]
    for f in jobs:
        add(kube, f)
    fleet = Fleet(kube, Quotas(cluster_max_instances=3))

    async def all_at_once() -> list[bool]:
        verdicts = await asyncio.gather(*(fleet.verdict(f) for f in reversed(jobs)))
        return [v.admission.admitted for v in reversed(verdicts)]

    admitted = asyncio.run(all_at_once())
    assert admitted == [True, True, True, False, False, False, False, False]


def test_an_admission_holds_its_slot_before_its_status_write_lands() -> None:
    """A is admitted (its queue.admittedAt not written yet); B, with a higher priority, arrives next:
    the slot is A's, whatever order a fresh computation would give."""
    kube = FakeKube()
    a, b = facts("a", at=0), facts("b", priority=10, at=1)
    add(kube, a)
    fleet = Fleet(kube, quotas_from(1, 0, 0))

    async def scenario() -> tuple[bool, bool]:
        first = (await fleet.verdict(a)).admission.admitted
        add(kube, b)
        return first, (await fleet.verdict(b)).admission.admitted

    assert asyncio.run(scenario()) == (True, False)


def test_a_restarted_operator_counts_admissions_recorded_in_status() -> None:
    kube = FakeKube()
    add(kube, facts("a", at=0), {"phase": "Pending", "queue": {"admittedAt": "2026-11-30T12:00:09Z"}})
    add(kube, facts("b", at=1), {"phase": "Running"})  # admitted before quotas existed
    add(kube, facts("c", at=2))
    fleet = Fleet(kube, Quotas(cluster_max_instances=2))
    verdict = asyncio.run(fleet.verdict(facts("c", at=2)))
    assert not verdict.admission.admitted
    assert verdict.admission.reason == admission.CLUSTER_INSTANCE_LIMIT
    assert "2 are in use" in verdict.admission.message


def test_a_finished_write_frees_the_slot_and_wakes_waiters() -> None:
    kube = FakeKube()
    for f in (facts("a", at=0), facts("b", at=1)):
        add(kube, f)
    fleet = Fleet(kube, quotas_from(1, 0, 0))

    async def scenario() -> tuple[bool, bool, bool, bool]:
        first = (await fleet.verdict(facts("a", at=0))).admission.admitted
        second = (await fleet.verdict(facts("b", at=1))).admission.admitted
        waiter = asyncio.ensure_future(fleet.wait_for_release(60))
        await asyncio.sleep(0)
        fleet.observe("uid-a", TaoBrevJobStatus(admitted_at=T0, finished_at=T0))
        await asyncio.wait_for(waiter, 1)
        third = (await fleet.verdict(facts("b", at=1))).admission.admitted
        return first, second, waiter.done(), third

    assert asyncio.run(scenario()) == (True, False, True, True)


def test_a_listing_that_lags_behind_an_admission_does_not_free_its_slot() -> None:
    kube = FakeKube()
    for f in (facts("a", at=0), facts("b", at=1)):
        add(kube, f)
    clock = FakeClock()
    fleet = Fleet(kube, quotas_from(1, 0, 0), relist_after=1, clock=clock.monotonic)

    async def scenario() -> bool:
        assert (await fleet.verdict(facts("a", at=0))).admission.admitted
        clock.advance(5)  # relist: the API still shows "a" Pending without queue.admittedAt
        return (await fleet.verdict(facts("b", at=1))).admission.admitted

    assert asyncio.run(scenario()) is False
    assert kube.job_lists == 2


def test_the_relist_reads_only_unfinished_jobs_and_finished_ones_hold_no_slot() -> None:
    # Issue 30: a namespace's thousands of finished jobs are not the ledger's concern.
    kube = FakeKube()
    add(
        kube,
        facts("done", at=0),
        {
            "phase": "Deleted",
            "queue": {"admittedAt": "2026-11-30T12:00:00Z"},
            "finishedAt": "2026-11-30T12:05:00Z",
        },
    )
    add(kube, facts("a", at=1))
    fleet = Fleet(kube, quotas_from(1, 0, 0))
    admitted = asyncio.run(fleet.verdict(facts("a", at=1))).admission.admitted
    assert admitted
    assert kube.job_listings == [False]


def test_namespace_annotation_overrides_bad_values_and_denied_reads_fall_back_with_a_warning() -> None:
    kube = FakeKube()
    kube.namespaces = {
        "big": {admission.MAX_INSTANCES_ANNOTATION: "2"},
        "typo": {admission.MAX_INSTANCES_ANNOTATION: "two"},
    }
    kube.denied_namespaces = {"locked"}
    for ns in ("big", "typo", "locked"):
        for i in range(3):
            add(kube, facts(f"{ns}-{i}", ns=ns, at=i))
    fleet = Fleet(kube, quotas_from(0, 1, 0))

    async def admitted(ns: str) -> tuple[int, set[str]]:
        count, warnings = 0, set()
        for i in range(3):
            v = await fleet.verdict(facts(f"{ns}-{i}", ns=ns, at=i))
            count += v.admission.admitted
            warnings |= set(v.warnings)
        return count, warnings

    big, big_warnings = asyncio.run(admitted("big"))
    assert big == 2
    assert big_warnings == set()
    typo, typo_warnings = asyncio.run(admitted("typo"))
    assert typo == 1  # the default
    (warning,) = typo_warnings
    assert "taobrev.io/max-instances='two'" in warning
    locked, locked_warnings = asyncio.run(admitted("locked"))
    assert locked == 1
    (warning,) = locked_warnings
    assert "get` on namespaces" in warning


def test_namespace_annotations_are_cached_and_a_transient_failure_keeps_the_last_ones() -> None:
    class Flaky(FakeKube):
        fail = False

        async def namespace_annotations(self, name: str) -> Mapping[str, str] | None:
            if self.fail:
                raise KubeUnavailable("no answer from the API server")
            return await super().namespace_annotations(name)

    kube = Flaky()
    kube.namespaces = {NAMESPACE: {admission.MAX_INSTANCES_ANNOTATION: "1"}}
    for i in range(2):
        add(kube, facts(f"j{i}", at=i))
    clock = FakeClock()
    fleet = Fleet(kube, Quotas(default=NamespaceLimits()), namespace_ttl=10, clock=clock.monotonic)

    async def scenario() -> list[bool]:
        out = [(await fleet.verdict(facts("j0", at=0))).admission.admitted]
        out.append((await fleet.verdict(facts("j1", at=1))).admission.admitted)
        clock.advance(30)
        kube.fail = True
        out.append((await fleet.verdict(facts("j1", at=1))).admission.admitted)
        return out

    assert asyncio.run(scenario()) == [True, False, False]
    assert kube.namespace_reads == 1


def brev_calls(h: Harness) -> int:
    b = h.brev
    return b.listings + len(b.creates) + len(b.deletes) + len(b.execs) + len(b.uploads)


def test_a_queued_job_reads_no_secret_and_calls_no_brev_and_deleting_it_is_instant() -> None:
    h = Harness(quotas=Quotas(default=NamespaceLimits(max_instances=1)))
    # Another job of the namespace holds the only slot.
    holder = h.kube.create(NAMESPACE, "holder", "uid-holder", job_spec())
    holder.status = {"phase": "Running", "queue": {"admittedAt": "2026-11-29T10:00:00Z"}}

    async def scenario() -> None:
        await h.run(seconds=60, until_finished=False)

    asyncio.run(scenario())
    assert h.phase == "Pending"
    assert queue(h.status)["reason"] == admission.NAMESPACE_INSTANCE_LIMIT
    assert queue(h.status)["position"] == 1
    assert brev_calls(h) == 0
    reads = h.kube.secret_reads
    asyncio.run(h.run(seconds=60, until_finished=False))
    assert h.kube.secret_reads == reads  # queued passes read no Secret

    h.delete_job()
    passes = asyncio.run(h.run(seconds=60))
    assert passes == 1
    assert h.obj is None
    assert brev_calls(h) == 0


def test_the_reconciler_posts_a_bad_annotation_once_as_a_warning_event() -> None:
    h = Harness(quotas=Quotas())
    h.kube.namespaces = {NAMESPACE: {admission.MAX_GPUS_ANNOTATION: "lots"}}
    h.kube.create(NAMESPACE, "other", "uid-other", job_spec())

    async def scenario() -> None:
        ref = JobRef.from_body(h.kube.objects[(NAMESPACE, "job")].body())
        await h.reconciler.reconcile(ref)  # first pass: accepted
        for _ in range(3):
            await h.reconciler.reconcile(JobRef.from_body(h.kube.objects[(NAMESPACE, "job")].body()))

    asyncio.run(scenario())
    warnings = [e for e in h.events.events if e.reason == "QuotaAnnotationInvalid"]
    assert len(warnings) == 1
    assert "taobrev.io/max-gpus='lots'" in warnings[0].message
    assert queue(h.status).get("admittedAt")  # the default (unlimited) applied


def test_a_queued_wait_ends_when_its_job_is_being_deleted() -> None:
    fleet = Fleet(FakeKube(), Quotas())

    async def scenario() -> bool:
        waiter = asyncio.ensure_future(fleet.wait_for_release(60, "uid-x"))
        await asyncio.sleep(0)
        fleet.interrupt("uid-y")  # another job: no effect
        await asyncio.sleep(0)
        early = waiter.done()
        fleet.interrupt("uid-x")
        await asyncio.wait_for(waiter, 1)
        return early

    assert asyncio.run(scenario()) is False


def queued_harness() -> tuple[Harness, Any]:
    h = Harness(quotas=Quotas(default=NamespaceLimits(max_instances=1)), wake_queued=True)
    holder = h.kube.create(NAMESPACE, "holder", "uid-holder", job_spec())
    holder.status = {"phase": "Running", "queue": {"admittedAt": "2026-11-29T10:00:00Z"}}
    return h, holder


def job_ref(h: Harness) -> JobRef:
    obj = h.kube.get(NAMESPACE, "job")
    assert obj is not None
    return JobRef.from_body(obj.body())


async def turns(n: int = 50) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_queued_pass_returns_as_soon_as_a_slot_is_released() -> None:
    """The queued job's pass waits (up to the poll interval) outside its lock; a finishing holder
    ends the wait within a few loop turns, not after the interval."""
    h, _ = queued_harness()

    async def scenario() -> tuple[bool, bool, float | None]:
        await h.reconciler.reconcile(job_ref(h))  # accepted
        waiting = asyncio.ensure_future(h.reconciler.reconcile(job_ref(h)))  # queued, then waits
        await turns()
        before = waiting.done()
        assert h.fleet is not None
        h.fleet.observe("uid-holder", TaoBrevJobStatus(admitted_at=T0, finished_at=T0))
        await turns()
        return before, waiting.done(), await waiting

    before, after, delay = asyncio.run(scenario())
    assert queue(h.status)["reason"] == admission.NAMESPACE_INSTANCE_LIMIT
    assert not before
    assert after
    assert delay == 0.0  # the daemon's next pass comes at once, and is admitted
    asyncio.run(h.reconciler.reconcile(job_ref(h)))
    assert queue(h.status).get("admittedAt")
    # ... and goes on to the create in the same pass: admission and create request are one write
    assert instance(h.status).get("createRequestedAt")


def test_deleting_a_job_ends_its_queued_wait() -> None:
    h, _ = queued_harness()

    async def scenario() -> tuple[bool, float | None, bool]:
        await h.reconciler.reconcile(job_ref(h))
        waiting = asyncio.ensure_future(h.reconciler.reconcile(job_ref(h)))
        await turns()
        h.delete_job()
        finished = await h.reconciler.reconcile(job_ref(h))  # the delete handler's pass
        await turns()
        return waiting.done(), finished, bool(h.status.get("finishedAt"))

    woken, finished, done = asyncio.run(scenario())
    assert woken
    assert finished is None
    assert done


def test_the_queue_gauge_counts_waiting_jobs_by_namespace_and_reason() -> None:
    from prometheus_client import CollectorRegistry

    from controller.observability.metrics import Recorder

    registry = CollectorRegistry()
    h = Harness(quotas=Quotas(default=NamespaceLimits(max_instances=1)))
    h.recorder = Recorder(registry)
    h.restart()
    holder = h.kube.create(NAMESPACE, "holder", "uid-holder", job_spec())
    holder.status = {"phase": "Running", "queue": {"admittedAt": "2026-11-29T10:00:00Z"}}
    asyncio.run(h.run(seconds=20, until_finished=False))
    labels = {"namespace": NAMESPACE, "reason": admission.NAMESPACE_INSTANCE_LIMIT}
    assert registry.get_sample_value("taobrev_queued_jobs", labels) == 1
    holder.status = {**holder.status, "finishedAt": "2026-11-29T11:00:00Z", "phase": "Deleted"}
    h.restart()  # a new process lists again: the holder is finished
    asyncio.run(h.run(seconds=20, until_finished=False))
    assert queue(h.status).get("admittedAt")
    assert registry.get_sample_value("taobrev_queued_jobs", labels) is None


def test_a_failure_after_a_held_pending_still_writes_it() -> None:
    # A new job's Pending goes out with its next step's status (reconciler._holdable). When that
    # next step's admission fails (the fleet's listing of jobs: API server down), the pass fails
    # after writing the Pending it held: the retried pass starts from it.
    h = Harness(quotas=Quotas(default=NamespaceLimits(max_instances=1)))
    h.kube.list_fails = KubeUnavailable("listing TaoBrevJobs: 503")
    assert asyncio.run(h.reconcile_once()) == 2.0  # failed transiently: the first backoff
    assert [w.status.get("phase") for w in h.kube.writes] == ["Pending"]
    assert instance(h.kube.writes[0].status).get("name") and not h.brev.creates
    h.kube.list_fails = None
    asyncio.run(h.run(seconds=60, until_finished=False))
    assert queue(h.status).get("admittedAt") and instance(h.status).get("createRequestedAt")


def test_a_job_held_by_a_quota_past_queued_seconds_fails_quota_having_created_nothing() -> None:
    """spec.timeouts.queuedSeconds: held by a limit longer than that, the job ends Failed
    (QueueTimeout, failureClass Quota), nothing created; the count is from status.queue.queuedAt,
    so a restart does not start it again."""
    spec = job_spec()
    spec["timeouts"] = {**spec["timeouts"], "queuedSeconds": 120}
    h = Harness(spec, quotas=Quotas(default=NamespaceLimits(max_instances=1)))
    holder = h.kube.create(NAMESPACE, "holder", "uid-holder", job_spec())
    holder.status = {"phase": "Running", "queue": {"admittedAt": "2026-11-29T10:00:00Z"}}

    asyncio.run(h.run(seconds=60, until_finished=False))
    assert h.phase == "Pending" and queue(h.status).get("queuedAt")
    assert "failureClass" not in h.status
    asyncio.run(h.run(seconds=600))
    assert (h.status["outcome"], h.status["reason"], h.status["failureClass"]) == (
        "Failed",
        "QueueTimeout",
        "Quota",
    )
    assert h.phase == "Deleted"
    assert "queuedSeconds=120" in h.status["message"] and "NamespaceInstanceLimit" in h.status["message"]
    assert brev_calls(h) == 0


def test_time_suspended_does_not_count_against_queued_seconds() -> None:
    spec = job_spec(suspend=True)
    spec["timeouts"] = {**spec["timeouts"], "queuedSeconds": 60}
    h = Harness(spec, quotas=Quotas(default=NamespaceLimits(max_instances=1)))
    asyncio.run(h.run(seconds=600, until_finished=False))
    assert h.phase == "Pending" and not h.status.get("outcome")
    assert not queue(h.status).get("queuedAt")
