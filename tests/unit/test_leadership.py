"""Leader election logic (controller/fleet/leadership.py) with a fake clock and an in-memory Lease store
that enforces resourceVersion preconditions like the API server. No I/O, no sleeps."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kopf
import pytest
import structlog
import yaml
from prometheus_client import CollectorRegistry

from controller.api.errors import NotLeading
from controller.fleet.leadership import (
    FAILURES_PER_WARNING,
    KubeLeaseStore,
    LeaderElector,
    LeaseConflict,
    LeaseRecord,
    SoleLeader,
    identity,
    lead_or_stop,
)
from controller.lifecycle.tunables import Timing
from controller.observability.health import Watchdog
from controller.observability.metrics import Recorder
from controller.reconciler import FINALIZER, JobRef
from controller.settings import Settings
from tests.unit.kopf_handlers import drive, teardown


def in_loop(scenario: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async scenario in a fresh event loop (the suite has no asyncio plugin)."""

    def test() -> None:
        asyncio.run(scenario())

    return test


RBAC = Path(__file__).resolve().parents[2] / "deploy" / "base" / "rbac.yaml"
LEADER_ROLE = "taobrev-operator-leader-election"
TIMING = Timing(lease_duration=15, renew_deadline=10.0, retry_period=2.0)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def wall(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=self.t)


