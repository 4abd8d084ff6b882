"""`make bench-recovery` (and `make bench`, through `run`): how long a lost instance costs.

One job on the local stack (real control plane, operator process, Brev simulator, loopback S3) whose
first instance vanishes after epoch `lose_at` (once that epoch's checkpoint is synced); the job
resumes on a second instance. EVERY duration is scaled by one factor: the simulator's nominal
lifecycle (deploy 120 s, ssh 60 s, pull 90 s, epochs 20 s ... x scale) AND the operator's
intervals (poll 5 s, listing age 10 s, create settle 120 s, backoff cap 60 s, docker-wait 30 s,
checkpoint interval 600 s ... x scale; floors the settings impose are printed). Figures are
divided by the factor again, so they read as seconds at real Brev speed:

- loss -> noticed: the instance vanished (simulator) -> attempt 1 ended (status.attempts[0].endedAt);
- noticed -> new instance Running: -> the operator's last `phase changed: Running` for the job;
- new instance boot+ready: attempt 2's create request (status.attempts[1].instance.billedFrom) ->
  that same Running (deploy, ssh-ready, pull, restore): what any fresh instance costs;
- ratio: (noticed -> Running) / (boot+ready): 1.0 means recovery adds nothing beyond booting.

Usage: python -m tests.bench_recovery [--scale 0.05] [--epochs 4] [--lose-at 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.brevsim.harness import BrevSim
from tests.brevsim.model import NOMINAL
from tests.devenv.controlplane import ControlPlane
from tests.devenv.operator import OperatorProcess, install_operator_identity
from tests.devenv.s3 import S3Server
from tests.fixtures.operator import Stack
from tests.status_paths import instance

REPO = Path(__file__).resolve().parents[1]
JOB = "recover"

# The operator's timing settings at their production defaults (controller/settings.py), with the
# floor each setting allows: scaled by the factor, then raised to the floor.
OPERATOR_INTERVALS: dict[str, tuple[float, float]] = {
    "TAOBREV_POLL_INTERVAL": (5.0, 0.01),
    "TAOBREV_LISTING_MAX_AGE": (10.0, 0.0),
    "TAOBREV_CREATE_SETTLE": (120.0, 0.0),
    "TAOBREV_BACKOFF_MAX": (60.0, 1.0),
    "TAOBREV_WAIT_TIMEOUT": (30.0, 1.0),
}
CHECKPOINT_INTERVAL = (600.0, 10.0)  # spec.recovery.checkpointIntervalSeconds default, minimum


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def scaled(nominal: float, floor: float, scale: float) -> float:
    return max(floor, nominal * scale)


def operator_env(scale: float) -> dict[str, str]:
    return {k: f"{scaled(v, floor, scale):g}" for k, (v, floor) in OPERATOR_INTERVALS.items()}


def recovery_job(stack: Stack, scale: float, epochs: int) -> dict[str, Any]:
    manifest = stack.job_manifest(
        JOB, simulation={"epochs": epochs, "epoch_seconds": NOMINAL["epoch_seconds"]}
    )
    manifest["spec"]["recovery"] = {
        "maxAttempts": 2,
        "checkpointIntervalSeconds": round(scaled(*CHECKPOINT_INTERVAL, scale)),
    }
    return manifest


def last_running(log_text: str, job: str) -> float:
    """When the operator last logged the job entering Running (attempt 2's instance)."""
    times = [
        _ts(e["timestamp"])
        for line in log_text.splitlines()
        if line.startswith("{")
        for e in [json.loads(line)]
        if e.get("event") == "phase changed" and e.get("phase") == "Running" and e.get("name") == job
    ]
    if not times:
        raise RuntimeError(f"the operator never logged {job} entering Running")
    return max(times)


def run(scale: float = 0.05, *, epochs: int = 4, lose_at: int = 2) -> dict[str, float]:
    """Run the recovery scenario once; figures in seconds at real Brev speed (divided by scale)."""
    work = Path(tempfile.mkdtemp(prefix="taobrev-bench-recovery-"))
    cp = ControlPlane.start(work / "cp")
    s3 = S3Server.start(work / "s3")
    op: OperatorProcess | None = None
    try:
        cp.apply_crds(REPO / "crds")
        sim = BrevSim(work / "sim", speed=scale, s3_endpoint=s3.endpoint_url)
        namespace = "bench-recovery"
        cp.create_namespace(namespace)
        install_operator_identity(cp, sim, job_namespaces=[namespace])
        s3.create_bucket("bench-recovery")
        op = OperatorProcess(
            cp, sim, work / "operator", extra_env={"TAOBREV_NAMESPACES": namespace, **operator_env(scale)}
        ).start()
        op.wait_leading()
        stack = Stack(cp, sim, s3, op, namespace, "bench-recovery")
        stack.create_job_secrets()
        stack.apply(recovery_job(stack, scale, epochs))
        first = stack.wait_for(
            JOB,
            lambda o: bool(instance((o or {}).get("status")).get("name")),
            "the first instance name",
        )
        assert first is not None
        name = str(instance(first["status"])["name"])
        # The loss comes once epoch `lose_at`'s checkpoint is synced (at most 2 sync intervals).
        sim.set_faults(
            vanish_at_epoch={name: lose_at},
            epoch_fault_sync_wait_s=2 * CHECKPOINT_INTERVAL[0] + NOMINAL["epoch_seconds"],
        )
        status = stack.wait_finished(JOB, timeout=3600 * scale + 600)
        if status.get("outcome") != "Succeeded" or len(status.get("attempts") or []) != 2:
            raise RuntimeError(
                f"the recovery scenario did not end as expected: {json.dumps(status, indent=1)}"
            )
        lost = next(
            float(i["disappear_at"])
            for i in sim.instances(include_deleted=True)
            if i["name"] == name and i.get("disappear_at") is not None
        )
        first_attempt, second = status["attempts"]
        noticed = _ts(first_attempt["endedAt"])
        running = last_running(op.log_text(), JOB)
        created = _ts(second["instance"]["billedFrom"])  # attempt 2's first `brev create`
        figures = {
            "scale": scale,
            "loss_to_noticed_s": (noticed - lost) / scale,
            "noticed_to_running_s": (running - noticed) / scale,
            "loss_to_running_s": (running - lost) / scale,
            "new_instance_boot_ready_s": (running - created) / scale,
            "nominal_boot_ready_floor_s": NOMINAL["deploy_s"]
            + NOMINAL["ssh_delay_s"]
            + NOMINAL["pull_seconds"],
        }
        figures["recovery_to_boot_ratio"] = (
            figures["noticed_to_running_s"] / figures["new_instance_boot_ready_s"]
        )
        return figures
    finally:
        if op is not None:
            op.stop()
        s3.stop()
        cp.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=0.05, help="real seconds per nominal second")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lose-at", type=int, default=2)
    args = ap.parse_args()
    print(
        f"== recovery: every nominal duration and operator interval x {args.scale:g} "
        f"(operator: {operator_env(args.scale)}, checkpointIntervalSeconds "
        f"{round(scaled(*CHECKPOINT_INTERVAL, args.scale))}); figures divided by {args.scale:g} again"
    )
    f = run(args.scale, epochs=args.epochs, lose_at=args.lose_at)
    print(f"instance lost -> loss noticed (attempt 1 ended):       {f['loss_to_noticed_s']:.1f} s")
    print(f"loss noticed -> new instance Running:                   {f['noticed_to_running_s']:.1f} s")
    print(f"instance lost -> new instance Running:                  {f['loss_to_running_s']:.1f} s")
    print(
        f"new instance's own boot+ready (create -> Running):      {f['new_instance_boot_ready_s']:.1f} s "
        f"(simulator floor deploy+ssh+pull {f['nominal_boot_ready_floor_s']:.0f} s)"
    )
    print(f"ratio (noticed -> Running) / (boot+ready):              {f['recovery_to_boot_ratio']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
