"""The bench's idle-priority cgroup (tests/bench/idle_cgroup.py) against a stand-in cgroup tree in
a temporary directory: which knob it sets, why it gives up, and that the wrapped command runs as the
very process that wrote itself into `cgroup.procs` (so nothing of the fill starts outside)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.bench import idle_cgroup
from tests.bench.idle_cgroup import IdleCgroup


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    v1, v2 = tmp_path / "v1-cpu", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    monkeypatch.setattr(idle_cgroup, "V1", v1)
    monkeypatch.setattr(idle_cgroup, "V2", v2)
    return v1, v2


def test_a_v1_cpu_hierarchy_gets_a_child_group_at_cpu_idle(roots: tuple[Path, Path]) -> None:
    v1, _ = roots
    (v1 / "cgroup.procs").write_text("")
    group, why = IdleCgroup.create("fill")
    assert group is not None, why
    assert group.path == v1 / f"fill-{os.getpid()}"
    assert (group.path / "cpu.idle").read_text() == "1"
    assert "cpu.idle = 1" in group.how


def test_v2_is_used_only_when_it_offers_the_cpu_controller(roots: tuple[Path, Path]) -> None:
    _, v2 = roots
    (v2 / "cgroup.procs").write_text("")
    (v2 / "cgroup.controllers").write_text("memory pids")
    group, why = IdleCgroup.create("fill")
    assert group is None
    assert "no cgroup cpu controller" in why
    (v2 / "cgroup.controllers").write_text("cpu memory pids")
    group, why = IdleCgroup.create("fill")
    assert group is not None, why
    assert group.path.parent == v2


def test_a_group_whose_knobs_cannot_be_written_is_removed_and_says_which(
    roots: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    v1, _ = roots
    (v1 / "cgroup.procs").write_text("")
    real_write = Path.write_text

    def refuse_knobs(self: Path, data: str, *a: object, **kw: object) -> int:
        if self.name.startswith("cpu."):
            raise PermissionError(13, "Permission denied", str(self))
        return real_write(self, data)

    monkeypatch.setattr(Path, "write_text", refuse_knobs)
    group, why = IdleCgroup.create("fill")
    assert group is None
    assert "neither cpu.idle nor cpu.shares is writable" in why
    assert list(v1.iterdir()) == [v1 / "cgroup.procs"]


def test_the_wrapped_command_is_the_process_that_joined_the_group(roots: tuple[Path, Path]) -> None:
    v1, _ = roots
    (v1 / "cgroup.procs").write_text("")
    group, why = IdleCgroup.create("fill")
    assert group is not None, why
    cmd = group.wrap([sys.executable, "-c", "import os; print(os.getpid())", "arg with space"])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=30)
    joined = (group.path / "cgroup.procs").read_text().split()
    assert joined == [out.stdout.strip()]  # exec kept the pid: the payload itself is in the group


def test_kill_all_reports_and_stops_what_is_left(roots: tuple[Path, Path]) -> None:
    v1, _ = roots
    (v1 / "cgroup.procs").write_text("")
    group, why = IdleCgroup.create("fill")
    assert group is not None, why
    straggler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        (group.path / "cgroup.procs").write_text(f"{straggler.pid}\n")

        # A stand-in file does not drop exited pids the way the kernel does: empty it once the
        # straggler is gone, as the kernel would.
        def reaper() -> None:
            straggler.wait(30)
            (group.path / "cgroup.procs").write_text("")

        t = threading.Thread(target=reaper)
        t.start()
        left = group.kill_all(grace=30)
        t.join()
        assert len(left) == 1 and left[0].startswith(f"{straggler.pid} python")
        assert straggler.returncode == -15
    finally:
        straggler.kill()
        straggler.wait()


def test_a_v1_hierarchy_that_refuses_a_group_falls_through_to_v2(
    roots: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    v1, v2 = roots
    (v1 / "cgroup.procs").write_text("")
    (v2 / "cgroup.procs").write_text("")
    (v2 / "cgroup.controllers").write_text("cpu")
    real_mkdir = Path.mkdir

    def refuse_v1(self: Path, *a: object, **kw: object) -> None:
        if self.parent == v1:
            raise PermissionError(13, "Read-only file system", str(self))
        real_mkdir(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", refuse_v1)
    group, why = IdleCgroup.create("fill")
    assert group is not None, why
    assert group.path.parent == v2