class FakeStore:
    """One Lease; writes need the current resourceVersion (409 -> LeaseConflict), as in the API."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.writes: list[LeaseRecord] = []
        self.fail: Exception | None = None
        self.before_write: Callable[[], None] | None = None  # a concurrent writer sneaks in here

    def _bump(self, record: LeaseRecord) -> LeaseRecord:
        self.version += 1
        self.record = replace(record, resource_version=str(self.version))
        self.writes.append(self.record)
        return self.record

    async def get(self) -> LeaseRecord | None:
        if self.fail is not None:
            raise self.fail
        return self.record

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        if self.before_write is not None:
            self.before_write()
        if self.record is not None:
            raise LeaseConflict("exists")
        return self._bump(record)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        if self.fail is not None:
            raise self.fail
        if self.before_write is not None:
            hook, self.before_write = self.before_write, None
            hook()
        if self.record is None or record.resource_version != self.record.resource_version:
            raise LeaseConflict("stale resourceVersion")
        return self._bump(record)


def elector(store: FakeStore, clock: Clock, name: str, changes: list[bool] | None = None) -> LeaderElector:
    return LeaderElector(
        store,
        name,
        TIMING,
        clock=clock,
        now=clock.wall,
        on_change=None if changes is None else changes.append,
    )


@in_loop
async def test_first_replica_creates_the_lease_and_leads() -> None:
    store, clock = FakeStore(), Clock()
    changes: list[bool] = []
    a = elector(store, clock, "a", changes)
    assert not a.is_leading()
    assert await a.tick()
    assert a.is_leading()
    assert changes == [True]
    assert store.record is not None
    assert store.record.holder == "a"
    assert store.record.duration_seconds == 15
    assert store.record.transitions == 0
    assert store.record.acquire_time == clock.wall()


@in_loop
async def test_standby_does_not_take_a_lease_that_keeps_being_renewed() -> None:
    store, clock = FakeStore(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    await a.tick()
    for _ in range(30):  # 60 s: four lease durations
        assert not await b.tick()
        clock.t += TIMING.retry_period
        assert await a.tick()
    assert a.is_leading()
    assert not b.is_leading()
    assert store.record is not None
    assert store.record.holder == "a"


@in_loop
async def test_standby_takes_over_only_once_the_lease_expired_on_its_own_clock() -> None:
    store, clock = FakeStore(), Clock()
    changes: list[bool] = []
    a, b = elector(store, clock, "a"), elector(store, clock, "b", changes)
    await a.tick()
    clock.t += 1
    assert not await b.tick()  # b first SEES the record now: expiry counts from here
    clock.t += TIMING.lease_duration - 0.5
    assert not await b.tick(), "still within leaseDuration of b's observation"
    clock.t += 0.5
    assert await b.tick()
    assert changes == [True]
    assert store.record is not None
    assert store.record.holder == "b"
    assert store.record.transitions == 1
    assert store.record.acquire_time == clock.wall()


@in_loop
async def test_expiry_counts_from_the_last_change_the_standby_saw() -> None:
    store, clock = FakeStore(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    await a.tick()
    assert not await b.tick()
    for _ in range(7):  # a renews for 14 s while b does not look
        clock.t += 2
        await a.tick()
    clock.t += 1
    assert not await b.tick(), "b sees a changed record at t=15: a fresh 15 s start"
    clock.t += 14
    assert not await b.tick()
    clock.t += 1
    assert await b.tick()


@in_loop
async def test_a_write_that_loses_the_optimistic_concurrency_race_does_not_lead() -> None:
    store, clock = FakeStore(), Clock()
    changes: list[bool] = []
    dead, b = elector(store, clock, "dead"), elector(store, clock, "b", changes)
    await dead.tick()
    await b.tick()
    clock.t += TIMING.lease_duration

    def other_replica_wins() -> None:
        assert store.record is not None
        store._bump(replace(store.record, holder="c", renew_time=clock.wall()))

    store.before_write = other_replica_wins
    assert not await b.tick()
    assert changes == []
    assert store.record is not None
    assert store.record.holder == "c"


@in_loop
async def test_leader_that_cannot_renew_stops_at_the_renew_deadline_and_not_before() -> None:
    store, clock = FakeStore(), Clock()
    changes: list[bool] = []
    a = elector(store, clock, "a", changes)
    await a.tick()
    store.fail = OSError("connection refused")
    clock.t += TIMING.renew_deadline - 0.1
    assert await a.tick(), "failed renewals within the deadline keep leadership"
    clock.t += 0.1
    assert not await a.tick()
    assert changes == [True, False]


@in_loop
async def test_a_run_of_failed_lease_requests_is_warned_once_a_minute_not_at_every_retry() -> None:
    store, clock = FakeStore(), Clock()
    b = elector(store, clock, "b")
    store.fail = OSError("connection refused")
    with structlog.testing.capture_logs() as logged:
        for _ in range(FAILURES_PER_WARNING + 1):  # a standby cut off for ~a minute
            await b.tick()
            clock.t += TIMING.retry_period
        store.fail = None
        await b.tick()
    warned = [e["failed_in_a_row"] for e in logged if e["log_level"] == "warning"]
    assert warned == [1, FAILURES_PER_WARNING + 1]
    answered = [e for e in logged if e["event"] == "leader lease requests answered again"]
    assert [(e["log_level"], e["failed"]) for e in answered] == [("info", FAILURES_PER_WARNING + 1)]


@in_loop
async def test_leadership_ends_at_the_deadline_even_if_the_election_loop_is_stuck() -> None:
    store, clock = FakeStore(), Clock()
    a = elector(store, clock, "a")
    await a.tick()
    clock.t += TIMING.renew_deadline
    assert not a.is_leading(), "no tick ran, yet the expired term no longer counts"


@in_loop
async def test_waiting_out_a_term_past_its_deadline_yields_to_the_election_loop() -> None:
    # The term is past its renew deadline and run() has not ended it yet (a starved loop). The
    # loops that go wait_leading -> NotLeading -> wait_leading (sweeper, node cost feed) spun
    # here without yielding, so run() never got the loop back: the replica froze (failover
    # bench at 1,000 running, c111333). wait_leading must wait, not return at once.
    store, clock = FakeStore(), Clock()
    a = elector(store, clock, "a")
    await a.tick()
    clock.t += TIMING.renew_deadline
    assert not a.is_leading()
    waiter = asyncio.ensure_future(a.wait_leading())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not waiter.done(), "returned while not leading"
    loops = 0
    while not waiter.done():  # the election loop gets its turns: it ends the term, then re-takes it
        loops += 1
        assert loops < 10, "the waiter never saw the new term"
        await a.tick()
        for _ in range(5):
            await asyncio.sleep(0)
    assert waiter.result() is True
    assert a.is_leading()
    clock.t += TIMING.renew_deadline
    assert await a.wait_leading(timeout=0.01) is False  # bounded by its timeout meanwhile


@in_loop
async def test_leader_seeing_another_holder_stops_at_once() -> None:
    store, clock = FakeStore(), Clock()
    changes: list[bool] = []
    a = elector(store, clock, "a", changes)
    await a.tick()
    assert store.record is not None
    store._bump(replace(store.record, holder="intruder", renew_time=clock.wall()))
    clock.t += TIMING.retry_period
    assert not await a.tick()
    assert changes == [True, False]


@in_loop
async def test_loss_cancels_the_pass_running_in_the_term() -> None:
    store, clock = FakeStore(), Clock()
    a = elector(store, clock, "a")
    await a.tick()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def long_pass() -> float:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 1.0

    running = asyncio.ensure_future(a.while_leading(long_pass()))
    await started.wait()
    store.fail = OSError("apiserver gone")
    clock.t += TIMING.renew_deadline
    await a.tick()
    with pytest.raises(NotLeading):
        await running
    assert cancelled.is_set()


@in_loop
async def test_standby_never_starts_the_work() -> None:
    store, clock = FakeStore(), Clock()
    b = elector(store, clock, "b")
    ran: list[str] = []

    async def act() -> None:
        ran.append("acted")

    with pytest.raises(NotLeading):
        await b.while_leading(act())
    assert ran == []


@in_loop
async def test_work_within_the_term_returns_its_result() -> None:
    store, clock = FakeStore(), Clock()
    a = elector(store, clock, "a")
    await a.tick()

    async def act() -> float:
        return 2.5

    assert await a.while_leading(act()) == 2.5


@in_loop
async def test_release_lets_the_standby_take_over_without_waiting_for_expiry() -> None:
    store, clock = FakeStore(), Clock()
    changes: list[bool] = []
    a, b = elector(store, clock, "a", changes), elector(store, clock, "b")
    await a.tick()
    assert not await b.tick()
    assert await a.release()
    assert changes == [True, False]
    assert not a.is_leading()
    assert store.record is not None
    assert store.record.holder == ""
    assert store.record.duration_seconds == 1
    clock.t += TIMING.retry_period
    assert await b.tick()


@in_loop
async def test_release_writes_nothing_when_the_lease_is_not_ours() -> None:
    store, clock = FakeStore(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    await a.tick()
    await b.tick()
    writes = len(store.writes)
    assert not await b.release()
    assert len(store.writes) == writes


@in_loop
async def test_run_loop_renews_every_retry_period_and_wakes_at_the_deadline() -> None:
    store, clock = FakeStore(), Clock()
    changes: list[bool] = []
    delays: list[float] = []

    class Stop(Exception):
        pass

    async def fake_sleep(seconds: float) -> None:
        delays.append(seconds)
        clock.t += seconds
        if len(delays) == 3:
            store.fail = OSError("partition")  # renewals fail from now on
        if len(delays) == 12:
            raise Stop

    a = LeaderElector(
        store, "a", TIMING, clock=clock, now=clock.wall, sleep=fake_sleep, on_change=changes.append
    )
    with pytest.raises(Stop):
        await a.run()
    assert delays[:3] == [2.0, 2.0, 2.0]
    # Last good renewal at t0+4; tries at +6, +8, +10, +12, then the deadline +14 exactly.
    assert sum(delays[:7]) == 4.0 + TIMING.renew_deadline
    assert changes == [True, False]
    assert not a.is_leading()


@in_loop
async def test_sole_leader_always_acts() -> None:
    sole = SoleLeader()

    async def act() -> int:
        return 7

    assert sole.is_leading()
    assert await sole.wait_leading(0)
    assert await sole.while_leading(act()) == 7


def test_identity_is_the_pod_name_with_a_random_suffix() -> None:
    one, two = identity("op-abc"), identity("op-abc")
    assert one.startswith("op-abc_")
    assert one != two


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"TAOBREV_LEADER_LEASE_DURATION": "10"}, "TAOBREV_LEADER_LEASE_DURATION (10) must be greater"),
        ({"TAOBREV_LEADER_RETRY_PERIOD": "9"}, "TAOBREV_LEADER_RETRY_PERIOD (9)"),
        ({"TAOBREV_LEADER_LEASE_DURATION": "x"}, "TAOBREV_LEADER_LEASE_DURATION"),
    ],
)
def test_bad_election_timing_fails_start_up_naming_the_setting(env: dict[str, str], needle: str) -> None:
    with pytest.raises(SystemExit) as err:
        Settings.from_env(env)
    assert needle in str(err.value)


def test_election_defaults_are_client_go_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.leader_election
    assert settings.leader_timing() == Timing(15, 10.0, 2.0)


def test_lease_body_carries_the_resource_version_and_micro_times() -> None:
    store = KubeLeaseStore(None, "taobrev-system", "taobrev-operator", 5.0)
    when = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    body = store._body(LeaseRecord("a_1", 15, when, when, 3, resource_version="42"))
    assert body["metadata"]["resourceVersion"] == "42"
    assert body["metadata"]["name"] == "taobrev-operator"
    assert body["spec"]["renewTime"] == "2026-03-04T05:06:07.000000Z"
    assert body["spec"]["holderIdentity"] == "a_1"
    assert body["spec"]["leaseTransitions"] == 3


def test_leader_gauge_follows_leadership() -> None:
    registry = CollectorRegistry()
    recorder = Recorder(registry)
    recorder.leader(True)
    assert registry.get_sample_value("taobrev_leader") == 1
    recorder.leader(False)
    assert registry.get_sample_value("taobrev_leader") == 0


def test_lease_rbac_is_one_named_lease_in_the_operator_namespace() -> None:
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    role = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == LEADER_ROLE)
    assert role["metadata"]["namespace"] == "taobrev-system"
    by_verbs = {tuple(r["verbs"]): r for r in role["rules"]}
    assert set(by_verbs) == {("get", "update"), ("create",)}
    assert by_verbs[("get", "update")]["resourceNames"] == [Settings.from_env({}).leader_lease_name]
    for rule in role["rules"]:
        assert rule["apiGroups"] == ["coordination.k8s.io"]
        assert rule["resources"] == ["leases"]
    lease_grants = [
        d
        for d in docs
        if d["kind"] == "ClusterRole"
        for r in d["rules"]
        if "coordination.k8s.io" in r["apiGroups"]
    ]
    assert lease_grants == [], "no cluster-wide Lease access"


# -- the kopf handlers' gate (controller/handlers.py) with a fake app ------------------------------


class FakeReconciler:
    def __init__(self) -> None:
        self.passes: list[str] = []

    async def reconcile(self, ref: JobRef) -> float | None:
        self.passes.append(ref.name)
        return None  # finished

    def forget(self, ref: JobRef) -> None:
        pass


@dataclass
class FakeApp:
    leadership: LeaderElector
    reconciler: FakeReconciler = field(default_factory=FakeReconciler)
    settings: Settings = field(default_factory=Settings)
    watchdog: Watchdog = field(default_factory=lambda: Watchdog(grace=60, pass_ceiling=600))
    recorder: Any = None
    takeover_pace: Any = None


class StopFlag:
    """kopf.DaemonStopped as drive() uses it, set by the test."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), timeout)


