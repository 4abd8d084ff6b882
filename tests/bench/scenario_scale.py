"""Burst, isolation and footprint on one operator, in waves of long-running jobs:

1. wave 1 (e.g. 50 jobs) -> all Running: memory at 50;
2. an "exiter" job is Running, then wave 2 (50) is applied at once; the exiter's container exits
   while they probe or pull: exit -> `brev delete` sent, minus its own upload time; then memory at
   100, and CPU plus brev+ssh calls over a steady window;
3. wave 3 (100) applied at once = the burst: all Running / one job's physical boot+ready+pull;
   memory at 200;
4. `kubectl delete` of a Running job -> its container stopped.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from tests.bench import sampling
from tests.bench.figures import cores, per_job_per_minute
from tests.bench.scenario_idle import transfer_seconds
from tests.bench.stack import Bench, Scenario, brev_call_times, running_or_beyond

LONG_EPOCHS = 1000  # x 300 s nominal: runs far past the end of the scenario
BUSY = ("WaitingExec", "Pulling")


@dataclass
class ScaleResult:
    memory: list[tuple[int, sampling.Memory]] = field(default_factory=list)
    window_wall: float = 0.0
    window_jobs: int = 0
    operator_cores: float | None = None
    pod_cores: float | None = None
    calls_per_job_min: float | None = None
    burst_jobs: int = 0
    burst_wall: float | None = None
    burst_not_running: list[str] = field(default_factory=list)
    burst_failed: int = 0
    burst_reached: int = 0
    burst_reasons: dict[str, int] = field(default_factory=dict)
    burst_create_to_running_max: float | None = None
    burst_pod_cpu_per_job: float | None = None
    exit_to_delete_wall: float | None = None
    exiter_upload_wall: float = 0.0
    exiter_others_busy: int | None = None
    exiter_others_phases: dict[str, int] = field(default_factory=dict)
    delete_to_stop_wall: float | None = None
    problems: list[str] = field(default_factory=list)


def _running(sc: Scenario) -> int:
    with sc.watch.lock:
        return sum(1 for st in sc.watch.status.values() if st.get("phase") == "Running")


def physical_to_running(durations: dict[str, float]) -> float:
    """One job's own boot + ready + pull (nominal s): deploying, the first exec, build, the pull."""
    return durations["deploy_s"] + durations["ssh_delay_s"] + durations["build_s"] + durations["pull_seconds"]


