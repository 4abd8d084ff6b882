"""The benchmark's arithmetic, pure (unit-tested in tests/unit/test_bench_figures.py)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

MIB = 1024 * 1024


@dataclass(frozen=True)
class Figure:
    """One line of the final table. `value` None = not measured (`note` says why)."""

    name: str
    value: float | None
    unit: str
    goal: float | None = None
    sense: Literal["<=", ">="] = "<="
    note: str = ""
    incomplete: bool = False  # measured on part of the sample only (e.g. jobs failed): a miss

    @property
    def verdict(self) -> str:
        if self.value is None:
            return "n/a"
        if self.incomplete:
            return "MISS"
        if self.goal is None:
            return "-"
        ok = self.value <= self.goal if self.sense == "<=" else self.value >= self.goal
        return "pass" if ok else "MISS"

    @property
    def goal_text(self) -> str:
        return "-" if self.goal is None else f"{self.sense} {self.goal:g}"


def ratio(numerator: float, denominator: float) -> float:
    if denominator <= 0:
        raise ValueError(f"ratio denominator must be > 0, got {denominator}")
    return numerator / denominator


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (e.g. pod bytes over running jobs)."""
    if len({x for x, _ in points}) < 2:
        raise ValueError("a slope needs points at two different x at least")
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    num = sum((x - mx) * (y - my) for x, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return num / den


def per_job_per_minute(calls: int, jobs: int, wall_seconds: float, factor: float) -> float:
    """Calls per job per minute of REAL time: the window lasted wall_seconds / factor real seconds
    (every interval that drives the calls was scaled by the same factor)."""
    if jobs <= 0 or wall_seconds <= 0:
        raise ValueError("need jobs > 0 and a window > 0 s")
    return calls / jobs / (wall_seconds / factor / 60.0)


def cores(cpu_seconds: float, wall_seconds: float) -> float:
    if wall_seconds <= 0:
        raise ValueError("need a window > 0 s")
    return cpu_seconds / wall_seconds


def boot_and_ready(durations: Mapping[str, float]) -> float:
    """One fresh instance's own boot + ready (nominal s): DEPLOYING, then the first exec can
    succeed after `ssh_delay_s`; the build (`build_s`) runs during that wait, not after it."""
    return durations["deploy_s"] + max(durations["ssh_delay_s"], durations["build_s"])


def idle_billed(create_sent: float, delete_sent: float, work: float) -> float:
    """Seconds an instance was billed without doing work: from `brev create` sent to `brev delete`
    sent, minus its work (boot and first exec, transfers, the run). Clamped at 0: the simulated
    durations start when the simulator receives the call, a little after `ts`."""
    return max(0.0, delete_sent - create_sent - work)


def union_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length of the union of [start, end) intervals (overlaps counted once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def mean(values: Iterable[float]) -> float | None:
    vals = list(values)
    return statistics.fmean(vals) if vals else None


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
