"""`python -m tests.brevsim.footprint [--containers 1000]`: what N running simulated jobs cost.

Starts a simulator, N RUNNING instances (each with its sshd port, after one `brev refresh`) and one
detached TAO container per instance (started through the instance's `docker run -d`, as the
operator does, minus the ssh hop), then prints the daemon's RSS and thread count and the number of
simulator processes at several N. A measurement, not a test (no timed or sized assertion).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.brevsim import container as ct
from tests.brevsim import docker
from tests.brevsim.harness import BrevSim
from tests.brevsim.store import write_json

TAO = "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def start_container(sim: BrevSim, inst_id: str, job: str) -> None:
    home = sim.store.instance_dir(inst_id) / "home"
    spec = home / "taobrev" / job / "spec"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "spec.yaml").write_text(json.dumps({"simulation": {"epochs": 10**6, "epoch_seconds": 3600}}))
    d = ct.Docker(sim.store, inst_id)
    digest = hashlib.sha256(TAO.encode()).hexdigest()
    write_json(
        d.images_path,
        {TAO: {"Id": "sha256:" + digest, "Created": ct.iso(), "Size": 1, "Digest": "sha256:" + digest}},
    )
    argv = ["run", "-d", "--name", job, "--gpus", "all", "-v", f"{spec}:/workspace/spec:ro"]
    argv += ["-v", f"{home}/taobrev/{job}/results:/workspace/results", TAO, "visual_changenet", "train"]
    argv += ["-e", "/workspace/spec/spec.yaml"]
    with contextlib.redirect_stdout(io.StringIO()):
        code = docker.main(str(sim.state_dir), inst_id, argv)
    if code != 0:
        raise RuntimeError(f"docker run failed on {inst_id}: exit {code}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--containers", type=int, default=1000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="brevsim-footprint-"))
    sim = BrevSim(work / "sim", speed=1.0)
    try:
        sim.login_api_key()
        began = time.monotonic()
        ids = [sim.add_instance(f"fp-{i:04d}") for i in range(args.containers)]
        subprocess.run(["brev", "refresh"], env=sim.env(), check=True, capture_output=True)
        pid = sim.daemon_pid
        assert pid is not None
        marks = sorted(
            {0, *(n for n in (10, 100, 250, 500, 1000, 2000) if n <= args.containers), args.containers}
        )
        print(f"daemon pid {pid}; {args.containers} instances with an sshd port each")
        print(f"{'containers':>10} {'daemon RSS MiB':>15} {'threads':>8} {'sim processes':>14}")
        started = 0
        for mark in marks:
            while started < mark:
                start_container(sim, ids[started], f"job{started}")
                started += 1
            print(
                f"{mark:>10} {rss_mib(pid):>15.1f} {threads(pid):>8} {len(sim.processes()):>14}", flush=True
            )
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(10)
        cores = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
        print(f"daemon CPU with {started} running containers, 10 s sample: {cores:.3f} cores")
        print(f"(setup took {time.monotonic() - began:.0f} s; command: python -m tests.brevsim.footprint)")
    finally:
        sim.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
