"""The loop learns of brev/ssh exits through pidfds, not one waiting thread per child: 1,000
running jobs keep one long call in flight each (the blocking `docker wait`), and Python 3.11's
default watcher kept a thread for every one of them. The only threads are spawn.py's few
spawners."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from controller.brev.childwatch import pidfd_supported
from controller.brev.runner import Runner
from controller.brev.spawn import SPAWN_THREADS

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

CALLS = 20


async def _concurrent_calls(runner: Runner) -> tuple[list[int], int]:
    """CALLS children in flight at once; returns their exit codes and the most threads seen."""
    base = threading.active_count()
    most = base
    calls = asyncio.gather(
        *(runner.run(["bash", "-c", "sleep 1; exit 3"], verb="t", timeout=30) for _ in range(CALLS))
    )
    while not calls.done():
        most = max(most, threading.active_count())
        await asyncio.sleep(0.01)
    return [r.returncode for r in calls.result()], most - base


def test_children_in_flight_cost_no_thread_each_and_exit_codes_still_arrive() -> None:
    assert pidfd_supported()  # Linux >= 5.3: the operator's image and this machine

    async def main() -> tuple[list[int], int]:
        return await _concurrent_calls(Runner(dict(os.environ)))

    codes, extra_threads = asyncio.run(main())
    assert codes == [3] * CALLS
    assert CALLS > SPAWN_THREADS
    assert extra_threads <= SPAWN_THREADS


def test_the_open_files_limit_is_raised_to_the_hard_limit() -> None:
    """In a child (limits are per process): soft 256 before, the hard limit after."""
    code = (
        "import resource\n"
        "from controller.brev.childwatch import raise_open_files_limit\n"
        "_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "soft, after_hard = raise_open_files_limit()\n"
        "assert after_hard == hard, (after_hard, hard)\n"
        "assert soft == hard or hard == resource.RLIM_INFINITY, (soft, hard)\n"
        "assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == soft\n"
        "print('raised', soft)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("raised "), done.stdout
