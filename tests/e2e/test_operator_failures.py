"""Failure handling end to end: registry entitlement, exec never ready, brev auth EOF, and the
operator killed with SIGKILL in every phase of one run (missing Secrets: tests/e2e/test_preflight.py)."""

from __future__ import annotations

import functools
from typing import Any

from tests.fixtures.operator import Stack
from tests.status_paths import instance, upload


def cond(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions", []) if c["type"] == ctype)


def brev_calls(stack: Stack, verb: str) -> int:
    return sum(1 for c in stack.sim.calls() if c.program == "brev" and c.argv[:1] == [verb])


def test_ngc_entitlement_failure_ends_the_job_at_once_and_deletes_the_instance(stack: Stack) -> None:
    stack.sim.set_faults(ngc_entitlement=True)
    stack.apply(stack.job_manifest("noentitlement"))
    status = stack.wait_finished("noentitlement")
    assert status["outcome"] == "Failed"
    assert status["reason"] == "RegistryEntitlementFailed"
    assert status["failureClass"] == "Configuration"  # fix the NGC entitlement, not retry
    assert "Running" not in status["phaseTimes"], "never billed on into a run"
    assert status["retries"] == 0, "a permanent error is not retried"
    assert stack.live_instances() == []


def test_instance_that_never_accepts_commands_times_out_in_waiting_exec(stack: Stack) -> None:
    stack.sim.set_faults(exec_never_ready=True)
    manifest = stack.job_manifest("neverready", timeouts={"waitingExecSeconds": 10})
    manifest["spec"]["recovery"] = {"maxAttempts": 1}  # one attempt: recovery has its own tests
    stack.apply(manifest)
    status = stack.wait_finished("neverready", timeout=120)
    assert status["outcome"] == "Failed"
    assert status["reason"] == "WaitingExecTimeout"
    assert status["failureClass"] == "Infrastructure"
    assert "10s" in status["message"]
    assert "spec.timeouts" in status["message"]
    assert stack.live_instances() == []
    assert stack.sim.created_count() == 1


def test_brev_auth_eof_triggers_one_relogin_and_the_job_succeeds(stack: Stack) -> None:
    stack.sim.set_faults(auth_eof_once=1)
    stack.apply(stack.job_manifest("autheof"))
    status = stack.wait_finished("autheof")
    assert status["outcome"] == "Succeeded"
    log = stack.operator.log_text()
    assert log.count("brev_credentials_written") == 2, "initial login + exactly one re-login"


# (phase to kill in, the simulator faults that hold it). Each is set while the operator is down,
# so the phase's window opens only after the restart: WaitingExec lasts until ssh is allowed, the
# others a few seconds from their start (Running: the job's 3 epochs of 400 nominal seconds).
KILL_POINTS: list[tuple[str, dict[str, Any]]] = [
    ("Provisioning", {"deploy_s": 600}),
    ("WaitingExec", {"exec_never_ready": True}),
    ("Pulling", {"pull_seconds": 600}),
    ("Running", {}),
    ("Uploading", {"upload_s": 500}),
    ("Deleted", {"delete_s": 800}),
]


def _in_phase(phase: str, obj: dict[str, Any] | None) -> bool:
    st = (obj or {}).get("status") or {}
    if phase == "Provisioning":
        return bool(instance(st).get("createRequestedAt")) and st.get("phase") == phase
    if phase == "Deleted":
        return bool(instance(st).get("deleteRequestedAt")) and not st.get("finishedAt")
    return st.get("phase") == phase


def test_sigkill_in_every_phase_of_one_run_finishes_with_exactly_one_instance(stack: Stack) -> None:
    """One lifecycle, the operator SIGKILLed once in each phase and restarted: each restart picks
    the job up from its status alone. (One run instead of six: what a kill at each pass does to
    the state machine is the component tier's and the simulation's; this shows the real process,
    kopf and the API server agree.)"""
    name = "kill-every-phase"
    stack.sim.set_faults(**KILL_POINTS[0][1])
    stack.apply(stack.job_manifest(name, simulation={"epochs": 3, "epoch_seconds": 400}))
    for i, (phase, _) in enumerate(KILL_POINTS):
        stack.wait_for(name, functools.partial(_in_phase, phase), f"phase {phase}")
        stack.operator.kill()
        stack.sim.clear_faults()
        if i + 1 < len(KILL_POINTS):
            stack.sim.set_faults(**KILL_POINTS[i + 1][1])
        stack.operator.start()
    status = stack.wait_finished(name)

    assert status["outcome"] == "Succeeded", status
    assert stack.sim.created_count() == 1, "exactly one instance was ever created for the job"
    assert stack.live_instances() == []
    assert stack.operator.starts == 1 + len(KILL_POINTS)


def test_seed_only_placement_field_is_refused_with_a_clear_reason_and_nothing_is_created(
    stack: Stack,
) -> None:
    """The skill documents' --cloud-cred-id does not exist in the pinned brev CLI: the job fails
    naming the spec field instead of passing a flag brev would reject."""
    job = stack.job_manifest(
        "placement", instance={"ephemeral": {"gpuName": "L40S", "cloudCredId": "cc-123"}}
    )
    stack.apply(job)
    status = stack.wait_finished("placement")
    assert status["outcome"] == "Failed"
    assert status["reason"] == "InvalidSpec"
    assert status["failureClass"] == "Configuration"
    assert "cloudCredId" in status["message"]
    assert stack.sim.created_count() == 0
    assert not any("--cloud-cred-id" in c.argv for c in stack.sim.calls())


def test_capacity_shortage_is_retried_with_backoff_and_the_job_succeeds_once_capacity_returns(
    stack: Stack,
) -> None:
    stack.sim.set_faults(capacity=["g6e.xlarge"])
    stack.apply(stack.job_manifest("capacity"))
    obj = stack.wait_for(
        "capacity", lambda o: int(((o or {}).get("status") or {}).get("retries") or 0) >= 2, "two retries"
    )
    status = (obj or {})["status"]
    assert status["phase"] == "Provisioning"
    assert not status.get("outcome")
    assert "capacity" in status["message"]
    assert "will retry" in status["message"]
    assert stack.sim.created_count() == 0
    stack.sim.clear_faults()
    final = stack.wait_finished("capacity")
    assert final["outcome"] == "Succeeded"
    assert stack.sim.created_count() == 1


def test_instance_that_disappears_mid_run_fails_with_a_distinct_reason(stack: Stack) -> None:
    # Vanishes 400 nominal seconds after RUNNING: while the (long) training runs.
    stack.sim.set_faults(disappear_after_s=400)
    manifest = stack.job_manifest("vanish", simulation={"epochs": 50, "epoch_seconds": 200})
    manifest["spec"]["recovery"] = {"maxAttempts": 1}  # one attempt: recovery has its own tests
    stack.apply(manifest)
    status = stack.wait_finished("vanish")
    assert status["outcome"] == "Failed", status
    assert status["reason"] == "InstanceLost", status
    assert status["failureClass"] == "Infrastructure"
    assert "disappeared" in status["message"]
    assert stack.live_instances() == []


def test_upload_that_keeps_failing_ends_as_failed_and_still_deletes_the_instance(stack: Stack) -> None:
    stack.sim.set_faults(upload_fails="bucket unreachable")
    stack.apply(stack.job_manifest("noupload", timeouts={"uploadingSeconds": 10}))
    status = stack.wait_finished("noupload")
    assert status["outcome"] == "Failed"
    assert status["reason"] == "UploadFailed"
    assert status["failureClass"] == "Infrastructure"
    assert "uploadingSeconds" in status["message"]
    assert "uploadedAt" not in upload(status)
    assert stack.live_instances() == [], "billing stops even when results cannot be saved"


def test_sigkill_during_a_cancel_teardown_still_uploads_releases_and_deletes(stack: Stack) -> None:
    stack.sim.set_faults(upload_s=500)
    stack.apply(stack.job_manifest("cancelkill", simulation={"epochs": 50, "epoch_seconds": 200}))

    def training(o: dict[str, Any] | None) -> bool:
        st = (o or {}).get("status") or {}
        return st.get("phase") == "Running" and any(
            c.get("State", {}).get("Running") for c in stack.sim.containers(instance(st)["name"])
        )

    stack.wait_for("cancelkill", training, "the training container to run")
    stack.kubectl("delete", "tbj", "cancelkill", "-n", stack.namespace, "--wait=false")
    stack.wait_for(
        "cancelkill",
        lambda o: ((o or {}).get("status") or {}).get("phase") == "Uploading",
        "the cancel upload",
    )
    stack.operator.kill()
    stack.sim.clear_faults()
    stack.operator.start()
    stack.wait_gone("cancelkill")
    assert stack.live_instances() == []
    assert stack.sim.created_count() == 1
    resp = stack.s3.client().list_objects_v2(Bucket=stack.bucket, Prefix="cancelkill/logs/")
    assert resp.get("KeyCount", 0) >= 1, "the container log was uploaded before teardown"