RAW: kopf.RawBody = {
    "metadata": {"namespace": "ns", "name": "job", "uid": "u1", "finalizers": [FINALIZER]},
    "spec": {},
    "status": {},
}
BODY = kopf.Body(RAW)


def standby(store: FakeStore, clock: Clock) -> LeaderElector:
    store.record = LeaseRecord("other", 15, clock.wall(), clock.wall(), 0, resource_version="1")
    return elector(store, clock, "me")


@in_loop
async def test_delete_handler_on_a_standby_keeps_the_finalizer_and_touches_nothing() -> None:
    store, clock = FakeStore(), Clock()
    app = FakeApp(standby(store, clock))
    await app.leadership.tick()
    # Not a wait of a whole lease duration in a unit test: the handler gives up at once.
    app.settings = app.settings.model_copy(update={"leader_lease_duration": 0})
    with pytest.raises(kopf.TemporaryError):
        await teardown(body=BODY, memo=kopf.Memo(app=app))
    assert app.reconciler.passes == []


@in_loop
async def test_daemon_on_a_standby_waits_and_acts_once_it_leads() -> None:
    store, clock = FakeStore(), Clock()
    app = FakeApp(standby(store, clock))
    await app.leadership.tick()
    daemon = asyncio.ensure_future(drive(stopped=StopFlag(), body=BODY, memo=kopf.Memo(app=app)))
    for _ in range(20):
        await asyncio.sleep(0)  # let the daemon run up to its wait
    assert app.reconciler.passes == [], "no pass while standing by"
    assert not daemon.done()
    clock.t += 15  # the other holder's lease expires
    assert await app.leadership.tick()
    await daemon
    assert app.reconciler.passes == ["job"]


