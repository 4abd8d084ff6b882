"""`kubectl taobrev get/describe/cost/suspend/resume/cancel` run the way users run them (kubectl
finds `kubectl-taobrev` on PATH and hands it the arguments) against a real kube-apiserver, on jobs
whose status is what real runs wrote (tests/data/health, captured from the operator), written
through the status subresource by the admin with billing times moved to the test's own clock. No
operator runs: these commands read and patch the API, and the operator's answer to a cancel is
tested with the operator itself (the lifecycle's e2e tests)."""

from __future__ import annotations

import copy
import json
import secrets
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.devenv.controlplane import ControlPlane
from tests.devenv.plugin import kubectl_taobrev
from tests.unit.test_models import valid_job

HEALTH = Path(__file__).resolve().parents[1] / "data" / "health"
RESOURCE = "taobrevjobs.taobrev.io"


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def real_status(fixture: str) -> dict[str, Any]:
    status: dict[str, Any] = yaml.safe_load((HEALTH / f"{fixture}.yaml").read_text())["object"]["status"]
    return copy.deepcopy(status)


def billed(
    status: dict[str, Any], start: datetime, seconds: int, *, deleted: bool, price: float | None
) -> None:
    """Move the (single) attempt's billing to [start, start + seconds] on today's clock."""
    (attempt,) = status["attempts"]
    inst = attempt["instance"]
    inst["billedFrom"] = stamp(start)
    if deleted:
        inst["deletedAt"] = stamp(start + timedelta(seconds=seconds))
    attempt["billedSeconds"] = status["billedSeconds"] = seconds
    if price is None:
        inst.pop("pricePerHour", None)
        attempt.pop("estimatedCostDollars", None)
        status.pop("estimatedCostDollars", None)
        status["costKnown"] = False
    else:
        inst["pricePerHour"] = price
        attempt["estimatedCostDollars"] = status["estimatedCostDollars"] = round(seconds * price / 3600, 4)
        status["costKnown"] = True


def create_job(cp: ControlPlane, ns: str, name: str, status: dict[str, Any] | None) -> dict[str, Any]:
    cp.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(valid_job(name)))
    if status is not None:
        cp.kubectl(
            "patch", RESOURCE, name, "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}),
        )  # fmt: skip
    obj: dict[str, Any] = json.loads(cp.kubectl("get", RESOURCE, name, "-n", ns, "-o", "json").stdout)
    return obj


def post_event(cp: ControlPlane, job: dict[str, Any], reason: str, message: str) -> None:
    now = stamp(datetime.now(UTC))
    meta = job["metadata"]
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{secrets.token_hex(4)}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": "taobrev.io/v1alpha1",
            "kind": "TaoBrevJob",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "type": "Warning",
        "reason": reason,
        "message": message,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "source": {"component": "taobrev-operator"},
    }
    cp.kubectl("create", "-f", "-", input=json.dumps(event))


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def rows(text: str) -> dict[tuple[str, ...], list[str]]:
    """A table's rows keyed by their first cells (NAME, or NAMESPACE and NAME)."""
    lines = text.splitlines()
    header = lines[0].split()
    key = 2 if header[0] == "NAMESPACE" else 1
    return {tuple(line.split()[:key]): line.split() for line in lines[1:]}


@pytest.fixture
def jobs(control_plane: ControlPlane, crds_installed: list[Path], namespace: str) -> tuple[str, str]:
    """In `namespace`: `done` (succeeded, billed 2 h ending 1 h ago at $1.86/h) and `failed`
    (Program failure, an Event); in a second namespace: `other`, running, its price unknown."""
    other_ns = f"{namespace[:50]}-other"
    control_plane.create_namespace(other_ns)
    now = datetime.now(UTC).replace(microsecond=0)
    done = real_status("real-succeeded")
    billed(done, now - timedelta(hours=3), 7200, deleted=True, price=1.86)
    create_job(control_plane, namespace, "done", done)
    failed = real_status("real-failed")
    failed["failureClass"] = "Program"
    billed(failed, now - timedelta(hours=30), 600, deleted=True, price=1.86)
    job = create_job(control_plane, namespace, "failed", failed)
    post_event(control_plane, job, "TrainingFailed", "training container exited with code 3")
    running = real_status("real-running")
    billed(running, now - timedelta(minutes=30), 1200, deleted=False, price=None)
    create_job(control_plane, other_ns, "other", running)
    return namespace, other_ns


