"""Admission (controller/fleet/admission.py): order, priorities, ties, namespace vs cluster limits,
namespace annotation overrides, GPUs, suspend and reused instances."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from controller.fleet import admission
from controller.fleet.admission import (
    Admission,
    JobFacts,
    NamespaceLimits,
    Quotas,
    admit,
    gpus_of,
    namespace_limits,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def job(
    name: str,
    *,
    ns: str = "team-a",
    at: int = 0,
    priority: int = 0,
    admitted: bool = False,
    finished: bool = False,
    suspended: bool = False,
    deleting: bool = False,
    reuse: bool = False,
    gpus: int = 1,
) -> JobFacts:
    return JobFacts(
        namespace=ns,
        name=name,
        uid=f"uid-{ns}-{name}",
        created=T0 + timedelta(seconds=at),
        priority=priority,
        suspended=suspended,
        admitted=admitted,
        finished=finished,
        deleting=deleting,
        creates_instance=not reuse,
        gpus=gpus,
    )


def per_ns(n: int | None = None, gpus: int | None = None) -> Quotas:
    return Quotas(default=NamespaceLimits(max_instances=n, max_gpus=gpus))


def admitted_names(jobs: list[JobFacts], verdicts: dict[str, Admission]) -> list[str]:
    """Admitted job names in admission order (the order the function walked them)."""
    by_uid = {j.uid: j for j in jobs}
    ordered = sorted((by_uid[u] for u, v in verdicts.items() if v.admitted), key=JobFacts.order_key)
    return [j.name for j in ordered]


def test_priority_first_then_creation_time_then_name() -> None:
    jobs = [
        job("old-low", at=0),
        job("new-high", at=30, priority=5),
        job("b-tie", at=10),
        job("a-tie", at=10),
        job("newest", at=40),
    ]
    verdicts = admit(jobs, per_ns(3))
    assert admitted_names(jobs, verdicts) == ["new-high", "old-low", "a-tie"]
    assert not verdicts["uid-team-a-b-tie"].admitted
    assert verdicts["uid-team-a-b-tie"].position == 1
    assert verdicts["uid-team-a-newest"].position == 2


def test_without_any_limit_every_waiting_job_is_admitted() -> None:
    jobs = [job(f"j{i}", at=i) for i in range(20)]
    verdicts = admit(jobs, Quotas())
    assert all(v.admitted for v in verdicts.values())
    assert len(verdicts) == 20


def test_slots_held_by_admitted_unfinished_jobs_count_finished_ones_do_not() -> None:
    jobs = [
        job("running", admitted=True),
        job("tearing-down", admitted=True),  # admitted, not finished: still billing
        job("done", admitted=True, finished=True),
        job("w1", at=1),
        job("w2", at=2),
    ]
    verdicts = admit(jobs, per_ns(3))
    assert set(verdicts) == {"uid-team-a-w1", "uid-team-a-w2"}  # verdicts only for waiting jobs
    assert verdicts["uid-team-a-w1"].admitted
    w2 = verdicts["uid-team-a-w2"]
    assert not w2.admitted
    assert w2.reason == admission.NAMESPACE_INSTANCE_LIMIT
    assert "namespace team-a may have 3 instance(s) at once" in w2.message
    assert "and 3 are in use" in w2.message
    assert "1st in namespace team-a's queue" in w2.message


def test_queue_message_names_the_limit_the_usage_and_the_position() -> None:
    jobs = [job("h1", admitted=True), job("h2", admitted=True)] + [job(f"w{i}", at=i) for i in range(1, 5)]
    verdicts = admit(jobs, per_ns(2))
    third = verdicts["uid-team-a-w3"]
    assert third.position == 3
    assert third.message == (
        "waiting: namespace team-a may have 2 instance(s) at once (TAOBREV_NAMESPACE_MAX_INSTANCES) and 2 "
        "are in use; behind an earlier job of namespace team-a; 3rd in namespace team-a's queue"
    )


def test_a_full_namespace_does_not_hold_back_other_namespaces() -> None:
    jobs = [
        job("a-held", ns="team-a", admitted=True),
        job("a-wait", ns="team-a", at=0, priority=9),
        job("b-new", ns="team-b", at=5),
    ]
    verdicts = admit(jobs, per_ns(1))
    assert not verdicts["uid-team-a-a-wait"].admitted
    assert verdicts["uid-team-b-b-new"].admitted


def test_cluster_cap_queues_across_namespaces_with_cluster_positions() -> None:
    jobs = [
        job("a1", ns="team-a", at=1),
        job("b1", ns="team-b", at=2),
        job("a2", ns="team-a", at=3),
        job("b2", ns="team-b", at=4),
    ]
    verdicts = admit(jobs, Quotas(cluster_max_instances=2))
    assert [verdicts[f"uid-team-{n[0]}-{n}"].admitted for n in ("a1", "b1", "a2", "b2")] == [
        True,
        True,
        False,
        False,
    ]
    b2 = verdicts["uid-team-b-b2"]
    assert b2.reason == admission.CLUSTER_INSTANCE_LIMIT
    assert b2.position == 2
    assert "2nd in the cluster's queue" in b2.message
    assert "TAOBREV_MAX_INSTANCES" in b2.message


def test_namespace_limit_applies_before_the_cluster_cap() -> None:
    jobs = [job("held", ns="team-a", admitted=True), job("next", ns="team-a", at=1)]
    verdicts = admit(jobs, Quotas(cluster_max_instances=1, default=NamespaceLimits(max_instances=1)))
    assert verdicts["uid-team-a-next"].reason == admission.NAMESPACE_INSTANCE_LIMIT


def test_per_namespace_override_replaces_the_default_for_that_namespace_only() -> None:
    quotas = Quotas(
        default=NamespaceLimits(max_instances=1),
        namespaces={"big": NamespaceLimits(max_instances=3, instances_source="annotation x")},
    )
    jobs = [job(f"b{i}", ns="big", at=i) for i in range(4)] + [
        job(f"s{i}", ns="small", at=i) for i in range(2)
    ]
    verdicts = admit(jobs, quotas)
    assert sum(verdicts[f"uid-big-b{i}"].admitted for i in range(4)) == 3
    assert sum(verdicts[f"uid-small-s{i}"].admitted for i in range(2)) == 1
    assert "(annotation x)" in verdicts["uid-big-b3"].message


def test_suspended_jobs_are_not_admitted_and_neither_wait_in_line_nor_block() -> None:
    jobs = [job("first", at=0, priority=10, suspended=True), job("second", at=1), job("third", at=2)]
    verdicts = admit(jobs, per_ns(1))
    first = verdicts["uid-team-a-first"]
    assert not first.admitted
    assert first.suspended
    assert first.position is None
    assert "spec.suspend" in first.message
    assert verdicts["uid-team-a-second"].admitted
    assert verdicts["uid-team-a-third"].position == 1  # the suspended job is not ahead of it


def test_a_suspended_job_is_admitted_in_its_turn_once_suspend_is_lifted() -> None:
    waiting = [job("resumed", at=0), job("later", at=5)]
    verdicts = admit([job("holder", admitted=True, finished=True), *waiting], per_ns(1))
    assert verdicts["uid-team-a-resumed"].admitted
    assert not verdicts["uid-team-a-later"].admitted


def test_reuse_jobs_are_admitted_at_once_and_count_against_no_limit() -> None:
    jobs = [
        job("held", admitted=True),
        job("reused", at=0, reuse=True),
        job("reused-running", admitted=True, reuse=True),
        job("fresh", ns="team-b", at=1),
    ]
    verdicts = admit(jobs, Quotas(cluster_max_instances=2, default=NamespaceLimits(max_instances=1)))
    assert verdicts["uid-team-a-reused"].admitted
    assert verdicts["uid-team-b-fresh"].admitted  # the running reuse job holds no cluster slot


def test_deleting_jobs_are_not_admitted_and_take_no_place_in_the_queue() -> None:
    jobs = [job("held", admitted=True), job("gone", at=0, deleting=True), job("next", at=1)]
    verdicts = admit(jobs, per_ns(1))
    assert "uid-team-a-gone" not in verdicts
    assert verdicts["uid-team-a-next"].position == 1


def test_gpu_limit_counts_gpus_and_is_strict_fifo_within_the_namespace() -> None:
    jobs = [
        job("held", admitted=True, gpus=2),
        job("big", at=1, gpus=4),  # 2 + 4 > 4: waits
        job("small", at=2, gpus=1),  # would fit, but stays behind "big" (no starvation)
        job("other-ns", ns="team-b", at=3, gpus=4),
    ]
    verdicts = admit(jobs, per_ns(gpus=4))
    big = verdicts["uid-team-a-big"]
    assert big.reason == admission.NAMESPACE_GPU_LIMIT
    assert "needs 4 GPU(s); namespace team-a may use 4 at once" in big.message
    assert "2 are in use" in big.message
    assert not verdicts["uid-team-a-small"].admitted
    assert verdicts["uid-team-a-small"].position == 2
    assert verdicts["uid-team-b-other-ns"].admitted


def test_a_job_that_can_never_fit_waits_without_blocking_the_namespace() -> None:
    jobs = [job("huge", at=0, gpus=8), job("small", at=1, gpus=1)]
    verdicts = admit(jobs, per_ns(gpus=4))
    huge = verdicts["uid-team-a-huge"]
    assert not huge.admitted
    assert "can never be admitted" in huge.message
    assert "spec.task.gpus" in huge.message
    assert verdicts["uid-team-a-small"].admitted


def test_gpus_of_reads_task_gpus_then_the_instance_type_then_one() -> None:
    def spec(gpus: int | None = None, types: list[str] | None = None) -> dict[str, object]:
        task: dict[str, object] = {} if gpus is None else {"gpus": gpus}
        return {"task": task, "instance": {"ephemeral": {"types": types or []}}}

    assert gpus_of(spec(gpus=2, types=["n1-highmem-8:nvidia-tesla-t4:4"])) == 2
    assert gpus_of(spec(types=["n1-highmem-8:nvidia-tesla-t4:4", "n1-highmem-4:nvidia-tesla-t4:2"])) == 4
    assert gpus_of(spec(types=["g5.12xlarge"])) == 1
    assert gpus_of({}) == 1
    assert gpus_of({"task": "garbage", "instance": None}) == 1
    # A workflow (spec.steps) holds what its largest step asks for on its one instance.
    assert gpus_of({"steps": [{"gpus": 1}, {"gpus": 4}, {}], "instance": {"ephemeral": {}}}) == 4
    assert gpus_of({"steps": ["garbage", {}], "instance": {"ephemeral": {"types": ["a:b:2"]}}}) == 2


def test_namespace_annotations_override_the_defaults_and_name_their_source() -> None:
    default = NamespaceLimits(max_instances=5, max_gpus=None)
    limits, problems = namespace_limits(
        "team-a", {admission.MAX_INSTANCES_ANNOTATION: "2", admission.MAX_GPUS_ANNOTATION: " 8 "}, default
    )
    assert problems == []
    assert limits.max_instances == 2
    assert limits.max_gpus == 8
    assert limits.instances_source == "annotation taobrev.io/max-instances on namespace team-a"
    zero, _ = namespace_limits("team-a", {admission.MAX_INSTANCES_ANNOTATION: "0"}, default)
    assert zero.max_instances is None  # 0 = unlimited, as in the settings


def test_a_bad_annotation_falls_back_to_the_default_with_a_problem_naming_it_and_the_fix() -> None:
    default = NamespaceLimits(max_instances=5)
    for bad in ("three", "-1", "1.5", "", "99999999999"):
        limits, problems = namespace_limits("team-a", {admission.MAX_INSTANCES_ANNOTATION: bad}, default)
        assert limits == default, bad
        (problem,) = problems
        assert "taobrev.io/max-instances" in problem
        assert "kubectl annotate namespace team-a --overwrite taobrev.io/max-instances=<N>" in problem
        assert "default applies" in problem


def test_facts_from_an_api_object() -> None:
    body = {
        "metadata": {
            "namespace": "team-a",
            "name": "j",
            "uid": "u1",
            "creationTimestamp": "2026-11-30T12:00:05Z",
        },
        "spec": {"priority": 7, "suspend": True, "task": {"gpus": 2}, "instance": {"ephemeral": {}}},
        "status": {"phase": "Pending", "admittedAt": "2026-11-30T12:00:06Z"},
    }
    facts = JobFacts.from_body(body)
    assert facts.created == T0 + timedelta(seconds=5)
    assert facts.priority == 7
    assert facts.suspended
    assert facts.admitted
    assert facts.gpus == 2
    assert facts.creates_instance
    # A job from before admission existed, already past Pending, holds its slot.
    legacy = JobFacts.from_body({**body, "status": {"phase": "Running"}, "spec": {}})
    assert legacy.holds_slot
    reused = JobFacts.from_body({**body, "spec": {"instance": {"reuse": {"name": "box"}}}})
    assert not reused.creates_instance
    finished = JobFacts.from_body(
        {**body, "status": {"phase": "Deleted", "finishedAt": "2026-11-30T13:00:00Z"}}
    )
    assert not finished.holds_slot
