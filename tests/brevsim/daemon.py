"""The simulator daemon: ONE process per simulator, bound to loopback only, holding what a fleet of
instances runs for a long time: every instance's sshd (sshd.py) and every detached TAO container
(engine.py). It also starts (as a fresh interpreter) and stops the zygote the instances' `docker`
and `nvidia-smi` fork from (zygote.py). Started and stopped by the harness (BrevSim); short-lived
simulator processes talk to it through control.py.

It dies with its harness: it exits when its parent goes away (an interrupted run), and on the way
out it kills every process carrying this simulator's marker (reaper.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import asyncssh

from tests.brevsim import container as ct
from tests.brevsim import reaper, zygote
from tests.brevsim.control import MARKER, address
from tests.brevsim.engine import Engine
from tests.brevsim.sshd import SSHD, below_the_daemon
from tests.brevsim.store import Store

RECONCILE_S = 0.1  # how often listeners follow the lazily computed instance lifecycle
WATCH_TICKS = 5  # containers check their instance (deleted, vanished) every 0.5 s


def load_key(path: Path) -> asyncssh.SSHKey:
    """An ed25519 key, generated once per simulator (the host key, and the user's brev.pem)."""
    if path.exists():
        return asyncssh.read_private_key(path)
    key = asyncssh.generate_private_key("ssh-ed25519", comment="brevsim")
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.export_private_key("openssh"))
    tmp.replace(path)
    path.with_name(path.name + ".pub").write_bytes(key.export_public_key("openssh"))
    return key


class Daemon:
    def __init__(self, state: Path, *, detach: bool = False) -> None:
        self.state = state
        self.detach = detach
        self.sshd = SSHD(state, load_key(state / "ssh_host_ed25519_key"), load_key(state / "brev.pem"))
        self.engine = Engine(state)
        self.done = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            req = json.loads(line)
            reply = await self.dispatch(req)
        except Exception as e:  # a bad request is answered, never fatal
            reply = {"error": f"{type(e).__name__}: {e}"}
        with contextlib.suppress(OSError):
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
            writer.close()

    async def dispatch(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        loop = asyncio.get_running_loop()
        if op == "ping":
            return {"pid": os.getpid(), "containers": self.engine.count(), "ports": len(self.sshd.listeners)}
        if op == "ports":
            ports = {str(i): self.sshd.port_of(str(i)) for i in req.get("ids", [])}
            self.sshd.reconcile(full=True)
            return {"ports": ports}
        if op == "reconcile":
            self.sshd.reconcile(full=True)
            self.engine.watch()
            return {}
        if op == "run":
            # tao.run's setup reads files: keep the event loop free while it starts
            await loop.run_in_executor(
                None,
                lambda: self.engine.run(str(req["instance"]), str(req["cid"]), remove=bool(req["remove"])),
            )
            return {}
        if op == "signal":
            found = self.engine.signal(str(req["instance"]), str(req["cid"]), str(req["signal"]))
            return {"found": found}
        if op == "stop":
            self.done.set()
            return {}
        raise ValueError(f"unknown op {op!r}")

    async def tick(self) -> None:
        parent = os.getppid()
        ticks = 0
        while not self.done.is_set():
            self.sshd.reconcile()
            if ticks % WATCH_TICKS == 0:
                self.engine.watch()
            ticks += 1
            if os.getppid() != parent and not self.detach:
                self.done.set()  # the harness died without stopping us
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), RECONCILE_S)

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        _watch_children_by_pidfd(loop)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self.done.set)
        server = await asyncio.start_unix_server(self.handle, path=address(self.state))
        ct.LOCAL_ENGINE = self.engine  # in-process strikes (tao.run) reach the engine directly
        sys.stdout.write(f"ready {os.getpid()}\n")
        sys.stdout.flush()
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the harness stopped reading
        await self.tick()
        server.close()
        self.sshd.close()
        self.engine.kill_all()


def _watch_children_by_pidfd(loop: asyncio.AbstractEventLoop) -> None:
    """Every ssh session's `bash` is an asyncio subprocess. Python 3.11's default watcher starts a
    thread per child that blocks in waitpid: a thread start per session, and one blocked thread
    per waiting `docker wait` (~1,000 at the footprint bench's fill). A pidfd per child on the
    loop does the same work (3.12 picks it by default and deprecates choosing). The operator's
    `controller/brev/childwatch.py` does the same; the simulator may not import the operator
    (.importlinter: brevsim-independent), hence this copy of its few lines."""
    if sys.version_info >= (3, 12) or not _pidfd_supported():
        return
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(loop)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.get_event_loop_policy().set_child_watcher(watcher)


def _pidfd_supported() -> bool:
    # os.pidfd_open exists on any Linux build of Python; kernels before 5.3 refuse it (ENOSYS),
    # and a pidfd watcher there would fail every session's start.
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


def main(state: str, argv: list[str]) -> int:
    root = Path(state)
    os.environ[MARKER] = str(root.resolve())
    threading.stack_size(512 * 1024)  # a container thread mostly sleeps: keep its stack small
    # a socket per instance, a log file per container, connections: far beyond a default 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    # the instances' Python programs fork from the zygote: started first, it imports while we do
    python = str(Store(root).config().get("python") or sys.executable)
    programs = zygote.start(python, root, dict(os.environ))
    below_the_daemon(programs.pid)  # the instances' programs, as the sessions that run them
    try:
        daemon = Daemon(root, detach="--detach" in argv)
        zygote.wait_ready(programs)
        asyncio.run(daemon.serve())
    finally:
        programs.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            programs.wait(timeout=5)
        reaper.reap(root, spare={os.getpid()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
