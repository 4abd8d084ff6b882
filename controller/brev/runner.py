"""Async subprocess runner for the `brev` and `ssh` programs.

Why each rule exists (tests/brevsim/SIM-CONTRACT.md sections 2 and 5):
- stdin is `/dev/null` unless the caller feeds it on purpose: brev reads a piped stdin to EOF as
  instance names, so an open pipe blocks forever and a closed fd 0 makes it panic.
- every child gets its own process group and a timeout kills the whole group: `brev exec` runs
  `bash -c '... ssh ...'`, and killing only brev would leave ssh holding our pipes.
  The one process that leaves the group on purpose is an ssh ControlPersist master: it
  daemonises (setsid, stdio on /dev/null) so it outlives the call that opened it and serves every
  later call to that instance. Nothing here waits on it (its pipes are closed, it is not our
  child); the client ends it with `ssh -O exit` when the instance is deleted, and PID 1 (tini in
  the image) reaps it.
- `SSH_AUTH_SOCK` points at ONE long-lived agent per client home: without it every `brev exec`
  runs `eval $(ssh-agent -s)` and leaks one agent process per call.
- only the verb, exit status and duration are logged and recorded, never argv content.
- every child is started off the loop and runs CHILD_NICE below us: the event loop that spawns
  them must not queue for CPU behind them (see spawn.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from controller.api import reasons
from controller.api.errors import BrevPermanentError, BrevTransientError
from controller.brev.client import BrevCallRecorder, NullRecorder
from controller.brev.spawn import spawn

log = structlog.get_logger(__name__)

# Keep at most this much of each stream (the tail: exec's sentinel and brev's error are at the end).
MAX_CAPTURE_BYTES = 8 * 1024 * 1024
# After killing a process group, how long to wait for the pipes to close before giving up on them.
_KILL_GRACE_S = 5.0
# How long a call reuses the agent found alive before checking again (brev only needs the
# variable set; a dead agent costs ssh nothing, it falls back to the IdentityFile).
CHECK_EVERY_S = 60.0
# sun_path is 108 bytes on Linux; leave room for the terminating NUL.
_MAX_SOCKET_PATH = 100

# Variables that make the CLI quiet and deterministic when captured: no colours, no analytics.
QUIET_ENV: Mapping[str, str] = {"NO_COLOR": "1", "BREV_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1"}


@dataclass(frozen=True)
class RunResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        """Both streams, for substring matching of messages whose channel varies (TTY vs piped)."""
        return f"{self.stdout}\n{self.stderr}"


class CommandTimeout(BrevTransientError):
    """The call did not finish within its timeout; its whole process group was killed."""

    reason = reasons.BREV_TIMEOUT

    def __init__(self, message: str, *, stdout: str = "", stderr: str = "") -> None:
        super().__init__(message, cli_message=stderr.strip()[-2000:])
        self.stdout = stdout
        self.stderr = stderr


class SshAgent:
    """One `ssh-agent` per client home, started lazily and reused across calls and restarts.

    The agent needs no keys (brev's ssh config names `~/.brev/brev.pem` as IdentityFile); its only
    job is to make brev skip its own per-call `ssh-agent -s`. brev only tests that SSH_AUTH_SOCK is
    non-empty, so a dead agent is restarted at most every `respawn_after_s`, never per call.
    """

    def __init__(
        self,
        home: Path,
        *,
        socket_path: Path | None = None,
        binary: str = "ssh-agent",
        respawn_after_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._binary = binary
        self._clock = clock
        self._socket = socket_path or default_agent_socket(home)
        self._respawn_after_s = respawn_after_s
        self._pid: int | None = None
        self._current: str | None = None
        self._started_at = 0.0
        self._checked_at = 0.0  # monotonic time `_current` was last found alive (or started)
        self._lock = asyncio.Lock()

    @property
    def socket_path(self) -> Path:
        return self._socket

    async def ensure(self, env: Mapping[str, str] | None = None) -> str:
        """The socket path of a live agent, starting one (with `env`, for PATH) if needed.

        Every brev and ssh call asks, so the answer is reused for CHECK_EVERY_S, and a check
        (a connect to the agent's socket) runs in a thread, never on the event loop: at a
        takeover a thousand ssh clients query the agent at once, its backlog fills, and a
        blocking connect per call stalled the loop for seconds (long enough to lose the Lease)."""
        async with self._lock:
            now = self._clock()
            if self._current is not None and now - self._checked_at < CHECK_EVERY_S:
                return self._current
            inherited = (env or {}).get("SSH_AUTH_SOCK")
            if inherited and await _alive(Path(inherited)):
                self._current, self._checked_at = inherited, now
                return inherited
            if self._current is not None and (
                await _alive(Path(self._current)) or now - self._started_at < self._respawn_after_s
            ):
                self._checked_at = now
                return self._current
            if await _alive(self._socket):  # left by a previous operator process: reuse it
                self._current, self._checked_at = str(self._socket), now
                return self._current
            self._current = await self._start(env)
            self._started_at = self._checked_at = self._clock()
            return self._current

    async def _start(self, env: Mapping[str, str] | None) -> str:
        self._socket.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self._socket.unlink()  # stale socket of a dead agent
        try:
            proc = await spawn(
                [self._binary, "-a", str(self._socket), "-s"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
        except FileNotFoundError as exc:
            raise BrevPermanentError(
                f"{self._binary} not found on PATH: the operator image needs openssh-client "
                "(ssh and ssh-agent) next to brev"
            ) from exc
        assert proc.stdout is not None and proc.stderr is not None
        out, err, _ = await asyncio.gather(proc.stdout.read(), proc.stderr.read(), proc.wait())
        if proc.returncode != 0:
            raise BrevTransientError(
                f"could not start {self._binary} at {self._socket}",
                cli_message=err.decode(errors="replace").strip(),
            )
        pid = re.search(rb"SSH_AGENT_PID=(\d+)", out)
        self._pid = int(pid.group(1)) if pid else None
        sock = re.search(rb"SSH_AUTH_SOCK=([^;\s]+)", out)
        path = sock.group(1).decode() if sock else str(self._socket)
        log.info("ssh_agent_started", socket=path, pid=self._pid)
        return path

    def close(self) -> None:
        """Stop the agent this object started (an agent found already running is left alone)."""
        if self._pid is not None and _is_our_agent(self._pid, self._socket):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self._pid, signal.SIGTERM)
            self._pid = None
            with contextlib.suppress(FileNotFoundError):
                self._socket.unlink()
        self._current = None


def default_agent_socket(home: Path) -> Path:
    """`<home>/.ssh/taobrev-agent.sock`, or a short per-home path in the temp dir when that would
    exceed the unix-socket path limit (test homes live deep under /tmp/pytest-...)."""
    candidate = home / ".ssh" / "taobrev-agent.sock"
    if len(str(candidate)) <= _MAX_SOCKET_PATH:
        return candidate
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"taobrev-agent-{digest}" / "agent.sock"


def _is_our_agent(pid: int, sock: Path) -> bool:
    """Only signal the pid the agent reported if it really is that agent (never a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(sock).encode() in cmdline


async def _alive(path: Path) -> bool:
    return await asyncio.to_thread(_socket_alive, path)


def _socket_alive(path: Path) -> bool:
    if not path.is_socket():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


class Runner:
    """Runs one program invocation at a time per call; safe to share between tasks."""

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        recorder: BrevCallRecorder | None = None,
        agent: SshAgent | None = None,
    ) -> None:
        self._env = {**env, **QUIET_ENV}
        self._recorder = recorder or NullRecorder()
        self._agent = agent

    async def environment(self) -> dict[str, str]:
        env = dict(self._env)
        if self._agent is not None:
            env["SSH_AUTH_SOCK"] = await self._agent.ensure(self._env)
        return env

    async def run(
        self,
        argv: Sequence[str],
        *,
        verb: str,
        timeout: float,  # noqa: ASYNC109 - the whole process group is killed on expiry, not just awaited
        stdin: bytes | None = None,
        fence: Callable[[], bool] | None = None,
    ) -> RunResult:
        """Run `argv`; returns whatever exit status it had. Raises `CommandTimeout` (after killing
        the process group) when it outlives `timeout`, `BrevPermanentError` if the program is missing,
        NotLeading if `fence` fails at the fork (spawn.py).
        """
        env = await self.environment()
        started = time.monotonic()
        try:
            proc = await spawn(
                argv,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                fence=fence,
            )
        except FileNotFoundError as exc:
            self._recorder.brev_call(verb, "error", time.monotonic() - started)
            raise BrevPermanentError(
                f"{argv[0]} not found: install it or point the operator's brev binary setting at it"
            ) from exc

        out_buf: list[bytes] = []
        err_buf: list[bytes] = []
        assert proc.stdout is not None and proc.stderr is not None
        tasks = [
            asyncio.ensure_future(_drain(proc.stdout, out_buf)),
            asyncio.ensure_future(_drain(proc.stderr, err_buf)),
            asyncio.ensure_future(proc.wait()),
        ]
        if stdin is not None:
            assert proc.stdin is not None
            tasks.append(asyncio.ensure_future(_feed(proc.stdin, stdin)))
        try:
            _done, pending = await asyncio.wait(tasks, timeout=timeout)
            if pending:
                _kill_group(proc.pid)
                _done, still = await asyncio.wait(pending, timeout=_KILL_GRACE_S)
                for task in still:
                    task.cancel()
                seconds = time.monotonic() - started
                self._recorder.brev_call(verb, "timeout", seconds)
                out, err = _text(out_buf), _text(err_buf)
                log.warning("brev_call_timeout", verb=verb, timeout_s=timeout)
                raise CommandTimeout(
                    f"{verb} did not finish within {timeout:g} s (killed)", stdout=out, stderr=err
                )
        except asyncio.CancelledError:
            _kill_group(proc.pid)
            for task in tasks:
                task.cancel()
            raise
        seconds = time.monotonic() - started
        rc = proc.returncode if proc.returncode is not None else -1
        self._recorder.brev_call(verb, "ok" if rc == 0 else "error", seconds)
        log.debug("brev_call", verb=verb, rc=rc, seconds=round(seconds, 3))
        return RunResult(returncode=rc, stdout=_text(out_buf), stderr=_text(err_buf), seconds=seconds)


async def _drain(stream: asyncio.StreamReader, buf: list[bytes]) -> None:
    size = 0
    while chunk := await stream.read(65536):
        buf.append(chunk)
        size += len(chunk)
        while size > MAX_CAPTURE_BYTES and len(buf) > 1:
            size -= len(buf.pop(0))


async def _feed(pipe: asyncio.StreamWriter, data: bytes) -> None:
    # The child may exit without reading (e.g. ssh cannot connect): that is its exit status's story.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        pipe.write(data)
        await pipe.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        pipe.close()
        await pipe.wait_closed()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _text(buf: list[bytes]) -> str:
    return b"".join(buf).decode(errors="replace")
