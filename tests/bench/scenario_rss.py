"""The operator's footprint from 50 to 1,000 Running jobs: the operator at its NOMINAL intervals
(F = 1: poll, docker-wait bound, probe backoff as in production, so N running jobs cost what they
would), the simulator with very short boot/ready/pull so jobs reach Running quickly, and endless
epochs so they stay there. What a running job holds does not depend on how long its instance took
to boot, so only the way there is shortened.

Jobs are applied in waves (one kubectl call each). At each of `stops` (50, 100, 200) the fill
pauses until every applied job is Running and waits for its container's exit (its ssh client is
up), then samples the pod's memory (the per-job slope). Past
the last stop the waves pipeline: the next goes as soon as fewer than half a wave are still
starting, until `target` are Running or the time budget ends. Then, once no job is still starting
and every running job's container has started and waits for its exit (steady state: a starting
job's probes, pulls, container start and status writes are not what 1,000 running jobs cost),
the operator's RSS, the pod's RSS/PSS sum and process count, and CPU + brev/ssh calls over a
window. If the budget ends first, the figures are those at the count reached (and say so). The
fill's CPU is split by process group (operator, its brev/ssh children, simulator, kube-apiserver,
etcd, the bench itself) so a slow fill says what it waits for."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.bench import sampling
from tests.bench.figures import cores, per_job_per_minute
from tests.bench.log_viewers import LogViewers
from tests.bench.scale import Scale
from tests.bench.stack import Bench, Scenario, running_or_beyond
from tests.devenv.controlplane import ControlPlaneError
from tests.devenv.operator import OperatorProcess
from tests.footprint import descendants, masters_of, processes
from tests.status_paths import instance

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
# Checkpoint syncs off in the fill (the longest interval the CRD allows). A sync is one short ssh
# call per job per interval (default 600 s) that starts a detached aws-cli container ON THE
# INSTANCE; here every instance is this machine, and each sync ran the real AWS CLI (~1 CPU s):
# from 10 minutes into the fill, 1.7 CPU s per second at 1,000 jobs, starving the fill it
# measures. The operator's part, the one call per interval, is added to the calls figure instead
# (report.py: DEFAULT_SYNC_CALLS_PER_JOB_MIN).
NO_CHECKPOINTS = {"checkpointIntervalSeconds": 86400}
SETTLE = 300.0  # s: after the fill, how long the last starters may take before the window anyway
# ... and after a fill cut short by its budget: the caller's budget holds (the window is then
# flagged not steady if jobs are still starting), so the bench ends on time.
LATE_SETTLE = 15.0
# s before the fill's budget ends: no new wave (its jobs reach Running and start their containers
# inside the budget)
APPLY_CUTOFF = 120.0
REARM_SETTLE = 120.0  # s: after the fill, how long the last containers may take to start
# One log follower (`kubectl taobrev logs -f`) per this many running jobs over the final sample
# and window (issue 27: the footprint goals hold with them).
FOLLOW_EVERY = 10
FOLLOW_SETTLE = 120.0  # s: for the followers' remote streams to open


@dataclass(frozen=True)
class Window:
    """CPU and brev+ssh calls of the operator pod over a window at `jobs` Running."""

    jobs: int
    wall: float
    operator_cores: float
    pod_cores: float
    calls_per_job_min: float | None
    cpu: dict[str, float]  # group -> cores
    steady: bool


@dataclass
class RssResult:
    target: int
    budget: float
    points: list[tuple[int, sampling.Memory]] = field(default_factory=list)  # at each stop
    applied: int = 0
    running: int = 0
    failed: int = 0
    fill_wall: float = 0.0  # first apply -> the last wave Running (or the budget)
    memory: sampling.Memory | None = None
    window_wall: float = 0.0
    window_jobs: int = 0
    window_steady: bool = False  # no job was starting when the window began, none started in it
    operator_cores: float | None = None
    pod_cores: float | None = None
    calls_per_job_min: float | None = None
    fill_cpu: dict[str, float] = field(default_factory=dict)  # group -> cores over the fill
    window_cpu: dict[str, float] = field(default_factory=dict)  # group -> cores over the window
    followers: int = 0  # log followers (kubectl taobrev logs -f) held open over the sample and window
    problems: list[str] = field(default_factory=list)

    @property
    def fill_rate(self) -> float | None:
        """Jobs that reached Running per minute of fill (what reaching the target costs)."""
        return self.running / self.fill_wall * 60.0 if self.fill_wall > 0 and self.running else None


def _ticks(pid: int, *, reaped: bool) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if reaped else 0)


def cpu_groups(sc: Scenario, op: OperatorProcess | None = None) -> tuple[float, Counter[str]]:
    """CPU seconds so far per process group (children an alive parent reaped count for it); `op`:
    the operator that acts (a standby after a failover), `sc.op` by default."""
    acting = op or sc.op
    assert acting.proc is not None
    pid = acting.proc.pid
    pods = [g for name, g in sc.groups.items() if name.startswith("pod ") and pid in g.pids()]
    if pods and "cloud" in sc.groups:  # cgroups (pod_cgroups.py): each group's exact CPU time
        ticks = Counter({"operator": _ticks(pid, reaped=False)})
        ticks["operator's brev/ssh"] = round(pods[0].cpu_seconds() * sampling.TICK) - ticks["operator"]
        ticks["simulator"] = round(sc.groups["cloud"].cpu_seconds() * sampling.TICK)
        if sc.sim.daemon_pid is not None:  # one process: its asyncssh server serves every instance
            ticks["simulator's daemon"] = _ticks(sc.sim.daemon_pid, reaped=False)
        return _others(ticks)
    # The ssh masters left the operator's tree but not its pod (its own home). Not `env()`: it
    # requests a fresh token (a kubectl call) inside the window being measured.
    test = masters_of(Path(acting.extra_env.get("HOME") or sc.sim.home))
    pod = descendants(pid) | {p.pid for p in processes() if test(p.pid)}
    sim = set(sc.sim.processes())
    out: Counter[str] = Counter()
    out["operator"] = _ticks(pid, reaped=False)
    out["operator's brev/ssh"] = (
        _ticks(pid, reaped=True) - out["operator"] + sum(_ticks(p, reaped=True) for p in pod - sim)
    )
    out["simulator"] = sum(_ticks(p, reaped=True) for p in sim)
    return _others(out, skip=sim)


def _others(out: Counter[str], skip: set[int] | frozenset[int] = frozenset()) -> tuple[float, Counter[str]]:
    """`out` (ticks) with the bench's and the control plane's, as (monotonic now, CPU seconds)."""
    out["bench + kubectl watch"] = _ticks(os.getpid(), reaped=True)
    for p in processes():
        if p.comm in ("kube-apiserver", "etcd") and p.pid not in skip:
            out[p.comm] += _ticks(p.pid, reaped=True)
    return time.monotonic(), Counter({k: v / sampling.TICK for k, v in out.items()})


def cores_between(a: tuple[float, Counter[str]], b: tuple[float, Counter[str]]) -> dict[str, float]:
    wall = b[0] - a[0]
    return {k: round(cores(max(0.0, b[1][k] - a[1][k]), wall), 3) for k in b[1]} if wall > 0 else {}


def _starting(sc: Scenario, names: list[str]) -> int:
    with sc.watch.lock:
        return sum(1 for n in names if not running_or_beyond(sc.watch.status.get(n, {})))


def _fill(
    sc: Scenario,
    res: RssResult,
    wave: int,
    stops: Sequence[int],
    at_stop: Callable[[int, list[str]], None],
) -> list[str]:
    """Apply waves until `res.target` are Running or `res.budget` ends; returns the names applied.
    At each of `stops` the fill waits until every applied job is Running, then calls `at_stop`."""
    began = time.monotonic()
    deadline = began + res.budget
    # No new wave this close to the end: the last ones reach Running inside the budget, so the
    # window after it is steady (no job starting) at whatever count was reached.
    last_apply = deadline - APPLY_CUTOFF
    names: list[str] = []
    pending = sorted(n for n in stops if n < res.target)
    # Keep about one wave starting at a time: the next wave goes when fewer than half a wave of
    # the applied jobs are still on their way to Running (a pipeline, not lock-step waves).
    while time.monotonic() < deadline:
        starting = _starting(sc, names)
        if (len(names) >= res.target or time.monotonic() >= last_apply) and not starting:
            if len(names) < res.target:
                res.problems.append(
                    f"time budget ({res.budget:.0f} s): the last wave went {APPLY_CUTOFF:.0f} s before "
                    f"its end, {len(names)} of {res.target} jobs applied"
                )
            break
        if pending and len(names) >= pending[0]:
            if starting:
                with sc.watch.changed:
                    sc.watch.changed.wait(1.0)
                continue
            at_stop(pending.pop(0), names)
            continue
        limit = min(res.target, pending[0] if pending else res.target)
        if len(names) < limit and starting < wave / 2 and time.monotonic() < last_apply:
            batch = [f"r-{i:04d}" for i in range(len(names), min(limit, len(names) + wave))]
            try:
                sc.apply_all(
                    batch, epochs=ENDLESS_EPOCHS, epoch_seconds=FAST["epoch_seconds"], recovery=NO_CHECKPOINTS
                )
            except (subprocess.SubprocessError, ControlPlaneError) as e:
                res.problems.append(f"creating jobs {batch[0]}..{batch[-1]} failed: {e}"[:300])
                break  # figures at what runs now
            names += batch
            print(f"   {time.monotonic() - began:6.0f} s: {len(names)} applied, {sc.running()} Running",
                  flush=True)  # fmt: skip
            continue
        with sc.watch.changed:
            sc.watch.changed.wait(1.0)
    else:
        res.problems.append(f"time budget ({res.budget:.0f} s) ended before {res.target} jobs were Running")
    res.fill_wall = time.monotonic() - began
    return names


class ExitWaits:
    """`docker wait` calls per instance, read incrementally from the simulator's call record
    (tens of thousands of lines at 1,000 jobs); the one reader of it for every scenario.

    A job enters Running when its container start is DECIDED; the start itself (secrets,
    `docker run`) then queues in the operator's start lane (seen: 0.75 calls per job per minute in
    a window right after the last wave, container starts included). From its first exit wait on
    it is a steady running job: its waits end on its own grid over the whole wait period
    (controller/lifecycle/run_phases.py), so jobs started together re-arm spread over the period.

    `first_since`: per instance, when its first wait at or after `since` started (a takeover's
    re-arm); `launched_since`: when the operator started the first ssh carrying one (the
    difference is the connection: the simulated sshd's, not a real instance's)."""

    def __init__(self, sc: Scenario, since: float = 0.0) -> None:
        self.path, self.offset, self.since = sc.sim.store.calls_path, 0, since
        self.seen: Counter[str] = Counter()
        self.first_since: dict[str, float] = {}
        self.launched_since: dict[str, float] = {}

    def update(self) -> Counter[str]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return self.seen
        end = data.rfind(b"\n") + 1  # a line still being appended is read next time
        self.offset += end
        for line in data[:end].splitlines():
            if b'"ssh"' in line and b"docker wait" in line:
                entry = json.loads(line)
                host = ssh_host(entry.get("argv", []))
                if entry.get("where") != "remote" and host and float(entry["ts"]) >= self.since:
                    self.launched_since.setdefault(host, float(entry["ts"]))
                continue
            if b'"docker"' not in line or b'"wait"' not in line:
                continue
            entry = json.loads(line)
            if entry.get("where") == "remote" and entry.get("argv", [])[:1] == ["wait"]:
                name = str(entry.get("instance"))
                self.seen[name] += 1
                if float(entry["ts"]) >= self.since:
                    self.first_since.setdefault(name, float(entry["ts"]))
        return self.seen


_SSH_VALUED = frozenset("BbcDEeFIiJLlmOoPpQRSWw")  # ssh options that take a value


def ssh_host(argv: list[str]) -> str | None:
    """The destination of an ssh command line (the first word that is no option or its value)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word.startswith("-") and len(word) >= 2:
            skip = len(word) == 2 and word[1] in _SSH_VALUED
        else:
            return word
    return None


