"""A leader change at N running jobs (issue 30, part 1), on the footprint's fleet.

Two replicas of one deployment run with the production election timing (lease 15 s, renew 10 s,
retry 2 s); the standby has its own home (a pod of its own: no brev credentials, ssh config or
ssh masters of the leader's). Once the fleet is steady (N Running, every exit wait armed), the
namespace's instance cap is set to what runs, `QUEUED` more jobs are applied (they queue), then the
cap is raised by `STARTING` and as many jobs applied, so some creates are in flight, and the leader
is SIGKILLed with its ssh masters (a node loss kills the whole pod). Then:

- takeover: the kill -> the standby holds the Lease (its acquireTime);
- re-armed: takeover -> every Running job's `docker wait` started again on its instance (the
  simulator records each remote command when it starts);
- calls: every brev and ssh process the operator started in the first `CALLS_WINDOW` s after the
  takeover, per job, by kind; the most ssh masters alive at once;
- exit notice: `EXITING` containers are finished (the simulator's SIGUSR1: exit 0) while no one
  leads and just after the takeover, `AFTER` more once every wait is re-armed, and `LATE` more
  from `LATE_FROM` s after the takeover, the goal's "exits after that" (at most half the fleet
  in all: most jobs must stay running); for each, its container's FinishedAt -> the job's status
  shows the exit code. For the last two groups the CPU each process group used meanwhile is
  printed (operator, its ssh, simulator, API server, etcd, bench): on a shared 2-core machine it
  tells the operator's latency from the machine's;
- creates: every job has at most one instance (a create in flight at the kill is adopted, never
  repeated);
- the queue: the queued jobs keep their order (every exit frees a slot for the queue's head).

`restart` does the same with a single replica (no standby): the process is SIGKILLed and started
again, so the same pod waits out its own dead Lease and re-arms everything.

`python -m tests.bench.scenario_failover --jobs 1000` runs the fill and both alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.api.timestamps import parse_time
from tests.bench import scenario_finished, scenario_rss
from tests.bench.pod_cgroups import POD_WEIGHT
from tests.bench.scale import Scale
from tests.bench.scenario_rss import ExitWaits, cores_between, cpu_groups
from tests.bench.stack import Bench, ContainerExit, Scenario, running_or_beyond
from tests.brevsim import container
from tests.devenv.operator import OPERATOR_NAMESPACE, OperatorProcess
from tests.footprint import cmdline, descendants, memory_of, ssh_masters
from tests.status_paths import instance, queue
from tests.status_paths import run as run_of

LEASE = "taobrev-operator"
# The deployment's election timing (client-go's defaults), not the tests' shortened one.
ELECTION = {
    "TAOBREV_LEADER_ELECTION": "true",  # the bench's Scale turns it off for its lone operators
    "TAOBREV_LEADER_LEASE_DURATION": "15",
    "TAOBREV_LEADER_RENEW_DEADLINE": "10",
    "TAOBREV_LEADER_RETRY_PERIOD": "2",
}
REARM_GOAL = 60.0  # s: takeover -> every running job's exit wait re-armed
NOTICE_GOAL = 2.0  # s: an exit after the re-arm -> seen in status
CALLS_GOAL = 3.0  # brev + ssh calls per job in the first CALLS_WINDOW s after the takeover
CALLS_WINDOW = 300.0
QUEUED = 50  # jobs waiting in the queue at the kill
STARTING = 10  # jobs admitted just before the kill (their creates in flight)
EXITING = 10  # containers stopped around the takeover (half before it, half after)
AFTER = 10  # containers stopped once every wait is re-armed, one a second
LATE = 10  # containers stopped from LATE_FROM s after the takeover, one a second
LATE_FROM = REARM_GOAL  # "re-armed within 60 s; exits after that noticed within 2 s"
# How the bench host's CPU was shared (tests/bench/pod_cgroups.py), printed with the figures.
CPU_SETUP = {
    True: f"each replica's pod in a cgroup of its own, the simulator in another ({POD_WEIGHT:g}x its weight)",
    False: "no cgroups: every ssh master and simulator session scheduled as heavy as the operator",
}
TAKEOVER_TIMEOUT = 120.0
REARM_TIMEOUT = 600.0  # s: the bench gives up waiting for the re-arm (reported, not hidden)
NOTICE_TIMEOUT = 120.0


@dataclass
class FailoverResult:
    mode: str  # "failover" | "restart"
    running: int = 0  # Running jobs at the kill
    takeover: float | None = None  # s: kill -> the new holder's acquireTime
    rearm: float | None = None  # s: takeover -> the last Running job's exit wait started again
    not_rearmed: int = 0
    rearm_shares: dict[int, float] = field(default_factory=dict)  # % re-armed -> s after the takeover
    launch_shares: dict[int, float] = field(default_factory=dict)  # % whose wait's ssh started -> s
    connect_shares: dict[int, float] = field(default_factory=dict)  # % -> s from that ssh to the wait
    cores_rearm: dict[str, float] = field(default_factory=dict)  # group -> cores during the re-arm
    calls: Counter[str] = field(default_factory=Counter)  # kind -> count in the window
    calls_window: float = 0.0  # s the window really covered
    steady: int = 0  # jobs Running throughout the window (not stopped, not started in it)
    steady_calls: int = 0  # calls naming no job (listings) or one of those
    masters_peak: int = 0  # ssh masters of the acting replica alive at once
    notice_during: list[float] = field(default_factory=list)  # s, exits around the takeover
    notice_after: list[float] = field(default_factory=list)  # s, exits right after the re-arm
    notice_late: list[float] = field(default_factory=list)  # s, exits from LATE_FROM after the takeover
    cores_after: dict[str, float] = field(default_factory=dict)  # group -> cores while `after` exited
    cores_late: dict[str, float] = field(default_factory=dict)  # group -> cores while `late` exited
    duplicate_creates: int = 0
    pod_before: dict[str, tuple[int, float]] = field(default_factory=dict)  # the acting pod, at the kill
    rss_before: dict[str, float] = field(default_factory=dict)  # replica -> operator RSS MiB at the kill
    start_to_healthy: float | None = None  # restart: process start -> /healthz
    rss_settled: float | None = None  # restart: the standby's RSS (MiB) once it saw every object
    queue_problems: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    cgroups: bool = False  # each replica's pod and the simulator in CPU cgroups of their own

    @property
    def calls_per_job(self) -> float | None:
        """The steady jobs' calls and the shared ones, per steady job."""
        return self.steady_calls / self.steady if self.steady else None


