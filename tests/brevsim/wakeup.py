"""Wake-ups for the simulator's long `docker wait`: one FIFO per waiting call in its container's
`waiters/` directory; every state write (`Docker.set_state`) and the directory's removal poke
each FIFO, so a wait sleeps until something changed.

Why not inotify (the first design, `dirwatch.py`): an inotify instance per waiting call meets the
per-user limit `fs.inotify.max_user_instances` (128 by default) at ~128 running jobs, and past it
every wait fell back to polling (0.5 s, a full state read every 2.5 s): ~0.7 ms CPU per second per
wait, 0.28 cores at 400 running jobs, measured with strace and /proc on the footprint bench. It
also took the quota from every other program of the user (kube-apiserver reloads its
certificates through inotify). A FIFO uses no kernel quota and costs nothing until a write.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
from pathlib import Path

WAITERS = "waiters"
_seq = itertools.count()


class Wakeup:
    """Readable (`fd`) once the container's state was written or its directory removed."""

    def __init__(self, path: Path, rfd: int, wfd: int) -> None:
        self.path, self.fd, self._wfd = path, rfd, wfd

    @classmethod
    def open(cls, container_dir: Path) -> Wakeup | None:
        """None when the container's directory is gone (the caller's next state read says so) or
        FIFOs are not available (the caller polls)."""
        # A wait the operator's `timeout` ended (SIGTERM) or killed left its FIFO: the next
        # wait on the container removes it, so they never pile up on a long run.
        _each_waiter(container_dir, poke=False)
        path = container_dir / WAITERS / f"{os.getpid()}-{next(_seq)}"
        try:
            path.parent.mkdir(exist_ok=True)
            os.mkfifo(path, 0o600)
        except OSError:
            return None
        try:
            rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            _unlink(path)
            return None
        try:
            # A writer of our own: once a poker closed its end, a FIFO without writers reads EOF
            # and would be readable forever (a busy loop).
            wfd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            os.close(rfd)
            _unlink(path)
            return None
        return cls(path, rfd, wfd)

    def drain(self) -> None:
        """Consume the pending pokes (how many does not matter: the caller re-reads the state)."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 4096):
                pass

    def close(self) -> None:
        os.close(self.fd)
        os.close(self._wfd)
        _unlink(self.path)


def poke(container_dir: Path) -> None:
    """Wake every call waiting on this container."""
    _each_waiter(container_dir, poke=True)


def _each_waiter(container_dir: Path, *, poke: bool) -> None:
    """Poke (or just look at) each FIFO; one whose waiter is gone (killed: no reader left) is
    removed."""
    d = container_dir / WAITERS
    try:
        paths = list(d.iterdir())
    except OSError:
        return
    for path in paths:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            if e.errno == errno.ENXIO:  # no reader: its waiter is gone
                _unlink(path)
            continue
        try:
            if poke:
                os.write(fd, b"\0")
        except BlockingIOError:
            pass  # the pipe is full: a wake-up is pending anyway
        finally:
            os.close(fd)


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
