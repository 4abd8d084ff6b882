"""The pure sweep decision (controller/fleet/orphans.py): grace, policy, the ownership mark, never
sweeping blind, references (status, attempts, reuse, a Pending job's name), retained instances."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from controller.api import naming
from controller.brev.client import DELETING, RUNNING, Instance
from controller.fleet.orphans import (
    REDELETE_AFTER,
    UNPROVEN,
    DeleteMark,
    Memory,
    Plan,
    Policy,
    Reference,
    State,
    Why,
    decide,
    references_of,
)
from controller.fleet.retained_record import RetainedRecord
from controller.observability.metrics import ORPHAN_REASONS, ORPHAN_STATES
from tests.fakes.clock import T0

CLUSTER = "cluster-a"
OTHER = "cluster-b"
GRACE = 600.0


DEPLOY_A = "ops-a/taobrev-operator"
DEPLOY_B = "ops-b/taobrev-operator"


def ours(
    job: str,
    uid: str = "u1",
    cluster: str = CLUSTER,
    *,
    namespace: str = "ns",
    deployment: str = naming.DEFAULT_DEPLOYMENT,
) -> str:
    return naming.instance_name(namespace, job, uid, cluster_id=cluster, deployment=deployment)


def legacy(job: str, namespace: str = "ns") -> str:
    """The name an operator before deployment marks gave: the cluster's mark only."""
    return f"tbj-{naming.legacy_mark(CLUSTER)}-{namespace}-{job}-1d7f4a52"


def inst(name: str, id_: str, status: str = RUNNING) -> Instance:
    return Instance(name=name, id=id_, status=status)


def ref(*names: str, ids: Sequence[str] = (), active: bool = True) -> Reference:
    return Reference(job="ns/j", names=frozenset(names), ids=frozenset(ids), active=active)


def sweep(
    listing: Sequence[Instance] | None,
    references: Sequence[Reference] | None = (),
    *,
    retained: Mapping[str, RetainedRecord] | None = None,
    memory: Memory | None = None,
    at: float = 0.0,
    policy: Policy = Policy.DELETE,
    deployment: str = naming.DEFAULT_DEPLOYMENT,
    namespaces: Sequence[str] = (),
) -> Plan:
    return decide(
        listing=listing,
        references=references,
        retained={} if retained is None else retained,
        memory=memory or Memory(),
        now=T0 + timedelta(seconds=at),
        cluster_id=CLUSTER,
        deployment=deployment,
        namespaces=namespaces,
        policy=policy,
        grace=GRACE,
    )


def deleted(plan: Plan) -> list[str]:
    return [f.instance.id for f in plan.delete]


def test_state_and_reason_names_are_the_metric_label_values() -> None:
    assert tuple(str(s) for s in State) == ORPHAN_STATES
    # Reasons of deletes; the unproven kinds are only ever reported.
    assert tuple(str(w) for w in Why if w not in UNPROVEN) == ORPHAN_REASONS


def test_an_unreferenced_instance_of_ours_is_deleted_only_after_the_grace_from_first_seen() -> None:
    listing = [inst(ours("gone"), "i-1")]
    first = sweep(listing)
    assert deleted(first) == []
    assert [f.state for f in first.findings] == [State.PENDING_GRACE]
    assert first.memory.first_seen == {"i-1": T0}

    almost = sweep(listing, memory=first.memory, at=GRACE - 1)
    assert deleted(almost) == []
    assert almost.memory.first_seen == {"i-1": T0}  # the clock is not restarted by later sweeps

    due = sweep(listing, memory=almost.memory, at=GRACE)
    assert deleted(due) == ["i-1"]
    assert [(f.state, f.why) for f in due.findings] == [(State.DELETING, Why.ORPHAN)]


def test_without_memory_the_grace_starts_again() -> None:
    # An operator restart: a long-orphaned instance still waits a whole grace.
    plan = sweep([inst(ours("gone"), "i-1")], at=10 * GRACE)
    assert deleted(plan) == []
    assert plan.findings[0].state is State.PENDING_GRACE


def test_no_listing_no_job_list_or_no_retained_record_means_no_sweep() -> None:
    remembered = Memory(first_seen={"i-1": T0})
    listing = [inst(ours("gone"), "i-1")]
    for plan in (
        sweep(None, memory=remembered, at=2 * GRACE),
        sweep(listing, None, memory=remembered, at=2 * GRACE),
        decide(
            listing=listing,
            references=[],
            retained=None,
            memory=remembered,
            now=T0 + timedelta(seconds=2 * GRACE),
            cluster_id=CLUSTER,
            policy=Policy.DELETE,
            grace=GRACE,
        ),
    ):
        assert plan.skipped is not None
        assert plan.delete == ()
        assert plan.findings == ()
        assert plan.memory == remembered