def _lease(sc: Scenario) -> dict[str, Any]:
    r = sc.stack.cp.kubectl("get", "lease", LEASE, "-n", OPERATOR_NAMESPACE, "-o", "json", check=False)
    return dict(json.loads(r.stdout).get("spec") or {}) if r.returncode == 0 else {}


def _await_takeover(sc: Scenario, old_holder: str, killed: float) -> float | None:
    """The wall time the new holder acquired the Lease (its acquireTime), polling the Lease."""
    deadline = time.monotonic() + TAKEOVER_TIMEOUT
    while time.monotonic() < deadline:
        spec = _lease(sc)
        holder = str(spec.get("holderIdentity") or "")
        acquired = parse_time(str(spec.get("acquireTime") or ""))
        if holder and holder != old_holder and acquired is not None:
            return max(killed, acquired.timestamp())
        threading.Event().wait(0.2)
    return None


def _kill_pod(op: OperatorProcess) -> None:
    """SIGKILL the operator and its ssh masters (daemonised out of its process group, but in its
    pod: a node loss or an OOM kill of the pod takes them too)."""
    op.kill()
    home = Path(op.env()["HOME"])
    for pid in ssh_masters(home):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _stop_container(sc: Scenario, job: str) -> ContainerExit | None:
    """End the job's training now, successfully (the simulator's SIGUSR1 control: exit 0, as a
    run reaching its last epoch); a watcher of its FinishedAt."""
    with sc.watch.lock:
        st = dict(sc.watch.status.get(job, {}))
    inst_id, job_id = str(instance(st).get("id") or ""), str(st.get("jobId") or "")
    docker = container.Docker(sc.sim.store, inst_id)
    for cid in docker.ids():
        if (docker.config(cid) or {}).get("Name") == "/" + job_id:
            state = docker.state(cid) or {}
            if state.get("Running"):
                exit_watch = ContainerExit(sc.sim, inst_id, job_id)
                exit_watch.start()
                container.signal_container(sc.sim.store, inst_id, cid, state, signal.SIGUSR1)
                return exit_watch
    return None


