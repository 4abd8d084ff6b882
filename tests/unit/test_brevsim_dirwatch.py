"""tests/brevsim/dirwatch.py: the inotify watch a waiting `docker wait` sleeps on wakes for a state
file renamed into place and for the directory's removal, and not for unrelated writes."""

from __future__ import annotations

import select
import shutil
from pathlib import Path

from tests.brevsim.dirwatch import DirWatch


def _ready(watch: DirWatch, timeout: float = 5.0) -> bool:
    return bool(select.select([watch.fd], [], [], timeout)[0])


def test_a_rename_into_the_directory_wakes_the_watch(tmp_path: Path) -> None:
    watch = DirWatch.open(tmp_path)
    assert watch is not None, "inotify is missing: docker wait would fall back to polling"
    try:
        (tmp_path / ".state.json.tmp").write_text("{}")
        assert _ready(watch)  # the temp file's creation
        watch.drain()
        assert not _ready(watch, 0.0)  # drained: nothing pending
        (tmp_path / ".state.json.tmp").replace(tmp_path / "state.json")
        assert _ready(watch)
    finally:
        watch.close()


def test_appending_to_a_log_does_not_wake_it_but_removing_the_directory_does(tmp_path: Path) -> None:
    d = tmp_path / "container"
    d.mkdir()
    log = d / "log"
    log.write_text("")
    watch = DirWatch.open(d)
    assert watch is not None
    try:
        with log.open("a") as f:
            f.write("epoch 1\n")  # a running job's log grows all the time: no wake-ups for that
        assert not _ready(watch, 0.2)
        shutil.rmtree(d)
        assert _ready(watch)
        watch.drain()
    finally:
        watch.close()


def test_a_missing_directory_gives_no_watch(tmp_path: Path) -> None:
    assert DirWatch.open(tmp_path / "gone") is None
