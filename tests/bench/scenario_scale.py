"""The burst (every duration and operator interval x F), on its own operator: 100 jobs applied at
once on an idle operator, with Brev's boot times (3-10 min spread over the jobs), first exec and
pull: all Running / the slowest job's own boot+ready+pull.

The burst runs alone and at its own factor (`--burst-scale`, 0.1): its measured span holds fixed
costs that do not shrink with F — 100 jobs' first API writes, `brev create` processes, ssh and
docker process starts, about 10 s of wall time on 2 cores — which wall / F multiplies 1/F-fold
(at 0.05 that alone is 200 "real" s, 0.11 of the ratio).

The footprint (memory slope, CPU, calls, RSS at 1,000) is measured at F = 1 in scenario_rss.py.
Isolation (exit -> delete, kubectl delete -> stopped) is measured at real speed in
scenario_isolation.py: at F < 1 the simulator's fixed process costs would be part of it.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field

from controller.settings import Settings
from tests.bench import sampling
from tests.bench.figures import boot_and_ready
from tests.bench.scale import Scale
from tests.bench.stack import Bench, Scenario, brev_call_times, running_or_beyond
from tests.status_paths import instance

LONG_EPOCHS = 1000  # x 300 s nominal: runs far past the end of the scenario
API_VERBS = frozenset({"ls", "create", "delete", "start", "stop", "refresh", "search"})  # paced calls


@dataclass
class ScaleResult:
    burst_jobs: int = 0
    burst_wall: float | None = None  # wall s: the apply call returned -> the last job Running
    burst_apply_wall: float = 0.0  # wall s the one kubectl call creating the burst took
    burst_not_running: list[str] = field(default_factory=list)
    burst_failed: int = 0
    burst_reached: int = 0
    burst_reasons: dict[str, int] = field(default_factory=dict)
    burst_create_to_running_max: float | None = None
    burst_pod_cpu_per_job: float | None = None
    burst_physical: float | None = None  # nominal s: the slowest burst job's own boot+ready+pull
    burst_factor: float = 1.0  # the F the burst ran at
    # Under Brev's rate limit (the simulator's api_rate_limit, calls per nominal second):
    brev_limit: float | None = None
    brev_pace: tuple[float, int] | None = None  # the operator's (rate per nominal s, burst)
    api_refusals: int = 0  # calls Brev refused (429)
    api_calls: int = 0  # calls to Brev's API during the burst
    api_max_per_s: int = 0  # the most in any one window of the simulator's limit
    api_window: float = 1.0  # that window, nominal s (one real second at least)
    problems: list[str] = field(default_factory=list)


# Brev boots take 3-10 minutes, one instance to the next; the burst's instances get deploy times
# spread evenly over that range (nominal s), so the burst is judged against its slowest job's own
# boot+ready+pull. Identical boots would make every instance answer at the same instant, a
# thundering herd no real burst produces (and one the simulator's single sshd process and two
# cores serialise).
BOOT_SPREAD = (180.0, 600.0)


def spread_boots(
    names: list[str], lo: float = BOOT_SPREAD[0], hi: float = BOOT_SPREAD[1]
) -> dict[str, dict[str, float]]:
    """`instance_durations` entries giving job i of `names` a deploy time evenly spaced in
    [lo, hi]; matched by `-<job name>-` inside the instance name (tbj-<mark>-<ns>-<job>-<uid>)."""
    n = len(names)
    step = (hi - lo) / (n - 1) if n > 1 else 0.0
    return {f"-{name}-": {"deploy_s": round(lo + i * step, 3)} for i, name in enumerate(names)}


def physical_to_running(durations: dict[str, float]) -> float:
    """One job's own boot + ready + pull (nominal s): deploying, the first exec (the build runs
    meanwhile), the pull."""
    return boot_and_ready(durations) + durations["pull_seconds"]


class _Steps:
    """The scenario's steps on one operator; each fills its part of `res`."""

    def __init__(self, bench: Bench, sc: Scenario) -> None:
        self.bench, self.sc = bench, sc
        self.res = ScaleResult()
        self.nominal = sc.scale.brev_durations()
        self.timeout = max(180.0, 12 * sc.scale.wall(physical_to_running(self.nominal)))
        assert sc.op.proc is not None
        self.pid, self.home = sc.op.proc.pid, sc.sim.home

    def wave(self, label: str, size: int) -> list[str]:
        names = [f"{label}-{i:03d}" for i in range(size)]
        self.sc.apply_all(names, epochs=LONG_EPOCHS, epoch_seconds=self.nominal["epoch_seconds"])
        return names

    def burst(self, size: int) -> None:
        sc, res = self.sc, self.res
        res.burst_jobs = size
        res.burst_factor = sc.scale.factor
        names = [f"b-{i:03d}" for i in range(size)]
        spread = spread_boots(names)
        sc.sim.set_faults(instance_durations=spread)
        res.burst_physical = max(physical_to_running({**self.nominal, **d}) for d in spread.values())
        cpu0 = sampling.cpu(self.pid, self.home)
        began = time.time()
        jobs = self.wave("b", size)
        # kubectl creates the objects one POST after another: seconds that do not shrink with F.
        # They count as themselves (real seconds), the rest of the burst as scaled time.
        applied = time.time()
        res.burst_apply_wall = applied - began
        res.burst_not_running = sc.watch.wait(jobs, running_or_beyond, self.timeout)
        res.burst_pod_cpu_per_job = (sampling.cpu(self.pid, self.home).pod - cpu0.pod) / size
        seen = {n: sc.watch.first_seen[n]["Running"] for n in jobs if "Running" in sc.watch.first_seen[n]}
        failed = [sc.watch.status.get(n, {}) for n in jobs if sc.watch.status.get(n, {}).get("outcome")]
        res.burst_failed = len(failed)
        for st in failed:
            reason = str(st.get("reason"))
            res.burst_reasons[reason] = res.burst_reasons.get(reason, 0) + 1
        res.burst_reached = len(seen)
        if seen:  # the last of those that got there; the figure says how many did not
            res.burst_wall = max(seen.values()) - applied
        calls = sc.calls()
        spans = []
        for n, running_at in seen.items():
            created = brev_call_times(calls, "create", {str(instance(sc.watch.status[n]).get("name"))})
            if created:
                spans.append(running_at - min(created))
        res.burst_create_to_running_max = max(spans, default=None)
        api = sorted(
            c.ts
            for c in calls
            if c.program == "brev" and c.argv[:1] and c.argv[0] in API_VERBS and "--help" not in c.argv
            and c.ts >= began
        )  # fmt: skip
        window = max(1.0, sc.scale.wall(1.0))  # the simulator's own window (Store.admit_api_call)
        res.api_window = sc.scale.real(window)
        res.api_calls = len(api)
        res.api_max_per_s = max(
            (bisect.bisect_left(api, t + window) - i for i, t in enumerate(api)), default=0
        )
        res.api_refusals = sc.sim.api_refusals()