def _notice(sc: Scenario, job: str, watch: ContainerExit | None, problems: list[str]) -> float | None:
    """Container FinishedAt -> the job's status shows the exit code (or ended)."""
    if watch is None:
        problems.append(f"{job}: no running container to stop")
        return None
    watch.join(NOTICE_TIMEOUT)
    if watch.finished_at is None:
        problems.append(f"{job}: its container did not exit within {NOTICE_TIMEOUT:.0f} s")
        return None
    if sc.watch.wait([job], _exited, NOTICE_TIMEOUT):
        problems.append(f"{job}: its exit was not seen within {NOTICE_TIMEOUT:.0f} s")
        return None
    with sc.watch.lock:
        seen = sc.watch.exit_seen.get(job)
    return None if seen is None else max(0.0, seen - watch.finished_at)


def _call_kind(program: str, argv: list[str]) -> str:
    if program == "brev":
        return f"brev {argv[0]}" if argv else "brev"
    return program


def _queue_order(sc: Scenario, names: list[str]) -> dict[str, int | None]:
    """Each queued job's place by the queue's documented order (priority, then creation time,
    then name), from the objects. Not their status.queue.position when read: a job's position is
    written at its own pass, against the queue as the fleet knew it then, so a read right after
    the apply mixes positions of different moments (a restart run flagged jobs "ahead of their
    turn" from such a mix)."""
    got = sc.stack.cp.kubectl("get", "taobrevjobs", "-n", sc.name, "-o", "json", timeout=300)
    objects = {o["metadata"]["name"]: o for o in json.loads(got.stdout)["items"]}
    keys = []
    for n in names:
        o = objects.get(n)
        if o is not None:
            priority = int((o.get("spec") or {}).get("priority") or 0)
            keys.append((-priority, str(o["metadata"]["creationTimestamp"]), n))
    place = {n: i for i, (_, _, n) in enumerate(sorted(keys))}
    return {n: place.get(n) for n in names}


def _check_queue(before: dict[str, int | None], admitted_at: dict[str, str | None]) -> list[str]:
    """No job lost its place: the ones admitted since the kill are the head of the queue as it
    was. Their admittedAt times are not compared: the fleet decides for the whole queue under one
    lock, but each job writes its own admission at its own pass, in any order."""
    order = [n for _, n in sorted((p, n) for n, p in before.items() if p is not None)]
    if len(order) != len(before):
        return [f"{len(before) - len(order)} queued jobs had no queue position before the kill"]
    admitted = {n for n in order if admitted_at.get(n)}
    head = set(order[: len(admitted)])
    if admitted != head:
        ahead, waiting = sorted(admitted - head)[:5], sorted(head - admitted)[:5]
        return [f"admitted ahead of their turn: {ahead}, still waiting: {waiting}"]
    return []


def _creates(sc: Scenario) -> Counter[str]:
    counts: Counter[str] = Counter()
    for inst in sc.sim.instances(include_deleted=True):
        counts[str(inst.get("name"))] += 1
    return counts


def _annotate_cap(sc: Scenario, cap: int) -> None:
    sc.stack.cp.kubectl("annotate", "namespace", sc.name, f"taobrev.io/max-instances={cap}", "--overwrite")


def pod_breakdown(op: OperatorProcess) -> dict[str, tuple[int, float]]:
    """The pod's PSS by kind of process: (how many, MiB). The ssh masters left the operator's
    process tree (daemonised) but are its pod's; they are told apart by their ControlPath."""
    assert op.proc is not None
    home = Path(op.env()["HOME"])
    masters = set(ssh_masters(home))
    groups: dict[str, list[int]] = {"operator": [op.proc.pid], "ssh masters": sorted(masters)}
    for pid in descendants(op.proc.pid) - {op.proc.pid}:
        text = cmdline(pid)
        kind = (
            "ssh sessions" if text.startswith("ssh ") else (text.split(" ", 1)[0].rsplit("/", 1)[-1] or "?")
        )
        groups.setdefault(kind, []).append(pid)
    return {k: (len(v), sum(memory_of(p, "pss") for p in v) / 2**20) for k, v in groups.items()}


class _MasterPeak(threading.Thread):
    def __init__(self, home: Path) -> None:
        super().__init__(daemon=True, name="ssh-master-peak")
        self.home, self.peak, self.stop = home, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            self.peak = max(self.peak, len(ssh_masters(self.home)))