def _not_waiting(sc: Scenario, names: list[str], waits: ExitWaits) -> list[str]:
    seen = waits.update()
    with sc.watch.lock:
        sts = [(n, sc.watch.status.get(n, {})) for n in names]
    return [n for n, st in sts if st.get("phase") == "Running" and seen[str(instance(st).get("name"))] < 1]


def _await_waits(sc: Scenario, names: list[str], timeout: float) -> list[str]:
    """Until every Running job's container waits for its exit (or `timeout`); who does not."""
    waits, deadline = ExitWaits(sc), time.monotonic() + timeout
    left = _not_waiting(sc, names, waits)
    while left and time.monotonic() < deadline:
        with sc.watch.changed:  # a poll of the call record; status changes wake it early
            sc.watch.changed.wait(1.0)
        left = _not_waiting(sc, names, waits)
    return left


def _window(sc: Scenario, seconds: float) -> Window:
    """CPU and calls over `seconds` (a measurement window, not a wait for a signal)."""
    assert sc.op.proc is not None
    pid, home = sc.op.proc.pid, sc.sim.home
    jobs = sc.running()
    c0, t0, g0 = sampling.cpu(pid, home), time.time(), cpu_groups(sc)
    threading.Event().wait(seconds)
    c1, t1, g1 = sampling.cpu(pid, home), time.time(), cpu_groups(sc)
    n_calls = sampling.calls_between(sc.calls(), t0, t1)
    return Window(
        jobs=jobs,
        wall=t1 - t0,
        operator_cores=cores(c1.operator - c0.operator, c1.at - c0.at),
        pod_cores=cores(c1.pod - c0.pod, c1.at - c0.at),
        calls_per_job_min=per_job_per_minute(n_calls, jobs, t1 - t0, REAL.factor) if jobs else None,
        cpu=cores_between(g0, g1),
        steady=sc.running() == jobs,
    )