def test_referenced_instances_are_left_alone_by_name_or_by_id() -> None:
    listing = [inst(ours("a"), "i-a"), inst("renamed-by-hand", "i-b"), inst(ours("c"), "i-c")]
    refs = [ref(ours("a")), ref(ids=["i-c"])]
    memory = Memory(first_seen={"i-a": T0, "i-c": T0})
    plan = sweep(listing, refs, memory=memory, at=2 * GRACE)
    assert plan.findings == ()
    assert deleted(plan) == []
    assert plan.memory.first_seen == {}  # referenced again: forgotten


def test_another_clusters_instances_and_unmarked_ones_are_never_touched() -> None:
    foreign = inst(ours("x", cluster=OTHER), "i-f")
    legacy = inst("tbj-ns-old-1d7f4a52", "i-l")
    person = inst("alice-dev", "i-p")
    memory = Memory(first_seen={"i-f": T0, "i-l": T0, "i-p": T0})
    plan = sweep([foreign, legacy, person], memory=memory, at=100 * GRACE)
    assert plan.findings == ()
    assert deleted(plan) == []
    assert plan.foreign == 2  # the two `tbj-` names, counted for the log


def test_policy_report_reports_past_the_grace_and_deletes_nothing() -> None:
    listing = [inst(ours("gone"), "i-1")]
    plan = sweep(listing, memory=Memory(first_seen={"i-1": T0}), at=GRACE, policy=Policy.REPORT)
    assert deleted(plan) == []
    assert plan.confirm == ()
    assert [f.state for f in plan.findings] == [State.REPORTED]
    assert plan.counts()[State.REPORTED] == 1


def test_a_live_instance_a_finished_job_names_is_swept_after_the_grace_whatever_its_id() -> None:
    # Issue 25, scenario 3: finishedAt is written only after the teardown confirmed its delete,
    # so that teardown will never act again; the instance is a leak (e.g. a create that landed
    # late, under a new id), not the job's to handle.
    for recorded in ("i-1", "i-recorded"):
        listing = [inst(ours("done"), "i-1")]
        finished = [ref(ours("done"), ids=[recorded], active=False)]
        first = sweep(listing, finished)
        assert deleted(first) == []
        assert [(f.state, f.why, f.job) for f in first.findings] == [
            (State.PENDING_GRACE, Why.FINISHED_JOB, "ns/j")
        ]
        due = sweep(listing, finished, memory=first.memory, at=GRACE)
        assert deleted(due) == ["i-1"]
        assert [(f.state, f.why) for f in due.findings] == [(State.DELETING, Why.FINISHED_JOB)]
        report = sweep(listing, finished, memory=first.memory, at=GRACE, policy=Policy.REPORT)
        assert deleted(report) == []
        assert [(f.state, f.why) for f in report.findings] == [(State.REPORTED, Why.FINISHED_JOB)]


def test_an_instance_a_finished_job_reused_is_never_swept() -> None:
    # A reused instance was lent to the job, never created by it: not the sweeper's to delete.
    listing = [inst(ours("lent"), "i-1"), inst("alice-box", "i-2")]
    finished = [
        Reference(
            job="ns/j",
            names=frozenset({ours("lent"), "alice-box"}),
            ids=frozenset({"i-1", "i-2"}),
            active=False,
            reused=frozenset({ours("lent"), "i-1", "alice-box", "i-2"}),
        )
    ]
    plan = sweep(listing, finished, memory=Memory(first_seen={"i-1": T0}), at=10 * GRACE)
    assert plan.findings == ()
    assert deleted(plan) == []


def record(name: str, until: datetime | None, id_: str | None = None) -> dict[str, RetainedRecord]:
    return {name: RetainedRecord(name=name, instance_id=id_, job="ns/kept", until=until)}


def test_a_retained_instance_is_never_swept_after_its_job_is_deleted() -> None:
    name = ours("kept")
    for until in (None, T0 + timedelta(days=1)):
        plan = sweep([inst(name, "i-1")], [], retained=record(name, until), memory=Memory(), at=100 * GRACE)
        assert plan.findings == ()
        assert deleted(plan) == []
        assert plan.retained == (name,)


def test_a_retained_record_matches_by_id_too() -> None:
    plan = sweep([inst(ours("kept"), "i-1")], retained=record("other-name", None, id_="i-1"), at=2 * GRACE)
    assert deleted(plan) == []
    assert plan.retained == (ours("kept"),)