def _apply(sc: Scenario, names: list[str], priority: int = 0) -> None:
    """Create the jobs in one call (as Scenario.apply_all), with `spec.priority`."""
    items = sc.manifests(
        names,
        epochs=scenario_rss.ENDLESS_EPOCHS,
        epoch_seconds=scenario_rss.FAST["epoch_seconds"],
        recovery=scenario_rss.NO_CHECKPOINTS,
    )
    for m in items:
        m["spec"]["priority"] = priority
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    sc.stack.cp.kubectl("create", "-f", "-", input=doc, timeout=300)


def _in_flight(status: dict[str, Any]) -> bool:
    return bool(instance(status).get("createRequestedAt")) or running_or_beyond(status)


def _exited(status: dict[str, Any]) -> bool:
    return run_of(status).get("exitCode") is not None or bool(status.get("outcome"))


@dataclass
class _Kill:
    """One kill and its takeover: what the figures are read from."""

    sc: Scenario
    res: FailoverResult
    running: list[str]
    queued: dict[str, int | None]  # name -> queue position before the kill
    exiting: list[str]
    watches: dict[str, ContainerExit | None] = field(default_factory=dict)

    def prepare(self, tag: str) -> list[str]:
        """The queue (the cap at what holds a slot now, QUEUED more behind it) and STARTING jobs
        whose creates are in flight at the kill (the cap raised for them); returns the latter."""
        sc = self.sc
        with sc.watch.lock:
            statuses = list(sc.watch.status.values())
        holding = sum(1 for st in statuses if queue(st).get("admittedAt") and not st.get("finishedAt"))
        _annotate_cap(sc, holding)
        queued = [f"{tag}-q{i:03d}" for i in range(QUEUED)]
        _apply(sc, queued)
        if sc.watch.wait(queued, lambda s: queue(s).get("position") is not None, 120.0):
            self.res.problems.append("queued jobs got no queue position within 120 s")
        self.queued = _queue_order(sc, queued)
        # Ahead of the queue (a higher priority): the raised cap is theirs, the queue stays put.
        _annotate_cap(sc, holding + STARTING)
        starting = [f"{tag}-s{i:03d}" for i in range(STARTING)]
        _apply(sc, starting, priority=100)
        # The kill follows the first createRequestedAt: Brev was asked, the answer may not be in.
        sc.watch.wait(starting[:1], _in_flight, 120.0)
        return starting

    def stop_containers(self, jobs: list[str], gap: float = 0.0) -> None:
        for job in jobs:
            self.watches[job] = _stop_container(self.sc, job)
            if gap:
                threading.Event().wait(gap)

    def await_rearm(self, takeover: float, acting: OperatorProcess) -> None:
        """Every Running job (but those stopped) has a `docker wait` that started after the
        takeover."""
        sc, res = self.sc, self.res
        with sc.watch.lock:
            by_instance = {
                str(instance(sc.watch.status.get(n, {})).get("name")): n
                for n in self.running
                if n not in self.exiting
            }
        deadline = time.monotonic() + REARM_TIMEOUT
        since = ExitWaits(sc, since=takeover)
        cpu0 = cpu_groups(sc, acting)
        while True:
            since.update()
            waits = since.first_since
            left = [i for i in by_instance if i not in waits]
            if not left or time.monotonic() > deadline:
                break
            threading.Event().wait(1.0)
        res.cores_rearm = cores_between(cpu0, cpu_groups(sc, acting))
        # The curve tells a rate (a bottleneck's throughput) from a tail (a few slow jobs); the
        # launches are the operator's pace, the connections the simulated sshd's.
        launched, n = since.launched_since, len(by_instance)
        res.rearm_shares = _shares([waits[i] - takeover for i in by_instance if i in waits], n)
        res.launch_shares = _shares([launched[i] - takeover for i in by_instance if i in launched], n)
        both = waits.keys() & launched.keys() & by_instance.keys()
        res.connect_shares = _shares([waits[i] - launched[i] for i in both])
        res.not_rearmed = len(left)
        if left:
            res.problems.append(
                f"{len(left)} Running jobs not re-armed {REARM_TIMEOUT:.0f} s after the takeover"
            )
        else:
            res.rearm = max((waits[i] for i in by_instance), default=takeover) - takeover

    def notices(self, jobs: list[str]) -> list[float]:
        return [
            v
            for job in jobs
            if (v := _notice(self.sc, job, self.watches.get(job), self.res.problems)) is not None
        ]

    def exits_after_rearm(
        self, takeover: float, after: list[str], late: list[str], acting: OperatorProcess
    ) -> None:
        """`after` right after the re-arm, then `late` from LATE_FROM s after the takeover."""
        res = self.res
        res.notice_after, res.cores_after = self.timed_exits(after, acting)
        left_s = takeover + LATE_FROM - time.time()
        if left_s > 0:
            threading.Event().wait(left_s)  # the goal's moment, not a signal to wait for
        res.notice_late, res.cores_late = self.timed_exits(late, acting)

    def timed_exits(self, jobs: list[str], acting: OperatorProcess) -> tuple[list[float], dict[str, float]]:
        """Stop `jobs` one a second and wait until each exit is seen: the notices, and the cores
        each process group used meanwhile."""
        before = cpu_groups(self.sc, acting)
        self.stop_containers(jobs, gap=1.0)
        seen = self.notices(jobs)
        return seen, cores_between(before, cpu_groups(self.sc, acting))

    def window(self, takeover: float, creates_before: Counter[str], seconds: float) -> None:
        """The calls of the first `seconds` (CALLS_WINDOW), then the creates and the queue."""
        sc, res = self.sc, self.res
        left_s = takeover + seconds - time.time()
        if left_s > 0:
            threading.Event().wait(left_s)
        res.calls_window = min(seconds, time.time() - takeover)
        with sc.watch.lock:
            names = {n: str(instance(st).get("name")) for n, st in sc.watch.status.items()}
        steady = {names[n] for n in self.running if n not in self.exiting and n in names}
        every = set(names.values())
        res.steady = len(steady)
        for c in sc.calls():
            if c.where != "local" or c.program not in ("brev", "ssh"):
                continue
            if not takeover <= c.ts < takeover + seconds:
                continue
            res.calls[_call_kind(c.program, c.argv)] += 1
            # A job that exited or started in the window pays for its own work (upload, delete,
            # create, pull) as it would without a takeover: the per-job figure is the fleet's
            # shared calls (listings) plus the calls of the jobs that ran throughout.
            named = every.intersection(c.argv)
            if not named or named <= steady:
                res.steady_calls += 1
        res.duplicate_creates = _duplicates(_creates(sc)) - _duplicates(creates_before)
        with sc.watch.lock:
            admitted_at = {n: queue(sc.watch.status.get(n, {})).get("admittedAt") for n in self.queued}
        res.queue_problems = _check_queue(self.queued, admitted_at)