def test_get_describe_and_cost_read_real_status_through_kubectl_taobrev(
    control_plane: ControlPlane, jobs: tuple[str, str]
) -> None:
    ns, other_ns = jobs
    table = rows(ok(kubectl_taobrev(control_plane, "get", "-n", ns)))
    assert table[("done",)][:7] == ["done", "Deleted", "-", "-", "1", "$3.72", table[("done",)][6]]
    assert table[("failed",)][1:6] == ["Deleted", "-", "-", "1", "$0.31"]

    wide = rows(ok(kubectl_taobrev(control_plane, "get", "-n", ns, "-o", "wide")))
    assert wide[("failed",)][-4:] == [
        "tbj-4cb3e0a4-test-argocd-argo-fail-e44f3994",
        "L40S",
        "Program",
        "TrainingFailed",
    ]

    every = rows(ok(kubectl_taobrev(control_plane, "get", "-A")))
    assert every[(other_ns, "other")][2:7] == ["Running", "-", "-", "1", "unknown"]
    assert (ns, "done") in every

    as_json = json.loads(ok(kubectl_taobrev(control_plane, "get", "done", "-n", ns, "-o", "json")))
    stored = json.loads(control_plane.kubectl("get", RESOURCE, "done", "-n", ns, "-o", "json").stdout)
    assert as_json == stored
    listed = yaml.safe_load(ok(kubectl_taobrev(control_plane, "get", "-n", ns, "-o", "yaml")))
    assert sorted(i["metadata"]["name"] for i in listed["items"]) == ["done", "failed"]

    text = ok(kubectl_taobrev(control_plane, "describe", "failed", "-n", ns))
    assert "Outcome:        Failed (TrainingFailed)" in text
    assert "Failure class:  Program" in text
    assert "What to do:   the training itself failed" in text
    assert (
        "Results:        s3://results-test-argocd-health-of-a-run-whose-training-exits-non-ze/argo-fail"
        in text
    )
    assert "Cost:           $0.31 (10m00s billed over 1 attempt)" in text
    assert "exited 2026-12-05T10:13:20Z with code 3" in text
    events = text[text.index("Events:") :].splitlines()
    assert events[1].split()[:2] == ["TYPE", "REASON"]
    assert events[2].split()[:2] == ["Warning", "TrainingFailed"]
    assert "taobrev-operator" in events[2] and "training container exited with code 3" in events[2]

    # The whole of both jobs; then a period starting 90 min ago: half of `done`'s 2 h (its billing
    # ended 1 h ago), none of `failed` (30 h ago).
    text = ok(kubectl_taobrev(control_plane, "cost", "-n", ns, "--since", "all"))
    assert text.splitlines()[-1].split() == ["TOTAL", "2", "2h10m", "$4.03"]
    report = json.loads(
        ok(kubectl_taobrev(control_plane, "cost", "-A", "--by", "namespace", "--since", "90m", "-o", "json"))
    )
    by_ns = {r["namespace"]: r for r in report["rows"]}
    # The period starts when the command runs: the seconds since the fixture wrote the times
    # come off the 30 min (a minute at most on a loaded machine).
    inside = by_ns[ns]["billedSeconds"]
    assert 1740 <= inside <= 1800
    # billedSeconds is rounded to the second and the cost to 1/10,000 of a dollar, each from the
    # exact seconds: half a second's price plus half a rounding step apart at most.
    assert by_ns[ns]["costDollars"] == pytest.approx(inside * 1.86 / 3600, abs=0.5 * 1.86 / 3600 + 0.00005)
    assert by_ns[other_ns] == {
        "namespace": other_ns, "jobs": 1, "billedSeconds": 1200, "costDollars": None,
        "knownCostDollars": 0.0, "costKnown": False, "attempts": 1,
    }  # fmt: skip
    assert report["total"]["costKnown"] is False

    for command in ("get", "describe", "cost", "suspend"):
        missing = kubectl_taobrev(control_plane, command, "nope", "-n", ns)
        assert missing.returncode == 1, command
        assert f'{RESOURCE} "nope" not found' in missing.stderr, command


def test_suspend_resume_and_cancel_patch_the_object_and_an_admitted_job_is_not_suspended(
    control_plane: ControlPlane, crds_installed: list[Path], namespace: str
) -> None:
    ns = namespace

    def spec_and_notes(name: str) -> tuple[dict[str, Any], dict[str, str]]:
        obj = json.loads(control_plane.kubectl("get", RESOURCE, name, "-n", ns, "-o", "json").stdout)
        return obj["spec"], obj["metadata"].get("annotations") or {}

    create_job(control_plane, ns, "queued", None)
    out = ok(kubectl_taobrev(control_plane, "suspend", "queued", "-n", ns))
    assert "taobrevjob/queued suspended" in out
    assert spec_and_notes("queued")[0]["suspend"] is True
    assert "already suspended" in ok(kubectl_taobrev(control_plane, "suspend", "queued", "-n", ns))
    assert "resumed (spec.suspend: false)" in ok(kubectl_taobrev(control_plane, "resume", "queued", "-n", ns))
    assert spec_and_notes("queued")[0]["suspend"] is False

    create_job(control_plane, ns, "running", real_status("real-running"))
    refused = kubectl_taobrev(control_plane, "suspend", "running", "-n", ns)
    assert refused.returncode == 1
    assert "already admitted (phase Running)" in refused.stderr
    assert "the run continues" in refused.stderr
    assert f"kubectl taobrev cancel running -n {ns}" in refused.stderr
    assert spec_and_notes("running")[0]["suspend"] is False

    before = datetime.now(UTC).replace(microsecond=0)
    out = ok(kubectl_taobrev(control_plane, "cancel", "running", "-n", ns))
    assert "taobrevjob/running cancel requested" in out
    spec, notes = spec_and_notes("running")
    asked = datetime.fromisoformat(notes["taobrev.io/cancel"].replace("Z", "+00:00"))
    assert before <= asked <= datetime.now(UTC)
    assert spec["suspend"] is False  # an annotation, not a spec change
    again = ok(kubectl_taobrev(control_plane, "cancel", "running", "-n", ns))
    assert f"cancel already requested at {notes['taobrev.io/cancel']}" in again
