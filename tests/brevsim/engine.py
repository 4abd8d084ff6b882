"""The docker daemon's in-process containers: a detached TAO container is a thread of the daemon.

A training container mostly sleeps, so it costs no OS process: `docker run -d` of the TAO image
asks the daemon (control.py) to run `tao.run` in a thread, logging to the container's log file
exactly as the process form (container.shim_main) does, with the same on-disk records. State.Pid
is the thread's id (so `/proc/<Pid>` exists while the container runs, as for a real container's
init), ShimPid the daemon's pid (a dead daemon means dead containers, as a dead shim does).
`docker stop` (SIGTERM) sets the run's stop event (TAO exits 143); SIGKILL, an instance that is
deleted, stopped or vanishes record exit 137 at once and stop the thread.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO, cast

from tests.brevsim import container as ct
from tests.brevsim import tao
from tests.brevsim.store import Store, read_json


class Killed(BaseException):
    """SIGKILL reached an in-process container: raised from its next wait, so it prints nothing more."""


class KillableStop(threading.Event):
    """The run's stop event: set means SIGTERM (the program winds down, TAO exits 143); `kill()`
    makes every wait raise Killed instead, as SIGKILL ends a process wherever it is."""

    def __init__(self) -> None:
        super().__init__()
        self.killed = False
        self.finishing = False  # set with it: end training now, successfully (tao.py: SIGUSR1)

    def kill(self) -> None:
        self.killed = True
        self.set()

    def wait(self, timeout: float | None = None) -> bool:
        fired = super().wait(timeout)
        if self.killed:
            raise Killed
        return fired


@dataclass
class Running:
    instance_id: str
    cid: str
    remove: bool
    disappear_at: float | None
    stop: KillableStop = field(default_factory=KillableStop)
    thread: threading.Thread | None = None


class Engine:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.store = Store(state)
        self.running: dict[tuple[str, str], Running] = {}
        self.lock = threading.Lock()

    def run(self, instance_id: str, cid: str, *, remove: bool) -> None:
        """Start the container's program in a thread; returns once State says running."""
        docker = ct.Docker(self.store, instance_id)
        cfg = docker.config(cid)
        if cfg is None:
            raise KeyError(f"no container {cid} on instance {instance_id}")
        meta = read_json(self.store.instance_dir(instance_id) / "meta.json", {})
        run = Running(instance_id, cid, remove, meta.get("disappear_at"))
        started = threading.Event()
        run.thread = threading.Thread(
            target=self._main, args=(run, cfg, started), name=f"ctr-{cid[:12]}", daemon=True
        )
        with self.lock:
            self.running[(instance_id, cid)] = run
        run.thread.start()
        started.wait(10)

    def _main(self, run: Running, cfg: dict[str, object], started: threading.Event) -> None:
        store = Store(self.state)  # this thread's own view (faults are read once per Store)
        docker = ct.Docker(store, run.instance_id)
        rootfs = docker.containers_dir / run.cid / "rootfs"
        (rootfs / "root").mkdir(parents=True, exist_ok=True)
        mounts = list(cfg.get("Mounts", []))  # type: ignore[call-overload]
        Path(ct.host_path(mounts, str(rootfs), str(cfg.get("WorkingDir") or "/"))).mkdir(
            parents=True, exist_ok=True
        )
        tid = threading.get_native_id()
        docker.set_state(
            run.cid,
            Status="running",
            Running=True,
            Pid=tid,
            PidStart=ct.proc_starttime(tid),
            StartedAt=ct.iso(),
            ShimPid=os.getpid(),
            ShimStart=ct.proc_starttime(os.getpid()),
            InProcess=True,
        )
        started.set()
        code = 0
        log: TextIO
        try:
            with docker.log_path(run.cid).open("a", buffering=1, encoding="utf-8", errors="replace") as raw:
                log = cast(TextIO, ct.StampedLog(raw, docker.log_times_path(run.cid)))
                code = tao.run(
                    str(self.state),
                    run.instance_id,
                    mounts,
                    str(rootfs),
                    list(cfg["Args"]),  # type: ignore[call-overload]
                    env=ct.container_env(dict(cfg), str(rootfs)),
                    out=log,
                    err=log,
                    stop=run.stop,
                )
        except Killed:
            code = 137
        except Exception as e:  # the program crashed: what a container's uncaught exception does
            with contextlib.suppress(OSError), docker.log_path(run.cid).open("a") as f:
                f.write(f"Traceback (most recent call last):\n{type(e).__name__}: {e}\n")
            code = 1
        finally:
            with self.lock:
                self.running.pop((run.instance_id, run.cid), None)
        if run.stop.killed:
            return  # the killer records it (137) once this thread is gone
        if run.remove:
            ct.remove_dir(docker.containers_dir / run.cid)
        else:
            docker.set_state(
                run.cid, Status="exited", Running=False, ExitCode=code, FinishedAt=ct.iso(), Pid=0
            )

    def signal(self, instance_id: str, cid: str, sig: str) -> bool:
        """TERM: ask the program to stop; KILL: it is dead now (137); USR1: the harness asks it to
        finish now, exit 0 (tao.py). False if not running here."""
        with self.lock:
            run = self.running.get((instance_id, cid))
        if run is None:
            return False
        if sig == "KILL":
            self._kill(run)
        else:
            run.stop.finishing = sig == "USR1"
            run.stop.set()
        return True

    def _kill(self, run: Running) -> None:
        run.stop.kill()
        if run.thread is not None and run.thread is not threading.current_thread():
            run.thread.join(5)  # it dies at its next wait: milliseconds
        ct.Docker(Store(self.state), run.instance_id).set_state(
            run.cid, Status="exited", Running=False, ExitCode=137, FinishedAt=ct.iso(), Pid=0
        )
        with self.lock:
            self.running.pop((run.instance_id, run.cid), None)

    def watch(self) -> None:
        """Containers die with their instance (deleted, stopped or vanished)."""
        with self.lock:
            runs = list(self.running.values())
        store = Store(self.state)
        for run in runs:
            if ct.instance_gone(store, run.instance_id, run.disappear_at):
                self._kill(run)

    def kill_all(self) -> int:
        with self.lock:
            runs = list(self.running.values())
        for run in runs:
            self._kill(run)
        return len(runs)

    def count(self) -> int:
        with self.lock:
            return len(self.running)
