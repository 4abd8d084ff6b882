"""Children start off the event loop (spawn.py): the loop's thread never waits in vfork for a
child to be scheduled, and a spawn abandoned by its caller leaves no process behind."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from controller.brev import spawn as spawn_module
from controller.brev.spawn import spawn

pytestmark = pytest.mark.integration


def _with_marker(marker: str) -> list[int]:
    """Processes whose command line holds `marker` (a zombie's is empty: dead ones never match)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_the_loops_thread_never_forks_and_streams_and_exit_status_arrive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    forked_on: list[int] = []
    real = subprocess.Popen

    def recording(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        forked_on.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", recording)  # spawn.py calls it as subprocess.Popen

    async def main() -> tuple[bytes, bytes, int, int]:
        child = await spawn(
            ["bash", "-c", "read -r line; echo out:$line; echo err >&2; exit 7"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=None,
        )
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        child.stdin.write(b"fed\n")
        await child.stdin.drain()
        child.stdin.close()
        await child.stdin.wait_closed()
        out, err, rc = await asyncio.gather(child.stdout.read(), child.stderr.read(), child.wait())
        return out, err, rc, threading.get_ident()

    out, err, rc, loop_thread = asyncio.run(main())
    assert (out, err, rc) == (b"out:fed\n", b"err\n", 7)
    assert forked_on and loop_thread not in forked_on


def test_a_spawn_cancelled_by_its_caller_kills_the_child_it_started(monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"spawn-cancel-{uuid.uuid4().hex}"
    forked = threading.Event()
    real = spawn_module._popen

    def recording(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        popen = real(*args, **kwargs)
        forked.set()
        return popen

    monkeypatch.setattr(spawn_module, "_popen", recording)

    async def main() -> None:
        task = asyncio.create_task(
            spawn(
                ["bash", "-c", f"sleep 60; : {marker}"],  # bash stays (no exec of a last command)
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=None,
            )
        )
        await asyncio.sleep(0)  # the spawn is handed to its thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The thread finishes the fork after the caller left; the child must not outlive that.
        assert await asyncio.to_thread(forked.wait, 20)
        for _ in range(400):  # up to 20 s
            if not _with_marker(marker):
                break
            await asyncio.sleep(0.05)

    asyncio.run(main())
    assert _with_marker(marker) == []


def test_a_missing_program_raises_file_not_found() -> None:
    async def main() -> None:
        await spawn(["/nonexistent/brev"], stdin=subprocess.DEVNULL, stdout=None, stderr=None, env=None)

    with pytest.raises(FileNotFoundError):
        asyncio.run(main())
