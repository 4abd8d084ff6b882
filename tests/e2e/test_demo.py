"""`python -m tests.devenv demo` (what `make demo` runs) works on its own, as a newcomer runs it.

Each test runs the command as a subprocess (its own control plane, S3, simulator and operator) at
a fast simulator speed, and reads only what it prints and the processes it names.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.devenv import kubebuild

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]
PHASES = ["Pending", "Provisioning", "WaitingExec", "Pulling", "Running", "Uploading", "Deleted"]
# The demo runs this example as is, apart from the S3 endpoint and the simulated epochs.
EXAMPLE = yaml.safe_load((REPO_ROOT / "crds" / "examples" / "ephemeral-inline-spec.yaml").read_text())
JOB = EXAMPLE["metadata"]["name"]
RESULTS = EXAMPLE["spec"]["data"]["resultsUri"].rstrip("/") + "/"
# Fast enough for CI; the default (0.1) is for watching.
SPEED = "0.01"
# A guard against hangs only: the demo itself takes well under a minute at this speed.
TIMEOUT_S = 600


def _devenv(*args: str, devenv_dir: Path, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    # TAOBREV_DEVENV_DIR keeps `down`/`status` away from a developer's own ~/.cache state.
    env = {**os.environ, "TAOBREV_DEVENV_DIR": str(devenv_dir)}
    return subprocess.run(
        [sys.executable, "-m", "tests.devenv", *args],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _running(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def _shown_phases(stdout: str) -> list[str]:
    """Phase names in the order the watch printed them (phase lines start with `+<secs>s` or blanks)."""
    found = re.findall(r"^  (?:\+\s*\d+\.\ds|\s{7})  (\w+)\s", stdout, flags=re.MULTILINE)
    return [p for p in found if p in PHASES]


def _group(pattern: str, text: str) -> str:
    match = re.search(pattern, text, flags=re.MULTILINE)
    assert match is not None, f"no match for {pattern!r} in:\n{text}"
    return match.group(1)


def _pids(stdout: str) -> dict[str, int]:
    """Component pids from the set-up lines (operator, S3, etcd, kube-apiserver)."""
    pids = {
        "operator": int(_group(r"\] operator\s+pid (\d+)", stdout)),
        "s3": int(_group(r"S3 \(moto\)\s+\S+ \(pid (\d+)\)", stdout)),
    }
    for name, pid in re.findall(r"(etcd|kube-apiserver) (\d+)", stdout.split("control plane", 1)[1])[:2]:
        pids[name] = int(pid)
    return pids


def _assert_job_shown_end_to_end(out: str) -> None:
    assert _shown_phases(out) == PHASES, out
    assert re.search(r"^Outcome: Succeeded \(reason Succeeded, exit code 0\)", out, flags=re.MULTILINE), out
    # The printer columns of `kubectl get tbj -o wide`, with the job's row.
    assert re.search(
        r"NAME\s+PHASE\s+OUTCOME\s+INSTANCE\s+GPU\s+QUEUE\s+PROGRESS\s+ETA\s+STEP\s+QUEUED\s+ACTION\s+REASON\s+FAILURE\s+KEPT-UNTIL\s+ATTEMPT\s+BILLED\s+COST\s+AGE",
        out,
    ), out
    # ... PROGRESS 100 and ETA (TAO's last estimate) between GPU and ACTION
    assert re.search(rf"{JOB}\s+Deleted\s+Succeeded\s+tbj-\S+\s+L40S\s+100\s+\S+\s+train\s+Succeeded", out), (
        out
    )
    # Epoch lines of the TAO stand-in, shown while the job runs.
    assert "Epoch 5/5" in out, out
    # The results listing read back from S3 agrees with status.results' object count.
    count = int(_group(rf"^Results: {re.escape(RESULTS.rstrip('/'))} \((\d+) objects", out))
    listed = re.findall(rf"^  {re.escape(RESULTS)}(\S+)\s+\d", out, flags=re.MULTILINE)
    assert len(listed) == count, out
    assert "logs/container.log" in listed, out
    assert "results/train/model_latest.pth" in listed, out
    assert "deleted (the simulated Brev backend reports it DELETED" in out, out


def test_demo_runs_the_sample_job_through_every_phase_then_tears_everything_down(tmp_path: Path) -> None:
    """`demo` exits 0 after showing every phase in order, the Succeeded outcome, the S3 results and
    the deleted instance; afterwards none of the processes it started is still running."""
    kubebuild.build()  # a cold build (minutes) happens here with progress, not inside the demo's run
    demo_dir = tmp_path / "demo"
    try:
        run = _devenv("demo", "--dir", str(demo_dir), "--speed", SPEED, devenv_dir=tmp_path)
    finally:
        # Only does something if the demo died before its own teardown.
        _devenv("down", "--dir", str(demo_dir), devenv_dir=tmp_path, timeout=120)
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    _assert_job_shown_end_to_end(out)
    assert "demo succeeded" in out, out
    assert "(exit 0)" in out, out
    # The plan comes first, from `kubectl taobrev plan`, and its pre-flight passed.
    assert out.index("Plan for TaoBrevJob taobrev-demo/") < out.index("Watching taobrevjob"), out
    assert "pre-flight:   passed" in out, out
    # docs/preflight.md's example of `kubectl taobrev plan` comes from here
    print(out[out.index("kubectl taobrev plan") : out.index("Watching taobrevjob")])

    pids = _pids(out)
    assert set(pids) == {"operator", "s3", "etcd", "kube-apiserver"}, out
    assert [name for name, pid in pids.items() if _running(pid)] == []
    assert not (demo_dir / "controlplane" / "state.json").exists()
    assert not (demo_dir / "demo.json").exists()


def test_demo_keep_leaves_the_stack_running_until_devenv_down(tmp_path: Path) -> None:
    """With --keep the stack outlives the demo, `status` reports it healthy, and the printed
    `python -m tests.devenv down` stops every process."""
    kubebuild.build()
    run = _devenv("demo", "--keep", "--speed", SPEED, devenv_dir=tmp_path)  # default dir: <devenv>/demo
    try:
        out = run.stdout
        assert run.returncode == 0, out + run.stderr
        assert "Stop it with:\n  python -m tests.devenv down\n" in out, out
        pids = _pids(out)
        assert [name for name, pid in pids.items() if not _running(pid)] == [], out

        status = _devenv("status", devenv_dir=tmp_path, timeout=120)
        assert "demo: " in status.stdout, status.stdout
        assert "operator pid" in status.stdout, status.stdout
        demo_line = next(line for line in status.stdout.splitlines() if line.startswith("demo: "))
        assert "NOT RUNNING" not in demo_line, status.stdout
        assert "control plane healthy" in demo_line, status.stdout
    finally:
        down = _devenv("down", devenv_dir=tmp_path, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert [name for name, pid in pids.items() if _running(pid)] == []
    assert not (tmp_path / "demo" / "demo.json").exists()