def test_retain_for_expiry_deletes_the_instance_once_the_time_is_up() -> None:
    name = ours("kept")
    until = T0 + timedelta(hours=12)
    before = sweep([inst(name, "i-1")], retained=record(name, until), at=12 * 3600 - 1)
    assert deleted(before) == []
    after = sweep([inst(name, "i-1")], retained=record(name, until), at=12 * 3600)
    assert deleted(after) == ["i-1"]
    assert after.findings[0].why is Why.RETENTION_EXPIRED
    # No grace on top of the retain time; its finished job still existing does not matter either.
    kept_job = sweep(
        [inst(name, "i-1")], [ref(name, active=False)], retained=record(name, until), at=12 * 3600
    )
    assert deleted(kept_job) == ["i-1"]


def test_an_expired_retained_instance_in_use_by_a_running_job_is_left_alone() -> None:
    name = ours("kept")
    plan = sweep([inst(name, "i-1")], [ref(name)], retained=record(name, T0), at=3600)
    assert deleted(plan) == []
    assert plan.findings == ()


def test_an_expired_retained_instance_under_policy_report_is_only_reported() -> None:
    name = ours("kept")
    plan = sweep([inst(name, "i-1")], retained=record(name, T0), at=1, policy=Policy.REPORT)
    assert deleted(plan) == []
    assert [f.state for f in plan.findings] == [State.REPORTED]


def mark(id_: str, name: str, at: float) -> DeleteMark:
    return DeleteMark(id_, name, Why.ORPHAN, T0 + timedelta(seconds=at))


def test_an_accepted_delete_is_not_resent_while_the_instance_is_going() -> None:
    name = ours("gone")
    memory = Memory(first_seen={"i-1": T0}, deleting={"i-1": mark("i-1", name, GRACE)})
    lagging = sweep([inst(name, "i-1")], memory=memory, at=GRACE + 10)
    assert deleted(lagging) == []
    assert lagging.counts()[State.DELETING] == 1
    going = sweep([inst(name, "i-1", DELETING)], memory=memory, at=GRACE + REDELETE_AFTER + 1)
    assert deleted(going) == []


def test_an_accepted_delete_that_brev_seems_to_have_dropped_is_sent_again() -> None:
    name = ours("gone")
    memory = Memory(first_seen={"i-1": T0}, deleting={"i-1": mark("i-1", name, GRACE)})
    plan = sweep([inst(name, "i-1")], memory=memory, at=GRACE + REDELETE_AFTER)
    assert deleted(plan) == ["i-1"]


def test_an_accepted_delete_no_longer_listed_is_confirmed_once() -> None:
    gone = mark("i-1", ours("gone"), GRACE)
    plan = sweep([], memory=Memory(deleting={"i-1": gone}), at=GRACE + 60)
    assert plan.confirm == (gone,)
    assert deleted(plan) == []


def job(
    name: str, uid: str, *, status: Mapping[str, Any] | None = None, reuse: str | None = None
) -> dict[str, Any]:
    instance: dict[str, Any] = {"reuse": {"name": reuse}} if reuse else {"ephemeral": {}}
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": uid},
        "spec": {"instance": instance},
        "status": dict(status or {}),
    }


def test_references_of_a_job_cover_status_attempts_reuse_and_the_pending_name() -> None:
    running = references_of(
        job(
            "j",
            "u1",
            status={
                "attempts": [
                    {"attempt": 1, "instance": {"name": "tbj-first", "id": "i-first", "created": True}},
                    {"bogus": 1},
                    {"attempt": 3, "instance": {"name": "tbj-now", "id": "i-now", "created": True}},
                ],
            },
        ),
        CLUSTER,
    )
    assert running.names == {"tbj-now", "tbj-first", ours("j", "u1")}
    assert running.ids == {"i-now", "i-first"}
    assert running.active
    assert running.job == "ns/j"
    # The flat status of an earlier release (until the job's next pass rewrites it) refers to the same.
    flat = references_of(
        job(
            "j",
            "u1",
            status={
                "instanceName": "tbj-now",
                "instanceId": "i-now",
                "attempts": [{"instanceName": "tbj-first", "instanceId": "i-first"}, {"bogus": 1}],
            },
        ),
        CLUSTER,
    )
    assert flat == running

    pending = references_of(job("p", "u2"), CLUSTER)
    assert pending.names == {ours("p", "u2")}  # no status yet: the name it will get

    reused = references_of(
        job(
            "r",
            "u3",
            reuse="shared-box",
            status={
                "finishedAt": "x",
                "attempts": [
                    {"attempt": 1, "instance": {"name": "shared-box", "id": "i-box", "created": False}}
                ],
            },
        ),
        CLUSTER,
    )
    assert "shared-box" in reused.names
    assert reused.reused == {"shared-box", "i-box"}
    assert not reused.active
    assert running.reused == frozenset()


