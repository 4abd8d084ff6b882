"""Start brev/ssh children off the event loop.

`asyncio.create_subprocess_exec` forks on the loop's thread, and CPython forks with vfork: the
caller is suspended until the child has exec'd, which waits for the scheduler to run the child.
On a busy host that is the run queue's latency per child. A takeover starts ~1,000 ssh clients at
once: on the failover bench every STALL stack of the loop was vfork in `_execute_child` (stalls
up to 23 s), and the operator started 99% of its exit waits' ssh only 144 s after the takeover
while it used 0.10 cores. `subprocess.Popen` releases the GIL around the fork, so a few spawner
threads wait on the run queue in parallel while the loop goes on renewing the Lease and writing
status (tests/bench: 300 spawns under 8 busy loops, 2.9 s with 2.0 s of loop stalls on the loop's
thread, 0.55 s with 0.1 s from threads).

A `Child` offers what the callers used of `asyncio.subprocess.Process`: pid, the three streams,
returncode and wait(). Its exit is learnt from a pidfd on the loop (no thread per child, see
childwatch.py), or from a thread blocked in waitpid where pidfds are missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from controller.api.errors import NotLeading

# A takeover spawns ~1,000 children within seconds; a few threads each waiting for one child to be
# scheduled cover the run queue's latency without one thread per child.
SPAWN_THREADS = 4
# Read buffer of each output stream (asyncio's default; exec's sentinel lines are short).
STREAM_LIMIT = 2**16

# A takeover at 1,000 running jobs starts ~1,000 ssh clients (key exchange, agent signing) and the
# brev calls of the first passes at once. At equal priority each runnable child gets the loop's
# share: on the failover bench the loop waited 82 s on the run queue (LAG probe) over a 165 s
# re-arm, and every exit notice and status write waited with it. Nice 10 weighs a child ~1/10 of
# the loop (CFS weights 110 vs 1024), which still gives the children all the CPU the loop leaves.
# Inside a container's cgroup nice is honoured per task (autogroup applies only to the root group).
CHILD_NICE = 10


@functools.cache
def _spawner() -> ThreadPoolExecutor:
    """One pool for the process (every loop's spawns), created on first use."""
    return ThreadPoolExecutor(max_workers=SPAWN_THREADS, thread_name_prefix="spawn")


def below_the_loop(pid: int) -> None:
    """Lower a child just spawned CHILD_NICE below us (an ssh master it forks later inherits it).
    From the parent, not a pre-exec hook (unsafe with threads, and it would turn vfork into fork):
    when the spawn returns the child has only exec'd, and its CPU (connect, key exchange) comes
    after."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # gone already; or a sandbox
        own = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, pid, min(19, own + CHILD_NICE))


class Child:
    """A running child started by `spawn`; the loop learns its exit without a thread."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: asyncio.StreamWriter | None,
        stdout: asyncio.StreamReader | None,
        stderr: asyncio.StreamReader | None,
    ) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self._exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._watch()

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    async def wait(self) -> int:
        # shielded: a cancelled waiter must not cancel the one future every waiter shares
        return await asyncio.shield(self._exited)

    def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # no pidfds (kernel < 5.3, not Linux): a thread waits
            waiting = loop.run_in_executor(None, self._popen.wait)
            waiting.add_done_callback(lambda _f: self._reaped())
            return

        def readable() -> None:
            loop.remove_reader(fd)
            os.close(fd)
            self._popen.poll()
            self._reaped()

        loop.add_reader(fd, readable)

    def _reaped(self) -> None:
        if not self._exited.done():
            rc = self._popen.returncode
            self._exited.set_result(rc if rc is not None else -1)


class _StdinProtocol(asyncio.streams.FlowControlMixin):
    """Flow control for the child's stdin and the future `StreamWriter.wait_closed` awaits, as
    asyncio.subprocess gives them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self._closed: asyncio.Future[None] = loop.create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self._closed.done():
            self._closed.set_result(None)  # a broken pipe is the child's exit status's story

    def _get_close_waiter(self, stream: asyncio.StreamWriter) -> asyncio.Future[None]:
        return self._closed


async def spawn(
    argv: Sequence[str],
    *,
    stdin: int | None,
    stdout: int | None,
    stderr: int | None,
    env: Mapping[str, str] | None,
    fence: Callable[[], bool] | None = None,
) -> Child:
    """Start `argv` in a session of its own (its group is killed as one) and CHILD_NICE below us.
    `stdin`/`stdout`/`stderr` are subprocess.PIPE or DEVNULL. Raises what Popen raises
    (FileNotFoundError for a missing program), and NotLeading when `fence` (the leader term of a
    change to Brev) no longer holds at the fork: a spawn may queue behind a takeover's others.
    A spawn whose caller is cancelled kills its child."""
    loop = asyncio.get_running_loop()
    fork = functools.partial(
        _popen,
        list(argv),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=None if env is None else dict(env),
        fence=fence,
    )
    started = loop.run_in_executor(_spawner(), fork)
    try:
        popen = await asyncio.shield(started)
    except asyncio.CancelledError:
        started.add_done_callback(_kill_abandoned)
        raise
    try:
        return Child(
            popen,
            await _writer(loop, popen.stdin) if popen.stdin is not None else None,
            await _reader(loop, popen.stdout) if popen.stdout is not None else None,
            await _reader(loop, popen.stderr) if popen.stderr is not None else None,
        )
    except BaseException:
        _kill(popen)
        raise


def _popen(
    argv: list[str],
    *,
    stdin: int | None,
    stdout: int | None,
    stderr: int | None,
    env: dict[str, str] | None,
    fence: Callable[[], bool] | None,
) -> subprocess.Popen[bytes]:
    if fence is not None and not fence():  # read-only: safe from this thread
        what = " ".join([Path(argv[0]).name, *argv[1:2]])
        raise NotLeading(f"{what} not sent: this replica's leader term has ended")
    popen = subprocess.Popen(  # noqa: S603 - our argv (brev/ssh), never through a shell
        argv, stdin=stdin, stdout=stdout, stderr=stderr, env=env, start_new_session=True
    )
    below_the_loop(popen.pid)
    return popen


async def _reader(loop: asyncio.AbstractEventLoop, pipe: IO[bytes]) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=STREAM_LIMIT, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
    return reader


async def _writer(loop: asyncio.AbstractEventLoop, pipe: IO[bytes]) -> asyncio.StreamWriter:
    transport, protocol = await loop.connect_write_pipe(lambda: _StdinProtocol(loop=loop), pipe)
    return asyncio.StreamWriter(transport, protocol, None, loop)


def _kill_abandoned(started: asyncio.Future[Any]) -> None:
    if not started.cancelled() and started.exception() is None:
        _kill(started.result())


def _kill(popen: subprocess.Popen[bytes]) -> None:
    """Kill the child's group, close our ends and reap it off the loop."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    for pipe in (popen.stdin, popen.stdout, popen.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    _spawner().submit(popen.wait)
