"""The watchdog's /healthz served over HTTP on loopback (the unit tier does no I/O)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from controller.observability.health import Watchdog, serve_health
from tests.devenv.ports import free_port
from tests.unit.test_health import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def dog(clock: Clock) -> Watchdog:
    w = Watchdog(grace=60, pass_ceiling=600, clock=clock)
    w.started = True
    return w


@pytest.fixture
def served(dog: Watchdog) -> Iterator[str]:
    port = free_port()
    server = serve_health(dog, f"http://127.0.0.1:{port}/healthz")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}") if err.code == 500 else {}


def test_healthz_answers_200_then_500_when_overdue(served: str, dog: Watchdog, clock: Clock) -> None:
    assert _get(served + "/healthz") == (200, {"ok": True, "jobs": 0})
    dog.pass_started("ns/a")
    clock.now += 700
    status, body = _get(served + "/healthz")
    assert status == 500
    assert body["ok"] is False
    assert _get(served + "/other")[0] == 404
