"""`make bench`: figures for the operator on the local stack (real control plane, operator process,
Brev simulator at a high speed factor, loopback S3).

Prints, for N concurrent jobs:
- exit-notice latency: container FinishedAt (simulator) -> the operator's "phase changed: Uploading"
  log line (p50 / p99 / max) — the target is p99 <= 2 s;
- exit-to-teardown: container exit -> `brev delete` sent, and -> job finished (instance gone);
- brev calls per job by verb (from the simulator's argv record) and the shared `ls` count;
- Kubernetes API writes per job (object versions seen on a watch: status patches + kopf's own);
- wall time for all jobs.

Usage: python -m tests.bench [--jobs N] [--epochs E]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

from tests.brevsim import container
from tests.brevsim.harness import BrevSim
from tests.devenv.controlplane import ControlPlane, kubectl_path
from tests.devenv.operator import OperatorProcess, install_operator_identity
from tests.devenv.s3 import S3Server
from tests.fixtures.operator import Stack

REPO = Path(__file__).resolve().parents[1]


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class ExitWatcher(threading.Thread):
    """Records each container's FinishedAt as soon as the simulator shows it (before teardown
    removes the container)."""

    def __init__(self, sim: BrevSim) -> None:
        super().__init__(daemon=True)
        self.sim = sim
        self.finished: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for inst in self.sim.instances():
                try:
                    docker = container.Docker(self.sim.store, str(inst["id"]))
                    for cid in docker.ids():
                        obj = container.inspect_object(docker, cid)
                        if (
                            obj
                            and obj["State"].get("FinishedAt")
                            and obj["Name"].strip("/") not in self.finished
                        ):
                            fin = obj["State"]["FinishedAt"]
                            if not fin.startswith("0001"):
                                self.finished[obj["Name"].strip("/")] = _ts(fin)
                except (OSError, KeyError, ValueError):
                    continue
            self.stop.wait(0.05)


def _watch_versions(cp: ControlPlane, namespace: str, counts: Counter[str], stop: threading.Event) -> None:
    proc = subprocess.Popen(
        [kubectl_path(), "--kubeconfig", str(cp.kubeconfig), "get", "tbj", "-n", namespace, "-w",
         "--output-watch-events", "-o", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    decoder = json.JSONDecoder()
    buf = ""
    seen: dict[str, set[str]] = defaultdict(set)
    for chunk in iter(proc.stdout.readline, ""):
        buf += chunk
        while buf.strip():
            try:
                event, end = decoder.raw_decode(buf.lstrip())
            except ValueError:
                break
            buf = buf.lstrip()[end:]
            obj = event.get("object", {})
            name, rv = obj["metadata"]["name"], obj["metadata"]["resourceVersion"]
            if event.get("type") == "MODIFIED" and rv not in seen[name]:
                seen[name].add(rv)
                counts[name] += 1
        if stop.is_set():
            break
    proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--speed", type=float, default=0.01)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="taobrev-bench-"))
    print(f"bench workdir: {work}")
    cp = ControlPlane.start(work / "cp")
    s3 = S3Server.start(work / "s3")
    try:
        cp.apply_crds(REPO / "crds")
        sim = BrevSim(work / "sim", speed=args.speed, s3_endpoint=s3.endpoint_url)
        namespace = "bench"
        cp.create_namespace(namespace)
        install_operator_identity(cp, sim, job_namespaces=[namespace])
        s3.create_bucket("bench-results")
        op = OperatorProcess(cp, sim, work / "operator", extra_env={"TAOBREV_NAMESPACES": namespace}).start()
        stack = Stack(cp, sim, s3, op, namespace, "bench-results")
        stack.create_job_secrets()

        writes: Counter[str] = Counter()
        stop = threading.Event()
        watcher = threading.Thread(target=_watch_versions, args=(cp, namespace, writes, stop), daemon=True)
        watcher.start()
        exits = ExitWatcher(sim)
        exits.start()
        time.sleep(1.0)  # let the watch establish before the first object exists

        names = [f"bench-{i:03d}" for i in range(args.jobs)]
        began = time.monotonic()
        for name in names:
            stack.apply(stack.job_manifest(name, simulation={"epochs": args.epochs, "epoch_seconds": 200}))
        statuses = {n: stack.wait_finished(n, timeout=1800) for n in names}
        wall = time.monotonic() - began
        stop.set()
        exits.stop.set()

        log = [json.loads(line) for line in op.log_text().splitlines() if line.startswith("{")]
        noticed = {
            e["name"]: _ts(e["timestamp"])
            for e in log
            if e.get("event") == "phase changed" and e.get("phase") == "Uploading" and "name" in e
        }
        calls = [c for c in sim.calls() if c.program == "brev"]
        notice, to_delete, to_finish = [], [], []
        verbs_per_job: list[Counter[str]] = []
        for name, st in statuses.items():
            job, inst = st["jobId"], st["instanceName"]
            # exec addresses the instance by name; delete by the id recorded at first sighting.
            refs = {inst, st.get("instanceId")}
            verbs = Counter(c.argv[0] for c in calls if refs & set(c.argv[1:]))
            verbs_per_job.append(verbs)
            exited = exits.finished.get(job)
            if exited is None:
                continue
            if name in noticed:
                notice.append(noticed[name] - exited)
            deletes = [c.ts for c in calls if c.argv[:1] == ["delete"] and refs & set(c.argv[1:])]
            if deletes:
                to_delete.append(min(deletes) - exited)
            to_finish.append(_ts(st["finishedAt"]) - exited)

        total = Counter[str]()
        for v in verbs_per_job:
            total.update(v)
        print(f"\n== {args.jobs} concurrent jobs, {args.epochs} epochs each, simulator speed {args.speed}")
        print(f"wall time, apply -> all finished: {wall:.1f} s")
        print(f"outcomes: {Counter(s['outcome'] for s in statuses.values())}")
        print(
            f"exit noticed (container exit -> phase Uploading): p50 {_pct(notice, 0.5):.2f} s, "
            f"p99 {_pct(notice, 0.99):.2f} s, max {max(notice, default=float('nan')):.2f} s (n={len(notice)})"
        )
        print(
            f"exit -> brev delete sent: p50 {_pct(to_delete, 0.5):.2f} s, p99 {_pct(to_delete, 0.99):.2f} s; "
            "exit -> job finished (instance gone, 1 s status resolution): "
            f"p50 {statistics.median(to_finish):.1f} s"
            if to_finish
            else "no exit samples"
        )
        print("brev calls per job (mean, by verb): " + ", ".join(
            f"{verb} {n / len(names):.1f}" for verb, n in sorted(total.items())
        ))  # fmt: skip
        print(f"brev calls per job (total, excluding the shared ls): {sum(total.values()) / len(names):.1f}")
        print(f"shared `brev ls` calls for all jobs: {sum(1 for c in calls if c.argv[:1] == ['ls'])}")
        print(f"Kubernetes API writes per job (object versions on a watch): mean "
              f"{statistics.mean(writes.values()) if writes else float('nan'):.1f}, "
              f"max {max(writes.values(), default=0)}")  # fmt: skip
        op.stop()
    finally:
        s3.stop()
        cp.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
