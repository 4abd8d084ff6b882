"""The shared stack of every scenario: one control plane and one S3 for the whole bench; per
scenario a fresh simulator (speed = F, realistic nominal durations), namespace and operator
process (scaled settings), plus the watches the figures are read from."""

from __future__ import annotations

import contextlib
import json
import subprocess
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.pod_cgroups import POD_WEIGHT, CpuGroup
from tests.bench.scale import Scale
from tests.brevsim import container
from tests.brevsim.harness import BrevSim, SimCall
from tests.devenv.controlplane import ControlPlane, kubectl_path
from tests.devenv.operator import OperatorProcess, install_operator_identity
from tests.devenv.s3 import S3Server
from tests.fixtures.operator import Stack
from tests.status_paths import instance, run

REPO = Path(__file__).resolve().parents[2]
BUCKET = "bench-results"
APPLY_TIMEOUT = 300.0  # s: 100 creates on a loaded 2-core machine; guards against a hang only


class PhaseWatch(threading.Thread):
    """`kubectl get tbj -w` on one namespace: per job, the object versions written (Kubernetes API
    writes), the wall time each phase was first seen, and the last status."""

    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        super().__init__(daemon=True, name=f"watch-{namespace}")
        self.writes: Counter[str] = Counter()
        self.first_seen: dict[str, dict[str, float]] = defaultdict(dict)
        self.status: dict[str, dict[str, Any]] = {}
        self.exit_seen: dict[str, float] = {}  # per job: when its status first showed an exit code
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.ready = threading.Event()
        self.restarts = 0
        self._cp, self._namespace = cp, namespace
        self._closed = False
        self._stderr = cp.workdir.parent / f"watch-{namespace}.stderr"
        self._proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[str]:
        with self._stderr.open("a") as err:
            return subprocess.Popen(
                [kubectl_path(), "--kubeconfig", str(self._cp.kubeconfig), "get", "tbj",
                 "-n", self._namespace, "-w", "--output-watch-events", "-o", "json"],
                stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True,
            )  # fmt: skip

    def run(self) -> None:
        """Read events; when kubectl's watch ends (the API server closes watches, a loaded machine
        times them out), start it again: it lists every object first, so no status is lost."""
        seen: dict[str, set[str]] = defaultdict(set)
        self.ready.set()
        while True:
            self._read(self._proc, seen)
            self._proc.wait()
            if self._closed:
                return
            self.restarts += 1
            self._proc = self._spawn()
            if self._closed:  # close() ran meanwhile and may have killed the previous one only
                self._proc.kill()
                self._proc.wait()
                return

    def _read(self, proc: subprocess.Popen[str], seen: dict[str, set[str]]) -> None:
        assert proc.stdout is not None
        decoder = json.JSONDecoder()
        buf = ""
        for chunk in iter(proc.stdout.readline, ""):
            buf += chunk
            while buf.strip():
                try:
                    event, end = decoder.raw_decode(buf.lstrip())
                except ValueError:
                    break
                buf = buf.lstrip()[end:]
                with contextlib.suppress(KeyError, TypeError):  # e.g. an ERROR event: no object name
                    self._on(event, seen)

    def _on(self, event: dict[str, Any], seen: dict[str, set[str]]) -> None:
        now = time.time()
        obj = event.get("object", {})
        name, rv = obj["metadata"]["name"], obj["metadata"]["resourceVersion"]
        with self.changed:
            if event.get("type") == "MODIFIED" and rv not in seen[name]:
                seen[name].add(rv)
                self.writes[name] += 1
            status = dict(obj.get("status") or {})
            self.status[name] = status
            phase = status.get("phase")
            if phase:
                self.first_seen[name].setdefault(str(phase), now)
            if run(status).get("exitCode") is not None:
                self.exit_seen.setdefault(name, now)
            self.changed.notify_all()

    def phase(self, name: str) -> str | None:
        with self.lock:
            return self.status.get(name, {}).get("phase")

    def wait(self, names: Iterable[str], done: Callable[[dict[str, Any]], bool], timeout: float) -> list[str]:
        """Wait until `done(status)` for every name; returns the names that never got there."""
        pending = set(names)
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                pending = {n for n in pending if not done(self.status.get(n, {}))}
                left = deadline - time.monotonic()
                if not pending or left <= 0:
                    return sorted(pending)
                self.changed.wait(min(left, 1.0))

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._proc.kill()
        self._proc.wait()


