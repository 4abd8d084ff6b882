"""The failover bench's pod and cloud cgroups (tests/bench/pod_cgroups.py) against stand-in cgroup
trees in a temporary directory: they nest under the bench's own group (so inside the footprint's
idle group they stay idle), a wrapped command joins the cpu group and its cpuacct twin as itself,
and the CPU time is read from whichever file the hierarchy offers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench import pod_cgroups
from tests.bench.pod_cgroups import CpuGroup


def _stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, self_cgroup: str) -> Path:
    (tmp_path / "self").write_text(self_cgroup)
    monkeypatch.setattr(pod_cgroups, "V1", tmp_path)
    monkeypatch.setattr(pod_cgroups, "V2", tmp_path)
    monkeypatch.setattr(pod_cgroups, "SELF", tmp_path / "self")
    return tmp_path


def test_v1_groups_nest_under_the_benchs_own_in_cpu_and_cpuacct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _stand_in(tmp_path, monkeypatch, "2:cpuacct:/\n1:cpu:/taobrev-bench-fill-7\n0::/\n")
    (root / "cpu" / "taobrev-bench-fill-7").mkdir(parents=True)
    (root / "cpu" / "cgroup.procs").write_text("")
    (root / "cpuacct").mkdir()
    group, why = CpuGroup.create("pod", weight=4)
    assert group is not None, why
    name = f"pod-{os.getpid()}"
    assert (root / "cpu" / "taobrev-bench-fill-7" / name / "cpu.shares").read_text() == "4096"
    assert group.dirs == (root / "cpu" / "taobrev-bench-fill-7" / name, root / "cpuacct" / name)
    (group.dirs[1] / "cpuacct.usage").write_text("2500000000\n")
    assert group.cpu_seconds() == 2.5

    cmd = group.wrap([sys.executable, "-c", "import os; print(os.getpid())", "arg with space"])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=30)
    for d in group.dirs:  # exec kept the pid: the payload itself joined both
        assert (d / "cgroup.procs").read_text().split() == [out.stdout.strip()]

    (group.dirs[0] / "cgroup.procs").write_text("")  # the kernel drops exited pids
    for d in group.dirs:
        for f in d.iterdir():
            f.unlink()
    assert group.remove() == []
    assert not any(d.exists() for d in group.dirs)


def test_co_mounted_cpu_and_cpuacct_make_one_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _stand_in(tmp_path, monkeypatch, "1:cpu,cpuacct:/\n0::/\n")
    (root / "cpu,cpuacct").mkdir()
    (root / "cpu,cpuacct" / "cgroup.procs").write_text("")
    (root / "cpu").symlink_to(root / "cpu,cpuacct")
    (root / "cpuacct").symlink_to(root / "cpu,cpuacct")
    real_mkdir = Path.mkdir

    def with_usage(self: Path, *a: object, **kw: object) -> None:
        real_mkdir(self, *a, **kw)  # type: ignore[arg-type]
        (self / "cpuacct.usage").write_text("0\n")  # the kernel's files of a new group

    monkeypatch.setattr(Path, "mkdir", with_usage)
    group, why = CpuGroup.create("pod")
    assert group is not None, why
    assert group.dirs == (root / "cpu,cpuacct" / f"pod-{os.getpid()}",)
    assert group.usage_file == group.dirs[0] / "cpuacct.usage"


def test_v2_reads_usage_usec_and_needs_the_cpu_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _stand_in(tmp_path, monkeypatch, "0::/bench\n")
    (root / "bench").mkdir()
    (root / "cgroup.controllers").write_text("memory pids")
    group, why = CpuGroup.create("cloud")
    assert group is None and "no writable cgroup cpu controller" in why
    (root / "cgroup.controllers").write_text("cpu memory pids")
    group, why = CpuGroup.create("cloud", weight=4)
    assert group is not None, why
    assert group.dirs == (root / "bench" / f"cloud-{os.getpid()}",)
    assert (group.dirs[0] / "cpu.weight").read_text() == "400"
    (group.dirs[0] / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    assert group.cpu_seconds() == 1.5


def test_a_group_that_cannot_be_made_says_why_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _stand_in(tmp_path, monkeypatch, "2:cpuacct:/\n1:cpu:/\n0::/\n")
    (root / "cpu").mkdir()
    (root / "cpu" / "cgroup.procs").write_text("")
    (root / "cpuacct").mkdir()
    real_mkdir = Path.mkdir

    def refuse_cpuacct(self: Path, *a: object, **kw: object) -> None:
        if self.parent == root / "cpuacct":
            raise PermissionError(13, "Permission denied", str(self))
        real_mkdir(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", refuse_cpuacct)
    group, why = CpuGroup.create("pod")
    assert group is None and "Permission denied" in why
    assert list((root / "cpu").iterdir()) == [root / "cpu" / "cgroup.procs"]
