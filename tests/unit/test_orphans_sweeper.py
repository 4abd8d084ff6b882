"""The sweep loop's I/O (controller/fleet/sweeper.py) over the in-memory Brev and Kubernetes fakes:
delete + confirm, no sweep when a list fails, Report, foreign and teammates' instances, the
retained-instance record (written before a Retain job finishes) and retainFor expiry."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from controller.api import naming
from controller.api.errors import KubeUnavailable
from controller.api.models import TaoBrevJobSpec
from controller.api.spec_parse import parse_spec
from controller.api.status import TaoBrevJobStatus
from controller.brev.client import Instance
from controller.effects.directory import InstanceDirectory
from controller.fleet.leadership import Leadership, SoleLeader
from controller.fleet.orphans import Policy
from controller.fleet.retained import RetainedStore
from controller.fleet.retained_record import CONFIG_MAP, RetainedRecord, record_for
from controller.fleet.sweeper import Sweeper
from controller.observability.metrics import Recorder
from tests.fakes.brev import FakeBrev
from tests.fakes.clock import T0, FakeClock
from tests.fakes.harness import job_spec
from tests.fakes.kube import FakeKube
from tests.fixtures.polling import until_async

CLUSTER = "cluster-a"
GRACE = 600.0
OPERATOR_NS = "taobrev-system"


class World:
    def __init__(
        self,
        policy: Policy = Policy.DELETE,
        *,
        leadership: Leadership | None = None,
        interval: float = 60,
        grace: float = GRACE,
        brev: type[FakeBrev] = FakeBrev,
        namespaces: Sequence[str] = (),
        kube: FakeKube | None = None,
    ) -> None:
        self.clock = FakeClock()
        self.brev = brev(self.clock)
        self.kube = kube or FakeKube()
        self.registry = CollectorRegistry()
        self.retained = RetainedStore(self.kube, OPERATOR_NS)
        self.sweeper = Sweeper(
            brev=self.brev,
            directory=InstanceDirectory(self.brev, clock=self.clock.monotonic),
            kube=self.kube,
            retained=self.retained,
            recorder=Recorder(self.registry, clock=self.clock.unix),
            leadership=leadership or SoleLeader(),
            cluster_id=CLUSTER,
            policy=policy,
            interval=interval,
            grace=grace,
            listing_max_age=0,
            namespaces=namespaces,
            clock=self.clock.now,
        )

    def sweep(self, after: float = 0.0) -> None:
        self.clock.advance(after)
        asyncio.run(self.sweeper.sweep_once())

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        assert value is not None, (name, labels)
        return value

    def delete_outcomes(self) -> list[tuple[str, str]]:
        return [(d.target, d.outcome) for d in self.brev.deletes]  # by id: we delete by id


def ours(job: str, uid: str = "u1") -> str:
    return naming.instance_name("ns", job, uid, cluster_id=CLUSTER)


def test_an_orphan_is_deleted_after_the_grace_and_counted_once_confirmed() -> None:
    w = World()
    orphan = w.brev.add_instance(ours("stripped"))
    w.sweep()
    assert w.brev.deletes == []
    assert w.metric("taobrev_orphan_instances", state="pending_grace") == 1
    w.sweep(after=GRACE)
    assert w.delete_outcomes() == [(orphan.id, "accepted")]
    assert w.metric("taobrev_orphan_instances", state="deleting") == 1
    assert w.metric("taobrev_orphans_deleted_total", reason="orphan") == 0  # not confirmed yet
    w.sweep(after=5)  # still listed (DELETING): no second delete
    assert len(w.brev.deletes) == 1
    w.sweep(after=60)  # gone from the listing: one confirming delete answers not-found
    assert w.delete_outcomes() == [(orphan.id, "accepted"), (orphan.id, "not-found")]
    assert w.metric("taobrev_orphans_deleted_total", reason="orphan") == 1
    assert w.metric("taobrev_orphan_instances", state="deleting") == 0
    w.sweep(after=60)
    assert len(w.brev.deletes) == 2  # nothing more to do
    assert w.metric("taobrev_orphan_sweeps_total", result="done") == 5


class CreateDuringListing(FakeBrev):
    """A job is created (name in status first, as the operator does) and its instance made just
    as the sweep lists Brev: the race an in-flight create runs against the sweep."""

    kube: FakeKube | None = None

    async def list_instances(self) -> Sequence[Instance]:
        if self.kube is not None and not self.instances:
            obj = self.kube.create("ns", "racing", "u-race", job_spec())
            name = ours("racing", "u-race")
            obj.status = {"phase": "Provisioning", "attempts": [{"attempt": 1, "instance": {"name": name}}]}
            self.add_instance(name)
        return await super().list_instances()


def test_an_in_flight_create_is_never_swept_even_without_a_grace() -> None:
    # The sweep lists Brev BEFORE the jobs: a job whose instance is in the listing is in the job
    # list. (Listing the jobs first would see this instance unreferenced and, with no grace,
    # delete it.)
    w = World(grace=0, brev=CreateDuringListing)
    assert isinstance(w.brev, CreateDuringListing)
    w.brev.kube = w.kube
    for _ in range(3):
        w.sweep(after=60)
    assert len(w.brev.instances) == 1
    assert w.brev.deletes == []


def test_a_failed_listing_or_job_list_means_no_sweep() -> None:
    w = World()
    w.brev.add_instance(ours("stripped"))
    w.sweep()
    w.brev.set_faults(list_failures=1)
    w.sweep(after=GRACE)
    w.kube.list_fails = KubeUnavailable("listing TaoBrevJobs: 503")
    w.sweep(after=GRACE)
    w.kube.list_fails = None
    w.kube.config_map_fails = KubeUnavailable("reading ConfigMap: 503")
    w.sweep(after=GRACE)
    assert w.brev.deletes == []
    assert w.metric("taobrev_orphan_sweeps_total", result="skipped") == 3
    w.kube.config_map_fails = None
    w.sweep()
    assert len(w.brev.deletes) == 1  # the memory of first sight survived the skipped sweeps


def test_a_delete_that_fails_transiently_is_sent_again_at_the_next_sweep() -> None:
    w = World()
    orphan = w.brev.add_instance(ours("stripped"))
    w.sweep()
    w.brev.set_faults(delete_failures=1)
    w.sweep(after=GRACE)
    assert w.delete_outcomes() == [(orphan.id, "failed")]
    assert w.metric("taobrev_orphan_instances", state="deleting") == 1  # still due, not "reported"
    w.sweep(after=1)
    assert w.delete_outcomes() == [(orphan.id, "failed"), (orphan.id, "accepted")]


def test_policy_report_deletes_nothing_and_says_so_in_the_gauge() -> None:
    w = World(Policy.REPORT)
    w.brev.add_instance(ours("stripped"))
    w.sweep()
    w.sweep(after=GRACE)
    w.sweep(after=GRACE)
    assert w.brev.deletes == []
    assert w.metric("taobrev_orphan_instances", state="reported") == 1


def test_instances_of_running_jobs_other_clusters_and_people_are_untouched() -> None:
    w = World()
    w.kube.create("ns", "live", "u1", job_spec())
    w.brev.add_instance(ours("live", "u1"))  # a Pending job's name, before its status is written
    w.brev.add_instance(naming.instance_name("ns", "x", "u9", cluster_id="cluster-b"))
    w.brev.add_instance("tbj-ns-legacy-1d7f4a52")
    w.brev.add_instance("alice-box")
    for _ in range(5):
        w.sweep(after=GRACE)
    assert w.brev.deletes == []
    assert w.metric("taobrev_orphan_instances", state="pending_grace") == 0


def test_a_teammates_marked_instance_brev_will_not_delete_for_us_is_reported_never_counted() -> None:
    w = World()
    w.brev.switch_identity("alice", login="token")
    w.brev.add_instance(ours("theirs"), owner="bob")  # listed with --all, not deletable by alice
    w.sweep()
    w.sweep(after=GRACE)
    assert [o for _, o in w.delete_outcomes()] == ["not-found"]
    assert w.metric("taobrev_orphan_instances", state="reported") == 1
    assert w.metric("taobrev_orphans_deleted_total", reason="orphan") == 0


def retain_spec(retain_for: str | None) -> TaoBrevJobSpec:
    eph: dict[str, object] = {"gpuName": "L40S"}
    if retain_for is not None:
        eph["retainFor"] = retain_for
    raw = job_spec(instance={"ephemeral": eph, "onCompletion": "Retain"})
    return parse_spec(raw, default_image="nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt")


def test_record_for_keeps_only_created_and_retained_instances() -> None:
    finished = TaoBrevJobStatus(
        instance_name=ours("kept"), instance_id="i-1", instance_created=True, finished_at=T0
    )
    rec = record_for("ns", "kept", retain_spec("12h"), finished)
    assert rec == RetainedRecord(ours("kept"), "i-1", "ns/kept", T0 + timedelta(hours=12))
    forever = record_for("ns", "kept", retain_spec(None), finished)
    assert forever is not None
    assert forever.until is None
    deleted_spec = parse_spec(job_spec(), default_image="img")
    assert record_for("ns", "gone", deleted_spec, finished) is None
    reused = TaoBrevJobStatus(
        instance_name=ours("kept"), instance_id="i-1", instance_created=False, finished_at=T0
    )
    assert reused.instance.created is False
    assert record_for("ns", "kept", retain_spec(None), reused) is None


def test_the_record_round_trips_through_the_config_map_and_protects_the_instance() -> None:
    w = World()
    inst = w.brev.add_instance(ours("kept"))
    rec = RetainedRecord(inst.name, inst.id, "ns/kept", None)
    asyncio.run(w.retained.record(rec))
    assert (OPERATOR_NS, w.retained.shard_of(inst.name)) in w.kube.config_maps  # sharded (S11-12)
    assert asyncio.run(w.retained.read()) == {inst.name: rec}
    for _ in range(5):
        w.sweep(after=GRACE)
    assert w.brev.deletes == []


def test_an_unreadable_record_entry_still_protects_its_instance() -> None:
    w = World()
    inst = w.brev.add_instance(ours("kept"))
    w.kube.config_maps[(OPERATOR_NS, CONFIG_MAP)] = ({inst.name: "{not json"}, 1)
    for _ in range(3):
        w.sweep(after=GRACE)
    assert w.brev.deletes == []


def test_retain_for_expiry_deletes_confirms_and_drops_the_record() -> None:
    w = World()
    inst = w.brev.add_instance(ours("kept"))
    until = w.clock.now() + timedelta(hours=1)
    asyncio.run(w.retained.record(RetainedRecord(inst.name, inst.id, "ns/kept", until)))
    w.sweep(after=3599)
    assert w.brev.deletes == []
    w.sweep(after=1)
    assert w.delete_outcomes() == [(inst.id, "accepted")]
    w.sweep(after=120)
    assert w.delete_outcomes() == [(inst.id, "accepted"), (inst.id, "not-found")]
    assert w.metric("taobrev_orphans_deleted_total", reason="retention_expired") == 1
    assert asyncio.run(w.retained.read()) == {}


class Toggle:
    """A Leadership the test switches: a standby idles in wait_leading."""

    def __init__(self) -> None:
        self.leading = asyncio.Event()

    def is_leading(self) -> bool:
        return self.leading.is_set()

    async def wait_leading(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        await self.leading.wait()
        return True

    async def while_leading(self, work: Any) -> Any:
        return await work


def test_only_the_leader_sweeps_and_a_new_term_forgets_the_old_terms_clock() -> None:
    toggle = Toggle()
    w = World(leadership=toggle, interval=0.001)
    w.brev.add_instance(ours("stripped"))

    async def scenario() -> None:
        task = asyncio.create_task(w.sweeper.run())
        for _ in range(50):
            await asyncio.sleep(0)
        assert w.brev.listings == 0  # a standby makes no Brev call
        toggle.leading.set()
        await until_async(
            lambda: w.metric("taobrev_orphan_sweeps_total", result="done") >= 2, "two sweeps", interval=0.001
        )
        assert w.sweeper.memory.first_seen
        assert w.metric("taobrev_orphan_instances", state="pending_grace") == 1
        toggle.leading.clear()  # the term ends
        await until_async(lambda: not w.sweeper.memory.first_seen, "the memory forgotten", interval=0.001)
        assert w.metric("taobrev_orphan_instances", state="pending_grace") == 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert w.brev.deletes == []


def running_status(name: str, instance_id: str) -> dict[str, Any]:
    return {
        "phase": "Running",
        "attempts": [{"attempt": 1, "instance": {"name": name, "id": instance_id, "created": True}}],
    }


def test_a_namespaced_sweeper_never_deletes_a_running_job_of_a_namespace_it_does_not_watch() -> None:
    # Issue 25, scenario 2: an operator with TAOBREV_NAMESPACES=team-a cannot list team-b's jobs,
    # so a running training there looks unreferenced to it. Named with this sweeper's own mark
    # (one deployment whose TAOBREV_NAMESPACES lost team-b), it still cannot prove it an orphan.
    w = World(namespaces=("team-a",))
    job = w.kube.create("team-b", "train", "u-b", job_spec())
    inst = w.brev.add_instance(naming.instance_name("team-b", "train", "u-b", cluster_id=CLUSTER))
    job.status = running_status(inst.name, inst.id)
    for _ in range(5):
        w.sweep(after=GRACE)
    assert w.brev.deletes == []
    assert w.metric("taobrev_orphan_instances", state="deleting") == 0
    assert w.metric("taobrev_orphan_instances", state="reported") == 1  # for a person to look at


def test_a_live_instance_a_finished_job_still_names_is_reported_then_deleted_after_the_grace() -> None:
    # Issue 25, scenario 3: the job finished (its teardown deleted "i-recorded" and will never act
    # again), yet an instance of its name is live under another id (a create that landed late).
    w = World()
    job = w.kube.create("ns", "done", "u1", job_spec())
    late = w.brev.add_instance(ours("done"))
    job.status = {
        **running_status(late.name, "i-recorded"),
        "phase": "Deleted",
        "outcome": "Succeeded",
        "finishedAt": "2026-11-29T12:00:00Z",
    }
    w.sweep()
    assert w.brev.deletes == []
    assert w.metric("taobrev_orphan_instances", state="pending_grace") == 1
    w.sweep(after=GRACE)
    assert w.delete_outcomes() == [(late.id, "accepted")]
    w.sweep(after=60)
    assert w.delete_outcomes() == [(late.id, "accepted"), (late.id, "not-found")]
    assert w.metric("taobrev_orphans_deleted_total", reason="finished_job") == 1


def test_the_finished_jobs_own_recorded_instance_left_live_is_deleted_too() -> None:
    w = World()
    job = w.kube.create("ns", "done", "u1", job_spec())
    inst = w.brev.add_instance(ours("done"))
    job.status = {
        **running_status(inst.name, inst.id),
        "phase": "Deleted",
        "finishedAt": "2026-11-29T12:00:00Z",
    }
    w.sweep()
    w.sweep(after=GRACE)
    assert w.delete_outcomes() == [(inst.id, "accepted")]


def test_under_policy_report_a_finished_jobs_live_instance_is_only_reported() -> None:
    w = World(Policy.REPORT)
    job = w.kube.create("ns", "done", "u1", job_spec())
    inst = w.brev.add_instance(ours("done"))
    job.status = {**running_status(inst.name, "i-recorded"), "finishedAt": "2026-11-29T12:00:00Z"}
    w.sweep()
    w.sweep(after=GRACE)
    assert w.brev.deletes == []
    assert w.metric("taobrev_orphan_instances", state="reported") == 1


def finished_status(name: str, instance_id: str, *, created: bool = True) -> dict[str, Any]:
    return {
        "phase": "Deleted",
        "outcome": "Succeeded",
        "finishedAt": "2026-11-29T12:00:00Z",
        "attempts": [{"attempt": 1, "instance": {"name": name, "id": instance_id, "created": created}}],
    }


def test_a_quiet_fleets_sweep_lists_only_the_unfinished_jobs() -> None:
    # Issue 30: thousands of finished jobs must cost the periodic sweep nothing. Every instance
    # here is explained by an unfinished job, so the finished ones are never read.
    w = World()
    running = w.kube.create("ns", "train", "u1", job_spec())
    inst = w.brev.add_instance(ours("train"))
    running.status = running_status(inst.name, inst.id)
    for i in range(3):
        done = w.kube.create("ns", f"done-{i}", f"u-done-{i}", job_spec())
        done.status = finished_status(ours(f"done-{i}", f"u-done-{i}"), f"i-gone-{i}")
    w.sweep()
    w.sweep(after=GRACE)
    assert w.kube.job_listings == [False, False]
    assert w.brev.deletes == []


def test_an_unexplained_instance_makes_the_sweep_read_the_finished_jobs_too() -> None:
    w = World()
    job = w.kube.create("ns", "done", "u1", job_spec())
    late = w.brev.add_instance(ours("done"))
    job.status = finished_status(late.name, "i-recorded")
    w.sweep()
    assert w.kube.job_listings == [False, True]  # the unfinished first (see the sweeper's docstring)
    w.sweep(after=GRACE)
    assert w.delete_outcomes() == [(late.id, "accepted")]
    assert w.metric("taobrev_orphan_instances", state="deleting") == 1


def test_an_instance_a_finished_job_reused_is_never_swept_though_only_the_second_list_shows_it() -> None:
    # A reused instance was lent, never created: the verdict of the unfinished jobs alone (an
    # orphan) must give way to the finished job's reference.
    w = World()
    job = w.kube.create("ns", "borrowed", "u1", job_spec())
    lent = w.brev.add_instance(ours("borrowed"))
    job.status = finished_status(lent.name, lent.id, created=False)
    for _ in range(3):
        w.sweep(after=GRACE)
    assert w.brev.deletes == []
    assert w.metric("taobrev_orphan_instances", state="pending_grace") == 0


def test_a_failed_list_of_the_finished_jobs_means_no_sweep() -> None:
    class FailsOnFinished(FakeKube):
        async def list_jobs(
            self, namespaces: Sequence[str] = (), *, page_size: int = 500, finished: bool | None = None
        ) -> list[dict[str, Any]]:
            if finished:
                self.job_listings.append(finished)
                raise KubeUnavailable("listing TaoBrevJobs: 503")
            return await super().list_jobs(namespaces, page_size=page_size, finished=finished)

    w = World(kube=FailsOnFinished())
    w.brev.add_instance(ours("stripped"))
    for _ in range(3):
        w.sweep(after=GRACE)
    assert w.brev.deletes == []
    assert w.metric("taobrev_orphan_sweeps_total", result="skipped") == 3
