"""Liveness that means progress (issue 9.8): /healthz turns red while a job's reconcile pass is
stuck past its bound, and green again once passes complete - the signal a kubelet restarts a
wedged operator on. The bound is shortened (TAOBREV_LIVENESS_PASS_TIMEOUT) and every brev exec is
made slow (the simulator's `slow_exec_s`), which holds the pass that runs it."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.fixtures.operator import Stack

PASS_TIMEOUT_S = 3


@pytest.fixture
def operator_env() -> dict[str, str]:
    return {"TAOBREV_LIVENESS_PASS_TIMEOUT": str(PASS_TIMEOUT_S)}


def healthz(stack: Stack) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{stack.operator.health_port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def wait_health(stack: Stack, code: int, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status, body = healthz(stack)
        if status == code:
            return body
        assert time.monotonic() < deadline, f"/healthz stayed {status} {body}:\n{stack.operator.log_tail()}"
        time.sleep(0.5)


def test_healthz_turns_red_while_a_pass_is_stuck_and_green_when_passes_complete(stack: Stack) -> None:
    assert healthz(stack) == (200, {"ok": True, "jobs": 0})
    # 40 s per exec (nominal 4000 s at speed 0.01): far past the 3 s bound of one pass.
    stack.sim.set_faults(slow_exec_s=4000)
    stack.apply(stack.job_manifest("wedged"))
    red = wait_health(stack, 500)
    assert red["overdue"][0]["job"] == f"{stack.namespace}/wedged"
    assert red["overdue"][0]["what"] == "pass running"
    stack.sim.clear_faults()
    status = stack.wait_finished("wedged", timeout=240)
    assert status["outcome"] == "Succeeded"
    wait_health(stack, 200)
    assert stack.live_instances() == []