class CountingPace:
    """TAOBREV_TAKEOVER_RATE's bucket as drive() uses it: every slot asked, granted when the test
    says."""

    def __init__(self) -> None:
        self.asked = 0
        self.open = asyncio.Event()

    async def slot(self) -> float:
        self.asked += 1
        await self.open.wait()
        return 0.0


@in_loop
async def test_a_new_leaders_first_passes_wait_for_the_takeover_pace() -> None:
    """Every daemon of a standby wakes when it begins to lead: their first passes go through the
    takeover pace (1,000 at once starved the loop past the renew deadline, issue 30); a daemon
    that found its replica leading already (kopf spawned it then) does not wait."""
    store, clock = FakeStore(), Clock()
    app = FakeApp(standby(store, clock))
    app.takeover_pace = pace = CountingPace()
    await app.leadership.tick()
    bodies = [
        kopf.Body({**RAW, "metadata": {**RAW["metadata"], "uid": f"u{i}", "name": f"j{i}"}}) for i in range(3)
    ]
    daemons = [
        asyncio.ensure_future(drive(stopped=StopFlag(), body=b, memo=kopf.Memo(app=app))) for b in bodies
    ]
    for _ in range(20):
        await asyncio.sleep(0)
    clock.t += 15
    assert await app.leadership.tick()
    for _ in range(20):
        await asyncio.sleep(0)
    assert pace.asked == 3 and app.reconciler.passes == [], "no first pass before its slot"
    pace.open.set()
    await asyncio.gather(*daemons)
    assert sorted(app.reconciler.passes) == ["j0", "j1", "j2"]
    late = kopf.Body({**RAW, "metadata": {**RAW["metadata"], "uid": "u9", "name": "late"}})
    await drive(stopped=StopFlag(), body=late, memo=kopf.Memo(app=app))
    assert pace.asked == 3 and app.reconciler.passes[-1] == "late"