def run(
    bench: Bench,
    target: int,
    wave: int,
    budget: float,
    window: float,
    stops: Sequence[int] = (),
    before_window: Callable[[], None] | None = None,
    after_window: Callable[[Scenario], None] | None = None,
    follow_every: int = FOLLOW_EVERY,
) -> RssResult:
    """`budget`: wall seconds for applying and reaching Running, stops included (the settle and
    the last window come after). `before_window` runs once the fill is steady, before the final
    memory sample and window (the background child waits there for a quiet machine); `after_window`
    gets the steady fleet once the window is done (the failover scenario)."""
    res = RssResult(target=target, budget=budget)
    sc = bench.scenario("rss", scale=REAL, durations=FAST)
    try:
        assert sc.op.proc is not None
        pid, home = sc.op.proc.pid, sc.sim.home

        def at_stop(n: int, names: list[str]) -> None:
            # Like the final window: a job enters Running when its container start is decided, and
            # its exit wait (an ssh client per job) comes after; the slope compares steady pods.
            late = _await_waits(sc, names, REARM_SETTLE)
            if late:
                res.problems.append(f"stop at {n}: {len(late)} Running jobs did not wait for their container")
            res.points.append((sc.running(), sampling.memory(pid, home)))
            print(f"   stop at {n} applied: {res.points[-1][0]} Running, {res.points[-1][1].text()}",
                  flush=True)  # fmt: skip

        cpu0 = cpu_groups(sc)
        names = _fill(sc, res, wave, stops, at_stop)
        res.fill_cpu = cores_between(cpu0, cpu_groups(sc))
        res.applied = len(names)
        res.running = sc.running()
        # Steady state: the window starts only when no applied job is still on its way to Running.
        settle = LATE_SETTLE if res.fill_wall >= res.budget else SETTLE
        left = sc.watch.wait(names, running_or_beyond, settle)
        if left:
            res.problems.append(f"{len(left)} jobs still starting {settle:.0f} s after the fill: not steady")
        not_waiting = _await_waits(sc, names, REARM_SETTLE)
        if not_waiting:
            res.problems.append(
                f"{len(not_waiting)} Running jobs did not wait for their container {REARM_SETTLE:.0f} s "
                "after the fill: not steady"
            )
        res.running = sc.running()
        res.failed = sum(1 for n in names if sc.watch.status.get(n, {}).get("outcome"))
        with sc.watch.lock:
            running = [n for n in names if sc.watch.status.get(n, {}).get("phase") == "Running"]
        viewers = LogViewers(sc, running[::follow_every] if follow_every else []).start()
        res.followers = viewers.wait_streams(sc.op.metrics_url, FOLLOW_SETTLE)
        if viewers.errors or res.followers < len(running[::follow_every] if follow_every else []):
            res.problems.append(f"log followers: {res.followers} streams open; {viewers.errors[:3]}")
        if before_window is not None:
            before_window()
        res.running = sc.running()
        res.memory = sampling.memory(pid, home)
        print(
            f"   steady window of {window:.0f} s starts: {res.running} Running, {res.memory.text()}",
            flush=True,
        )
        last = _window(sc, window)
        res.window_wall, res.window_jobs, res.window_cpu = last.wall, last.jobs, last.cpu
        res.window_steady = not left and not not_waiting and last.steady and last.jobs == res.running
        res.operator_cores, res.pod_cores = last.operator_cores, last.pod_cores
        res.calls_per_job_min = last.calls_per_job_min
        viewers.close()
        if after_window is not None:
            after_window(sc)
        return res
    finally:
        sc.close()
