"""spec.debug.keepInstanceOnFailure and `kubectl taobrev cancel` (the annotation taobrev.io/cancel),
end to end: real control plane, the operator process under kopf, the Brev simulator, S3."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from controller.api.naming import CANCEL_ANNOTATION
from controller.api.timestamps import format_time
from controller.reconciler import FINALIZER
from tests.fixtures.operator import SECRET_VALUES, Stack
from tests.status_paths import instance, run, upload

KEEP_S = 40


@pytest.fixture
def operator_env() -> dict[str, str]:
    # A running job's pass sits in a 120 s exit wait (production's default), so a cancel acted on
    # within seconds shows the watch event cut the wait short.
    return {"TAOBREV_WAIT_TIMEOUT": "120", "TAOBREV_STOP_GRACE": "30"}


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _condition(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return dict(next(c for c in status.get("conditions", []) if c["type"] == ctype))


def _kept(o: dict[str, Any] | None) -> bool:
    return bool(o and instance(o.get("status") or {}).get("keptUntil"))


def test_a_failed_run_keeps_its_instance_without_secrets_until_the_deadline_then_deletes_it(
    stack: Stack,
) -> None:
    """Two jobs fail (exit 3): one without secret env keeps its stopped container, one with
    spec.credentials.extraEnv has it removed (its config held the value). Both instances stay
    listed with no secret value anywhere on them — files or container configs — while status,
    `kubectl describe`, `-o wide` and an Event say how to connect and until when; then each is
    deleted after the deadline."""
    jobs = {"keep": False, "keep-env": True}
    for name, secret_env in jobs.items():
        manifest = stack.job_manifest(
            name, simulation={"epochs": 4, "fail_at_epoch": 2, "exit_code": 3}, extra_env=secret_env
        )
        manifest["spec"]["debug"] = {"keepInstanceOnFailure": str(KEEP_S)}
        stack.apply(manifest)

    for name, secret_env in jobs.items():
        obj = stack.wait_for(name, _kept, "the failed run's instance to be kept")
        assert obj is not None
        status = obj["status"]
        name_on_brev, job_id = instance(status)["name"], status["jobId"]
        until = _when(instance(status)["keptUntil"])

        # Kept, as the job says: Failed by the program, not finished, the finalizer on.
        assert (status["phase"], status["outcome"], status["failureClass"]) == (
            "Deleted",
            "Failed",
            "Program",
        )
        assert "finishedAt" not in status and FINALIZER in obj["metadata"]["finalizers"]
        assert any(i["name"] == name_on_brev and i["status"] == "RUNNING" for i in stack.live_instances())
        # Results and logs were uploaded before anything was removed.
        assert upload(status).get("uploadedAt") and run(status).get("cleanedUpAt")

        # No secret left on the instance: the job's secrets directory is gone, its other files stay.
        home = stack.sim.instance_files(name_on_brev)
        job_dir = home / "taobrev" / job_id
        assert (job_dir / "logs").is_dir() and not (job_dir / "secrets").exists()
        for path in (p for p in home.rglob("*") if p.is_file()):
            data = path.read_bytes()
            assert not [s for s in SECRET_VALUES if s.encode() in data], path
        containers = stack.sim.containers(name_on_brev)
        assert not [s for s in SECRET_VALUES if s in json.dumps(containers)]
        mine = [c for c in containers if c.get("Name", "").strip("/") == job_id]
        if secret_env:
            assert mine == [], "a container whose config holds secret env is not kept"
        else:
            assert len(mine) == 1 and not mine[0]["State"]["Running"], "the stopped container stays"

        # How to connect and until when: the condition, describe, -o wide, an Event.
        released = _condition(status, "InstanceReleased")
        assert released["reason"] == "KeptForDebugging"
        assert f"brev shell {name_on_brev}" in released["message"]
        assert format_time(until) in released["message"]
        described = stack.kubectl("describe", "tbj", name, "-n", stack.namespace).stdout
        assert "KeptForDebugging" in described and f"brev shell {name_on_brev}" in described
        wide = stack.kubectl("get", "tbj", name, "-n", stack.namespace, "-o", "wide").stdout
        assert "KEPT-UNTIL" in wide and format_time(until) in wide
        assert "KeptForDebugging" in [e["reason"] for e in stack.events(name)]

    for name in jobs:
        final = stack.wait_finished(name, timeout=KEEP_S + 120)
        kept_until = _when(instance(final)["keptUntil"])
        # Deleted after the deadline, not before; the run's failure is what the job says.
        assert _when(instance(final)["keepEndedAt"]) >= kept_until
        assert _when(final["finishedAt"]) >= kept_until
        assert (final["outcome"], final["reason"], final["failureClass"]) == (
            "Failed",
            "TrainingFailed",
            "Program",
        )
        # The keep ended, then the delete was requested. By time, not by list order: Events carry
        # whole seconds, and two in one second list in either order.
        events = stack.events(name)
        ended = [_when(e["firstTimestamp"]) for e in events if e["reason"] == "KeepEnded"]
        deletes = [
            _when(e.get("lastTimestamp") or e["firstTimestamp"])
            for e in events
            if e["reason"] == "InstanceDeleteRequested"
        ]
        assert ended and deletes, [e["reason"] for e in events]
        assert min(ended) <= max(deletes), (ended, deletes)
    assert stack.live_instances() == []


def test_the_cancel_annotation_ends_a_running_job_canceled_with_results_and_keeps_the_object(
    stack: Stack,
) -> None:
    """`kubectl taobrev cancel` sets taobrev.io/cancel: the running container is stopped at once
    (not after the pass's exit wait), results and logs are uploaded, the instance is deleted, and
    the TaoBrevJob stays, Canceled (CanceledByUser), until it is deleted."""
    stack.apply(stack.job_manifest("stop", simulation={"epochs": 50, "epoch_seconds": 200}))

    def training(o: dict[str, Any] | None) -> bool:
        st = (o or {}).get("status") or {}
        if st.get("phase") != "Running":
            return False
        return any(
            c.get("State", {}).get("Running") and c.get("Name", "").strip("/") == st["jobId"]
            for c in stack.sim.containers(instance(st)["name"])
        )

    stack.wait_for("stop", training, "the training container to run")
    asked = datetime.now(UTC)
    stack.kubectl(
        "annotate", "tbj", "stop", "-n", stack.namespace, f"{CANCEL_ANNOTATION}={format_time(asked)}"
    )
    status = stack.wait_finished("stop")

    assert (status["outcome"], status["reason"]) == ("Canceled", "CanceledByUser")
    assert "failureClass" not in status
    assert CANCEL_ANNOTATION in status["message"]
    # Acted on within seconds: the pass in its exit wait was cut short by the watch event.
    ended = _when(run(status)["endedAt"])
    assert (ended - asked.replace(microsecond=0)).total_seconds() <= 10, (asked, ended)
    assert run(status)["exitCode"] == 143, "stopped with SIGTERM (docker stop)"
    assert upload(status).get("uploadedAt")
    resp = stack.s3.client().list_objects_v2(Bucket=stack.bucket, Prefix="stop/")
    assert any(o["Key"].startswith("stop/logs/") for o in resp.get("Contents", []))
    assert stack.live_instances() == []
    assert "CanceledByUser" in [e["reason"] for e in stack.events("stop")]

    # The object stays (finalizer on, nothing more to do) until it is deleted; then it goes at once.
    obj = stack.get("stop")
    assert obj is not None and FINALIZER in obj["metadata"]["finalizers"]
    assert obj["status"]["phase"] == "Deleted"
    stack.kubectl("delete", "tbj", "stop", "-n", stack.namespace, "--wait=false")
    stack.wait_gone("stop", timeout=30)
    assert stack.sim.created_count() == 1
