"""SshAgent.ensure runs before every brev and ssh call: whether the agent still answers is
checked at most once a minute, and never on the event loop (a connect to an agent whose backlog
a takeover's thousand ssh clients had filled blocked the loop for seconds; the Lease was lost)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from controller.brev import runner
from controller.brev.runner import CHECK_EVERY_S, SshAgent


def test_a_live_agent_is_checked_off_the_loop_and_once_a_minute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    checks: list[tuple[Path, bool]] = []

    def alive(path: Path) -> bool:
        checks.append((path, threading.current_thread() is threading.main_thread()))
        return True

    monkeypatch.setattr(runner, "_socket_alive", alive)
    now = [1000.0]
    agent = SshAgent(tmp_path, socket_path=tmp_path / "agent.sock", clock=lambda: now[0])

    async def calls(n: int) -> set[str]:
        return {await agent.ensure({}) for _ in range(n)}

    assert asyncio.run(calls(100)) == {str(tmp_path / "agent.sock")}  # left by an earlier process
    assert len(checks) == 1
    now[0] += CHECK_EVERY_S - 1
    asyncio.run(calls(10))
    assert len(checks) == 1
    now[0] += 1
    asyncio.run(calls(10))
    assert len(checks) == 2
    assert not any(on_loop for _, on_loop in checks), checks


def test_an_inherited_agent_is_used_when_it_answers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(runner, "_socket_alive", lambda path: path == Path("/run/agent.sock"))
    agent = SshAgent(tmp_path, socket_path=tmp_path / "agent.sock")
    assert asyncio.run(agent.ensure({"SSH_AUTH_SOCK": "/run/agent.sock"})) == "/run/agent.sock"