def brev_call_times(calls: Iterable[SimCall], verb: str, refs: set[str]) -> list[float]:
    """When the operator ran `brev <verb>` naming any of `refs` (instance name or id)."""
    return [
        c.ts
        for c in calls
        if c.where == "local" and c.program == "brev" and c.argv[:1] == [verb] and refs & set(c.argv[1:])
    ]


def running_or_beyond(status: dict[str, Any]) -> bool:
    """The job reached Running, or ended (a job that failed early never will)."""
    return "Running" in (status.get("phaseTimes") or {}) or bool(status.get("outcome"))


def finished(status: dict[str, Any]) -> bool:
    return bool(status.get("finishedAt"))


class ContainerExit(threading.Thread):
    """FinishedAt of the job's container (named `job_id`) on one instance, as soon as the simulator
    shows it (the instance's files go away with it at delete). `on_exit` runs in this thread then."""

    def __init__(
        self, sim: BrevSim, instance_id: str, job_id: str, on_exit: Callable[[], None] | None = None
    ) -> None:
        super().__init__(daemon=True, name=f"exit-{instance_id}")
        self.docker = container.Docker(sim.store, instance_id)
        self.job_id = job_id
        self.finished_at: float | None = None
        self.on_exit = on_exit
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and self.finished_at is None:
            with contextlib.suppress(OSError, KeyError, ValueError):
                for cid in self.docker.ids():
                    if (self.docker.config(cid) or {}).get("Name") != "/" + self.job_id:
                        continue
                    fin = str((self.docker.state(cid) or {}).get("FinishedAt") or "")
                    if fin and not fin.startswith("0001"):
                        self.finished_at = container.parse_iso(fin)
                        if self.on_exit is not None:
                            self.on_exit()
                        return
            self.stop.wait(0.01)


def pod_wrap(groups: dict[str, CpuGroup], replica: str) -> Callable[[list[str]], list[str]] | None:
    """Where the cloud has a cgroup, a new one for `replica`'s pod (added to `groups`) and the
    wrapper that starts a command in it; None otherwise."""
    if "cloud" not in groups:
        return None
    group, why = CpuGroup.create(f"taobrev-bench-pod-{replica}", POD_WEIGHT)
    if group is None:
        raise RuntimeError(f"the cloud has a cgroup but pod {replica} cannot have one: {why}")
    groups[f"pod {replica}"] = group
    return group.wrap


