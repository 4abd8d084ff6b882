"""The instances' sshd: ONE asyncssh server in the daemon process serving every simulated instance.

Each instance gets its own TCP port on 127.0.0.1 (OpenSSH's sshd caps listen sockets at 16, and
one port per instance keeps ControlPath's %C distinct as distinct hosts would). The client is the
real OpenSSH `ssh`, configured by `brev refresh` (sshconfig.py) with the key in ~/.brev/brev.pem,
the only key the server accepts (user `ubuntu` only).

What a connection meets depends on the instance at that moment (model.observe + faults):

| instance | TCP | client sees |
|---|---|---|
| RUNNING, ssh not ready yet, or `exec_never_ready` | port bound, not listening | `Connection refused` |
| not RUNNING (stopped, deleting, gone) | accepted, silent 10 s x speed, closed | exit 255 |
| `sshd_dead` | accepted, reset | `Connection reset by peer` |
| `exec_hangs` | handshake and session open | the command never starts, never answers |
| ready | | `bash -c <command>` in the sandbox home, exit status propagated |

A command runs like sshd runs it: stdout and stderr are separate pipes (a pty only when the client
asks for one, i.e. RequestTTY yes from a terminal: then stderr merges into stdout); the session
ends only when the program exited AND every process holding its stdout/stderr closed them (a
background job holding them hangs the client: brevdev/brev-cli issue #429), and the client gets
all of its output, then EOF, then the exit status; a client that goes
away sends SIGHUP to the session's process group. Established connections of an instance that
stops running are closed (the VM is gone); new sessions re-check the instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import pty
import signal
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from tests.brevsim import faults as knobs
from tests.brevsim.control import MARKER
from tests.brevsim.model import NOMINAL, observe
from tests.brevsim.record import record_call, record_stdin
from tests.brevsim.store import Store

USER = "ubuntu"
FULL_S = 2.0  # a full re-evaluation of every listener at least this often (~40 ms per 1,000)
CHANGED_S = 0.5  # and after a state file changed, at most this often (a burst changes db.json a lot)
CALL_ENV = "BREVSIM_CALL"  # sent by the ssh wrapper (SendEnv) so stdin sizes join its call record


@dataclass(frozen=True)
class Moment:
    """What a verdict depends on besides the instance record, read once (clock, delays, faults)."""

    now: float
    delays: dict[str, float]
    never_ready: object
    sshd_dead: object
    exec_hangs: object

    @classmethod
    def of(cls, store: Store) -> Moment:
        return cls(
            store.now(),
            {k: store.delay(k, v) for k, v in NOMINAL.items()},
            store.fault("exec_never_ready"),
            store.fault("sshd_dead"),
            store.fault("exec_hangs"),
        )


def verdict(moment: Moment, inst: dict[str, Any] | None) -> str:
    """ok | refused | gone | reset | hang, for a connection arriving now."""
    if inst is None:
        return "gone"
    obs = observe(inst, moment.now, moment.delays)
    if obs.gone or obs.status != "RUNNING":
        return "gone"
    name, iid = str(inst["name"]), str(inst["id"])
    if not obs.ssh_ready or knobs.targets(moment.never_ready, name, iid):
        return "refused"
    if knobs.targets(moment.sshd_dead, name, iid):
        return "reset"
    if knobs.targets(moment.exec_hangs, name, iid):
        return "hang"
    return "ok"


def verdict_now(store: Store, inst_id: str) -> str:
    return verdict(Moment.of(store), _instance(store, inst_id))


def _instance(store: Store, inst_id: str) -> dict[str, Any] | None:
    inst = store.read_shared()["instances"].get(inst_id)
    return dict(inst) if inst is not None else None


# One daemon plays a thousand instances' sshd on the same cores as their programs. At equal
# priority a takeover's thousand sessions (bash, timeout, docker) each took the daemon's share:
# during a restart at 1,000 running its loop got 0.14 cores and a session took a median 60 s to
# start (failover bench). On Brev each instance's sshd has its machine to itself; lowering the
# programs gives the daemon back what a real sshd has, without slowing what they do when it idles.
PROGRAM_NICE = 10


def below_the_daemon(pid: int) -> None:
    """Lower a program the daemon just started (its children inherit it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        own = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, pid, min(19, own + PROGRAM_NICE))


