"""The operator end to end: real control plane + operator process + Brev simulator + S3.

Jobs are created with `kubectl apply`; every wait is on the object's status.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from tests.fixtures.operator import SECRET_VALUES, Stack

PHASES = ["Pending", "Provisioning", "WaitingExec", "Pulling", "Running", "Uploading", "Deleted"]


def phase_order(status: dict[str, Any]) -> list[str]:
    times = status.get("phaseTimes") or {}
    return [p for p, _ in sorted(times.items(), key=lambda kv: (datetime.fromisoformat(kv[1]), PHASES.index(kv[0])))]


def s3_keys(stack: Stack, prefix: str) -> dict[str, int]:
    resp = stack.s3.client().list_objects_v2(Bucket=stack.bucket, Prefix=prefix)
    return {o["Key"]: o["Size"] for o in resp.get("Contents", [])}


def cond(status: dict[str, Any], ctype: str) -> str:
    return next(c["status"] for c in status.get("conditions", []) if c["type"] == ctype)


def test_happy_path_ephemeral_instance_walks_every_phase_uploads_and_deletes(stack: Stack) -> None:
    stack.apply(stack.job_manifest("happy"))
    status = stack.wait_finished("happy")

    assert phase_order(status) == PHASES
    assert status["outcome"] == "Succeeded" and status["exitCode"] == 0
    assert cond(status, "Ready") == "True" and cond(status, "Succeeded") == "True"
    assert status["backendRef"] == f"{status['instanceName']}/{status['jobId']}"

    # Results in S3 match what the TAO stand-in wrote (count and sizes), plus the container log.
    keys = s3_keys(stack, "happy/")
    assert any(k.startswith("happy/logs/") for k in keys)
    results = {k: v for k, v in keys.items() if k.startswith("happy/results/")}
    assert results and status["results"]["objects"] == len(keys)
    assert status["results"]["bytes"] == sum(keys.values())

    # Exactly one instance was created for the job, and it is gone.
    assert stack.sim.created_count() == 1
    assert stack.live_instances() == []

    # The finalizer is released once the object is deleted.
    stack.kubectl("delete", "tbj", "happy", "-n", stack.namespace, "--wait=false")
    stack.wait_gone("happy")

    reasons = [e["reason"] for e in stack.events("happy")]
    for phase in PHASES[1:]:
        assert phase in reasons
    # No secret ever reached an argv the simulator saw (local or remote), nor the operator's log.
    argv_text = json.dumps([c.argv for c in stack.sim.calls()])
    log_text = stack.operator.log_text()
    for secret in SECRET_VALUES:
        assert secret not in argv_text
        assert secret not in log_text
