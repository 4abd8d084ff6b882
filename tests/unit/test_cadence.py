"""How often a job costs a call while it waits (issue 11): exec probes back off with the time
already waited; the blocking exit wait is bounded by the next checkpoint sync, the Running
deadline and, while stopping, the grace left — never overrun by a whole wait."""

from __future__ import annotations

from datetime import timedelta

import pytest

from controller.api.vocabulary import Outcome
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import StopContainer, WaitForExit
from controller.lifecycle.tunables import Tunables
from tests.unit.test_machine import T0, TUN, at, decide, running
from tests.unit.test_recovery import SPEC, running_job, step


@pytest.mark.parametrize(
    ("waited", "interval"),
    [(0.0, 5.0), (49.0, 5.0), (100.0, 10.0), (250.0, 25.0), (400.0, 30.0), (5000.0, 30.0)],
)
def test_probe_interval_backs_off_to_a_tenth_of_the_wait_and_caps(waited: float, interval: float) -> None:
    assert Tunables(poll_interval=5.0, probe_interval_max=30.0).probe_interval(waited) == interval


def test_probe_interval_never_below_the_poll_interval() -> None:
    assert Tunables(poll_interval=60.0, probe_interval_max=30.0).probe_interval(1000.0) == 60.0


def test_a_failed_probe_looks_again_later_the_longer_it_waited() -> None:
    early = decide(at(Phase.WAITING_EXEC), instance=running(), probe_ok=False, now=T0 + timedelta(seconds=10))
    late = decide(at(Phase.WAITING_EXEC), instance=running(), probe_ok=False, now=T0 + timedelta(seconds=300))
    assert early.requeue_after == TUN.poll_interval
    assert late.requeue_after == TUN.probe_interval_max == 10.0  # the default cap, not 300 / 10


def test_the_default_probe_cap_bounds_the_readiness_lag_to_ten_seconds() -> None:
    # Every second between readiness and the probe that sees it is billed GPU time.
    assert Tunables().probe_interval(10_000.0) == 10.0


def test_the_last_probe_comes_before_the_waiting_exec_deadline() -> None:
    # waitingExecSeconds 600 (tests/unit/test_machine.spec): 7 s left, a 10 s back-off would overrun.
    d = decide(at(Phase.WAITING_EXEC), instance=running(), probe_ok=False, now=T0 + timedelta(seconds=593))
    assert d.status.phase is Phase.WAITING_EXEC
    assert d.requeue_after == 7.0


def _wait(actions: tuple[object, ...]) -> WaitForExit:
    waits = [a for a in actions if isinstance(a, WaitForExit)]
    assert len(waits) == 1, actions
    return waits[0]


def test_the_exit_wait_stops_at_the_running_deadline() -> None:
    # runningSeconds 3600: 10 s left of it.
    d = decide(at(Phase.RUNNING), instance=running(), now=T0 + timedelta(seconds=3590))
    assert _wait(d.actions).timeout_seconds == 10.0


def test_the_exit_wait_stops_when_the_next_checkpoint_sync_is_due() -> None:
    # checkpointIntervalSeconds 60, the container started at T0: the sync is due at T0 + 60.
    d = step(running_job(), instance=running(), now=T0 + timedelta(seconds=45))
    assert _wait(d.actions).timeout_seconds == 15.0
    assert SPEC.recovery.checkpoint_interval_seconds == 60


def test_a_stopping_container_is_waited_for_no_longer_than_the_grace_left() -> None:
    status = at(Phase.RUNNING, outcome=Outcome.CANCELED, reason="Canceled", run_ended_at=T0)
    d = decide(status, instance=running(), now=T0 + timedelta(seconds=TUN.grace - 4))
    assert StopContainer in [type(a) for a in d.actions]
    assert _wait(d.actions).timeout_seconds == 4.0
