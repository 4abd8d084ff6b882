"""``python -m tests.devenv demo`` (``make demo``): one TAO job end to end, on this machine.

It starts everything the job needs, in order, and fails loudly naming the component that could not
start: kube-apiserver + etcd (built once, then cached) with the CRD, a loopback S3 (moto) holding a
small dataset, the Brev CLI simulator, and the operator as a separate process running as its
ServiceAccount. Then it applies crds/examples/ephemeral-inline-spec.yaml (pointed at the loopback
S3, with a ``simulation:`` block) and prints each phase as the operator moves the job along.

Afterwards it tears everything down (exit 0 if the job Succeeded), or with ``--keep`` leaves it
running and records the processes in ``<dir>/demo.json`` so ``python -m tests.devenv down``
stops them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from controller.versions import load_versions
from tests import status_paths as sp
from tests.brevsim.harness import BrevSim
from tests.brevsim.model import NOMINAL
from tests.devenv import kubebuild
from tests.devenv.controlplane import ControlPlane, ControlPlaneError, kubectl_path
from tests.devenv.operator import (
    FAST_SETTINGS,
    OPERATOR_NAMESPACE,
    SERVICE_ACCOUNT,
    OperatorProcess,
    install_operator_identity,
)
from tests.devenv.plugin import kubectl_taobrev, plugin_env
from tests.devenv.s3 import REGION, S3Server

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "crds" / "examples"
JOB_EXAMPLE = EXAMPLES / "ephemeral-inline-spec.yaml"
SECRETS_EXAMPLE = EXAMPLES / "secrets.yaml"

PHASES = ("Pending", "Provisioning", "WaitingExec", "Pulling", "Running", "Uploading", "Deleted")
NAMESPACE = "taobrev-demo"
STATE_FILE = "demo.json"
# 1 simulated minute = 6 s: slow enough to watch every phase, the whole job takes about a minute.
DEFAULT_SPEED = 0.1
EPOCHS = 5
POLL_S = 0.5
DATASET_FILES = {
    "train/A/0001.png": 1536,
    "train/B/0001.png": 1536,
    "train/label/0001.png": 512,
    "val/A/0001.png": 1536,
    "val/B/0001.png": 1536,
    "val/label/0001.png": 512,
}


class DemoError(RuntimeError):
    """A component could not start or the job did not finish; the message says which and why."""


class Interrupted(BaseException):
    """SIGTERM/SIGINT: unwind so the teardown still runs."""


def default_demo_dir() -> Path:
    # Inside the state directory of `python -m tests.devenv`, so its `down` finds a kept demo.
    base = os.environ.get("TAOBREV_DEVENV_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "taobrev-operator" / "devenv"
    return root / "demo"


# ------------------------------------------------------------------ processes another run can stop


def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), None if gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


@dataclass(frozen=True)
class TrackedProcess:
    """A session leader we started, identified by pid AND start time (pids get reused)."""

    name: str
    pid: int
    start_ticks: int

    @classmethod
    def of(cls, name: str, pid: int) -> TrackedProcess:
        ticks = _start_ticks(pid)
        if ticks is None:
            raise DemoError(f"{name} (pid {pid}) exited right after it started")
        return cls(name, pid, ticks)

    def alive(self) -> bool:
        return _start_ticks(self.pid) == self.start_ticks

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM its process group (it started its own session), SIGKILL after ``timeout``."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self.alive():
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)
            deadline = time.monotonic() + timeout
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.05)


def _read_state(demo_dir: Path) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads((demo_dir / STATE_FILE).read_text())
    except FileNotFoundError:
        return None
    return state


def _tracked(state: dict[str, Any]) -> list[TrackedProcess]:
    return [
        TrackedProcess(p["name"], int(p["pid"]), int(p["start_ticks"])) for p in state.get("processes", [])
    ]


def _kept_control_plane(demo_dir: Path) -> ControlPlane | None:
    try:
        return ControlPlane.load(demo_dir / "controlplane")
    except ControlPlaneError:
        return None


def kept_status(demo_dir: Path) -> tuple[bool, str]:
    """For ``python -m tests.devenv status``: is the kept demo stack in ``demo_dir`` whole?"""
    state = _read_state(demo_dir)
    if state is None:
        return False, f"no demo state in {demo_dir}"
    parts, ok = [], True
    for proc in _tracked(state):
        alive = proc.alive()
        ok = ok and alive
        parts.append(f"{proc.name} pid {proc.pid} {'running' if alive else 'NOT RUNNING'}")
    cp = _kept_control_plane(demo_dir)
    cp_ok = cp is not None and all(cp.processes_running().values()) and cp.healthy()
    ok = ok and cp_ok
    parts.append(f"control plane {'healthy' if cp_ok else 'NOT RUNNING'}")
    return (
        ok,
        f"{'; '.join(parts)}; job {state['namespace']}/{state['job']}; KUBECONFIG={state['kubeconfig']}",
    )


def stop_kept(demo_dir: Path) -> None:
    """For ``python -m tests.devenv down``: stop what ``demo --keep`` left in ``demo_dir``."""
    state = _read_state(demo_dir)
    if state is None:
        return
    for proc in _tracked(state):  # the operator first: it must not see S3 or the API vanish mid-job
        proc.stop()
    sim_root = Path(state["brevsim"])
    if sim_root.is_dir():
        BrevSim(sim_root, speed=float(state["speed"]), s3_endpoint=state.get("s3_endpoint")).kill_containers()
    cp = _kept_control_plane(demo_dir)
    if cp is not None:
        cp.stop()
    (demo_dir / STATE_FILE).unlink(missing_ok=True)


def _down_command(demo_dir: Path) -> str:
    if demo_dir.resolve() == default_demo_dir().resolve():
        return "python -m tests.devenv down"
    return f"python -m tests.devenv down --dir {demo_dir}"


# ------------------------------------------------------------------------------------- output


class Out:
    """Timestamped, line-buffered progress on stdout (relative to the demo's start)."""

    def __init__(self) -> None:
        self.began = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def step(self, what: str, detail: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {what:<15} {detail}", flush=True)

    def line(self, text: str = "") -> None:
        print(text, flush=True)


def _human_bytes(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB"


def _short(path: Path | str) -> str:
    """A path relative to the current directory when it is below it (shorter commands to copy)."""
    with contextlib.suppress(ValueError):
        return str(Path(path).relative_to(Path.cwd()))
    return str(path)


# -------------------------------------------------------------------------------------- the run


@dataclass
class Options:
    demo_dir: Path
    speed: float
    keep: bool
    timeout: float
    # docs/workflows.md: the sample as a workflow, train -> evaluate -> export on one instance.
    workflow: bool = False


def parse_args(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m tests.devenv demo",
        description=(
            "Run a sample TaoBrevJob end to end on this machine: a real kube-apiserver + etcd, the "
            "operator as its ServiceAccount, the Brev CLI simulator and a loopback S3."
        ),
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help=f"state directory (default: {default_demo_dir()})"
    )
    parser.add_argument(
        "--speed",
        type=float,
        default=DEFAULT_SPEED,
        help=f"simulated-time factor: real seconds per nominal second (default {DEFAULT_SPEED}; "
        "1 is real time, the tests use 0.01)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the stack running afterwards (stop it with `python -m tests.devenv down`)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="give up on the job after this many seconds (default: generous for the speed)",
    )
    parser.add_argument(
        "--workflow",
        action="store_true",
        help="run the sample as a workflow: train -> evaluate -> export on one instance (spec.steps)",
    )
    ns = parser.parse_args(argv)
    if not 0 < ns.speed <= 1:
        parser.error(f"--speed must be in (0, 1], got {ns.speed}: e.g. --speed 0.1")
    # Nominal job length ~ deploy + ssh + pull + epochs + delete; allow 5x that plus start-up.
    nominal = sum(NOMINAL[k] for k in ("deploy_s", "ssh_delay_s", "pull_seconds", "delete_s"))
    nominal += EPOCHS * NOMINAL["epoch_seconds"]
    timeout = ns.timeout if ns.timeout is not None else 120 + 5 * nominal * ns.speed
    timeout += 3 * 120 * ns.speed if ns.workflow else 0  # two more steps and their uploads
    return Options((ns.dir or default_demo_dir()).resolve(), ns.speed, ns.keep, timeout, ns.workflow)


class Demo:
    def __init__(self, opts: Options, out: Out) -> None:
        self.opts = opts
        self.out = out
        self.dir = opts.demo_dir
        self.cp: ControlPlane | None = None
        self.s3: S3Server | None = None
        self.sim: BrevSim | None = None
        self.operator: OperatorProcess | None = None
        self.job = ""
        self.results_uri = ""
        self.recorded = False  # demo.json is ours to remove only once this run wrote it

    # ---- set-up, one component at a time; each failure names its component

    def check_nothing_kept(self) -> None:
        state = _read_state(self.dir)
        cp = _kept_control_plane(self.dir)
        alive = [f"{p.name} pid {p.pid}" for p in _tracked(state or {}) if p.alive()]
        if cp is not None and any(cp.processes_running().values()):
            alive.append(f"control plane pids {', '.join(map(str, cp.pids.values()))}")
        if alive:
            raise DemoError(
                f"a demo stack is still running from {self.dir} ({'; '.join(alive)}); "
                f"stop it first: {_down_command(self.dir)}"
            )
        (self.dir / STATE_FILE).unlink(missing_ok=True)

    def start_control_plane(self) -> ControlPlane:
        versions = load_versions().kubernetes
        began = time.monotonic()
        bins = kubebuild.build()  # prints its own progress on a first (minutes-long) build
        self.out.step(
            "binaries",
            f"kube-apiserver {versions.version}, etcd {versions.etcd_version} "
            f"in {bins.kube_apiserver.parent} ({time.monotonic() - began:.1f}s)",
        )
        # --keep: the servers must outlive this process; otherwise they die with it, even on SIGKILL.
        cp = ControlPlane.start(self.dir / "controlplane", detach=self.opts.keep)
        self.cp = cp
        crds = sorted((REPO / "crds").glob("*.yaml"))
        if not crds:
            raise DemoError(f"no CRD in {REPO / 'crds'}: regenerate it with `make crds`")
        for crd in crds:
            cp.apply_crds(crd)
        self.out.step(
            "control plane",
            f"{cp.server} ready in {cp.start_seconds:.1f}s "
            f"(pids {', '.join(f'{n} {p}' for n, p in cp.pids.items())}); "
            f"{', '.join(_short(c) for c in crds)} applied, CRD Established",
        )
        return cp

    def start_s3(self) -> S3Server:
        s3 = S3Server.start(self.dir / "s3")
        self.s3 = s3
        return s3

    def stage_dataset(self, s3: S3Server, job: dict[str, Any]) -> None:
        """Create the example's buckets and put a small stand-in dataset under each input URI."""
        data = job["spec"]["data"]
        client = s3.client()
        inputs = [item["uri"].removeprefix("s3://").partition("/") for item in data["inputs"]]
        buckets = sorted(
            {data["resultsUri"].removeprefix("s3://").split("/", 1)[0]} | {b for b, _, _ in inputs}
        )
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        staged = []
        for bucket, _, prefix in inputs:
            for rel, size in DATASET_FILES.items():
                client.put_object(Bucket=bucket, Key=f"{prefix.rstrip('/')}/{rel}", Body=os.urandom(size))
            staged.append(f"s3://{bucket}/{prefix}")
        total = sum(DATASET_FILES.values())
        self.out.step(
            "S3 (moto)",
            f"{s3.endpoint_url} (pid {s3.process.pid}): buckets {', '.join(buckets)}; "
            f"dataset {', '.join(staged)} ({len(DATASET_FILES)} objects, {_human_bytes(total)})",
        )

    def start_simulator(self, s3: S3Server) -> BrevSim:
        speed = self.opts.speed
        sim = BrevSim(self.dir / "brevsim", speed=speed, s3_endpoint=s3.endpoint_url, detach=self.opts.keep)
        self.sim = sim

        def real(key: str) -> str:
            return f"{NOMINAL[key] * speed:.1f}s"

        self.out.step(
            "Brev simulator",
            f"speed {speed} (1 simulated minute = {60 * speed:.1f}s): DEPLOYING {real('deploy_s')}, "
            f"ssh {real('ssh_delay_s')}, image pull {real('pull_seconds')}, epoch {real('epoch_seconds')}, "
            f"DELETING {real('delete_s')}",
        )
        return sim

    def start_operator(self, cp: ControlPlane, sim: BrevSim) -> OperatorProcess:
        cp.create_namespace(NAMESPACE)  # first: its Secret-read RoleBinding lives in it
        install_operator_identity(cp, sim, job_namespaces=[NAMESPACE])
        # FAST_SETTINGS poll every 0.5 s: at the demo's speeds every phase lasts seconds.
        op = OperatorProcess(cp, sim, self.dir / "operator", extra_env={"TAOBREV_NAMESPACES": NAMESPACE})
        self.operator = op
        op.log_path.unlink(missing_ok=True)  # a previous run's log would only confuse
        op.start()
        self.out.step(
            "operator",
            f"pid {op.proc.pid if op.proc else '?'} as system:serviceaccount:{OPERATOR_NAMESPACE}:"
            f"{SERVICE_ACCOUNT} (deploy/base RBAC), watching namespace {NAMESPACE}; "
            f"poll {FAST_SETTINGS['TAOBREV_POLL_INTERVAL']}s; log {_short(op.log_path)}",
        )
        return op

    def record_state(self) -> None:
        """What `python -m tests.devenv status/down` need to find this stack again."""
        assert self.cp is not None
        assert self.s3 is not None
        assert self.operator is not None
        assert self.operator.proc is not None
        procs = [
            TrackedProcess.of("operator", self.operator.proc.pid),
            TrackedProcess.of("s3", self.s3.process.pid),
        ]
        state = {
            "namespace": NAMESPACE,
            "job": self.job,
            "speed": self.opts.speed,
            "brevsim": str(self.dir / "brevsim"),
            "s3_endpoint": self.s3.endpoint_url,
            "kubeconfig": str(self.cp.kubeconfig),
            "metrics_url": self.operator.metrics_url,
            "processes": [p.__dict__ for p in procs],
        }
        (self.dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
        self.recorded = True

    # ---- the job

    def job_manifest(self, s3: S3Server) -> dict[str, Any]:
        """The ephemeral example, pointed at the loopback S3 and made short with `simulation:`."""
        job: dict[str, Any] = yaml.safe_load(JOB_EXAMPLE.read_text())
        job["metadata"]["namespace"] = NAMESPACE
        task = job["spec"]["task"]
        spec_content = yaml.safe_load(task["specContent"])
        spec_content.setdefault("train", {})["num_epochs"] = EPOCHS
        # Read only by the simulator's TAO stand-in: epochs of the nominal length (x speed).
        spec_content["simulation"] = {"epochs": EPOCHS, "epoch_seconds": NOMINAL["epoch_seconds"]}
        task["specContent"] = yaml.safe_dump(spec_content, sort_keys=False)
        task["args"] = [a for a in task.get("args", []) if not a.startswith("train.num_epochs=")]
        task["args"].append(f"train.num_epochs={EPOCHS}")
        data = job["spec"]["data"]
        data["s3EndpointUrl"] = s3.endpoint_url
        data["s3Region"] = REGION  # the loopback S3's region
        if not data.get("inputs"):
            raise DemoError(f"{JOB_EXAMPLE} has no spec.data.inputs: the demo stages its dataset there")
        if self.opts.workflow:
            job["spec"]["steps"] = _workflow_steps(job["spec"].pop("task"))
        return job

    def create_job(self, cp: ControlPlane, job: dict[str, Any]) -> None:
        secrets = [d for d in yaml.safe_load_all(SECRETS_EXAMPLE.read_text()) if d]
        for secret in secrets:
            secret["metadata"]["namespace"] = NAMESPACE
        # Through stdin: Secret values never appear in an argv.
        cp.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": secrets})
        )
        names = ", ".join(s["metadata"]["name"] for s in secrets)
        self.out.step("secrets", f"{names} (fake values from {_short(SECRETS_EXAMPLE)}, applied via stdin)")
        manifest = self.dir / "job.yaml"
        manifest.write_text(yaml.safe_dump(job, sort_keys=False))
        self.plan(cp, manifest)
        created = cp.kubectl("apply", "-f", str(manifest)).stdout.strip()
        self.job = job["metadata"]["name"]
        self.results_uri = job["spec"]["data"]["resultsUri"]
        self.out.step("job", f"kubectl apply -f {_short(manifest)}  ->  {created}")
        self.out.step(
            "",
            f"{EPOCHS} epochs on a new {job['spec']['instance']['ephemeral'].get('gpuName', '')} instance, "
            f"results to {self.results_uri}",
        )

    def plan(self, cp: ControlPlane, manifest: Path) -> None:
        """What the job would do, before it is applied: `kubectl taobrev plan` (nothing is created)."""
        self.out.step("plan", f"kubectl taobrev plan -f {_short(manifest)}")
        done = kubectl_taobrev(cp, "plan", "-f", str(manifest))
        if done.returncode != 0:
            raise DemoError(f"kubectl taobrev plan exited {done.returncode}:\n{done.stdout}{done.stderr}")
        for line in done.stdout.rstrip().splitlines():
            self.out.line(f"    {line}")

    def get_job(self) -> dict[str, Any] | None:
        assert self.cp is not None
        r = self.cp.kubectl("get", "tbj", self.job, "-n", NAMESPACE, "-o", "json", "--ignore-not-found")
        obj: dict[str, Any] | None = json.loads(r.stdout) if r.stdout.strip() else None
        return obj

    def watch(self) -> dict[str, Any]:
        """Print each phase (and message change) as it happens; return the final status."""
        assert self.operator is not None
        assert self.sim is not None
        out = self.out
        out.line()
        out.line(f"Watching taobrevjob {self.job} in namespace {NAMESPACE} (kubectl get every {POLL_S}s):")
        began = time.monotonic()
        deadline = began + self.opts.timeout
        shown_phases: list[str] = []
        last_message = ""
        log_lines: PluginLogFollower | None = None
        status: dict[str, Any] = {}
        while True:
            obj = self.get_job()
            status = dict((obj or {}).get("status") or {})
            now = time.monotonic() - began
            phase = status.get("phase")
            if phase and phase not in shown_phases:
                # A phase shorter than one poll is still shown: status.phaseTimes records it.
                for missed in _phases_between(shown_phases, phase, status):
                    entered = status.get("phaseTimes", {}).get(missed, "?")
                    out.line(f"  {'':>7}  {missed:<13} (entered at {entered}, shorter than one poll)")
                    shown_phases.append(missed)
                shown_phases.append(phase)
                last_message = status.get("message") or ""
                out.line(f"  +{now:5.1f}s  {phase:<13} {_with_instance(last_message, status)}")
            elif phase and (status.get("message") or "") != last_message:
                last_message = status.get("message") or ""
                out.line(f"  +{now:5.1f}s  {'':<13} {_with_instance(last_message, status)}")
            log_lines = self._show_log(log_lines, phase, finished=bool(status.get("finishedAt")))
            if status.get("finishedAt"):
                break
            proc = self.operator.proc
            if proc is not None and proc.poll() is not None:
                raise DemoError(
                    f"the operator exited with code {proc.returncode} while the job was {phase}; "
                    f"last lines of {self.operator.log_path}:\n{self.operator.log_tail(40)}"
                )
            if time.monotonic() > deadline:
                raise DemoError(
                    f"the job did not finish within {self.opts.timeout:.0f}s (phase {phase}, message "
                    f"{status.get('message')!r}); last lines of {self.operator.log_path}:\n"
                    f"{self.operator.log_tail(40)}"
                )
            time.sleep(POLL_S)
        tail = sp.run(status).get("logTail") or []
        if tail:
            out.line(
                f"  {'':>7}  status.attempts[-1].run.logTail (the log tail the operator recorded), "
                "last lines:"
            )
            for text in tail[-3:]:
                out.line(f"  {'':>7}  {'':<13} | {text}")
        return status

    def _show_log(
        self, follower: PluginLogFollower | None, phase: str | None, *, finished: bool
    ) -> PluginLogFollower | None:
        """From Running on, the log as `kubectl taobrev logs -f` shows it, beside the phases."""
        if phase == "Running" and follower is None:
            assert self.cp is not None
            follower = PluginLogFollower(self.cp, self.job)
            self.out.line(f"  {'':>7}  {'':<13} $ kubectl taobrev logs {self.job} -n {NAMESPACE} -f")
        if follower is not None:
            for text in follower.finish() if finished else follower.new_lines():
                self.out.line(f"  {'':>7}  {'':<13} | {text}")
        return follower

    # ---- the report

    def report(self, status: dict[str, Any]) -> bool:
        assert self.cp is not None
        assert self.s3 is not None
        assert self.sim is not None
        assert self.operator is not None
        out = self.out
        outcome = status.get("outcome") or "(none)"
        succeeded = outcome == "Succeeded"
        out.line()
        out.line(
            f"Outcome: {outcome} (reason {status.get('reason')}, exit code {sp.run(status).get('exitCode')}) "
            f"- {status.get('message')}"
        )
        out.line()
        out.line(f"$ kubectl get tbj -n {NAMESPACE} -o wide")
        table = self.cp.kubectl("get", "tbj", "-n", NAMESPACE, "-o", "wide").stdout.rstrip()
        for text in table.splitlines():
            out.line(f"  {text}")

        for step in status.get("steps") or []:  # --workflow: each step and where its results are
            results_of = (step.get("results") or {}).get("uri") or "(not uploaded)"
            out.line(
                f"  step {step['name']:<9} {step['phase']:<10} exit {step.get('exitCode')}  {results_of}"
            )
        results = sp.upload(status).get("results") or {}
        out.line()
        out.line(
            f"Results: {results.get('uri') or self.results_uri} ({results.get('objects', 0)} objects, "
            f"{_human_bytes(int(results.get('bytes') or 0))} according to "
            "status.attempts[-1].upload.results); read back from S3:"
        )
        bucket, _, prefix = self.results_uri.removeprefix("s3://").partition("/")
        listing = self.s3.client().list_objects_v2(Bucket=bucket, Prefix=prefix.rstrip("/") + "/")
        objects = listing.get("Contents", [])
        for item in objects:
            out.line(f"  s3://{bucket}/{item['Key']:<60} {_human_bytes(int(item['Size'])):>9}")
        if not objects:
            out.line("  (no objects)")
            succeeded = False

        name = str(sp.instance(status).get("name") or "")
        seen = [i for i in self.sim.instances(include_deleted=True) if i["name"] == name]
        live = [i for i in self.sim.instances() if i["name"] == name]
        out.line()
        if seen and not live:
            out.line(
                f"Instance {name}: deleted (the simulated Brev backend reports it "
                f"{seen[-1]['status']}; {self.sim.created_count()} instance(s) created in total, "
                f"{len(self.sim.instances())} left)"
            )
        else:
            state = live[-1]["status"] if live else "never created"
            out.line(f"Instance {name or '(none)'}: NOT deleted - the simulated Brev backend says {state}")
            succeeded = False

        out.line()
        kubectl = _short(kubectl_path())
        out.line(
            "Look around" + (":" if self.opts.keep else " (rerun with --keep to keep the stack running):")
        )
        out.line(f"  export KUBECONFIG={self.cp.kubeconfig}")
        out.line(f"  {kubectl} get tbj -A")
        out.line(f"  {kubectl} describe tbj {self.job} -n {NAMESPACE}")
        out.line(f"  {kubectl} get events -n {NAMESPACE}")
        out.line(f"  curl -s {self.operator.metrics_url} | grep ^taobrev_job")
        out.line(f"  operator log: {self.operator.log_path}")
        for text in _metrics_sample(self.operator.metrics_url):
            out.line(f"    {text}")
        return succeeded

    # ---- teardown

    def teardown(self) -> None:
        out = self.out
        if self.cp is None:
            return  # nothing started (and a kept stack's demo.json is not ours)
        began = time.monotonic()
        if self.operator is not None:
            self.operator.stop()
        if self.sim is not None:
            self.sim.kill_containers()
        if self.s3 is not None:
            self.s3.stop()
        self.cp.stop()
        if self.recorded:
            (self.dir / STATE_FILE).unlink(missing_ok=True)
        out.step("teardown", f"operator, S3 and control plane stopped ({time.monotonic() - began:.1f}s)")

    def print_keep(self) -> None:
        assert self.cp is not None
        assert self.s3 is not None
        assert self.operator is not None
        out = self.out
        pids = [
            f"operator {self.operator.proc.pid if self.operator.proc else '?'}",
            f"S3 {self.s3.process.pid}",
        ]
        pids += [f"{name} {pid}" for name, pid in self.cp.pids.items()]
        out.line()
        out.line(f"The stack keeps running (pids: {', '.join(pids)}). Stop it with:")
        out.line(f"  {_down_command(self.dir)}")


def _workflow_steps(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The sample's task as train -> evaluate -> export (each reading train's final model,
    mounted read-only; export runs in the -deploy image by default)."""
    model = {"fromStep": "train", "path": "train/model_latest.pth"}
    steps = [{"name": "train", **task}]
    for action in ("evaluate", "export"):
        spec = {action: {"checkpoint": "/workspace/inputs/train/train/model_latest.pth"},
                "simulation": {"epochs": 1, "epoch_seconds": 10}}  # fmt: skip
        steps.append({"name": action, "networkArch": task["networkArch"], "action": action,
                      "specContent": yaml.safe_dump(spec, sort_keys=False), "inputs": [model]})  # fmt: skip
    steps[0].pop("image", None)  # the pinned -pyt default, as the others get theirs
    return steps


def _with_instance(message: str, status: dict[str, Any]) -> str:
    """The status message, naming the instance when the message does not already."""
    name = sp.instance(status).get("name")
    if name and name not in message:
        return f"{message}  [instance {name}]"
    return message


def _phases_between(shown: list[str], phase: str, status: dict[str, Any]) -> list[str]:
    """Phases entered since the last one shown and before ``phase``, in order (from phaseTimes)."""
    times = status.get("phaseTimes") or {}
    start = PHASES.index(shown[-1]) + 1 if shown and shown[-1] in PHASES else 0
    end = PHASES.index(phase) if phase in PHASES else start
    return [p for p in PHASES[start:end] if p in times]


class PluginLogFollower:
    """`kubectl taobrev logs JOB -f` as a user runs it (the operator's log API through
    kube-apiserver), its lines collected as they arrive and printed by the watch loop."""

    def __init__(self, cp: ControlPlane, job: str) -> None:
        self.proc = subprocess.Popen(
            [kubectl_path(), "taobrev", "logs", job, "-f", "-n", NAMESPACE, f"--kubeconfig={cp.kubeconfig}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=plugin_env(),
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self._lines.put(line.rstrip())

    def new_lines(self) -> Iterator[str]:
        while True:
            try:
                yield self._lines.get_nowait()
            except queue.Empty:
                return

    def finish(self, timeout: float = 60.0) -> Iterator[str]:
        """The rest, once the follow ended with the container (and its exit code, on stderr)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        yield from self.new_lines()
        err = self.proc.stderr.read().strip() if self.proc.stderr else ""
        if err:
            yield f"(kubectl taobrev logs: {err.splitlines()[-1]}, exit {self.proc.returncode})"


def _metrics_sample(url: str) -> list[str]:
    """The job-outcome lines of the operator's /metrics, to show that the endpoint answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback URL we built
            text = resp.read().decode()
    except OSError as exc:
        return [f"(metrics endpoint did not answer: {exc})"]
    return [line for line in text.splitlines() if line.startswith("taobrev_job_outcomes_total")][:5]


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def run(opts: Options) -> int:
    out = Out()
    out.line("TaoBrevJob demo: a TAO training job on a simulated Brev GPU instance, run by the operator")
    out.line(f"state directory {opts.demo_dir}; speed {opts.speed}; started {datetime.now(UTC):%H:%M:%S} UTC")
    out.line()
    demo = Demo(opts, out)
    step = "checking for a kept demo stack"
    ok = False
    keep = False
    try:
        opts.demo_dir.mkdir(parents=True, exist_ok=True)
        demo.check_nothing_kept()
        step = "starting kube-apiserver + etcd"
        cp = demo.start_control_plane()
        step = "starting the S3 server (moto)"
        s3 = demo.start_s3()
        step = f"staging the dataset of {_short(JOB_EXAMPLE)} in S3"
        job = demo.job_manifest(s3)
        demo.stage_dataset(s3, job)
        step = "setting up the Brev simulator"
        sim = demo.start_simulator(s3)
        step = "starting the operator"
        demo.start_operator(cp, sim)
        demo.job = job["metadata"]["name"]
        demo.record_state()
        keep = opts.keep  # from here on the stack is whole: keep it even if the job fails
        step = "creating the job"
        demo.create_job(cp, job)
        step = "watching the job"
        status = demo.watch()
        step = "reporting the results"
        ok = demo.report(status)
    except Interrupted as exc:
        out.line(f"\ninterrupted ({exc}) while {step}")
    except Exception as exc:
        out.line(f"\nDEMO FAILED while {step}:\n{type(exc).__name__}: {exc}")
        if demo.operator is not None and not isinstance(exc, DemoError):
            out.line(
                f"last lines of the operator log ({demo.operator.log_path}):\n{demo.operator.log_tail(30)}"
            )
        if demo.cp is not None:
            out.line(f"logs stay in {opts.demo_dir} (operator/, controlplane/logs/, s3/); --keep keeps it")
    finally:
        if keep:
            demo.print_keep()
        else:
            try:
                demo.teardown()
            except Exception as exc:
                out.line(f"teardown failed: {type(exc).__name__}: {exc}")
                ok = False
    out.line(f"\ndemo {'succeeded' if ok else 'FAILED'} in {out.elapsed():.1f}s (exit {0 if ok else 1})")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    opts = parse_args(argv)
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return run(opts)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
