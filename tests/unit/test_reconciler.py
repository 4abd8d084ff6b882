"""The reconciler around decide(): where status enters and leaves, and what Kubernetes trouble
does to a pass. In-process, with a scripted Brev and Kubernetes (no I/O)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from controller.api import reasons
from controller.api.errors import InstanceNotFound, NotLeading, TransientError
from controller.api.models import TaoBrevJobSpec
from controller.api.status import TaoBrevJobStatus
from controller.brev.client import RUNNING, CreateRequest, CreateResult, ExecResult, Instance
from controller.effects.actions import ActionRunner
from controller.effects.directory import InstanceDirectory
from controller.effects.lanes import Lanes
from controller.lifecycle import machine
from controller.observability.metrics import Recorder
from controller.reconciler import FINALIZER, JobRef, Reconciler, _drop, parse_status

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SPEC: dict[str, Any] = {
    "task": {"image": "nvcr.io/nvidia/tao/tao-toolkit:6-pyt", "networkArch": "a", "action": "train"},
    "instance": {"ephemeral": {}},
    "data": {"resultsUri": "s3://bucket/out"},
    "credentials": {"ngcApiKey": {"name": "ngc"}, "s3": {"name": "s3"}},
}
SPEC["task"]["specContent"] = "a: 1\n"
SECRETS = {
    "ngc": {"NGC_API_KEY": b"nvapi-x", "OTHER_TEAM_TOKEN": b"y"},
    "s3": {"AWS_ACCESS_KEY_ID": b"AK", "AWS_SECRET_ACCESS_KEY": b"SK"},
}


class Brev:
    """Brev as a list of instances; records the calls that change it."""

    def __init__(self, *instances: Instance, create_delay: float = 0.0) -> None:
        self.instances = list(instances)
        self.creates: list[str] = []
        self.deletes: list[str] = []
        self.create_delay = create_delay
        self.create_started: asyncio.Event | None = None
        self.who = "alice"
        self.commands: list[str] = []

    async def identity(self) -> str:
        return self.who

    async def list_instances(self) -> Sequence[Instance]:
        return list(self.instances)

    async def create_instance(self, request: CreateRequest) -> CreateResult:
        if self.create_started is not None:
            self.create_started.set()
        await asyncio.sleep(self.create_delay)
        self.creates.append(request.name)
        self.instances.append(Instance(name=request.name, id="i-new", status="DEPLOYING"))
        return CreateResult(name=request.name, adopted=False)

    async def ssh_exec(
        self,
        instance: str,
        command: str,
        *,
        timeout: float,  # noqa: ASYNC109
        own_connection: bool = False,
    ) -> ExecResult:
        self.commands.append(command)
        return ExecResult(exit_code=0, stdout="")

    async def delete_instance(self, name: str) -> None:
        self.deletes.append(name)
        if not any(name in (i.id, i.name) for i in self.instances):
            raise InstanceNotFound(f"instance {name} does not exist")
        self.instances = [i for i in self.instances if name not in (i.id, i.name)]


class Kube:
    def __init__(self, *, gone: bool = False, patch_error: Exception | None = None) -> None:
        self.gone = gone
        self.patch_error = patch_error
        self.secret_error: Exception | None = None
        self.patches: list[dict[str, Any]] = []

    async def read_secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        if self.secret_error is not None:
            raise self.secret_error
        return SECRETS.get(name)

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        if self.patch_error is not None:
            raise self.patch_error
        if self.gone:
            return False
        self.patches.append(dict(status))
        return True


class Events:
    def __init__(self) -> None:
        self.notes: list[tuple[str, str, str]] = []

    def __call__(self, ref: JobRef, type_: str, reason: str, message: str) -> None:
        self.notes.append((type_, reason, message))


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def reconciler(
    brev: Brev, kube: Kube, events: Events | None = None, clock: Clock | None = None, notifier: Any = None
) -> Reconciler:
    directory = InstanceDirectory(brev)  # type: ignore[arg-type]
    return Reconciler(
        kube=kube,  # type: ignore[arg-type]
        directory=directory,
        runner=ActionRunner(brev, directory, lanes=Lanes.uniform(2)),  # type: ignore[arg-type]
        recorder=Recorder(CollectorRegistry()),
        events=events or Events(),
        tunables=machine.Tunables(),
        decide=machine.decide,
        listing_max_age=0.0,
        clock=clock or Clock(),
        notifier=notifier,
    )


def ref(status: Mapping[str, Any], *, spec: Mapping[str, Any] = SPEC, deleting: bool = False) -> JobRef:
    return JobRef(
        namespace="ns", name="job", uid="uid-1", generation=1, spec=spec, status=status, deleting=deleting
    )


def provisioning(**instance: Any) -> dict[str, Any]:
    """A stored Provisioning status: attempt 1 on the job's own tbj-ns-job-1, with `instance`
    fields (camelCase, as stored) in its instance record."""
    return {
        "phase": "Provisioning",
        "phaseTimes": {"Pending": "2026-11-29T12:00:00Z", "Provisioning": "2026-11-29T12:00:00Z"},
        "jobId": "job-1",
        "attempts": [{"attempt": 1, "instance": {"name": "tbj-ns-job-1", "created": True, **instance}}],
    }


PROVISIONING = provisioning()


def test_a_404_on_the_status_patch_stops_the_pass_before_any_brev_call() -> None:
    brev = Brev()
    delay = asyncio.run(reconciler(brev, Kube(gone=True)).reconcile(ref(PROVISIONING)))
    assert delay is None
    assert brev.creates == []


def test_a_transient_api_error_backs_off_instead_of_crashing_the_daemon() -> None:
    kube = Kube(patch_error=TransientError("API server unavailable", reason="KubeApiUnavailable"))
    rec = reconciler(Brev(), kube)
    delays = [asyncio.run(rec.reconcile(ref(PROVISIONING))) for _ in range(3)]
    assert delays == [2.0, 4.0, 8.0]


def test_the_merge_patch_clears_fields_with_explicit_nulls() -> None:
    kube = Kube()
    rec = reconciler(Brev(), kube)
    failing = {
        **provisioning(createRequestedAt="2026-11-29T11:00:00Z"),
        "reason": "BrevUnavailable",
        "retries": 2,
    }
    asyncio.run(rec.reconcile(ref(failing)))
    # The create succeeded (evidence of recovery): the transient reason goes, as an explicit null.
    assert any(p.get("reason", "absent") is None for p in kube.patches)


def test_a_missing_secret_key_is_named_without_listing_the_other_keys() -> None:
    kube = Kube()
    spec = {**SPEC, "credentials": {"ngcApiKey": {"name": "ngc", "key": "NGC_KEY"}, "s3": {"name": "s3"}}}
    asyncio.run(reconciler(Brev(), kube).reconcile(ref(PROVISIONING, spec=spec)))
    text = repr(kube.patches)
    assert "NGC_KEY" in text
    assert "OTHER_TEAM_TOKEN" not in text
    assert "NGC_API_KEY" not in text


def test_a_forbidden_secret_read_says_how_to_fix_rbac_and_backs_off() -> None:
    kube = Kube()
    kube.secret_error = TransientError("403 Forbidden reading Secret ns/ngc", reason="SecretAccessDenied")
    events = Events()
    delay = asyncio.run(reconciler(Brev(), kube, events).reconcile(ref(PROVISIONING)))
    assert delay == 2.0
    last = kube.patches[-1]
    assert last["reason"] == "SecretAccessDenied"
    assert "RoleBinding" in last["message"]
    assert ("Warning", "SecretAccessDenied") in [(t, r) for t, r, _ in events.notes]


def test_an_unparseable_spec_stalls_and_a_delete_still_removes_the_instance_by_id() -> None:
    running = {
        **provisioning(id="i-7", identity="alice", createRequestedAt="2026-11-29T12:00:00Z"),
        "phase": "Running",
        "phaseTimes": {
            **PROVISIONING["phaseTimes"],
            "Pulling": "2026-11-29T12:00:00Z",
            "Running": "2026-11-29T12:00:00Z",
        },
    }
    newer = {**SPEC, "task": {**SPEC["task"], "priority": "high"}}  # a field from a newer CRD
    brev = Brev(Instance(name="tbj-ns-job-1", id="i-7", status=RUNNING))
    kube = Kube()
    clock = Clock()
    rec = reconciler(brev, kube, clock=clock)
    assert asyncio.run(rec.reconcile(ref(running, spec=newer))) == machine.Tunables().backoff_max
    stalled = kube.patches[-1]
    assert stalled["stalledReason"] == reasons.INVALID_SPEC
    assert "spec.task.priority" in stalled["stalledMessage"]
    assert "finishedAt" not in stalled
    assert brev.deletes == []
    for _ in range(10):
        clock.advance(10)
        if asyncio.run(rec.reconcile(ref(kube.patches[-1], spec=newer, deleting=True))) is None:
            break
    assert brev.deletes[0] == "i-7"
    assert kube.patches[-1]["finishedAt"]


def test_job_ref_reads_whether_our_finalizer_is_on_the_object() -> None:
    meta = {"namespace": "ns", "name": "job", "uid": "u"}
    assert JobRef.from_body({"metadata": {**meta, "finalizers": [FINALIZER]}}).has_finalizer
    assert not JobRef.from_body({"metadata": meta}).has_finalizer


def test_cancelling_a_pass_does_not_kill_an_in_flight_create() -> None:
    brev = Brev(create_delay=0.05)
    rec = reconciler(brev, Kube())

    async def scenario() -> None:
        brev.create_started = asyncio.Event()
        task = asyncio.create_task(rec.reconcile(ref(PROVISIONING)))
        await brev.create_started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.gather(*rec._runner._creating.values())  # the create finishes on its own

    asyncio.run(scenario())
    assert brev.creates == ["tbj-ns-job-1"]


def test_an_unreadable_status_field_is_dropped_instead_of_wedging_the_job() -> None:
    status = parse_status({**provisioning(id="i-1", createRequestedAt="yesterday"), "retries": -3})
    assert status.phase == "Provisioning"
    assert status.retries == 0
    # Only the unreadable field goes: the attempt's instance (name, id, ownership) is kept.
    assert status.instance.name == "tbj-ns-job-1"
    assert status.instance.id == "i-1"
    assert status.instance.created is True
    assert status.instance.create_requested_at is None


def test_an_unreadable_field_of_a_flat_status_from_the_previous_release_is_dropped_too() -> None:
    # The error points into the sub-record shape (attempts.0.instance...), which the stored flat
    # dict does not have: the field is found after the conversion, not in the raw keys.
    status = parse_status(
        {
            "phase": "Provisioning",
            "instanceName": "tbj-ns-job-1",
            "instanceId": "i-1",
            "instanceCreated": True,
            "retries": -3,
            "createRequestedAt": "yesterday",
        }
    )
    assert status.retries == 0
    assert (status.instance.name, status.instance.id, status.instance.created) == (
        "tbj-ns-job-1",
        "i-1",
        True,
    )
    assert status.instance.create_requested_at is None


def test_one_unreadable_attempt_keeps_the_others() -> None:
    status = parse_status(
        {
            "phase": "Provisioning",
            "attempts": [
                {"attempt": 1, "instance": {"name": "a", "id": "i-1", "deletedAt": "2026-01-01T00:00:00Z"}},
                {"attempt": 2, "instance": {"name": "a-a2", "id": "i-2", "createRequestedAt": "soon"}},
            ],
        }
    )
    assert [a.instance.id for a in status.attempts] == ["i-1", "i-2"]
    assert status.attempts[0].instance.deleted_at is not None


def test_a_status_field_of_the_wrong_type_is_dropped_whole_and_a_missing_holder_is_refused() -> None:
    status = parse_status({"phase": "Running", "attempts": "not a list", "queue": ["nor", "this"]})
    assert status.phase == "Running" and status.attempts == [] and status.queue.admitted_at is None
    # Nothing along the path: nothing to drop (the error is raised, not looped on).
    assert _drop({"a": 1}, ("b", "c")) is False
    holder = {"a": {"b": 1}}
    assert _drop(holder, ("a", "missing")) is True and holder == {}


def waiting_exec(since: datetime) -> dict[str, Any]:
    at = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        **provisioning(id="i-1", createRequestedAt=at),
        "phase": "WaitingExec",
        "phaseTimes": {"Pending": at, "Provisioning": at, "WaitingExec": at},
    }


def _typed() -> tuple[int, int]:
    """Live (statuses, specs) as pydantic objects."""
    gc.collect()
    objects = gc.get_objects()
    return (
        sum(1 for o in objects if isinstance(o, TaoBrevJobStatus)),
        sum(1 for o in objects if isinstance(o, TaoBrevJobSpec)),
    )


def test_a_waiting_pass_holds_no_typed_status_or_spec() -> None:
    # Issue 11: a running job spends its life inside a pass (the blocking exit wait). A typed
    # status is ~16 KiB of pydantic objects and a parsed spec ~10 KiB: held by 1,000 waiting jobs,
    # 26 MiB. Between passes the reconciler keeps the written status pickled; across an action
    # the pass keeps neither.
    gate = asyncio.Event()
    blocked = asyncio.Event()

    class SlowProbe(Brev):
        async def ssh_exec(
            self,
            instance: str,
            command: str,
            *,
            timeout: float,  # noqa: ASYNC109
            own_connection: bool = False,
        ) -> ExecResult:
            self.commands.append(command)
            if len(self.commands) > 1:  # the second pass's probe hangs until released
                blocked.set()
                await gate.wait()
            return ExecResult(exit_code=255, stdout="")

    brev = SlowProbe(Instance(name="tbj-ns-job-1", id="i-1", status=RUNNING))
    kube = Kube()
    clock = Clock()
    clock.now = datetime.now(UTC)  # the action runner's deadlines are on the real clock
    rec = reconciler(brev, kube, clock=clock)
    status = waiting_exec(clock.now)

    async def scenario() -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        # Relative counts: other tests' module-level objects may be alive in this process.
        before = _typed()
        await rec.reconcile(ref(status))  # probe refused: the message changes, written
        written = len(kube.patches)
        assert written >= 1
        between = _typed()
        task = asyncio.create_task(rec.reconcile(ref(status)))
        await blocked.wait()
        during = _typed()
        gate.set()
        await task
        assert len(kube.patches) == written, "the second pass changed nothing"
        return before, between, during

    before, between, during = asyncio.run(scenario())
    assert between == before, "between passes: the written status is kept pickled, not typed"
    assert during == before, "no typed status or spec while the pass waits in its action"


def test_the_status_kept_between_passes_is_the_written_one_exactly() -> None:
    """The next pass starts from the status as this process wrote it, to the microsecond (the
    watch may not have delivered it yet; the API's copy has whole seconds)."""
    brev = Brev(Instance(name="tbj-ns-job-1", id="i-1", status=RUNNING))
    kube = Kube()
    clock = Clock()
    clock.now = datetime(2026, 12, 1, 12, 0, 0, 250_000, tzinfo=UTC)
    rec = reconciler(brev, kube, clock=clock)
    job = ref(waiting_exec(clock.now))
    asyncio.run(rec.reconcile(job))
    kept = rec._status(job)
    assert kept.phase_times["WaitingExec"].second == 0
    assert kept.conditions and all(c.last_transition_time is not None for c in kept.conditions)
    assert any(c.last_transition_time == clock.now for c in kept.conditions), kept.conditions


def test_the_billing_gauge_is_exact_between_the_stored_steps() -> None:
    """The stored billedSeconds moves in long steps (a status write each); the gauge every pass."""
    registry = CollectorRegistry()
    brev = Brev(Instance(name="tbj-ns-job-1", id="i-7", status="DEPLOYING"))
    kube, clock = Kube(), Clock()
    rec = reconciler(brev, kube, clock=clock)
    rec._recorder = Recorder(registry)
    status = provisioning(identity="alice", createRequestedAt="2026-11-29T11:59:00Z")

    def gauge() -> float | None:
        return registry.get_sample_value("taobrev_job_billed_seconds", {"namespace": "ns", "name": "job"})

    asyncio.run(rec.reconcile(ref(status)))
    assert kube.patches[-1]["billedSeconds"] == 60
    assert gauge() == 60.0
    clock.advance(100)
    asyncio.run(rec.reconcile(ref(kube.patches[-1])))
    assert len(kube.patches) == 1  # nothing changed but the clock: no write
    assert gauge() == 160.0


class Observed:
    """The notifier's side of a pass: what `observe` was handed."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, str | None]] = []

    def observe(self, namespace: str, name: str, uid: str, *, stored: Any, status: Any, spec: Any) -> None:
        self.calls.append((stored, str(status.phase)))

    def forget(self, uid: str) -> None:
        pass


def test_passes_hand_each_written_status_to_the_notifier_and_never_write_its_record() -> None:
    """status.notifications is the notifier's alone: the reconciler's merge patches neither send
    nor null it (a stale copy would undo a confirmation), and the notifier gets the stored one."""
    kube = Kube()
    seen = Observed()
    rec = reconciler(Brev(), kube, notifier=seen)
    stored = {"sinks": [{"notifier": "ops", "delivered": ["admitted"]}]}
    asyncio.run(rec.reconcile(ref({**provisioning(reason="BrevUnavailable"), "notifications": stored})))
    assert kube.patches, "the pass wrote its status"
    assert all("notifications" not in p for p in kube.patches)
    assert seen.calls and all(call == (stored, "Provisioning") for call in seen.calls[:1])


def test_a_pass_whose_term_ended_writes_no_status_and_sends_no_change_to_brev() -> None:
    """The term's fence (the runner's, the elector's is_leading in the app) is asked when a patch
    or a change leaves: a pass that decided before its loop stalled past the renew deadline ends
    as one cancelled by the end of its term (NotLeading), with nothing written or created."""
    brev, kube = Brev(), Kube()
    rec = reconciler(brev, kube)
    rec._runner.fence = lambda: False
    with pytest.raises(NotLeading):
        asyncio.run(rec.reconcile(ref({})))
    assert kube.patches == []
    assert brev.creates == []
