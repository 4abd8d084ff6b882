"""Billed seconds that did no work, ours vs a naive operator, on the same workload: N jobs applied at
once, each through its whole lifecycle. Per job, from the simulator's argv record: `brev create`
sent -> `brev delete` sent (the billed span) minus its work: boot + first exec (the simulated
durations), every transfer (registry login/pull, aws-cli containers and aws calls: from their start
to the next command on that instance, so their unscaled process costs count as work) and the run
(epochs x epoch seconds). What is left is the operator's own waiting: polls, queues, lanes.

That remainder mixes waits the operator's intervals and the simulated durations make (F times as
long in wall time) with fixed costs that do not shrink with F: the start-up of every ssh/docker
call between two steps, API round trips. Wall / F counts the fixed part 1/F-fold, so ours (whose
idle is mostly such steps: ~3 s wall per job) is an upper bound, the tighter the larger F. The
pair runs at its own factor (`--idle-scale`, 0.1): at 0.05 ours' fixed seconds alone would
read as ~60 real s."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tests.bench.figures import boot_and_ready, idle_billed, union_seconds
from tests.bench.scale import Scale
from tests.bench.stack import Bench, Scenario, brev_call_times, finished
from tests.brevsim.harness import SimCall

# 3 x 100 s nominal: the run is work, its length does not change the idle; epochs shorter than
# the run so each job's progress (status.progress) is read and written mid-run, as a training's
# is, and the writes figure counts it.
EPOCHS = 3
EPOCH_SECONDS = 100.0


def baseline_env(scale: Scale) -> dict[str, str]:
    """The naive setting: one pool of 8 slots for every brev call but waits (the pre-lane
    default), and a re-observe every 30 s (scaled)."""
    return {
        "TAOBREV_MAX_CONCURRENT_BREV_CALLS": "8",
        "TAOBREV_POLL_INTERVAL": f"{scale.wall(30.0):.6g}",
    }


def is_transfer(call: SimCall) -> bool:
    argv = call.argv
    if call.program == "aws":
        return True
    if call.program != "docker" or not argv:
        return False
    return argv[0] in ("pull", "login") or (argv[0] == "run" and any("aws-cli" in a for a in argv))


def transfer_seconds(remote: list[SimCall]) -> float:
    """Time the instance spent transferring: each transfer lasts until the next command on the
    instance starts (an upper bound: the operator runs one command at a time per job here)."""
    ordered = sorted(remote, key=lambda c: c.ts)
    spans = [(c.ts, nxt.ts) for c, nxt in itertools.pairwise(ordered) if is_transfer(c)]
    return union_seconds(spans)


@dataclass(frozen=True)
class IdleResult:
    label: str
    jobs: int
    idle_wall: list[float]  # per job, wall seconds
    outcomes: Counter[str]
    wall: float  # apply -> all finished
    writes_per_job: float
    brev_ssh_calls_per_job: float
    retried: int = 0  # jobs whose first instance was discarded (counted billed: all of them)


def _first(calls: list[SimCall], verb: str, refs: set[str], after: float = float("-inf")) -> float | None:
    return min((t for t in brev_call_times(calls, verb, refs) if t >= after), default=None)


def attempts_of(status: dict[str, Any]) -> list[tuple[str, str]]:
    """(instance name, Brev id or "") of every instance the job had, from its own record
    (`status.attempts[*].instance`, each started before its `brev create`; the last is current)."""
    recorded = [
        (str((a.get("instance") or {}).get("name") or ""), str((a.get("instance") or {}).get("id") or ""))
        for a in status.get("attempts") or []
    ]
    return [(name, iid) for name, iid in recorded if name]


def billed_spans(calls: list[SimCall], instances: list[tuple[str, str]]) -> list[tuple[float, float]] | None:
    """(`brev create` sent, first `brev delete` of it sent) per instance; None if one of them was
    never created or deleted by the operator (the job is not over: nothing to measure)."""
    spans = []
    for name, iid in instances:
        created = _first(calls, "create", {name})
        if created is None:
            return None
        deleted = _first(calls, "delete", {name, iid} - {""}, after=created)
        if deleted is None:
            return None
        spans.append((created, deleted))
    return spans


@dataclass
class Workload:
    """A workload applied on its own simulator + namespace + operator, not yet collected."""

    sc: Scenario
    names: list[str]
    began: float


def start(
    bench: Bench, label: str, jobs: int, scale: Scale, operator_env: dict[str, str] | None = None
) -> Workload:
    """Apply the workload at `scale` (every job in one kubectl call) and return at once, so the
    workloads run side by side on the same clock and machine load."""
    sc: Scenario = bench.scenario(label, operator_env, scale=scale)
    try:
        names = [f"{label}-{i:03d}" for i in range(jobs)]
        began = sc.apply_all(names, epochs=EPOCHS, epoch_seconds=EPOCH_SECONDS)
    except BaseException:
        sc.close()
        raise
    return Workload(sc, names, began)


def collect(bench: Bench, wl: Workload) -> IdleResult:
    """Wait until every job of `wl` finished, then read the figures; closes its scenario."""
    sc, names, began = wl.sc, wl.names, wl.began
    try:
        nominal = sc.scale.brev_durations()
        # Generous: 20x the physical lifecycle, so a slow baseline still finishes.
        lifecycle = sc.scale.wall(sum(nominal[k] for k in ("deploy_s", "ssh_delay_s", "pull_seconds")))
        left = sc.watch.wait(names, finished, timeout=max(300.0, 20 * lifecycle))
        wall = max((sc.watch.first_seen[n].get("Deleted", 0.0) for n in names), default=0.0) - began
        calls = sc.calls()
        boot_and_run = sc.scale.wall(boot_and_ready(nominal) + EPOCHS * EPOCH_SECONDS)
        retried = 0
        idle: list[float] = []
        outcomes: Counter[str] = Counter()
        for n in names:
            st = sc.watch.status.get(n, {})
            outcomes[str(st.get("outcome") or ("unfinished" if n in left else "none"))] += 1
            if st.get("outcome") != "Succeeded":
                continue
            # Billed: every instance the job had (a job whose probe overran its deadline had its
            # first one deleted and retried on a new one). Work: ONE boot + ready, the transfers
            # and the run; a discarded instance's boot did nothing the job needed.
            mine = attempts_of(st)
            spans = billed_spans(calls, mine)
            if not spans:
                continue
            work = boot_and_run
            for (name, _), (_, deleted) in zip(mine, spans, strict=True):
                on_it = [c for c in calls if c.where == "remote" and c.instance == name]
                work += transfer_seconds([c for c in on_it if c.ts < deleted])
            idle.append(idle_billed(0.0, sum(d - c for c, d in spans), work))
            retried += len(spans) > 1
        local = sum(1 for c in calls if c.where == "local" and c.program in ("brev", "ssh"))
        return IdleResult(
            label=sc.name,
            jobs=len(names),
            idle_wall=idle,
            outcomes=outcomes,
            wall=wall,
            writes_per_job=statistics.fmean(sc.watch.writes[n] for n in names),
            brev_ssh_calls_per_job=local / len(names),
            retried=retried,
        )
    finally:
        sc.close()


def run_side_by_side(bench: Bench, jobs: int, scale: Scale) -> tuple[IdleResult, IdleResult]:
    """Ours and the baseline on the same workload at the same time (two namespaces, two
    simulators, two operators): half the wall time, and both see the same machine load."""
    ours = start(bench, "idle-ours", jobs, scale)
    try:
        base = start(bench, "idle-base", jobs, scale, baseline_env(scale))
    except BaseException:
        ours.sc.close()
        raise
    try:
        ours_result = collect(bench, ours)
    finally:
        base_result = collect(bench, base)
    return ours_result, base_result
