"""Many finished TaoBrevJobs (issue 30, part 2): what N finished objects cost an operator that
starts with them. The objects are created finished (a status with finishedAt, as the operator
leaves them), the operator restarts, and the figures are its start-up to healthy, the time until
kopf has handed it every object (its daemons for finished jobs end before any pass), its RSS
then, and the passes and Brev calls it made for them (none is the goal: no daemon, timer or
periodic API/Brev work per finished job).

`python -m tests.bench.scenario_finished --finished 9000` runs it alone."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from controller.reconciler import FINALIZER
from tests.bench.scale import Scale
from tests.bench.stack import Bench, Scenario
from tests.footprint import memory_of

CHUNK = 500  # objects per `kubectl create` call
FINISHED_STATUS: dict[str, Any] = {
    "phase": "Deleted",
    "outcome": "Succeeded",
    "runOutcome": "Succeeded",
    "reason": "Succeeded",
    "message": "training exited 0; results verified in S3",
    "finishedAt": "2026-12-01T00:00:00Z",
}


@dataclass
class FinishedResult:
    finished: int
    create_wall: float  # s to create and finish them (the bench's own cost)
    start_to_healthy: float  # s: operator process start -> /healthz 200
    start_to_settled: float | None  # s: start -> every object seen (kopf's daemons spawned and ended)
    rss_mib: float  # the operator's RSS once settled
    rss_empty_mib: float  # its RSS started on an empty namespace
    passes: float  # reconcile passes it counted
    brev_calls: int  # brev calls it made after the restart


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - the operator's loopback /metrics
        text = resp.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def create_finished(sc: Scenario, n: int) -> float:
    began = time.time()
    names = [f"done-{i:05d}" for i in range(n)]
    for i in range(0, n, CHUNK):
        items = sc.manifests(names[i : i + CHUNK], epochs=1, epoch_seconds=1)
        for item in items:  # as the operator leaves a finished job: its finalizer still on
            item["metadata"]["finalizers"] = [FINALIZER]
        sc.stack.cp.kubectl(
            "create",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
            timeout=600,
        )
        print(f"   created {min(i + CHUNK, n)}/{n}", flush=True)
    # The status subresource through the API client: one kubectl process per object would cost
    # the bench more CPU than the operator it measures.
    api = k8s.CustomObjectsApi(k8s_config.new_client_from_config(str(sc.stack.cp.kubeconfig)))

    def finish(name: str) -> None:
        api.patch_namespaced_custom_object_status(
            "taobrev.io", "v1alpha1", sc.name, "taobrevjobs", name, {"status": FINISHED_STATUS}
        )

    with ThreadPoolExecutor(8) as pool:
        for done, _ in enumerate(pool.map(finish, names), start=1):
            if done % 1000 == 0:
                print(f"   finished {done}/{n}", flush=True)
    return time.time() - began


def run(bench: Bench, n: int) -> FinishedResult:
    sc = bench.scenario("finished", scale=Scale(1.0))
    try:
        op = sc.op
        assert op.proc is not None
        time.sleep(5)  # settle: an idle operator on an empty namespace
        rss_empty = memory_of(op.proc.pid) / 2**20
        op.stop()
        create_wall = create_finished(sc, n)
        calls_before = len(sc.sim.calls())
        began = time.monotonic()
        op.start(timeout=600)
        healthy = time.monotonic() - began
        settled: float | None = None
        # Settled: the operator's RSS stops growing for 10 s (kopf has listed and spawned/ended
        # every object's daemon), within 10 minutes.
        assert op.proc is not None
        last, still = memory_of(op.proc.pid), 0
        while time.monotonic() - began < 600:
            time.sleep(1)
            now = memory_of(op.proc.pid)
            still = still + 1 if abs(now - last) < 1 << 20 else 0
            last = now
            if still >= 10:
                settled = time.monotonic() - began - 10
                break
        passes = _metric(op.metrics_url, "taobrev_reconcile_duration_seconds_count")
        return FinishedResult(
            finished=n,
            create_wall=create_wall,
            start_to_healthy=healthy,
            start_to_settled=settled,
            rss_mib=last / 2**20,
            rss_empty_mib=rss_empty,
            passes=passes,
            brev_calls=len(sc.sim.calls()) - calls_before,
        )
    finally:
        sc.close()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.scenario_finished", description=__doc__)
    ap.add_argument("--finished", type=int, default=9000, help="finished objects (9000)")
    args = ap.parse_args(argv)
    bench = Bench.start(Scale(1.0))
    try:
        res = run(bench, args.finished)
    finally:
        bench.close()
    print(res)
    per = (res.rss_mib - res.rss_empty_mib) / max(1, res.finished) * 1024
    print(
        f"{res.finished} finished objects: start -> healthy {res.start_to_healthy:.1f} s, -> settled "
        f"{res.start_to_settled} s; operator RSS {res.rss_mib:.0f} MiB ({res.rss_empty_mib:.0f} empty, "
        f"{per:.1f} KiB per finished object); {res.passes:.0f} passes, {res.brev_calls} brev calls"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
