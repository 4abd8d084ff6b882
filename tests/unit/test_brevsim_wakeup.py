"""tests/brevsim/wakeup.py: the FIFO a waiting `docker wait` sleeps on wakes for a state write and
for the container's removal, not for unrelated writes, never reads as a busy EOF, and costs no
kernel quota (the inotify watches it replaced ran out at 128 waiting calls)."""

from __future__ import annotations

import os
import select
from pathlib import Path

from tests.brevsim import wakeup
from tests.brevsim.container import Docker, remove_dir
from tests.brevsim.store import Store
from tests.brevsim.wakeup import Wakeup


def _ready(w: Wakeup, timeout: float = 5.0) -> bool:
    return bool(select.select([w.fd], [], [], timeout)[0])


def _opened(d: Path) -> Wakeup:
    w = Wakeup.open(d)
    assert w is not None, f"no FIFO in {d}: docker wait would fall back to polling"
    return w


def test_a_poke_wakes_the_waiter_once_and_a_drained_fifo_stays_quiet(tmp_path: Path) -> None:
    w = _opened(tmp_path)
    try:
        assert not _ready(w, 0.0)
        wakeup.poke(tmp_path)
        assert _ready(w)
        w.drain()
        # The poker closed its end: without the waiter's own writer the FIFO would read EOF and
        # be readable forever.
        assert not _ready(w, 0.2)
    finally:
        w.close()
    assert not list((tmp_path / wakeup.WAITERS).iterdir()), "close() must remove its FIFO"


def test_a_state_write_wakes_it_and_a_log_append_does_not(tmp_path: Path) -> None:
    docker = Docker(Store(tmp_path), "i1")
    d = docker.containers_dir / "c1"
    d.mkdir(parents=True)
    w = _opened(d)
    try:
        with (d / "log").open("a") as f:
            f.write("epoch 1\n")  # a running job's log grows all the time: no wake-ups for that
        assert not _ready(w, 0.2)
        docker.set_state("c1", Status="exited", ExitCode=0)
        assert _ready(w)
    finally:
        w.close()


def test_removing_the_container_wakes_it(tmp_path: Path) -> None:
    d = tmp_path / "c1"
    d.mkdir()
    w = _opened(d)
    try:
        remove_dir(d)
        assert _ready(w)
        assert not d.exists()
    finally:
        w.close()


def test_a_killed_waiters_fifo_is_removed_by_the_next_poke(tmp_path: Path) -> None:
    w = _opened(tmp_path)
    os.close(w.fd)
    os.close(w._wfd)  # what a SIGKILL leaves: the FIFO, no reader
    wakeup.poke(tmp_path)
    assert not w.path.exists()


def test_many_waiters_each_get_a_fifo_past_the_inotify_instance_limit(tmp_path: Path) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    n = min(limit + 16, 400)  # two fds each: stay well inside the open-files limit
    waiters = [_opened(tmp_path) for _ in range(n)]
    try:
        wakeup.poke(tmp_path)
        assert all(_ready(w) for w in waiters)
    finally:
        for w in waiters:
            w.close()


def test_a_missing_directory_gives_no_fifo(tmp_path: Path) -> None:
    assert Wakeup.open(tmp_path / "gone") is None


def test_the_next_waiter_removes_a_killed_waiters_fifo(tmp_path: Path) -> None:
    """A wait ended by `timeout`'s SIGTERM leaves its FIFO; one re-arm per 120 s for days must
    not pile them up until the container's exit."""
    live = _opened(tmp_path)
    old = _opened(tmp_path)
    os.close(old.fd)
    os.close(old._wfd)
    new = _opened(tmp_path)
    try:
        assert not old.path.exists()
        assert live.path.exists()
        assert not _ready(live, 0.2), "looking at the other FIFOs must not wake their waiters"
    finally:
        new.close()
        live.close()
