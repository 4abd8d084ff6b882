"""Isolation at REAL speed (F = 1): the operator runs with its nominal settings and the simulator at
speed 1, so a latency is measured in real seconds, not bounded.

`busy` jobs are kept busy for the whole scenario by their own instance durations (the simulator's
`instance_durations` knob): half probe a fresh instance whose first exec takes 600 s
(WaitingExec), half pull a 600 s image (Pulling). Every other instance boots in seconds. Once they
are all busy:

1. the "exiter" (one short epoch) and the "victim" (endless epochs) are applied; the exiter's
   container exits -> `brev delete` of its instance sent, minus its own upload;
2. `kubectl delete` of the Running victim -> its container stopped.

Each figure comes with the number of busy others at that moment.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tests.bench.scale import Scale
from tests.bench.scenario_idle import transfer_seconds
from tests.bench.stack import Bench, ContainerExit, Scenario, brev_call_times, finished, running_or_beyond
from tests.status_paths import instance

REAL = Scale(1.0)
LONG = 600.0  # real s: a fresh instance's first exec; a multi-GB TAO pull
PROBING, PULLING = "busy-e", "busy-p"  # job names (instance names contain them)
BUSY = ("WaitingExec", "Pulling")
# Real seconds for everything else: boot and the exiter's work take seconds, not minutes.
SHORT: dict[str, float] = {
    "deploy_s": 5.0,
    "ssh_delay_s": 5.0,
    "build_s": 2.0,
    "delete_s": 5.0,
    "stop_s": 5.0,
    "start_s": 5.0,
    "pull_seconds": 5.0,
    "epoch_seconds": 20.0,
    "upload_s": 3.0,
    "create_poll_s": 1.0,
    "ssh_wait_interval_s": 1.0,  # the real brev's WaitForSSHToBeAvailable interval
}
EXITER_EPOCH_S = 20.0
WAIT = 300.0  # guards against a hang only: every step here is seconds of simulated work


def durations() -> dict[str, object]:
    return {
        **SHORT,
        "instance_durations": {PROBING: {"ssh_delay_s": LONG}, PULLING: {"pull_seconds": LONG}},
    }


@dataclass
class IsolationResult:
    busy_jobs: int = 0
    busy_reached: int = 0
    exit_to_delete: float | None = None  # real s, own upload subtracted
    exiter_upload: float = 0.0
    busy_at_exit: int | None = None
    delete_to_stop: float | None = None  # real s
    busy_at_delete: int | None = None
    busy_at_end: int = 0
    problems: list[str] = field(default_factory=list)


def _exit_to_delete(sc: Scenario, watch: ContainerExit, res: IsolationResult) -> None:
    if watch.finished_at is None:
        res.problems.append("the exiter's container exit was never seen")
        return
    st = sc.watch.status.get("exiter", {})
    inst = instance(st)
    refs = {str(inst.get("name") or ""), str(inst.get("id") or "")} - {""}
    calls = sc.calls()
    deletes = brev_call_times(calls, "delete", refs)
    if not deletes:
        res.problems.append("no `brev delete` of the exiter's instance")
        return
    exited, deleted = watch.finished_at, min(deletes)
    remote = [c for c in calls if c.where == "remote" and c.instance in refs and exited <= c.ts < deleted]
    res.exiter_upload = transfer_seconds(remote)
    res.exit_to_delete = deleted - exited - res.exiter_upload


def run(bench: Bench, busy: int) -> IsolationResult:
    res = IsolationResult(busy_jobs=busy)
    sc = bench.scenario("isolation", scale=REAL, durations=durations())
    try:
        others = [f"{PROBING}-{i:03d}" for i in range(busy // 2)]
        others += [f"{PULLING}-{i:03d}" for i in range(busy - busy // 2)]
        sc.apply_all(others, epochs=1, epoch_seconds=SHORT["epoch_seconds"])
        sc.watch.wait(others, lambda s: s.get("phase") in BUSY or bool(s.get("outcome")), WAIT)
        res.busy_reached = sc.in_phase(others, BUSY)
        if res.busy_reached < busy:
            res.problems.append(f"only {res.busy_reached}/{busy} others busy before the exiter")
        sc.apply_all(["victim"], epochs=1000, epoch_seconds=LONG)
        sc.apply_all(["exiter"], epochs=1, epoch_seconds=EXITER_EPOCH_S)
        at_exit: list[int] = []
        exit_watch = sc.container_exit("exiter", on_exit=lambda: at_exit.append(sc.in_phase(others, BUSY)))
        if sc.watch.wait(["exiter"], finished, WAIT):
            res.problems.append(f"exiter not finished after {WAIT:.0f} s")
        exit_watch.stop.set()
        exit_watch.join()
        res.busy_at_exit = at_exit[0] if at_exit else None
        _exit_to_delete(sc, exit_watch, res)
        if sc.watch.wait(["victim"], running_or_beyond, WAIT) or sc.watch.phase("victim") != "Running":
            res.problems.append(f"victim not Running (phase {sc.watch.phase('victim')})")
            return res
        stopped = sc.container_exit("victim")
        res.busy_at_delete = sc.in_phase(others, BUSY)
        asked = time.time()
        sc.stack.kubectl("delete", "tbj", "victim", "-n", sc.stack.namespace, "--wait=false")
        stopped.join(timeout=WAIT)
        stopped.stop.set()
        if stopped.finished_at is None:
            res.problems.append(f"victim: container not stopped {WAIT:.0f} s after kubectl delete")
        else:
            res.delete_to_stop = stopped.finished_at - asked
        res.busy_at_end = sc.in_phase(others, BUSY)
        return res
    finally:
        sc.close()
