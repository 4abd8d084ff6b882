"""`python -m tests.brevsim.progcost`: what one simulated program call costs (CPU and wall).

Runs each command N times in a loop inside one bash (as a remote command would) and reports the
CPU of every process involved per call: the loop's children (the program itself, or the native
client), plus the simulator processes that work on its behalf (the daemon, the zygote and what it
forked: their own and their reaped children's CPU). `/bin/true` is the floor of a fork+exec.
The exit wait is the operator's form: `ssh <alias> 'timeout N docker wait X; docker logs --tail
20 X'` (real OpenSSH through the ControlMaster), measured on an exited container (the fixed cost)
and, separately, per second while `docker wait` waits on a running one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from tests.brevsim import reaper
from tests.brevsim.control import MARKER
from tests.brevsim.harness import BrevSim

TAO = "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt"
LOGIN = "echo nvapi-key | docker login nvcr.io --username '$oauthtoken' --password-stdin"
RUN_ARGS = f"--gpus all -v $HOME:/w {TAO} x train -e /w/spec.yaml results_dir=/w/r"
TICK = os.sysconf("SC_CLK_TCK")


def sim_cpu(state: Path, exclude: set[int]) -> float:
    """CPU seconds of every live simulator process (own + reaped children), ssh masters excluded."""
    total = 0
    for pid in reaper.marked(state):
        if pid in exclude:
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / TICK


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure(sim: BrevSim, env: dict[str, str], cwd: Path, command: str, n: int) -> dict[str, float]:
    loop = f"for ((i=0;i<{n};i++)); do {command} >/dev/null 2>&1; done; true"
    c0, s0, w0 = children_cpu(), sim_cpu(sim.state_dir, set()), time.monotonic()
    subprocess.run(["bash", "-c", loop], env=env, cwd=cwd, check=True)
    w1, c1 = time.monotonic(), children_cpu()
    s1 = sim_cpu(sim.state_dir, set())
    result = {
        "cpu_ms": round((c1 - c0 + s1 - s0) * 1000 / n, 2),
        "caller_cpu_ms": round((c1 - c0) * 1000 / n, 2),
        "sim_cpu_ms": round((s1 - s0) * 1000 / n, 2),
        "wall_ms": round((w1 - w0) * 1000 / n, 2),
    }
    print(f"{command[:60]:60s} {result}", flush=True)
    return result


def sandbox_env(sim: BrevSim, inst_id: str) -> tuple[dict[str, str], Path]:
    sandbox = sim.store.instance_dir(inst_id)
    env = {
        "HOME": str(sandbox / "home"),
        "PATH": f"{sandbox / 'bin'}:/usr/bin:/bin",
        "USER": "ubuntu",
        "LANG": "C.UTF-8",
        MARKER: str(sim.state_dir.resolve()),
    }
    return env, sandbox / "home"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("-n", type=int, default=50, help="calls per measurement")
    ap.add_argument(
        "--wait-seconds", type=float, default=5.0, help="how long to watch a waiting `docker wait`"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="progcost-") as tmp:
        sim = BrevSim(Path(tmp) / "sim", speed=0.01)
        try:
            sim.login_api_key()
            iid = sim.add_instance("cost")
            env, home = sandbox_env(sim, iid)
            local = sim.env()
            n = args.n
            measure(sim, env, home, "/bin/true", n)
            measure(sim, env, home, "docker --version", n)
            measure(sim, env, home, "docker ps", n)
            measure(sim, env, home, "nvidia-smi -L", n)
            measure(sim, local, Path(tmp), "/usr/bin/ssh -V", n)
            measure(sim, local, Path(tmp), "ssh -V", n)
            subprocess.run(["brev", "refresh"], env=local, check=True, capture_output=True)
            ssh = ["ssh", "-T", "-o", "BatchMode=yes", "-F", str(sim.home / ".brev" / "ssh_config"), "cost"]
            # a container that exited: the exit wait's fixed cost (the master is opened first)
            subprocess.run([*ssh, "true"], env=local, check=True)
            sim.set_faults(pull_seconds=0)
            spec = home / "spec.yaml"
            spec.write_text(json.dumps({"simulation": {"epochs": 1, "epoch_seconds": 0}}))
            run = f"docker run -d --name done {RUN_ARGS}"
            subprocess.run(
                ["bash", "-c", f"{LOGIN} && docker pull {TAO} && {run} && docker wait done"],
                env=env,
                cwd=home,
                check=True,
                capture_output=True,
            )
            measure(
                sim,
                local,
                Path(tmp),
                shlex.join([*ssh, "timeout 60 docker wait done; docker logs --tail 20 done"]),
                n // 5,
            )
            # a waiting `docker wait`: CPU per second of waiting
            spec.write_text(json.dumps({"simulation": {"epochs": 100, "epoch_seconds": 100000}}))
            run = f"docker run -d --name long {RUN_ARGS}"
            subprocess.run(["bash", "-c", run], env=env, cwd=home, check=True, capture_output=True)
            secs = args.wait_seconds
            c0, s0 = children_cpu(), sim_cpu(sim.state_dir, set())
            time.sleep(secs)  # the same span without a wait: the daemon running the container
            c1, s1 = children_cpu(), sim_cpu(sim.state_dir, set())
            subprocess.run([*ssh, f"timeout {secs} docker wait long"], env=local, check=False)
            c2, s2 = children_cpu(), sim_cpu(sim.state_dir, set())
            idle = (c1 - c0 + s1 - s0) * 1000 / secs
            waiting = (c2 - c1 + s2 - s1) * 1000 / secs
            print(f"waiting `docker wait`, CPU ms per second: {waiting - idle:.1f} ", end="")
            print(f"({waiting:.1f} with the wait, {idle:.1f} without: the daemon running the container)")
        finally:
            sim.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