@in_loop
async def test_a_standby_daemon_wakes_for_nothing_and_ends_when_stopped() -> None:
    """No periodic wake-up per job on a standby (it used to re-check every second): only its
    Lease or kopf's stop wakes it, and a stop ends it without a pass."""
    store, clock = FakeStore(), Clock()
    app = FakeApp(standby(store, clock))
    await app.leadership.tick()
    waits: list[float | None] = []
    real_wait = app.leadership.wait_leading

    async def counted(timeout: float | None = None) -> bool:  # noqa: ASYNC109
        waits.append(timeout)
        return await real_wait(timeout)

    app.leadership.wait_leading = counted  # type: ignore[method-assign]
    stopped = StopFlag()
    daemon = asyncio.ensure_future(drive(stopped=stopped, body=BODY, memo=kopf.Memo(app=app)))
    for _ in range(20):
        await asyncio.sleep(0)
    assert waits == [None], "one unbounded wait, no polling"
    stopped.event.set()
    await asyncio.wait_for(daemon, 1)
    assert app.reconciler.passes == []


@in_loop
async def test_lead_or_stop_says_who_came_first() -> None:
    store, clock = FakeStore(), Clock()
    leader = elector(store, clock, "me")
    assert await leader.tick()
    assert await lead_or_stop(leader, asyncio.Event().wait) is True  # leading: no wait at all
    other = standby(FakeStore(), clock)
    await other.tick()
    stop = asyncio.Event()
    stop.set()
    assert await lead_or_stop(other, stop.wait) is False


@in_loop
async def test_a_term_that_retakes_its_own_lease_is_resumed_and_one_after_another_leader_is_not() -> None:
    """`resumed` tells the app whether this replica's memory of the jobs is current: nobody led
    between its last renewal and the new term (the Lease still named it), or somebody did."""
    store, clock = FakeStore(), Clock()
    me, other = elector(store, clock, "me"), elector(store, clock, "other")
    assert await me.tick()
    assert me.resumed is False  # a first term: nothing to resume
    store.fail = TimeoutError("cut off")
    clock.t += TIMING.renew_deadline + 1
    assert not await me.tick()  # the renew deadline passed: the term ends
    store.fail = None
    assert await me.tick()  # the Lease still names "me": nobody took it in between
    assert me.resumed is True

    store.fail = TimeoutError("cut off")
    clock.t += TIMING.renew_deadline + 1
    assert not await me.tick()
    store.fail = None
    assert not await other.tick()  # the other replica sees the Lease held ...
    clock.t += TIMING.lease_duration + 1
    assert await other.tick()  # ... takes it once expired ...
    await other.release()
    assert await me.tick()  # ... and lets it go: "me" leads again, but after someone else
    assert me.resumed is False
