"""controller.observability.health: the progress watchdog (injected clock) and the /healthz it serves."""

from __future__ import annotations

import pytest

from controller.observability.health import Watchdog, serve_health


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def dog(clock: Clock) -> Watchdog:
    w = Watchdog(grace=60, pass_ceiling=600, clock=clock)
    w.started = True
    return w


def test_not_healthy_before_startup_finished(clock: Clock) -> None:
    ok, detail = Watchdog(grace=60, pass_ceiling=600, clock=clock).report()
    assert ok is False
    assert detail["reason"] == "starting"


def test_idle_operator_is_healthy_forever(dog: Watchdog, clock: Clock) -> None:
    clock.now += 10**6
    assert dog.report()[0] is True


def test_passes_completing_on_time_keep_it_healthy(dog: Watchdog, clock: Clock) -> None:
    for _ in range(100):
        dog.pass_started("ns/a")
        clock.now += 2
        dog.pass_finished("ns/a", 5)
        clock.now += 5
    assert dog.report()[0] is True


def test_a_pass_running_past_the_ceiling_turns_it_red(dog: Watchdog, clock: Clock) -> None:
    dog.pass_started("ns/a")
    clock.now += 600
    assert dog.report()[0] is True  # exactly at the bound: still fine
    clock.now += 1
    ok, detail = dog.report()
    assert ok is False
    assert detail["overdue"] == [{"job": "ns/a", "what": "pass running", "overdueSeconds": 1.0}]


def test_a_late_pass_turns_it_red_after_the_grace(dog: Watchdog, clock: Clock) -> None:
    dog.pass_started("ns/a")
    dog.pass_finished("ns/a", 30)
    clock.now += 30 + 60
    assert dog.report()[0] is True
    clock.now += 0.5
    ok, detail = dog.report()
    assert ok is False
    assert detail["overdue"][0]["what"] == "pass late"


def test_one_wedged_job_among_healthy_ones_is_enough(dog: Watchdog, clock: Clock) -> None:
    dog.pass_started("ns/stuck")
    for _ in range(200):
        dog.pass_started("ns/fine")
        clock.now += 5
        dog.pass_finished("ns/fine", 0)
    ok, detail = dog.report()
    assert ok is False
    assert [o["job"] for o in detail["overdue"]] == ["ns/stuck"]


def test_finished_and_forgotten_jobs_are_not_watched(dog: Watchdog, clock: Clock) -> None:
    dog.pass_started("ns/a")
    dog.pass_finished("ns/a", None)
    dog.pass_started("ns/b")
    dog.forget("ns/b")
    clock.now += 10**5
    assert dog.report() == (True, {"ok": True, "jobs": 0})


def test_recovery_turns_it_green_again(dog: Watchdog, clock: Clock) -> None:
    dog.pass_started("ns/a")
    clock.now += 1000
    assert dog.report()[0] is False
    dog.pass_finished("ns/a", 1)
    assert dog.report()[0] is True


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="grace, pass_ceiling"):
        Watchdog(grace=0, pass_ceiling=10)


def test_endpoint_must_be_http_with_a_port(dog: Watchdog) -> None:
    with pytest.raises(ValueError, match="TAOBREV_LIVENESS_ENDPOINT"):
        serve_health(dog, "https://0.0.0.0/healthz")