class _Steps:
    """The scenario's steps on one operator; each fills its part of `res`."""

    def __init__(self, bench: Bench, sc: Scenario, window: float) -> None:
        self.bench, self.sc, self.window = bench, sc, window
        self.res = ScaleResult()
        self.nominal = bench.scale.brev_durations()
        self.timeout = max(180.0, 12 * bench.scale.wall(physical_to_running(self.nominal)))
        assert sc.op.proc is not None
        self.pid, self.home = sc.op.proc.pid, sc.sim.home

    def wave(self, label: str, size: int) -> list[str]:
        names = [f"{label}-{i:03d}" for i in range(size)]
        self.sc.apply_all(names, epochs=LONG_EPOCHS, epoch_seconds=self.nominal["epoch_seconds"])
        return names

    def wait_running(self, label: str, names: list[str]) -> list[str]:
        left = self.sc.watch.wait(names, running_or_beyond, self.timeout)
        if left:
            self.res.problems.append(f"{label}: {len(left)} jobs not Running after {self.timeout:.0f} s")
        return left

    def sample_memory(self) -> None:
        self.res.memory.append((_running(self.sc), sampling.memory(self.pid, self.home)))

    def isolation(self, size: int) -> None:
        """The exiter runs deploy + ssh_delay/2 nominal seconds, so it exits while the next wave
        (applied as soon as it is Running) is probing its fresh instances."""
        sc, res = self.sc, self.res
        sc.apply_all(
            ["exiter"],
            epochs=2,
            epoch_seconds=(self.nominal["deploy_s"] + self.nominal["ssh_delay_s"] / 2) / 2,
        )
        self.wait_running("exiter", ["exiter"])
        w2 = [f"w2-{i:03d}" for i in range(size)]
        busy: list[int] = []

        def snapshot() -> None:
            with sc.watch.lock:
                phases = [str(sc.watch.status.get(n, {}).get("phase")) for n in w2]
                busy.append(sum(1 for p in phases if p in BUSY))
                for p in phases:
                    res.exiter_others_phases[p] = res.exiter_others_phases.get(p, 0) + 1

        exit_watch = sc.container_exit("exiter", on_exit=snapshot)
        self.wave("w2", size)
        self.wait_running("wave 2", w2)
        if sc.watch.wait(["exiter"], lambda s: bool(s.get("finishedAt")), self.timeout):
            res.problems.append("exiter never finished")
        exit_watch.stop.set()
        exit_watch.join()
        res.exiter_others_busy = busy[0] if busy else None
        if exit_watch.finished_at is None:
            res.problems.append("the exiter's container exit was never seen")
            return
        st = sc.watch.status.get("exiter", {})
        refs = {str(st.get("instanceName") or ""), str(st.get("instanceId") or "")} - {""}
        calls = sc.calls()
        deletes = brev_call_times(calls, "delete", refs)
        if deletes:
            exited, deleted = exit_watch.finished_at, min(deletes)
            res.exit_to_delete_wall = deleted - exited
            # its own upload: the measured transfer spans (aws-cli containers, aws calls) in between
            remote = [
                c for c in calls if c.where == "remote" and c.instance in refs and exited <= c.ts < deleted
            ]
            res.exiter_upload_wall = transfer_seconds(remote)

    def steady(self) -> None:
        """CPU and calls over a window (a measurement window, not a wait for a signal)."""
        res, jobs = self.res, _running(self.sc)
        c0, t0 = sampling.cpu(self.pid, self.home), time.time()
        threading.Event().wait(self.window)
        c1, t1 = sampling.cpu(self.pid, self.home), time.time()
        res.window_wall, res.window_jobs = t1 - t0, jobs
        res.operator_cores = cores(c1.operator - c0.operator, c1.at - c0.at)
        res.pod_cores = cores(c1.pod - c0.pod, c1.at - c0.at)
        if jobs:
            n_calls = sampling.calls_between(self.sc.calls(), t0, t1)
            res.calls_per_job_min = per_job_per_minute(n_calls, jobs, t1 - t0, self.bench.scale.factor)

    def burst(self, size: int) -> None:
        sc, res = self.sc, self.res
        res.burst_jobs = size
        cpu0 = sampling.cpu(self.pid, self.home)
        began = time.time()
        w3 = self.wave("w3", size)
        res.burst_not_running = sc.watch.wait(w3, running_or_beyond, self.timeout)
        res.burst_pod_cpu_per_job = (sampling.cpu(self.pid, self.home).pod - cpu0.pod) / size
        seen = {n: sc.watch.first_seen[n]["Running"] for n in w3 if "Running" in sc.watch.first_seen[n]}
        failed = [sc.watch.status.get(n, {}) for n in w3 if sc.watch.status.get(n, {}).get("outcome")]
        res.burst_failed = len(failed)
        for st in failed:
            reason = str(st.get("reason"))
            res.burst_reasons[reason] = res.burst_reasons.get(reason, 0) + 1
        res.burst_reached = len(seen)
        if seen:  # the last of those that got there; the figure says how many did not
            res.burst_wall = max(seen.values()) - began
        calls = sc.calls()
        spans = []
        for n, running_at in seen.items():
            created = brev_call_times(calls, "create", {str(sc.watch.status[n].get("instanceName"))})
            if created:
                spans.append(running_at - min(created))
        res.burst_create_to_running_max = max(spans, default=None)

    def kubectl_delete(self, victim: str) -> None:
        stopped = self.sc.container_exit(victim)
        asked = time.time()
        self.sc.stack.kubectl("delete", "tbj", victim, "-n", self.sc.stack.namespace, "--wait=false")
        stopped.join(timeout=60)
        stopped.stop.set()
        if stopped.finished_at is not None:
            self.res.delete_to_stop_wall = stopped.finished_at - asked
        else:
            self.res.problems.append(f"{victim}: container not stopped 60 s after kubectl delete")


def run(bench: Bench, waves: tuple[int, int, int], window: float) -> ScaleResult:
    sc = bench.scenario("scale")
    try:
        steps = _Steps(bench, sc, window)
        w1 = steps.wave("w1", waves[0])
        steps.wait_running("wave 1", w1)
        steps.sample_memory()
        steps.isolation(waves[1])
        steps.sample_memory()
        steps.steady()
        steps.burst(waves[2])
        steps.sample_memory()
        steps.kubectl_delete(w1[0])
        return steps.res
    finally:
        sc.close()
