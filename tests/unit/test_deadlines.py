"""Remaining phase deadlines (issue 11.1): which deadline a pass hands its actions, that only the
budgeted lanes get it (a spent budget never blocks a stop, cleanup or delete), that the per-call
timeout is min(own, time left), and that a probe or pull that succeeded counts even when it came
back after the phase deadline (the result is looked at before the timeout)."""

from __future__ import annotations

import asyncio
import typing
from datetime import UTC, datetime, timedelta

import pytest

from controller.api.vocabulary import Outcome
from controller.effects.actions import ACTION_LANES, ActionRunner, JobContext, lane_of
from controller.effects.directory import InstanceDirectory
from controller.effects.lanes import BUDGETED, LANES, Lane, Lanes
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import (
    Action,
    CleanupWorkload,
    DeleteInstance,
    Observation,
    PrepareWorkload,
    ProbeExec,
    StopContainer,
)
from controller.reconciler import _deadline
from tests.unit.fake_exec import FakeClient, healthy_answer
from tests.unit.test_actions_secrets import SECRETS, _spec
from tests.unit.test_machine import EPHEMERAL, T0, at, decide, running

NOW = T0 + timedelta(seconds=100)
PROBE_TIMEOUT = 900.0


# --- which deadline a pass hands its actions (reconciler._deadline) ------------------------------


def test_waiting_exec_and_pulling_get_the_end_of_their_phase() -> None:
    # spec(): waitingExecSeconds 600; pullingSeconds is the model default 3600.
    assert _deadline(EPHEMERAL, at(Phase.WAITING_EXEC), NOW) == T0 + timedelta(seconds=600)
    assert _deadline(EPHEMERAL, at(Phase.PULLING), NOW) == T0 + timedelta(seconds=3600)


def test_a_spent_budget_is_passed_as_it_is_not_stretched() -> None:
    late = T0 + timedelta(seconds=5000)
    assert _deadline(EPHEMERAL, at(Phase.WAITING_EXEC), late) == T0 + timedelta(seconds=600)


def test_the_first_upload_attempt_gets_the_whole_uploading_budget_even_after_downtime() -> None:
    # uploadingSeconds 600; the operator was down for an hour after the phase began.
    back = T0 + timedelta(seconds=3600)
    status = at(Phase.UPLOADING, outcome=Outcome.SUCCEEDED)
    assert _deadline(EPHEMERAL, status, back) == back + timedelta(seconds=600)
    # Without downtime it is simply the end of the phase.
    assert _deadline(EPHEMERAL, status, T0) == T0 + timedelta(seconds=600)


def test_a_later_upload_attempt_gets_what_is_left_of_the_phase() -> None:
    status = at(Phase.UPLOADING, outcome=Outcome.SUCCEEDED, upload_attempts=1)
    assert _deadline(EPHEMERAL, status, NOW) == T0 + timedelta(seconds=600)


@pytest.mark.parametrize("phase", [Phase.PROVISIONING, Phase.RUNNING, Phase.DELETED])
def test_phases_whose_calls_keep_their_own_bounds_get_no_deadline(phase: Phase) -> None:
    assert _deadline(EPHEMERAL, at(phase), NOW) is None


def test_after_the_run_ended_in_a_pre_run_phase_only_teardown_is_left() -> None:
    status = at(Phase.WAITING_EXEC, outcome=Outcome.CANCELED)
    assert _deadline(EPHEMERAL, status, NOW) is None


def test_without_a_spec_there_is_no_budget() -> None:
    assert _deadline(None, at(Phase.PULLING), NOW) is None


# --- the result before the timeout (run_phases) ---------------------------------------------------


def test_a_probe_that_succeeded_after_the_deadline_still_moves_on_to_pulling() -> None:
    late = T0 + timedelta(seconds=630)  # waitingExecSeconds is 600
    d = decide(at(Phase.WAITING_EXEC), instance=running(), probe_ok=True, now=late, completed=("ProbeExec",))
    assert d.status.outcome is None
    assert d.status.phase is Phase.PULLING
    assert [type(a) for a in d.actions] == [PrepareWorkload]


def test_a_pull_that_succeeded_after_the_deadline_still_starts_the_run() -> None:
    late = T0 + timedelta(seconds=3700)  # pullingSeconds is 3600
    d = decide(at(Phase.PULLING), instance=running(), prepared=True, now=late, completed=("PrepareWorkload",))
    assert d.status.outcome is None
    assert d.status.phase is Phase.RUNNING


def test_a_probe_that_failed_after_the_deadline_times_the_phase_out() -> None:
    late = T0 + timedelta(seconds=630)
    d = decide(at(Phase.WAITING_EXEC), instance=running(), probe_ok=False, now=late)
    assert d.status.reason == "WaitingExecTimeout"
    assert d.status.phase is Phase.DELETED


# --- what the runner does with the deadline ---------------------------------------------------------


