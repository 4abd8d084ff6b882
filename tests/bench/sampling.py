"""What the operator pod costs, read from /proc and the simulator's argv record: memory (operator
+ children + its ssh masters, tests/footprint.py), CPU seconds, brev+ssh calls in a window."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from tests.bench.figures import MIB
from tests.brevsim.harness import SimCall
from tests.footprint import PodMemory, descendants, masters_of, pod_memory

TICK = os.sysconf("SC_CLK_TCK")
CALL_PROGRAMS = ("brev", "ssh")


@dataclass(frozen=True)
class Memory:
    """Bytes resident: RSS (shared pages counted in every process) and PSS (shared pages split
    among their users, closer to what the pod's cgroup is charged)."""

    operator: int
    children: int
    n_children: int
    pod_pss: int

    @property
    def pod(self) -> int:
        return self.operator + self.children

    def text(self) -> str:
        return (
            f"pod RSS {self.pod / MIB:.0f} MiB (operator {self.operator / MIB:.0f} MiB + "
            f"{self.n_children} other processes {self.children / MIB:.0f} MiB), "
            f"PSS {self.pod_pss / MIB:.0f} MiB"
        )


def memory(operator_pid: int, home: Path) -> Memory:
    rss: PodMemory = pod_memory(operator_pid, include=masters_of(home))
    pss: PodMemory = pod_memory(operator_pid, include=masters_of(home), metric="pss")
    return Memory(rss.operator_rss, rss.children_rss, rss.n_children, pss.operator_rss + pss.children_rss)


def _cpu_ticks(pid: int, *, reaped_children: bool) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0
    # fields[0] is state (stat field 3): utime/stime are fields 14/15, cutime/cstime 16/17.
    own = int(fields[11]) + int(fields[12])
    return own + (int(fields[13]) + int(fields[14]) if reaped_children else 0)


@dataclass(frozen=True)
class Cpu:
    """CPU seconds so far: the operator process alone, and with every child it ran (reaped ones
    included) plus its live descendants and ssh masters."""

    at: float
    operator: float
    pod: float


def cpu(operator_pid: int, home: Path) -> Cpu:
    test = masters_of(home)
    others = descendants(operator_pid) | {
        int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and test(int(p.name))
    }
    own = _cpu_ticks(operator_pid, reaped_children=False)
    total = _cpu_ticks(operator_pid, reaped_children=True) + sum(
        _cpu_ticks(pid, reaped_children=True) for pid in others
    )
    return Cpu(time.monotonic(), own / TICK, total / TICK)


def calls_between(calls: list[SimCall], start: float, end: float) -> int:
    """Local brev and ssh processes the operator started in [start, end) (wall clock)."""
    return sum(1 for c in calls if c.where == "local" and c.program in CALL_PROGRAMS and start <= c.ts < end)
