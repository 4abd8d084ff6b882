"""CPU cgroups standing in for the operator's pod and for Brev's cloud (the failover bench).

In production a replica's pod gets the CPU its node's cgroup gives it, and the instances run at
Brev. On the bench host the simulated cloud (the daemon's asyncssh server, the containers) takes
the same two cores, and with autogroup scheduling (`sched_autogroup_enabled` = 1) every `setsid`
(each ssh master, each simulator session) is a scheduling group as heavy as the whole operator:
at 1,000 running, the restart's operator got 0.07-0.10 cores and stalled 6-14 s (`fca87e7`).

Here each replica runs in a cgroup of its own (its whole pod: the operator, `brev`, ssh and its
masters, which stay in it across `setsid`), and the simulator in another; a task in a non-root
cgroup is not autogrouped. The pod and the simulated cloud (Brev's machines in production) weigh
the same (POD_WEIGHT): under contention each gets an equal share, the pod's like a pod's CPU
request on a node. The bench prints what each used, which is what the pod's request must cover
(docs/sizing.md). The groups nest under the bench's own (inside the
footprint's idle group when `make bench` runs it), and a `cpuacct` twin (cgroup v1; v2's
cpu.stat) gives each group's exact CPU time, daemonised masters and reaped children included.

Needs a writable cpu controller, like idle_cgroup.py; without one `create` says why and the bench
runs as before (the figures then say so).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

# x the default weight. Equal to the cloud's: at 4x (e2c36bd) a restart at 1,000 running gave the
# pod's ssh 0.79 cores and the simulated instances 0.54 during the re-arm, which took 99 s (91 s at
# equal weights), and exits 60 s later were seen in 6.8 s median (4.3 s at equal weights).
POD_WEIGHT = 1.0
V1 = Path("/sys/fs/cgroup")  # v1 hierarchies are V1/<controller>
V2 = Path("/sys/fs/cgroup")  # the unified hierarchy (v2-only hosts)
SELF = Path("/proc/self/cgroup")


def _own(controller: str) -> str | None:
    """This process's path in the v1 hierarchy of `controller` ("" on v2: its unified path)."""
    for line in _read(SELF).splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(",") or (controller == "" and names == ""):
            return path
    return None


@dataclass
class CpuGroup:
    name: str
    dirs: tuple[Path, ...]  # where a member's pid is written: the cpu group (and its cpuacct twin)
    usage_file: Path  # cpuacct.usage (ns) on v1, cpu.stat (usage_usec) on v2

    @classmethod
    def create(cls, name: str, weight: float = 1.0) -> tuple[CpuGroup | None, str]:
        """A child of this process's cpu (and cpuacct) group at `weight` times the default weight
        (v1 cpu.shares 1024, v2 cpu.weight 100), or (None, why)."""
        cpu, acct = _own("cpu"), _own("cpuacct")
        made: list[Path] = []
        try:
            if cpu is not None and acct is not None and (V1 / "cpu" / "cgroup.procs").exists():
                # (co-mounted "cpu,cpuacct" hierarchies are one directory reached by two names)
                leaf = f"{name}-{os.getpid()}"
                cpu_dir = (V1 / "cpu" / cpu.lstrip("/")).resolve() / leaf
                acct_dir = (V1 / "cpuacct" / acct.lstrip("/")).resolve() / leaf
                for path in dict.fromkeys((cpu_dir, acct_dir)):
                    path.mkdir()
                    made.append(path)
                if weight != 1.0:
                    (cpu_dir / "cpu.shares").write_text(str(round(1024 * weight)))
                return cls(name, tuple(made), acct_dir / "cpuacct.usage"), ""
            unified = _own("")
            if unified is not None and "cpu" in _read(V2 / "cgroup.controllers").split():
                path = V2 / unified.lstrip("/") / f"{name}-{os.getpid()}"
                path.mkdir()
                made.append(path)
                if weight != 1.0:
                    (path / "cpu.weight").write_text(str(round(100 * weight)))
                return cls(name, (path,), path / "cpu.stat"), ""
        except OSError as e:
            for path in reversed(made):
                with contextlib.suppress(OSError):
                    path.rmdir()
            return None, f"cannot create cgroup {name}: {e}"
        return None, "no writable cgroup cpu controller (v1 cpu + cpuacct, or v2 with cpu)"

    def wrap(self, cmd: list[str]) -> list[str]:
        """`cmd` started inside the group: the shell moves itself in, then execs `cmd` (same pid)."""
        moves = " && ".join(f'echo $$ > "{d / "cgroup.procs"}"' for d in self.dirs)
        return ["sh", "-c", f'{moves} && exec "$@"', "sh", *cmd]

    def adopt(self, pids: list[int]) -> None:
        """Move running processes in (their later children follow them)."""
        for d in self.dirs:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):  # gone meanwhile: nothing to move
                    (d / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        return [int(p) for p in _read(self.dirs[0] / "cgroup.procs").split()]

    def cpu_seconds(self) -> float:
        text = _read(self.usage_file)
        if self.usage_file.name == "cpuacct.usage":
            return int(text or 0) / 1e9
        stat = dict(line.split() for line in text.splitlines() if line.strip())
        return int(stat.get("usage_usec", 0)) / 1e6

    def remove(self, grace: float = 10.0) -> list[str]:
        """Kill what is left (SIGTERM, SIGKILL after `grace`) and remove the group. Returns what was
        left ("pid comm"); the stack's own close leaves nothing, so any is a leak."""
        left = [f"{pid} {_read(Path(f'/proc/{pid}/comm')).strip()}" for pid in self.pids()]
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.1)  # v1 has no event for "a group emptied"
        for d in reversed(self.dirs):
            with contextlib.suppress(OSError):
                d.rmdir()
        return left


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