def test_every_action_kind_has_a_lane_and_teardown_never_shares_one_with_long_work() -> None:
    kinds = set(typing.get_args(Action))
    assert kinds == set(ACTION_LANES)
    long_work = {Lane.PROBE, Lane.PULL, Lane.UPLOAD, Lane.CHECKPOINT, Lane.WAIT}
    for kind in (StopContainer, CleanupWorkload, DeleteInstance):
        assert ACTION_LANES[kind] not in long_work
    assert lane_of(DeleteInstance("x")) not in BUDGETED
    assert lane_of(StopContainer("x")) not in BUDGETED
    assert lane_of(ProbeExec("x")) in BUDGETED


def _runner(client: FakeClient, lanes: Lanes | None = None) -> ActionRunner:
    return ActionRunner(
        client, InstanceDirectory(client), lanes=lanes or Lanes.uniform(2), exec_timeout=PROBE_TIMEOUT
    )


def _job() -> JobContext:
    return JobContext("ns", "job", "job-1234abcd", _spec(), SECRETS)


def test_a_spent_budget_never_keeps_a_container_from_stopping_or_an_instance_from_being_deleted() -> None:
    client = FakeClient(answer=lambda cmd: (0, healthy_answer(cmd)))
    spent = datetime.now(UTC) - timedelta(seconds=30)
    actions: list[Action] = [StopContainer("i"), CleanupWorkload("i", must_succeed=True), DeleteInstance("i")]
    obs = asyncio.run(_runner(client).run(actions, _job(), Observation(now=NOW), deadline=spent))
    assert obs.failure is None
    assert obs.container_stopped
    assert obs.cleaned
    assert obs.delete_requested


def test_a_probe_with_a_spent_budget_is_not_attempted() -> None:
    client = FakeClient()
    spent = datetime.now(UTC) - timedelta(seconds=30)
    obs = asyncio.run(_runner(client).run([ProbeExec("i")], _job(), Observation(now=NOW), deadline=spent))
    assert obs.failure is not None
    assert obs.failure.reason == "PhaseBudgetSpent"
    assert not obs.failure.permanent
    assert client.commands == []


def test_a_call_gets_the_time_left_when_it_is_less_than_its_own_timeout() -> None:
    client = FakeClient(answer=lambda _cmd: (0, "ok"))
    left = datetime.now(UTC) + timedelta(seconds=120)
    asyncio.run(_runner(client).run([ProbeExec("i")], _job(), Observation(now=NOW), deadline=left))
    (timeout,) = client.timeouts
    assert 100 < timeout <= 120  # the probe's own timeout is 900 s


def test_a_call_keeps_its_own_timeout_when_more_time_is_left() -> None:
    client = FakeClient(answer=lambda _cmd: (0, "ok"))
    left = datetime.now(UTC) + timedelta(hours=5)
    asyncio.run(_runner(client).run([ProbeExec("i")], _job(), Observation(now=NOW), deadline=left))
    assert client.timeouts == [PROBE_TIMEOUT]


# --- lanes ----------------------------------------------------------------------------------------


def test_a_full_lane_with_a_spent_budget_fails_at_once_naming_the_lane_and_its_setting() -> None:
    sizes = {lane: (1, f"TAOBREV_LANE_{lane.upper()}") for lane in LANES}
    lanes = Lanes(sizes)

    async def scenario() -> str:
        async with lanes.hold(Lane.PROBE):
            with pytest.raises(Exception) as info:
                async with lanes.hold(Lane.PROBE, datetime.now(UTC) - timedelta(seconds=1)):
                    pass
            assert type(info.value).__name__ == "LaneBusy"
            return str(info.value)

    message = asyncio.run(scenario())
    assert "probe lane" in message
    assert "TAOBREV_LANE_PROBE" in message
    assert lanes.gate(Lane.PROBE).in_flight == 0
    assert lanes.gate(Lane.PROBE).waiting == 0


def test_a_free_slot_is_taken_whatever_the_deadline() -> None:
    # The remote step itself then refuses to start on a spent budget (PhaseBudgetSpent).
    lanes = Lanes.uniform(1)

    async def scenario() -> int:
        async with lanes.hold(Lane.PULL, datetime.now(UTC) - timedelta(seconds=1)):
            return lanes.gate(Lane.PULL).in_flight

    assert asyncio.run(scenario()) == 1


def test_the_deprecated_single_pool_puts_every_lane_but_waits_behind_one_gate() -> None:
    sizes = {lane: (4, f"TAOBREV_LANE_{lane.upper()}") for lane in LANES}
    lanes = Lanes(sizes, shared=(8, "TAOBREV_MAX_CONCURRENT_BREV_CALLS"))
    assert lanes.gate(Lane.DELETE) is lanes.gate(Lane.PULL)
    assert lanes.gate(Lane.DELETE).slots == 8
    assert lanes.gate(Lane.WAIT) is not lanes.gate(Lane.PULL)
    assert lanes.gate(Lane.WAIT).slots == 4


def test_a_lane_without_slots_is_refused_naming_its_setting() -> None:
    sizes = {lane: (0 if lane == Lane.STOP else 1, f"TAOBREV_LANE_{lane.upper()}") for lane in LANES}
    with pytest.raises(ValueError, match="TAOBREV_LANE_STOP=0"):
        Lanes(sizes)