def _shares(times: list[float], total: int | None = None) -> dict[int, float]:
    """{q: the time by which q% of `total` (default: of those timed) had it}, q in 50, 90, 99."""
    times, total = sorted(times), total or len(times)
    ranks = {q: -(-total * q // 100) for q in (50, 90, 99)}  # ceil
    return {q: times[r - 1] for q, r in ranks.items() if 0 < r <= len(times)}


def _duplicates(creates: Counter[str]) -> int:
    return sum(max(0, c - 1) for c in creates.values())


def _exit_groups(running: list[str]) -> tuple[list[str], list[str], list[str]]:
    """The jobs whose containers are stopped around the takeover, right after the re-arm and
    from LATE_FROM: spread over the fleet, at most half of it, in the groups' proportions (a
    small fleet stops fewer of each)."""
    total = EXITING + AFTER + LATE
    n_exit = min(total, len(running) // 2)
    exiting = running[:: max(1, len(running) // max(1, n_exit))][:n_exit]
    n_during, n_after = n_exit * EXITING // total, n_exit * AFTER // total
    return exiting[:n_during], exiting[n_during : n_during + n_after], exiting[n_during + n_after :]


def run(
    sc: Scenario,
    acting: OperatorProcess,
    *,
    mode: str,
    standby: OperatorProcess | None,
    tag: str,
    outage: Callable[[], None] | None = None,
    calls_window: float = CALLS_WINDOW,
) -> FailoverResult:
    """Kill `acting` with the namespace's fleet steady; `standby` takes over, or (restart) `acting`
    starts again after `outage()` (work done while no operator runs). `tag` names this run's
    extra jobs. The new acting replica is `standby or acting`, with the election on."""
    res = FailoverResult(mode=mode, cgroups="cloud" in sc.groups)
    with sc.watch.lock:
        running = sorted(n for n, st in sc.watch.status.items() if st.get("phase") == "Running")
    res.running = len(running)
    during, after, late = _exit_groups(running)
    kill = _Kill(sc, res, running, {}, [*during, *after, *late])
    starting = kill.prepare(tag)
    with sc.watch.lock:
        phases = Counter(str(sc.watch.status.get(n, {}).get("phase")) for n in starting)
    print(
        f"   {mode}: {res.running} Running, {QUEUED} queued, starting at the kill: {dict(phases)}", flush=True
    )
    res.pod_before = pod_breakdown(acting)
    for label, op in (("acting", acting), ("standby", standby)):
        if op is not None and op.proc is not None:
            res.rss_before[label] = memory_of(op.proc.pid) / 2**20
    creates_before = _creates(sc)
    old_holder = str(_lease(sc).get("holderIdentity") or "")
    nxt = standby or acting
    peak = _MasterPeak(Path(nxt.env()["HOME"]))

    killed = time.time()
    _kill_pod(acting)
    peak.start()
    try:
        if standby is None:
            if outage is not None:
                outage()
            acting.extra_env = {**acting.extra_env, **ELECTION}
            began = time.monotonic()
            acting.start(timeout=600)
            res.start_to_healthy = time.monotonic() - began
            killed = time.time() - (time.monotonic() - began)  # the takeover counts from the start
        kill.stop_containers(during[: len(during) // 2])  # while no one leads
        takeover = _await_takeover(sc, old_holder, killed)
        if takeover is None:
            res.problems.append(f"no new Lease holder within {TAKEOVER_TIMEOUT:.0f} s of the kill")
            return res
        res.takeover = takeover - killed
        kill.stop_containers(during[len(during) // 2 :], gap=1.0)  # during the re-arm
        kill.await_rearm(takeover, nxt)
        print(
            f"   {mode}: takeover {res.takeover:.1f} s after the kill, re-armed {res.rearm} s later",
            flush=True,
        )
        kill.exits_after_rearm(takeover, after, late, nxt)
        res.notice_during = kill.notices(during)
        kill.window(takeover, creates_before, calls_window)
    finally:
        peak.stop.set()
        res.masters_peak = peak.peak
    return res


def fill(bench: Bench, jobs: int, wave: int, budget: float) -> Scenario:
    """The footprint's fleet (F = 1, fast boots, endless epochs), one replica."""
    sc = bench.scenario("failover", scale=scenario_rss.REAL, durations=scenario_rss.FAST, cgroups=True)
    res = scenario_rss.RssResult(target=jobs, budget=budget)
    names = scenario_rss._fill(sc, res, wave, (), lambda n, names: None)
    sc.watch.wait(names, running_or_beyond, scenario_rss.SETTLE)
    late = scenario_rss._await_waits(sc, names, scenario_rss.REARM_SETTLE)
    if late or res.problems:
        print(f"   fill: {res.problems}; {len(late)} Running jobs not waiting for their container",
              flush=True)  # fmt: skip
    return sc


def standby_for(sc: Scenario) -> OperatorProcess:
    """A second replica of the acting one's deployment, in a pod of its own (its own home)."""
    env = {**sc.op.extra_env, **ELECTION, "HOME": str(sc.bench.work / sc.name / "standby-home")}
    Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
    op = OperatorProcess(sc.bench.cp, sc.sim, sc.bench.work / sc.name / "standby", extra_env=env)
    op.wrap = sc.pod("standby")
    return op.start(600)


def _settled_rss(op: OperatorProcess, timeout: float = 600.0) -> float:
    """The process's RSS (MiB) once it stopped growing for 10 s (kopf has seen every object)."""
    assert op.proc is not None
    last, still, deadline = memory_of(op.proc.pid), 0, time.monotonic() + timeout
    while still < 10 and time.monotonic() < deadline:
        threading.Event().wait(1.0)
        now = memory_of(op.proc.pid)
        still = still + 1 if abs(now - last) < 1 << 20 else 0
        last = now
    return last / 2**20


def after_fill(
    sc: Scenario, finished: int, calls_window: float = CALLS_WINDOW
) -> tuple[list[FailoverResult], OperatorProcess | None]:
    """On a steady fleet of one replica: the restart (SIGKILL, `finished` finished jobs created
    while it is down, start with the election on), then a standby replica, then the failover
    (SIGKILL of the leader). Returns both results and the standby (the caller stops it)."""

    def outage() -> None:
        if finished:
            print(f"   restart: creating {finished} finished jobs while no operator runs", flush=True)
            scenario_finished.create_finished(sc, finished)

    results = [
        run(sc, sc.op, mode="restart", standby=None, tag="rs", outage=outage, calls_window=calls_window)
    ]
    print(describe(results[-1]), flush=True)
    if results[-1].takeover is None:
        return results, None
    standby = standby_for(sc)
    results[-1].rss_settled = _settled_rss(standby)
    print(f"   standby started; settled at {results[-1].rss_settled:.0f} MiB RSS", flush=True)
    results.append(run(sc, sc.op, mode="failover", standby=standby, tag="fo", calls_window=calls_window))
    print(describe(results[-1]), flush=True)
    return results, standby


def cores_text(groups: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted(groups.items(), key=lambda kv: -kv[1])) or "none"


def describe(res: FailoverResult) -> str:
    def span(xs: list[float]) -> str:
        return f"max {max(xs):.2f} s, median {sorted(xs)[len(xs) // 2]:.2f} s ({len(xs)})" if xs else "none"

    since = "the kill" if res.mode == "failover" else "the process start"
    rss = ", ".join(f"{k} {v:.0f} MiB" for k, v in res.rss_before.items())
    pss = sum(m for _, m in res.pod_before.values())
    parts = ", ".join(f"{k} {n} x {m / max(1, n):.2f} = {m:.0f} MiB" for k, (n, m) in res.pod_before.items())
    lines = [
        f"{res.mode} at {res.running} Running: Lease taken {res.takeover} s after {since}; every wait "
        f"re-armed {res.rearm} s after that (goal {REARM_GOAL:g}); not re-armed {res.not_rearmed}",
        "  re-armed by then: "
        + ", ".join(f"{q}% {t:.1f} s" for q, t in res.rearm_shares.items())
        + "; its ssh started by then: "
        + ", ".join(f"{q}% {t:.1f} s" for q, t in res.launch_shares.items())
        + "; that ssh -> the wait on the instance: "
        + ", ".join(f"{q}% {t:.1f} s" for q, t in res.connect_shares.items()),
        f"  cores meanwhile, during the re-arm: {cores_text(res.cores_rearm)}",
        f"  calls in the first {res.calls_window:.0f} s: {res.calls_per_job} per job (goal {CALLS_GOAL:g}): "
        f"{res.steady_calls} of {res.steady} jobs running throughout and shared; all "
        f"{sum(res.calls.values())}: {dict(res.calls.most_common())}",
        f"  ssh masters alive at once (peak): {res.masters_peak}",
        f"  exit notice, exits around the takeover: {span(res.notice_during)}; right after the re-arm: "
        f"{span(res.notice_after)}; from {LATE_FROM:g} s after the takeover: {span(res.notice_late)} "
        f"(goal {NOTICE_GOAL:g})",
        f"  cores meanwhile, right after the re-arm: {cores_text(res.cores_after)}",
        f"  cores meanwhile, from {LATE_FROM:g} s: {cores_text(res.cores_late)}",
        f"  duplicate creates {res.duplicate_creates}; queue: {res.queue_problems or 'kept its order'}",
        f"  CPU: {CPU_SETUP[res.cgroups]}",
        f"  before the kill: operator RSS {rss}; the acting pod's PSS {pss:.0f} MiB: {parts}",
    ]
    if res.start_to_healthy is not None:
        lines.append(f"  restart: process start -> healthy {res.start_to_healthy:.1f} s")
    if res.rss_settled is not None:
        lines.append(f"  then a standby replica, settled: {res.rss_settled:.0f} MiB RSS")
    lines += [f"  problem: {p}" for p in res.problems]
    return "\n".join(lines)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # run the finally blocks: stop the operators, simulator, stack


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.scenario_failover", description=__doc__)
    ap.add_argument("--jobs", type=int, default=1000, help="Running jobs at the kill (1000)")
    ap.add_argument("--wave", type=int, default=100, help="jobs per apply (100)")
    ap.add_argument("--budget", type=float, default=1200.0, help="wall seconds for the fill (1200)")
    ap.add_argument("--finished", type=int, default=0, help="finished jobs created during the restart (9000)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    bench = Bench.start(Scale(1.0))
    print(f"bench workdir: {bench.work}", flush=True)
    standby: OperatorProcess | None = None
    try:
        sc = fill(bench, args.jobs, args.wave, args.budget)
        try:
            _, standby = after_fill(sc, args.finished)
        finally:
            if standby is not None:
                standby.stop()
            sc.close()
    finally:
        bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
