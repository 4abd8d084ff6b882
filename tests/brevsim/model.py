"""PURE instance lifecycle: statuses are computed lazily from timestamps, so no daemon is needed.

An instance record stores the last lifecycle action (`lifecycle`) and when it happened (`phase_at`).
Each lifecycle is a list of segments declared as data; the observed status is the segment that the
elapsed time (real seconds = nominal x speed) falls into. Allowed actions per status are data too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GONE = "GONE"  # not a brev status: the instance no longer exists (deleted or vanished)

# Nominal seconds (the harness multiplies by the speed factor). Each is a knob (faults.py).
NOMINAL: dict[str, float] = {
    "deploy_s": 120.0,  # DEPLOYING
    "ssh_delay_s": 60.0,  # ssh refused after RUNNING
    "build_s": 15.0,  # build BUILDING after RUNNING (shell NOT READY meanwhile)
    "delete_s": 30.0,  # DELETING
    "delete_lag_s": 0.0,  # after an accepted delete, `ls` still shows the old status (fault)
    "stop_s": 20.0,  # STOPPING
    "start_s": 30.0,  # STARTING
    "pull_seconds": 90.0,  # docker pull of the TAO image
    "epoch_seconds": 20.0,  # one TAO epoch
    "upload_s": 0.0,  # an upload through the aws-cli image (a test stretches it)
    "checkpoint_write_s": 0.0,  # the TAO stand-in writing one checkpoint in place (a test stretches it)
    "create_poll_s": 5.0,  # brev create/start poll interval
    "create_s": 0.0,  # the server makes a created instance this late (a test stretches it)
    "ssh_wait_interval_s": 1.0,  # WaitForSSHToBeAvailable sleep
    "device_login_s": 300.0,  # login device flow poll timeout
}


@dataclass(frozen=True)
class Segment:
    status: str
    duration_key: str | None  # None: the final segment
    build_status: str
    health_status: str


# lifecycle -> segments, in order
LIFECYCLES: dict[str, tuple[Segment, ...]] = {
    "create": (
        Segment("DEPLOYING", "deploy_s", "PENDING", ""),
        Segment("RUNNING", None, "COMPLETED", "HEALTHY"),
    ),
    "create_failed": (
        Segment("DEPLOYING", "deploy_s", "PENDING", ""),
        Segment("FAILURE", None, "CREATE_FAILED", "UNAVAILABLE"),
    ),
    "stop": (
        Segment("STOPPING", "stop_s", "COMPLETED", "UNAVAILABLE"),
        Segment("STOPPED", None, "COMPLETED", "UNAVAILABLE"),
    ),
    "start": (
        Segment("STARTING", "start_s", "COMPLETED", "UNAVAILABLE"),
        Segment("RUNNING", None, "COMPLETED", "HEALTHY"),
    ),
    "delete": (
        Segment("DELETING", "delete_s", "COMPLETED", "UNAVAILABLE"),
        Segment(GONE, None, "", ""),
    ),
}

# action -> statuses from which the simulated server accepts it
ALLOWED: dict[str, frozenset[str]] = {
    "stop": frozenset({"RUNNING"}),
    "start": frozenset({"STOPPED"}),
    "delete": frozenset({"DEPLOYING", "RUNNING", "STARTING", "STOPPING", "STOPPED", "FAILURE", "DELETING"}),
}


@dataclass(frozen=True)
class Observation:
    status: str
    build_status: str
    health_status: str
    ssh_ready: bool
    gone: bool
    running_since: float | None  # when the current RUNNING segment began (real time)

    @property
    def display_status(self) -> str:
        # brev ls shows RUNNING + UNHEALTHY as UNHEALTHY (pkg/entity WorkspaceInfo; SIM-CONTRACT.md section 4)
        if self.status == "RUNNING" and self.health_status == "UNHEALTHY":
            return "UNHEALTHY"
        return self.status

    @property
    def shell_status(self) -> str:
        return "READY" if self.status == "RUNNING" and self.build_status == "COMPLETED" else "NOT READY"


def instance_delays(inst: dict[str, Any], delays: dict[str, float]) -> dict[str, float]:
    """The delays of this instance: the global ones, overridden by the real seconds its record
    carries (`delays`, set at create from the `instance_durations` knob)."""
    own = inst.get("delays")
    return {**delays, **own} if own else delays


def observe(inst: dict[str, Any], now: float, delays: dict[str, float]) -> Observation:
    """Where `inst` is at time `now`. `delays` maps NOMINAL keys to REAL seconds (the instance's
    own `delays`, if any, win)."""
    delays = instance_delays(inst, delays)
    disappear_at = inst.get("disappear_at")
    if inst.get("lifecycle") != "delete" and disappear_at is not None and now >= float(disappear_at):
        return Observation(GONE, "", "", False, True, None)
    segments = LIFECYCLES[str(inst["lifecycle"])]
    start = float(inst["phase_at"])
    pre = inst.get("pre_delete")
    if inst.get("lifecycle") == "delete" and now < start and isinstance(pre, dict):
        # delete accepted, but the listing still shows the old status (the `delete_lag_s` knob)
        return Observation(
            str(pre["status"]), str(pre["build_status"]), str(pre["health_status"]), False, False, None
        )
    for seg in segments:
        if seg.duration_key is None:
            break
        end = start + delays[seg.duration_key]
        if now < end:
            return Observation(seg.status, seg.build_status, seg.health_status, False, False, None)
        start = end
    if seg.status == GONE:
        return Observation(GONE, "", "", False, True, None)
    if seg.status != "RUNNING":
        return Observation(seg.status, seg.build_status, seg.health_status, False, False, None)
    in_running = now - start
    building = inst.get("lifecycle") == "create" and in_running < delays["build_s"]
    build = "BUILDING" if building else seg.build_status
    health = str(inst.get("health_override") or ("" if building else seg.health_status))
    ssh_ready = in_running >= delays["ssh_delay_s"] and not inst.get("never_ready")
    return Observation("RUNNING", build, health, ssh_ready, False, start)


def can(action: str, status: str) -> bool:
    return status in ALLOWED[action]
