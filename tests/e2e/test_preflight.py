"""Check before you pay (issue 32), on the real control plane, the operator process, the Brev
simulator and a real S3 server: what can be verified without a GPU is verified before `brev
create`, a job waits (Pending, not Stalled) while an input may still arrive, and starts by itself
when it does (a Secret's arrival: tests/e2e/test_preflight_secret_arrival.py)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.devenv.plugin import kubectl_taobrev
from tests.devenv.s3 import S3Server
from tests.fixtures.operator import Stack
from tests.status_paths import queue


def cond(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions", []) if c["type"] == ctype)


def creates(stack: Stack) -> int:
    """`brev create` calls that could create (the client's `create --help` flag probe cannot)."""
    calls = stack.sim.calls()
    return sum(
        1 for c in calls if c.program == "brev" and c.argv[:1] == ["create"] and "--help" not in c.argv
    )


def waiting_with(reason: str) -> Any:
    def check(obj: dict[str, Any] | None) -> bool:
        status = (obj or {}).get("status") or {}
        return status.get("phase") == "Pending" and status.get("reason") == reason

    return check


@pytest.fixture
def strict_s3(tmp_path: Path) -> Iterator[S3Server]:
    """An S3 of its own that checks keys like S3 does (the stack's S3 accepts any)."""
    server = S3Server.start(tmp_path / "strict-s3")
    try:
        server.create_bucket("strict-results")
        server.require_auth()
        yield server
    finally:
        server.stop()


def test_four_mistakes_each_stop_the_job_before_any_create_naming_the_field(
    stack: Stack, strict_s3: S3Server
) -> None:
    stack.s3.client().put_object(Bucket=stack.bucket, Key="unrelated/a.jpg", Body=b"x")
    jobs: dict[str, tuple[str, str, dict[str, Any]]] = {}

    bucket = stack.job_manifest("nobucket")
    bucket["spec"]["data"]["resultsUri"] = "s3://no-such-results-bucket/run-1"
    jobs["nobucket"] = ("ResultsBucketNotFound", "spec.data.resultsUri", bucket)

    keys = stack.job_manifest("wrongkeys")
    keys["spec"]["data"]["resultsUri"] = "s3://strict-results/run-1"
    keys["spec"]["data"]["s3EndpointUrl"] = strict_s3.endpoint_url
    jobs["wrongkeys"] = ("S3CredentialsInvalid", "spec.credentials.s3", keys)

    empty = stack.job_manifest("emptyinput")
    empty["spec"]["data"]["inputs"] = [{"uri": f"s3://{stack.bucket}/no-data-here/"}]
    jobs["emptyinput"] = ("InputNotFound", "spec.data.inputs[0].uri", empty)

    gpu = stack.job_manifest("unknowngpu", instance={"ephemeral": {"gpuName": "L4OS"}})
    jobs["unknowngpu"] = ("GPUNameUnknown", "spec.instance.ephemeral.gpuName", gpu)

    for _, _, manifest in jobs.values():
        stack.apply(manifest)
    for name, (reason, field, _) in jobs.items():
        obj = stack.wait_for(name, waiting_with(reason), f"{name} to wait Pending with {reason}")
        assert obj is not None
        status = obj["status"]
        assert field in status["message"], status["message"]
        assert "nothing created" in status["message"]
        assert [p["field"] for p in status["preflight"]["problems"]] == [field]
        # kstatus InProgress: it may still resolve; Ready says why it is not.
        assert cond(status, "Stalled")["status"] == "False"
        assert cond(status, "Reconciling")["status"] == "True"
        assert cond(status, "Ready")["reason"] == reason
        assert "admittedAt" not in queue(status)
        warnings = [e for e in stack.events(name) if e["type"] == "Warning" and e["reason"] == reason]
        assert warnings and field in warnings[0]["message"]
    assert creates(stack) == 0, "nothing was asked of Brev"
    assert stack.sim.created_count() == 0
    assert stack.live_instances() == []
    # A fix while Pending is picked up by the next re-check: the job runs on its own.
    stack.s3.client().put_object(Bucket=stack.bucket, Key="no-data-here/train/0001.jpg", Body=b"x")
    status = stack.wait_finished("emptyinput", timeout=240)
    assert status["outcome"] == "Succeeded"
    assert creates(stack) == 1


def test_problems_that_outlive_pending_seconds_fail_the_job_with_nothing_created(stack: Stack) -> None:
    job = stack.job_manifest("nosecret", timeouts={"pendingSeconds": 10})
    job["spec"]["credentials"]["ngcApiKey"] = {"name": "does-not-exist"}
    stack.apply(job)
    status = stack.wait_finished("nosecret", timeout=120)
    assert status["outcome"] == "Failed"
    assert status["reason"] == "SecretNotFound"
    assert "does-not-exist" in status["message"] and "spec.credentials.ngcApiKey" in status["message"]
    assert "spec.timeouts.pendingSeconds=10" in status["message"]
    assert cond(status, "Stalled")["status"] == "True"
    assert creates(stack) == 0 and stack.sim.created_count() == 0


ON_ITS_WAY = {"Provisioning", "WaitingExec", "Pulling", "Running"}


def test_a_run_whose_upload_fails_never_shows_succeeded(stack: Stack) -> None:
    """The results bucket disappears during the run (after the pre-flight passed): the training
    exits 0, every upload fails, and nothing a user reads ever says Succeeded."""
    # ~9 s of training (3 epochs x 300 nominal s x speed 0.01): the bucket goes while the job is
    # on its way, long before the upload. At 3 x 3 s the run took 0.1 s and CI never saw Running.
    job = stack.job_manifest(
        "lostbucket", simulation={"epochs": 3, "epoch_seconds": 300}, timeouts={"uploadingSeconds": 30}
    )
    job["spec"]["recovery"] = {"maxAttempts": 1}
    stack.apply(job)
    stack.wait_for(
        "lostbucket",
        lambda o: ((o or {}).get("status") or {}).get("phase") in ON_ITS_WAY,
        "the pre-flight to pass and the job to start",
    )
    client = stack.s3.client()
    for obj in client.list_objects_v2(Bucket=stack.bucket).get("Contents", []):
        client.delete_object(Bucket=stack.bucket, Key=obj["Key"])
    client.delete_bucket(Bucket=stack.bucket)

    seen: list[tuple[str | None, str | None]] = []

    def finished(obj: dict[str, Any] | None) -> bool:
        status = (obj or {}).get("status") or {}
        seen.append((status.get("outcome"), status.get("reason")))
        return bool(status.get("finishedAt"))

    obj = stack.wait_for("lostbucket", finished, "the job to finish", timeout=240)
    assert obj is not None
    status = obj["status"]
    assert (status["outcome"], status["reason"]) == ("Failed", "UploadFailed")
    assert status["runOutcome"] == "Failed"
    assert ("Succeeded" not in {o for o, _ in seen}) and ("Succeeded" not in {r for _, r in seen}), seen
    assert (None, "RunCompleted") in seen, "the exit was shown as what it is while uploading"
    assert cond(status, "Succeeded")["status"] == "False"
    events = stack.events("lostbucket")
    assert "Succeeded" not in [e["reason"] for e in events]
    warnings = [e["message"] for e in events if e["type"] == "Warning"]
    assert any("then it is deleted and they are lost" in m and "until" in m for m in warnings), warnings
    assert stack.live_instances() == []


def plan_command(
    stack: Stack, manifest: dict[str, Any], tmp_path: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """`kubectl taobrev plan -f <manifest>` as a user runs it."""
    path = tmp_path / f"{manifest['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return kubectl_taobrev(stack.cp, "plan", "-f", str(path), "-n", stack.namespace, *extra)


def test_the_plan_command_shows_what_a_job_would_do_and_creates_nothing(stack: Stack, tmp_path: Path) -> None:
    job = stack.job_manifest("demo-plan")
    job["spec"]["budget"] = {"maxCostDollars": 10}
    done = plan_command(stack, job, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    print(out)  # docs/preflight.md's example comes from here
    assert out.startswith(f"Plan for TaoBrevJob {stack.namespace}/demo-plan (nothing was created)")
    assert "pre-flight:   passed" in out
    assert "instance:     g6e.xlarge ($" in out
    assert "nvcr.io/nvidia/tao/tao-toolkit" in out
    assert f"s3://{stack.bucket}/demo-plan/results/" in out
    assert "most billed:" in out and "at most $10.00" in out
    bad = stack.job_manifest("bad-plan", instance={"ephemeral": {"gpuName": "L4OS"}})
    done = plan_command(stack, bad, tmp_path, "-o", "json")
    assert done.returncode == 2, done.stdout + done.stderr
    answer = json.loads(done.stdout)
    assert [p["reason"] for p in answer["problems"]] == ["GPUNameUnknown"]
    assert answer["plan"]["ready"] is False
    # The dry-run copies go away; nothing was ever asked of Brev.
    for name in [
        j["metadata"]["name"]
        for j in json.loads(stack.kubectl("get", "tbj", "-n", stack.namespace, "-o", "json").stdout)["items"]
    ]:
        stack.wait_gone(name, timeout=60)
    assert creates(stack) == 0 and stack.sim.created_count() == 0