def run(bench: Bench, size: int, burst_scale: Scale, brev_limit: float | None = None) -> ScaleResult:
    """The burst of `size` jobs at `burst_scale`, alone on its own operator; with `brev_limit`,
    under Brev's rate limit (calls per nominal second, the simulator refusing past it) with the
    operator's pace at its defaults (scaled by 1/F as every rate)."""
    burst = bench.scenario("burst-limited" if brev_limit else "burst", scale=burst_scale)
    try:
        if brev_limit is not None:
            burst.sim.set_faults(api_rate_limit=brev_limit)
        steps = _Steps(bench, burst)
        if brev_limit is not None:
            rate, cap = (
                Settings.model_fields["brev_rate"].default,
                Settings.model_fields["brev_burst"].default,
            )
            steps.res.brev_limit, steps.res.brev_pace = brev_limit, (float(rate), int(cap))
        steps.burst(size)
        return steps.res
    finally:
        burst.close()


def rate_forced(res: ScaleResult) -> float:
    """Nominal seconds the operator's pace alone needs for the burst's calls to Brev's API (the
    calls beyond the bucket's burst at its rate): what the rate limit adds to the physical time,
    at most."""
    if res.brev_pace is None:
        return 0.0
    rate, cap = res.brev_pace
    return max(0.0, res.api_calls - cap) / rate if rate > 0 else 0.0
