"""The operator end to end: real control plane + operator process + Brev simulator + S3.

Jobs are created with `kubectl apply`; every wait is on the object's status.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from tests.fixtures.operator import SECRET_VALUES, Stack
from tests.status_paths import instance, run, upload

PHASES = ["Pending", "Provisioning", "WaitingExec", "Pulling", "Running", "Uploading", "Deleted"]


def phase_order(status: dict[str, Any]) -> list[str]:
    times = status.get("phaseTimes") or {}
    return [
        p
        for p, _ in sorted(times.items(), key=lambda kv: (datetime.fromisoformat(kv[1]), PHASES.index(kv[0])))
    ]


def s3_keys(stack: Stack, prefix: str) -> dict[str, int]:
    resp = stack.s3.client().list_objects_v2(Bucket=stack.bucket, Prefix=prefix)
    return {o["Key"]: o["Size"] for o in resp.get("Contents", [])}


def cond(status: dict[str, Any], ctype: str) -> str:
    return str(next(c["status"] for c in status.get("conditions", []) if c["type"] == ctype))


def test_happy_path_ephemeral_instance_walks_every_phase_uploads_and_deletes(stack: Stack) -> None:
    stack.apply(stack.job_manifest("happy"))
    # The way a user or a CI script waits: kubectl wait on the run's condition, then on Ready
    # (teardown finished too).
    for condition in ("Succeeded", "Ready"):
        stack.kubectl(
            "wait", "tbj/happy", "-n", stack.namespace, f"--for=condition={condition}", "--timeout=180s"
        )
    status = stack.status("happy")
    described = stack.kubectl("describe", "tbj", "happy", "-n", stack.namespace).stdout
    for text in ("Phase:", "Deleted", "Succeeded", "InstanceReleased", "Uploading", "Finished"):
        assert text in described, text

    assert phase_order(status) == PHASES
    assert status["outcome"] == "Succeeded"
    assert run(status)["exitCode"] == 0
    assert cond(status, "Ready") == "True"
    assert cond(status, "Succeeded") == "True"
    assert status["backendRef"] == f"{instance(status)['name']}/{status['jobId']}"

    # Results in S3 match what the TAO stand-in wrote (count and sizes), plus the container log.
    keys = s3_keys(stack, "happy/")
    assert any(k.startswith("happy/logs/") for k in keys)
    results = {k: v for k, v in keys.items() if k.startswith("happy/results/")}
    assert results
    assert upload(status)["results"]["objects"] == len(keys)
    assert upload(status)["results"]["bytes"] == sum(keys.values())

    # Exactly one instance was created for the job, and it is gone.
    assert stack.sim.created_count() == 1
    assert stack.live_instances() == []

    # The finalizer is released once the object is deleted.
    stack.kubectl("delete", "tbj", "happy", "-n", stack.namespace, "--wait=false")
    stack.wait_gone("happy")

    reasons = [e["reason"] for e in stack.events("happy")]
    for phase in PHASES[1:]:
        assert phase in reasons
    # Every line the operator logs about the job carries its identity, phase and instance.
    job_lines = [
        json.loads(line)
        for line in stack.operator.log_text().splitlines()
        if line.startswith("{") and '"happy"' in line
    ]
    ours = [e for e in job_lines if e.get("logger", "").startswith(("taobrev", "controller"))]
    assert ours
    for entry in ours:
        missing = {"namespace", "name", "uid", "phase", "instance"} - set(entry)
        assert not missing, (missing, entry)
    # No secret ever reached an argv the simulator saw (local or remote), nor the operator's log.
    argv_text = json.dumps([c.argv for c in stack.sim.calls()])
    log_text = stack.operator.log_text()
    for secret in SECRET_VALUES:
        assert secret not in argv_text
        assert secret not in log_text


def test_reused_instance_is_neither_created_nor_deleted_and_the_container_is_removed(stack: Stack) -> None:
    stack.sim.add_instance("shared-l40s", status="RUNNING", ssh_ready=True, gpu="L40S")
    stack.apply(stack.job_manifest("reuse", instance={"reuse": {"name": "shared-l40s"}}))
    status = stack.wait_finished("reuse")

    assert status["outcome"] == "Succeeded"
    assert instance(status)["created"] is False
    assert instance(status)["name"] == "shared-l40s"
    assert instance(status)["gpu"]
    assert stack.sim.created_count() == 0
    assert [i["name"] for i in stack.live_instances()] == ["shared-l40s"]
    assert not any(c.program == "brev" and c.argv[:1] == ["delete"] for c in stack.sim.calls())
    # The container and the job directory (with its secret files) are gone from the instance.
    assert stack.sim.containers("shared-l40s") == [] or all(
        c.get("name") != status["jobId"] for c in stack.sim.containers("shared-l40s")
    )
    assert not (stack.sim.instance_files("shared-l40s") / "taobrev" / status["jobId"]).exists()


def test_non_zero_training_exit_uploads_logs_and_partial_results_deletes_and_fails(stack: Stack) -> None:
    stack.apply(stack.job_manifest("crash", simulation={"epochs": 4, "fail_at_epoch": 2, "exit_code": 3}))
    status = stack.wait_finished("crash")

    assert status["outcome"] == "Failed"
    assert status["reason"] == "TrainingFailed"
    assert status["failureClass"] == "Program"
    assert run(status)["exitCode"] == 3
    assert "3" in status["message"]
    keys = s3_keys(stack, "crash/")
    assert any(k.startswith("crash/logs/") for k in keys), keys
    assert any(k.startswith("crash/results/") for k in keys), "partial results (epoch 1 checkpoint) uploaded"
    assert run(status)["logTail"], "the tail of the container log is kept in status"
    assert stack.live_instances() == []
    assert stack.sim.created_count() == 1
    assert cond(status, "Stalled") == "True"
    assert cond(status, "Succeeded") == "False"


def test_deleting_the_job_while_running_cancels_uploads_and_tears_down(stack: Stack) -> None:
    stack.apply(stack.job_manifest("cancel", simulation={"epochs": 50, "epoch_seconds": 200}))

    def training(o: dict[str, Any] | None) -> bool:
        # Running is written just before `docker run`; wait until the container really trains.
        st = (o or {}).get("status") or {}
        if st.get("phase") != "Running":
            return False
        return any(
            c.get("State", {}).get("Running") and c.get("Name", "").strip("/") == st["jobId"]
            for c in stack.sim.containers(instance(st)["name"])
        )

    stack.wait_for("cancel", training, "the training container to run")
    stack.kubectl("delete", "tbj", "cancel", "-n", stack.namespace, "--wait=false")
    # Observed through the status the operator writes while the finalizer holds the object.
    last: dict[str, Any] = {}

    def remember(o: dict[str, Any] | None) -> bool:
        if o is not None:
            last.update(o.get("status") or {})
        return o is None

    stack.wait_for("cancel", remember, "the canceled job to be torn down and released")
    assert last["outcome"] == "Canceled"
    assert upload(last).get("uploadedAt")
    assert run(last)["exitCode"] == 143, "stopped with SIGTERM (docker stop), not left running"
    keys = s3_keys(stack, "cancel/")
    assert any(k.startswith("cancel/logs/") for k in keys), (keys, upload(last).get("results"))
    assert stack.live_instances() == []


def test_a_stopped_reused_instance_is_started_once_used_and_left_running(stack: Stack) -> None:
    stack.sim.add_instance("parked-a100", status="STOPPED", gpu="A100")
    stack.apply(stack.job_manifest("parked", instance={"reuse": {"name": "parked-a100"}}))
    status = stack.wait_finished("parked")
    assert status["outcome"] == "Succeeded"
    assert instance(status).get("startRequestedAt")
    starts = [c for c in stack.sim.calls() if c.program == "brev" and c.argv[:1] == ["start"]]
    assert len(starts) == 1
    assert "--detached" in starts[0].argv
    assert [(i["name"], i["status"]) for i in stack.live_instances()] == [("parked-a100", "RUNNING")]
    assert stack.sim.created_count() == 0
