"""Issue 25, scenario 1: a create outlives its job.

A `brev create` queued in the create lane was shielded from its pass's cancellation with the rest
of the call, so it started after the job was deleted (or the Lease moved); and teardown concluded
absence `create_settle` after the create was sent although the CLI allows a create far longer
than that. Here: the real Reconciler and ActionRunner over real lanes (a queued create whose pass
is cancelled never starts; a started one is awaited by the job's next pass), and the pure machine
(no `brev delete`, whose "not found" would be taken as proof, while a create may be in flight).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry

from controller.api.vocabulary import Outcome
from controller.brev.cli import BrevTimeouts
from controller.brev.client import CreateRequest
from controller.effects.actions import CREATE_LANE_WAIT, ActionRunner, JobContext
from controller.effects.directory import InstanceDirectory
from controller.effects.lanes import Lane, Lanes
from controller.lifecycle import machine
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import CreateInstance, DeleteInstance, Observation
from controller.observability.metrics import Recorder
from controller.reconciler import Reconciler
from tests.component.test_lanes import GUARD_S, HangingBrev
from tests.fixtures.polling import until_async
from tests.unit.test_actions_secrets import SECRETS, _spec
from tests.unit.test_machine import INST, T0, TUN, at, decide
from tests.unit.test_reconciler import Clock, Events, Kube


def _world() -> tuple[HangingBrev, Lanes, Reconciler]:
    brev = HangingBrev()
    lanes = Lanes.uniform(1)
    directory = InstanceDirectory(brev)
    rec = Reconciler(
        kube=Kube(),  # type: ignore[arg-type]
        directory=directory,
        runner=ActionRunner(brev, directory, lanes=lanes),
        recorder=Recorder(CollectorRegistry()),
        events=Events(),
        tunables=machine.Tunables(),
        decide=machine.decide,
        listing_max_age=0.0,
        clock=Clock(),
    )
    return brev, lanes, rec


def _job() -> JobContext:
    return JobContext("ns", "job", "job-1", _spec(), SECRETS)


def test_a_create_queued_in_a_full_lane_never_starts_once_its_pass_is_cancelled() -> None:
    async def scenario() -> None:
        brev, lanes, rec = _world()
        freed = asyncio.Event()

        async def occupy() -> None:  # another job's create holds the lane's only slot
            async with lanes.hold(Lane.CREATE):
                await freed.wait()

        other = asyncio.ensure_future(occupy())
        await until_async(lambda: lanes.gate(Lane.CREATE).in_flight == 1, "a create in flight")
        create = CreateInstance(CreateRequest(name="tbj-queued"))
        decided = Observation(now=datetime.now(UTC))  # the lanes measure their wait on the wall clock
        act = asyncio.ensure_future(rec._act([create], _job(), decided, None))
        await until_async(lambda: lanes.gate(Lane.CREATE).waiting == 1, "a queued create")
        act.cancel()  # the job was deleted (kopf cancels the daemon) or the Lease moved
        await asyncio.gather(act, return_exceptions=True)
        freed.set()
        await asyncio.wait_for(other, GUARD_S)
        for _ in range(100):
            await asyncio.sleep(0)
        assert brev.creates == []
        assert lanes.gate(Lane.CREATE).waiting == 0
        assert lanes.gate(Lane.CREATE).in_flight == 0

    asyncio.run(scenario())


def test_teardown_sends_no_delete_while_a_create_that_never_came_back_may_be_in_flight() -> None:
    # The create was sent at T0 and its call never came back to this status (the pass was
    # cancelled, or the process that sent it lost the Lease or crashed). A `brev delete` answering
    # "not found" now would be taken as proof, and the create may still land.
    status = at(Phase.DELETED, outcome=Outcome.CANCELED, create_requested_at=T0, brev_identity="alice")
    past_settle = T0 + timedelta(seconds=TUN.create_settle + 1)
    d = decide(status, instance=None, identity="alice", now=past_settle)
    assert d.actions == ()
    assert d.status.finished_at is None
    assert "never created" in (d.status.teardown.message or "")
    # Past the longest a create can be in flight, plus the settle time: absence can be proven.
    late = T0 + timedelta(seconds=TUN.create_in_flight_max + TUN.create_settle + 1)
    d = decide(status, instance=None, identity="alice", now=late)
    (delete,) = d.actions
    assert isinstance(delete, DeleteInstance)
    assert delete.name == INST


def test_the_in_flight_bound_covers_the_lane_wait_and_the_cli_create_timeout() -> None:
    # The stated bound (README, teardown) must follow the settings it is derived from.
    t = BrevTimeouts()
    longest = CREATE_LANE_WAIT + t.create_default_wait + t.create_margin
    assert machine.Tunables().create_in_flight_max >= longest
