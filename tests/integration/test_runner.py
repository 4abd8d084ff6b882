"""The subprocess runner under real processes: stdin discipline, process-group timeouts, stdin
feeding, call recording, and the one long-lived ssh-agent per client home."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from controller.brev.runner import CommandTimeout, Runner, SshAgent
from controller.brev.spawn import CHILD_NICE

pytestmark = pytest.mark.integration


class ListRecorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []

    def brev_call(self, verb: str, result: str, seconds: float) -> None:
        self.calls.append((verb, result, seconds))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False


def test_children_get_dev_null_as_stdin_unless_fed_on_purpose() -> None:
    """brev reads a piped stdin as instance names (and blocks on an open pipe): never give it one."""
    runner = Runner(dict(os.environ))
    result = asyncio.run(runner.run(["readlink", "/proc/self/fd/0"], verb="t", timeout=10))
    assert result.stdout.strip() == "/dev/null"
    fed = asyncio.run(runner.run(["cat"], verb="t", timeout=10, stdin=b"secret-bytes\x00\n"))
    assert fed.stdout == "secret-bytes\x00\n"


def test_children_run_below_the_event_loops_priority() -> None:
    """A takeover's thousand ssh clients must not take the loop's CPU (runner.CHILD_NICE). The child
    reads its nice only after stdin's EOF, which the runner sends once it lowered the child."""
    runner = Runner(dict(os.environ))
    probe = "import os, sys; sys.stdin.read(); print(os.nice(0))"
    result = asyncio.run(runner.run([sys.executable, "-c", probe], verb="t", timeout=30, stdin=b"go"))
    assert int(result.stdout) == min(19, os.nice(0) + CHILD_NICE)


def test_timeout_kills_the_whole_process_group_and_records_it() -> None:
    """A timed-out call leaves no grandchild behind (brev exec runs bash -> ssh)."""
    recorder = ListRecorder()
    runner = Runner(dict(os.environ), recorder=recorder)
    # 3 s, not 0.5: the timeout must come after bash printed the grandchild's pid, and a loaded
    # machine can take longer than 0.5 s to start bash and fork.
    with pytest.raises(CommandTimeout) as info:
        asyncio.run(
            runner.run(["bash", "-c", "sleep 300 & echo $!; wait"], verb="exec", timeout=3),
        )
    grandchild = int(info.value.stdout.strip())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(grandchild)
    assert [(v, r) for v, r, _s in recorder.calls] == [("exec", "timeout")]


def test_results_are_recorded_by_verb_and_outcome() -> None:
    recorder = ListRecorder()
    runner = Runner(dict(os.environ), recorder=recorder)
    ok = asyncio.run(runner.run(["true"], verb="ls", timeout=10))
    bad = asyncio.run(runner.run(["bash", "-c", "echo oops >&2; exit 3"], verb="create", timeout=10))
    assert (ok.returncode, bad.returncode, bad.stderr) == (0, 3, "oops\n")
    assert [(v, r) for v, r, _s in recorder.calls] == [("ls", "ok"), ("create", "error")]
    assert all(s >= 0 for _v, _r, s in recorder.calls)


def test_one_agent_serves_every_call_of_a_client(tmp_path: Path) -> None:
    """SSH_AUTH_SOCK is set for every child and points at ONE agent, so brev never spawns its own."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    agent = SshAgent(home)
    runner = Runner(env, agent=agent)

    async def three() -> list[str]:
        out = []
        for _ in range(3):
            result = await runner.run(["bash", "-c", 'echo "$SSH_AUTH_SOCK"'], verb="t", timeout=10)
            out.append(result.stdout.strip())
        return out

    try:
        socks = asyncio.run(three())
        assert len(set(socks)) == 1
        assert socks[0]
        assert Path(socks[0]).is_socket()
        # A second client on the same home (an operator restart) reuses the live agent.
        again = Runner(env, agent=SshAgent(home))
        result = asyncio.run(again.run(["bash", "-c", 'echo "$SSH_AUTH_SOCK"'], verb="t", timeout=10))
        assert result.stdout.strip() == socks[0]
    finally:
        agent.close()
    assert not Path(socks[0]).exists()
