"""The operator's footprint at up to 1,000 Running jobs: the operator at its NOMINAL intervals
(F = 1: poll, docker-wait bound, probe backoff as in production, so 1,000 running jobs cost what
they would), the simulator with very short boot/ready/pull so jobs reach Running quickly, and
endless epochs so they stay there.

Jobs are applied in waves (one kubectl call each), the next as soon as fewer than half a wave are
still starting, until `target` are Running or the time budget ends. Then: the operator's RSS, the
pod's RSS/PSS sum and process count, and CPU + brev/ssh calls over a steady window. If the budget
ends first, the figures are those at the count reached (and say so)."""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field

from tests.bench import sampling
from tests.bench.figures import cores, per_job_per_minute
from tests.bench.scale import Scale
from tests.bench.stack import Bench, running_or_beyond
from tests.devenv.controlplane import ControlPlaneError

REAL = Scale(1.0)
FAST: dict[str, float] = {
    "deploy_s": 1.0,
    "ssh_delay_s": 1.0,
    "build_s": 0.0,
    "delete_s": 1.0,
    "stop_s": 1.0,
    "start_s": 1.0,
    "pull_seconds": 1.0,
    "epoch_seconds": 100_000.0,
    "upload_s": 0.0,
    "create_poll_s": 1.0,
    "ssh_wait_interval_s": 1.0,
}
ENDLESS_EPOCHS = 1000


@dataclass
class RssResult:
    target: int
    budget: float
    applied: int = 0
    running: int = 0
    failed: int = 0
    fill_wall: float = 0.0  # first apply -> the last wave Running (or the budget)
    memory: sampling.Memory | None = None
    window_wall: float = 0.0
    window_jobs: int = 0
    operator_cores: float | None = None
    pod_cores: float | None = None
    calls_per_job_min: float | None = None
    problems: list[str] = field(default_factory=list)


def run(bench: Bench, target: int, wave: int, budget: float, window: float) -> RssResult:
    """`budget`: wall seconds for applying and reaching Running (the window comes after)."""
    res = RssResult(target=target, budget=budget)
    sc = bench.scenario("rss", scale=REAL, durations=FAST)
    try:
        assert sc.op.proc is not None
        pid, home = sc.op.proc.pid, sc.sim.home
        began = time.monotonic()
        deadline = began + budget
        names: list[str] = []
        # Keep about one wave starting at a time: the next wave goes when fewer than half a wave
        # of the applied jobs are still on their way to Running (a pipeline, not lock-step waves).
        while time.monotonic() < deadline:
            with sc.watch.lock:
                starting = sum(1 for n in names if not running_or_beyond(sc.watch.status.get(n, {})))
            if len(names) >= target and not starting:
                break
            if len(names) < target and starting < wave / 2:
                batch = [f"r-{i:04d}" for i in range(len(names), min(target, len(names) + wave))]
                try:
                    sc.apply_all(batch, epochs=ENDLESS_EPOCHS, epoch_seconds=FAST["epoch_seconds"])
                except (subprocess.SubprocessError, ControlPlaneError) as e:
                    res.problems.append(f"creating jobs {batch[0]}..{batch[-1]} failed: {e}"[:300])
                    break  # figures at what runs now
                names += batch
                continue
            with sc.watch.changed:
                sc.watch.changed.wait(1.0)
        else:
            res.problems.append(f"time budget ({budget:.0f} s) ended before {target} jobs were Running")
        res.fill_wall = time.monotonic() - began
        res.applied = len(names)
        res.running = sc.running()
        res.failed = sum(1 for n in names if sc.watch.status.get(n, {}).get("outcome"))
        res.memory = sampling.memory(pid, home)
        c0, t0 = sampling.cpu(pid, home), time.time()
        threading.Event().wait(window)  # a measurement window, not a wait for a signal
        c1, t1 = sampling.cpu(pid, home), time.time()
        res.window_wall, res.window_jobs = t1 - t0, sc.running()
        res.operator_cores = cores(c1.operator - c0.operator, c1.at - c0.at)
        res.pod_cores = cores(c1.pod - c0.pod, c1.at - c0.at)
        if res.window_jobs:
            n_calls = sampling.calls_between(sc.calls(), t0, t1)
            res.calls_per_job_min = per_job_per_minute(n_calls, res.window_jobs, t1 - t0, REAL.factor)
        return res
    finally:
        sc.close()