def _reset(conn: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a crashing sshd's connection does."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


@dataclass
class Listener:
    inst_id: str
    port: int
    sock: socket.socket
    listening: bool = False
    last: str = ""  # the verdict at the last reconcile
    accept_task: asyncio.Task[None] | None = None
    conns: set[asyncssh.SSHServerConnection] = field(default_factory=set)


class SSHD:
    def __init__(self, state: Path, host_key: asyncssh.SSHKey, client_key: asyncssh.SSHKey) -> None:
        self.state = state
        self.host_key = host_key
        self.client_key = client_key
        self.listeners: dict[str, Listener] = {}
        self.sessions: set[Session] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.served_ports: list[int] = []
        self._seen: tuple[float, ...] = ()
        self._full_at = 0.0

    # -- listeners ---------------------------------------------------------------------------
    def port_of(self, inst_id: str) -> int:
        """The instance's port (bound now if new; not listening until reconcile says so)."""
        lst = self.listeners.get(inst_id)
        if lst is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            lst = Listener(inst_id, sock.getsockname()[1], sock)
            self.listeners[inst_id] = lst
            self.served_ports.append(lst.port)
            # the reaper finds ssh masters by these ports, even after this daemon is gone
            tmp = self.state / ".ports.json.tmp"
            tmp.write_text(json.dumps(self.served_ports))
            tmp.replace(self.state / "ports.json")
        return lst.port

    def _set_listening(self, lst: Listener, want: bool) -> None:
        if want == lst.listening:
            return
        if want:
            lst.sock.listen(128)
            lst.sock.setblocking(False)
            lst.accept_task = asyncio.get_running_loop().create_task(self._accept_loop(lst))
        else:
            # A socket cannot stop listening: rebind the same port without listen() (refused).
            if lst.accept_task is not None:
                lst.accept_task.cancel()
            lst.sock.close()
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", lst.port))
            lst.sock = sock
        lst.listening = want

    def _inputs(self) -> tuple[float, ...]:
        names = ("db.json", "faults.json", "clock.json", "config.json")
        stamps = []
        for name in names:
            try:
                stamps.append((self.state / name).stat().st_mtime)
            except FileNotFoundError:
                stamps.append(0.0)
        return tuple(stamps)

    def reconcile(self, *, full: bool = False) -> None:
        """Listen where a connection would get past TCP; drop connections of instances that stopped.

        Cheap when nothing changed: only `refused` instances are re-evaluated (ssh becomes ready
        with time alone); everything is when a state file changed, and at least every FULL_S (an
        instance that vanishes on a timer). Connections and sessions re-check on their own anyway."""
        if not self.listeners:
            return
        inputs = self._inputs()
        clock = time.monotonic()
        since = clock - self._full_at
        full = full or (inputs != self._seen and since >= CHANGED_S) or since >= FULL_S
        if full:
            self._seen, self._full_at = inputs, clock
        elif all(lst.last != "refused" for lst in self.listeners.values()):
            return
        store = Store(self.state)
        moment = Moment.of(store)
        instances = store.read_shared()["instances"]
        for inst_id, lst in list(self.listeners.items()):
            if not full and lst.last != "refused":
                continue
            inst = instances.get(inst_id)
            v = lst.last = verdict(moment, inst)
            self._set_listening(lst, v != "refused")
            if v == "gone" and lst.conns:
                for conn in list(lst.conns):
                    conn.abort()
            if inst is None:
                # purged from the database: nothing will ever connect again
                self._set_listening(lst, False)
                lst.sock.close()
                del self.listeners[inst_id]

    def close(self) -> None:
        for lst in self.listeners.values():
            if lst.accept_task is not None:
                lst.accept_task.cancel()
            for conn in list(lst.conns):
                conn.abort()
            lst.sock.close()
        self.listeners.clear()
        for session in list(self.sessions):
            session.hangup()

    # -- connections -------------------------------------------------------------------------
    async def _accept_loop(self, lst: Listener) -> None:
        loop = asyncio.get_running_loop()
        sock = lst.sock
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError:
                return
            task = loop.create_task(self._serve(lst, conn))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _serve(self, lst: Listener, conn: socket.socket) -> None:
        store = Store(self.state)
        v = verdict_now(store, lst.inst_id)
        if v in ("refused", "reset"):
            if v == "reset":
                # A dying sshd resets the connection once the client's banner arrived: the client
                # reports `kex_exchange_identification: read: Connection reset by peer`.
                conn.setblocking(False)
                with contextlib.suppress(OSError, TimeoutError):
                    await asyncio.wait_for(asyncio.get_running_loop().sock_recv(conn, 256), 5)
            _reset(conn)  # (refused: it stopped being ready since the last reconcile)
            return
        if v == "gone":
            # The VM does not answer: hold the connection silent, then drop it.
            await asyncio.sleep(10.0 * store.speed)
            conn.close()
            return
        conn.setblocking(False)
        try:
            ssh = await asyncssh.run_server(
                conn,
                server_host_keys=[self.host_key],
                server_factory=lambda: Server(self, lst),
                encoding=None,
                allow_scp=False,
                agent_forwarding=True,
                x11_forwarding=False,
                login_timeout=30,
                keepalive_interval=0,
            )
        except (OSError, asyncssh.Error):
            return
        lst.conns.add(ssh)

        def forget(lst: Listener = lst, ssh: asyncssh.SSHServerConnection = ssh) -> None:
            lst.conns.discard(ssh)

        # asyncssh has no close callback on the connection object itself; poll its wait_closed.
        async def watch() -> None:
            with contextlib.suppress(Exception):
                await ssh.wait_closed()
            forget()

        task = asyncio.get_running_loop().create_task(watch())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


class Server(asyncssh.SSHServer):
    def __init__(self, sshd: SSHD, lst: Listener) -> None:
        self.sshd = sshd
        self.lst = lst
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return username == USER and key.public_data == self.sshd.client_key.public_data

    def session_requested(self) -> Session:
        assert self.conn is not None
        return Session(self.sshd, self.lst, self.conn)


class Session(asyncssh.SSHServerSession[bytes]):
    """One channel: `bash -c <command>` (or `bash -s` for a shell) in the instance sandbox."""

    def __init__(self, sshd: SSHD, lst: Listener, conn: asyncssh.SSHServerConnection) -> None:
        self.sshd = sshd
        self.lst = lst
        self.conn = conn
        self.chan: Any = None
        self.command: str | None = None
        self.pty = False
        self.proc: asyncio.subprocess.Process | None = None
        self.master_fd: int | None = None
        self.stdin_queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.stdin_bytes = 0
        self.writable = asyncio.Event()
        self.writable.set()
        self.task: asyncio.Task[None] | None = None
        self.closed = False

    # asyncssh callbacks
    def connection_made(self, chan: Any) -> None:
        self.chan = chan
        # Paused while any output waits for the client's window, resumed when none does: the
        # exit status is sent only once `writable` says the output is all out.
        chan.set_write_buffer_limits(high=0, low=0)
        self.sshd.sessions.add(self)

    def pty_requested(self, term_type: str, term_size: Any, term_modes: Any) -> bool:
        self.pty = True
        return True

    def shell_requested(self) -> bool:
        return True

    def exec_requested(self, command: str) -> bool:
        self.command = command if isinstance(command, str) else command.decode()
        return True

    def session_started(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data: bytes, datatype: Any) -> None:
        self.stdin_bytes += len(data)
        self.stdin_queue.put_nowait(data)

    def eof_received(self) -> bool:
        self.stdin_queue.put_nowait(None)
        return True  # keep the channel half-open: the command still answers

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.writable.set()  # nothing will drain any more: let the pumps and the exit go on
        self.hangup()
        self.sshd.sessions.discard(self)

    def hangup(self) -> None:
        """The client went away: sshd sends SIGHUP to the session."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGHUP)

    # the session
    async def _run(self) -> None:
        store = Store(self.sshd.state)
        inst = _instance(store, self.lst.inst_id)
        v = verdict(Moment.of(store), inst)
        if v in ("gone", "reset", "refused") or inst is None:
            self.conn.abort()
            return
        if v == "hang":
            return  # session open, nothing ever runs or answers; the client's deadline ends it
        slow = float(store.fault("slow_exec_s") or 0)
        if slow:
            await asyncio.sleep(slow * store.speed)
        if self.closed:
            return
        name = str(inst["name"])
        command = self.command
        record_call(
            store.calls_path,
            "bash",
            ["-c", command] if command is not None else ["-s"],
            where="remote",
            instance=name,
        )
        env = self.chan.get_environment() if self.chan is not None else {}
        call_id = env.get(CALL_ENV)
        try:
            code = await self._execute(store, str(inst["id"]), command)
        finally:
            if call_id:
                record_stdin(store.calls_path, str(call_id), self.stdin_bytes)
        await self._output_sent()
        if self.closed:
            return
        with contextlib.suppress(Exception):
            if code < 0:
                self.chan.exit_with_signal(signal.Signals(-code).name.removeprefix("SIG"))
            else:
                self.chan.exit(code)

    async def _output_sent(self) -> None:
        """As sshd: the session's output, then EOF, then its exit status. asyncssh's exit() sends
        the status at once, ahead of output still waiting for the client's window, and an
        OpenSSH client that has its status may end with the output cut short (seen under load:
        1 of 3 MB of a `docker logs`, exit 0)."""
        with contextlib.suppress(Exception):
            self.chan.write_eof()
        await self.writable.wait()  # set once nothing is buffered (limits 0/0), or on hang-up

    def _env(self, sandbox: Path) -> dict[str, str]:
        env = {
            "HOME": str(sandbox / "home"),
            "PATH": f"{sandbox / 'bin'}:/usr/bin:/bin",
            "USER": USER,
            "LOGNAME": USER,
            "SHELL": "/bin/bash",
            "LANG": "C.UTF-8",
            "PWD": str(sandbox / "home"),
            "SSH_CONNECTION": f"127.0.0.1 0 127.0.0.1 {self.lst.port}",
            MARKER: str(self.sshd.state.resolve()),
        }
        if self.pty:
            env["TERM"] = "xterm-256color"
        return env

    async def _execute(self, store: Store, inst_id: str, command: str | None) -> int:
        sandbox = store.instance_dir(inst_id)
        argv = ["bash", "-c", command] if command is not None else ["bash", "-s"]
        if self.pty:
            return await self._execute_pty(sandbox, argv)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=sandbox / "home",
            env=self._env(sandbox),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        below_the_daemon(proc.pid)
        self.proc = proc
        assert proc.stdout is not None
        assert proc.stderr is not None
        feeder = asyncio.get_running_loop().create_task(self._feed(proc))
        await asyncio.gather(
            self._pump(proc.stdout, self.chan.write), self._pump(proc.stderr, self.chan.write_stderr)
        )
        code = await proc.wait()
        feeder.cancel()
        return code

    async def _feed(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdin is not None
        try:
            while True:
                chunk = await self.stdin_queue.get()
                if chunk is None:
                    break
                proc.stdin.write(chunk)
                await proc.stdin.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                proc.stdin.close()

    async def _pump(self, reader: asyncio.StreamReader, write: Callable[[bytes], None]) -> None:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            await self.writable.wait()
            if self.closed:
                continue  # keep draining so the program is not blocked on a full pipe
            with contextlib.suppress(Exception):
                write(chunk)

    async def _execute_pty(self, sandbox: Path, argv: list[str]) -> int:
        """With a tty: one stream (stderr merged), stdin is the terminal, not a pipe."""
        master, slave = pty.openpty()
        self.master_fd = master
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=sandbox / "home",
            env=self._env(sandbox),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        below_the_daemon(proc.pid)
        os.close(slave)
        self.proc = proc
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def readable() -> None:
            try:
                data = os.read(master, 65536)
            except OSError as e:
                data = b""
                if e.errno not in (errno.EIO, errno.EBADF):
                    raise
            if not data:
                loop.remove_reader(master)
                if not done.done():
                    done.set_result(None)
                return
            if not self.closed:
                with contextlib.suppress(Exception):
                    self.chan.write(data)

        os.set_blocking(master, False)
        loop.add_reader(master, readable)

        async def feed() -> None:
            while True:
                chunk = await self.stdin_queue.get()
                if chunk is None:
                    with contextlib.suppress(OSError):
                        os.write(master, b"\x04")  # ^D: EOF on a terminal
                    return
                with contextlib.suppress(OSError):
                    os.write(master, chunk)

        feeder = loop.create_task(feed())
        await done
        code = await proc.wait()
        feeder.cancel()
        os.close(master)
        return code
