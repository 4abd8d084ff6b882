"""PID 1 of the operator pod: ssh ControlPersist masters daemonise and are reparented to PID 1.

The operator runs as PID 1 of its own PID namespace (`unshare --pid --fork --mount-proc`, as in a
container) with exactly the image's ENTRYPOINT (deploy/image/Dockerfile; `python` is this venv's
interpreter), against the simulator whose instances speak real SSH to the real OpenSSH client.
Ten jobs go through their whole lifecycle (create, probe, pull, run, upload, delete: each
instance's master opens and, at delete, exits). Then the namespace's own /proc must hold no
zombie. The same run with python itself as PID 1 (the image before tini) must show the ssh
zombies — proof that the check sees the hazard it guards against.

While all ten run, the pod's processes are counted from the namespace's /proc (the pod is
everything in it): per running job at most one master and one mux client ssh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from tests.brevsim.harness import BrevSim
from tests.devenv.controlplane import ControlPlane
from tests.devenv.operator import OperatorProcess, install_operator_identity
from tests.devenv.ports import free_port
from tests.devenv.s3 import S3Server
from tests.fixtures.operator import Stack
from tests.fixtures.polling import until
from tests.footprint import ProcInfo, cmdline, memory_of, pod_memory, processes, zombies

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "image" / "Dockerfile"
# More for a footprint figure at a larger N (README): FOOTPRINT_JOBS=30 pytest ... -k tini -s
JOBS = int(os.environ.get("FOOTPRINT_JOBS", "10"))
T = TypeVar("T")


def image_entrypoint() -> list[str]:
    """The Dockerfile's ENTRYPOINT (exec form), with `python` as this test's interpreter."""
    [line] = [ln for ln in DOCKERFILE.read_text().splitlines() if ln.startswith("ENTRYPOINT ")]
    argv = [str(word) for word in json.loads(line.removeprefix("ENTRYPOINT "))]
    return [sys.executable if word == "python" else word for word in argv]


@dataclass
class NamespacedOperator(OperatorProcess):
    """The operator as PID 1 (or under `init` as PID 1) of a new PID namespace."""

    init: tuple[str, ...] = ()

    def start(self, timeout: float = 60) -> OperatorProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.metrics_port = self.metrics_port or free_port()
        self.health_port = self.health_port or free_port()
        log = self.log_path.open("ab")
        argv = [*self.init, sys.executable, "-m", "controller"]
        self.proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", *argv],
            cwd=REPO,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.starts += 1
        self._wait_healthy(timeout)
        return self

    @property
    def ns_proc(self) -> Path:
        """The namespace's own /proc (mounted by --mount-proc), seen through its PID 1's root."""
        assert self.proc is not None
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        [pid1] = children
        return Path(f"/proc/{pid1}/root/proc")


def ssh_zombies(proc: Path) -> list[ProcInfo]:
    return [p for p in zombies(proc) if p.comm == "ssh"]


def masters(proc: Path) -> list[int]:
    """Live ssh masters (OpenSSH titles them `ssh: <ControlPath> [mux]`)."""
    return [p.pid for p in processes(proc) if p.comm == "ssh" and "[mux]" in cmdline(p.pid, proc)]


def snapshot(proc: Path) -> dict[str, tuple[int, float, float]]:
    """Per program name in the namespace: (processes, MiB RSS, MiB PSS)."""
    table: dict[str, tuple[int, float, float]] = {}
    for p in processes(proc):
        n, rss, pss = table.get(p.comm, (0, 0.0, 0.0))
        table[p.comm] = (
            n + 1,
            rss + memory_of(p.pid, "rss", proc) / 2**20,
            pss + memory_of(p.pid, "pss", proc) / 2**20,
        )
    return table


@pytest.fixture
def namespaced_stack(
    request: pytest.FixtureRequest,
    control_plane: ControlPlane,
    crds_installed: None,
    brev_sim: BrevSim,
    s3_server: S3Server,
    namespace: str,
    tmp_path: Path,
) -> Iterator[tuple[Stack, NamespacedOperator]]:
    init: tuple[str, ...] = request.param
    install_operator_identity(control_plane, brev_sim, job_namespaces=[namespace])
    bucket = f"results-{namespace}"[:63].rstrip("-")
    s3_server.create_bucket(bucket)
    op = NamespacedOperator(
        control_plane, brev_sim, tmp_path / "operator", extra_env={"TAOBREV_NAMESPACES": namespace}, init=init
    )
    op.start()
    op.wait_leading()
    st = Stack(control_plane, brev_sim, s3_server, op, namespace, bucket)
    st.create_job_secrets()
    try:
        yield st, op
    finally:
        op.stop()


def run_jobs_through_their_lifecycle(stack: Stack, op: NamespacedOperator) -> Counter[str]:
    """Ten jobs at once, each to the end (instance deleted); returns the pod's processes by name
    at the moment all ten were Running."""
    names = [f"pid1-{i:03d}" for i in range(JOBS)]
    proc = op.ns_proc
    idle = pod_memory(1, proc=proc), pod_memory(1, metric="pss", proc=proc)
    for name in names:
        # >= 30 s of training each (epochs x 300 nominal s at speed 0.01), longer with more jobs:
        # long enough for all of them to be seen Running together.
        epochs = max(10, JOBS)
        stack.apply(stack.job_manifest(name, simulation={"epochs": epochs, "epoch_seconds": 300}))
    until(
        lambda: all(stack.status(n).get("phase") == "Running" for n in names),
        "all jobs Running",
        guard=300,
        interval=0.2,
    )
    table = snapshot(proc)
    during = Counter({name: n for name, (n, _rss, _pss) in table.items()})
    busy = pod_memory(1, proc=proc), pod_memory(1, metric="pss", proc=proc)
    print(f"\npod ({' '.join(op.init) or 'python'} as PID 1) idle, then at {JOBS} running jobs:")
    for kind, before, after in zip(("RSS", "PSS"), idle, busy, strict=True):
        total0 = (before.operator_rss + before.children_rss) / 2**20
        total1 = (after.operator_rss + after.children_rss) / 2**20
        print(
            f"  {kind}: {total0:.1f} MiB ({before.n_children + 1} processes) -> {total1:.1f} MiB "
            f"({after.n_children + 1} processes): {(total1 - total0) / JOBS:.2f} MiB per running job"
        )
    for name, (n, rss, pss) in sorted(table.items()):
        print(f"  {name:<16} {n:>4} processes  RSS {rss:8.1f} MiB  PSS {pss:8.1f} MiB")
    for name in names:
        assert stack.wait_finished(name, timeout=600)["outcome"] == "Succeeded"
    assert stack.live_instances() == []
    return during


ENTRYPOINT = image_entrypoint()
assert ENTRYPOINT[-3:] == [sys.executable, "-m", "controller"], ENTRYPOINT


@pytest.mark.parametrize("namespaced_stack", [tuple(ENTRYPOINT[:-3])], indirect=True, ids=["tini"])
def test_with_the_image_entrypoint_no_zombie_is_left_after_many_instances(
    namespaced_stack: tuple[Stack, NamespacedOperator],
) -> None:
    stack, op = namespaced_stack
    assert op.init == ("/usr/bin/tini", "--")
    during = run_jobs_through_their_lifecycle(stack, op)
    # One master per instance, at most one mux client per running job besides.
    assert 0 < during["ssh"] <= 2 * JOBS
    proc = op.ns_proc
    until(lambda: not masters(proc), "every deleted instance's ssh master to exit", guard=120, interval=0.2)
    until(lambda: not zombies(proc), "no zombie in the operator's PID namespace", guard=30, interval=0.2)
    assert zombies(proc) == []
    print(f"zombies left with tini as PID 1 after {JOBS} instances: 0")


@pytest.mark.parametrize("namespaced_stack", [()], indirect=True, ids=["python-as-pid1"])
def test_without_an_init_the_exited_ssh_masters_stay_zombies(
    namespaced_stack: tuple[Stack, NamespacedOperator],
) -> None:
    """The hazard itself: python as PID 1 never reaps the masters it inherits."""
    stack, op = namespaced_stack
    run_jobs_through_their_lifecycle(stack, op)
    proc = op.ns_proc
    until(lambda: not masters(proc), "every deleted instance's ssh master to exit", guard=120, interval=0.2)
    # A zombie is never reaped later by python: one read is the final answer.
    left = ssh_zombies(proc)
    print(f"ssh zombies left with python as PID 1 after {JOBS} instances: {len(left)}")
    assert len(left) >= JOBS