def test_the_pending_name_carries_the_deployments_mark() -> None:
    pending = references_of(job("p", "u2"), CLUSTER, DEPLOY_A)
    assert pending.names == {ours("p", "u2", deployment=DEPLOY_A)}


def test_two_deployments_in_one_cluster_never_sweep_each_others_instances() -> None:
    # Issue 25, scenario 2: two namespaced operators of one cluster share a Brev org. Each one's
    # running training is unreferenced in the other's job list; the deployment in the mark tells
    # them apart, so neither ever reports or deletes the other's instance.
    a_inst = inst(ours("train", namespace="team-a", deployment=DEPLOY_A), "i-a")
    b_inst = inst(ours("train", namespace="team-b", deployment=DEPLOY_B), "i-b")
    listing = [a_inst, b_inst]
    a_running = [ref(a_inst.name, ids=["i-a"])]
    b_running = [ref(b_inst.name, ids=["i-b"])]
    for me, refs, namespaces in (
        (DEPLOY_A, a_running, ("team-a",)),
        (DEPLOY_B, b_running, ("team-b",)),
        (DEPLOY_A, a_running, ()),  # A watching every namespace still knows B's are not its own
    ):
        seen = sweep(listing, refs, deployment=me, namespaces=namespaces)
        plan = sweep(listing, refs, memory=seen.memory, at=100 * GRACE, deployment=me, namespaces=namespaces)
        assert plan.findings == ()
        assert deleted(plan) == []
        assert plan.foreign == 1
    # ... while each one's own orphan is still swept.
    seen = sweep(listing, b_running, deployment=DEPLOY_A, namespaces=("team-a",))
    plan = sweep(
        listing, b_running, memory=seen.memory, at=GRACE, deployment=DEPLOY_A, namespaces=("team-a",)
    )
    assert deleted(plan) == ["i-a"]


def test_our_mark_on_a_namespace_we_do_not_watch_is_reported_never_deleted() -> None:
    # TAOBREV_NAMESPACES lost a namespace (or two deployments share an identity): its jobs are
    # not in our list, so "unreferenced" proves nothing there.
    elsewhere = inst(ours("train", namespace="team-b"), "i-b")
    seen = sweep([elsewhere], namespaces=("team-a",))
    assert [(f.state, f.why) for f in seen.findings] == [(State.PENDING_GRACE, Why.OUTSIDE_NAMESPACES)]
    plan = sweep([elsewhere], memory=seen.memory, at=100 * GRACE, namespaces=("team-a",))
    assert deleted(plan) == []
    assert [(f.state, f.why) for f in plan.findings] == [(State.REPORTED, Why.OUTSIDE_NAMESPACES)]


def test_an_instance_with_the_clusters_pre_deployment_mark_is_reported_never_deleted() -> None:
    # Named by an operator version whose mark was the cluster's alone: any deployment of this
    # cluster may own it. Jobs that recorded it keep it (referenced); unreferenced, it is only
    # reported, whatever the policy.
    old = inst(legacy("lost"), "i-old")
    in_use = inst(legacy("busy"), "i-busy")
    refs = [ref(legacy("busy"), ids=["i-busy"])]
    seen = sweep([old, in_use], refs)
    assert [(f.instance.id, f.state, f.why) for f in seen.findings] == [
        ("i-old", State.PENDING_GRACE, Why.LEGACY_MARK)
    ]
    plan = sweep([old, in_use], refs, memory=seen.memory, at=100 * GRACE)
    assert deleted(plan) == []
    assert [(f.instance.id, f.state, f.why) for f in plan.findings] == [
        ("i-old", State.REPORTED, Why.LEGACY_MARK)
    ]
    # A namespaced sweeper reports only those named for its own namespaces.
    scoped = sweep([old], memory=seen.memory, at=100 * GRACE, namespaces=("team-a",))
    assert scoped.findings == ()
    assert scoped.foreign == 1


def test_an_old_marked_instance_our_finished_job_created_is_deleted_after_the_grace() -> None:
    # A job we list created it (its name is in that job's status): that proves it ours.
    leaked = inst(legacy("done"), "i-2")
    finished = [ref(legacy("done"), ids=["i-1"], active=False)]
    seen = sweep([leaked], finished)
    plan = sweep([leaked], finished, memory=seen.memory, at=GRACE)
    assert deleted(plan) == ["i-2"]
    assert plan.findings[0].why is Why.FINISHED_JOB