@dataclass
class Scenario:
    """One simulator + namespace + operator process on the shared control plane and S3."""

    bench: Bench
    name: str
    sim: BrevSim
    op: OperatorProcess
    stack: Stack
    watch: PhaseWatch
    scale: Scale
    applied: dict[str, float] = field(default_factory=dict)
    # "cloud" (the simulator) and "pod <replica>" when the scenario runs in cgroups (pod_cgroups.py)
    groups: dict[str, CpuGroup] = field(default_factory=dict)

    def manifests(
        self,
        names: Iterable[str],
        *,
        epochs: int,
        epoch_seconds: float,
        recovery: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        timeouts = self.scale.timeouts()
        sim = {"epochs": epochs, "epoch_seconds": epoch_seconds}
        out = []
        for name in names:
            m = self.stack.job_manifest(name, simulation=sim, timeouts=timeouts)
            m["metadata"]["namespace"] = self.stack.namespace
            if recovery is not None:
                m["spec"]["recovery"] = recovery
            out.append(m)
        return out

    def apply_all(
        self, names: list[str], *, epochs: int, epoch_seconds: float, recovery: dict[str, Any] | None = None
    ) -> float:
        """Create every job in ONE kubectl call (jobs "applied at once": one POST each, no
        client-side-apply GET first); returns the wall time just before the call."""
        items = self.manifests(names, epochs=epochs, epoch_seconds=epoch_seconds, recovery=recovery)
        began = time.time()
        self.stack.cp.kubectl(
            "create",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
            timeout=APPLY_TIMEOUT,
        )
        for n in names:
            self.applied[n] = began
        return began

    def container_exit(self, job: str, on_exit: Callable[[], None] | None = None) -> ContainerExit:
        """A started ContainerExit for the job's container (the current attempt's instance.id +
        status.jobId)."""
        timeout = 120.0
        if self.watch.wait([job], lambda s: bool(instance(s).get("id") and s.get("jobId")), timeout):
            raise RuntimeError(f"{job}: no status.attempts[-1].instance.id/jobId after {timeout} s")
        with self.watch.lock:
            st = self.watch.status[job]
        watch = ContainerExit(self.sim, str(instance(st)["id"]), str(st["jobId"]), on_exit)
        watch.start()
        return watch

    def calls(self) -> list[SimCall]:
        return self.sim.calls()

    def in_phase(self, names: Iterable[str], phases: Iterable[str]) -> int:
        """How many of `names` are in one of `phases` now."""
        wanted = set(phases)
        with self.watch.lock:
            return sum(1 for n in names if self.watch.status.get(n, {}).get("phase") in wanted)

    def running(self) -> int:
        with self.watch.lock:
            return sum(1 for st in self.watch.status.values() if st.get("phase") == "Running")

    def pod(self, replica: str) -> Callable[[list[str]], list[str]] | None:
        """The wrapper that starts `replica` in a pod cgroup of its own (None: no cgroups here)."""
        return pod_wrap(self.groups, replica)

    def close(self) -> None:
        self.watch.close()
        with contextlib.suppress(Exception):
            self.op.stop()
        self.sim.close()
        for name, group in self.groups.items():
            left = group.remove()
            if left:
                print(f"   cgroup {name}: killed what its stack left running: {left}", flush=True)


@dataclass
class Bench:
    scale: Scale
    work: Path
    cp: ControlPlane
    s3: S3Server

    @classmethod
    def start(cls, scale: Scale) -> Bench:
        work = Path(tempfile.mkdtemp(prefix="taobrev-bench-"))
        cp = ControlPlane.start(work / "cp")
        try:
            s3 = S3Server.start(work / "s3")
        except BaseException:
            cp.stop()
            raise
        cp.apply_crds(REPO / "crds")
        s3.create_bucket(BUCKET)
        return cls(scale, work, cp, s3)

    def scenario(
        self,
        name: str,
        operator_env: Mapping[str, str] | None = None,
        *,
        scale: Scale | None = None,
        durations: Mapping[str, object] | None = None,
        cgroups: bool = False,
    ) -> Scenario:
        """A fresh simulator, namespace `name` and operator (settings scaled by `scale`, default
        the bench's, + `operator_env`); the simulator runs at that factor with `durations`
        (default: the realistic nominal ones). `cgroups`: the simulator and the operator each in a
        CPU cgroup of their own (pod_cgroups.py), where the host has a writable cpu controller."""
        scale = scale or self.scale
        groups: dict[str, CpuGroup] = {}
        if cgroups:
            cloud, why = CpuGroup.create("taobrev-bench-cloud")
            if cloud is None:
                print(f"   no cgroups for {name} ({why}): pod and cloud share the host", flush=True)
            else:
                groups["cloud"] = cloud
        sim = BrevSim(self.work / name / "sim", speed=scale.factor, s3_endpoint=self.s3.endpoint_url)
        if "cloud" in groups:
            groups["cloud"].adopt(sim.processes())  # the daemon (nothing else runs yet)
        try:
            sim.set_faults(**(durations if durations is not None else scale.brev_durations()))
            self.cp.create_namespace(name)
            install_operator_identity(self.cp, sim, job_namespaces=[name])
            env = {"TAOBREV_NAMESPACES": name, **scale.operator_env(), **(operator_env or {})}
            op = OperatorProcess(self.cp, sim, self.work / name / "operator", extra_env=env)
            if "cloud" in groups:
                op.wrap = pod_wrap(groups, "operator")
            op.start()
            stack = Stack(self.cp, sim, self.s3, op, name, BUCKET)
            stack.create_job_secrets()
            watch = PhaseWatch(self.cp, name)
            watch.start()
            watch.ready.wait(10)
        except BaseException:
            sim.close()
            for group in groups.values():
                group.remove()
            raise
        return Scenario(self, name, sim, op, stack, watch, scale, groups=groups)

    def close(self) -> None:
        self.s3.stop()
        self.cp.stop()
