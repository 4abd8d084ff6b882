"""The TaoBrevJob CRD on a real kube-apiserver: schema validation, CEL rules, immutability,
printer columns and `kubectl explain`.

Manifests go through `kubectl apply` exactly as a user's would; the API server's own error text
is asserted, so a rule that compiles but never fires (or fires with a useless message) fails here.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.status_paths import run
from tests.unit.test_models import EXAMPLES_DIR, INVALID_SPECS, InvalidSpec, valid_job

pytestmark = pytest.mark.e2e

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def tbj_ns(crds_installed: list[Path], namespace: str) -> str:
    """A fresh namespace on a control plane that has the TaoBrevJob CRD."""
    return namespace


def _apply(kubectl: Kubectl, ns: str, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest), check=False)


def _patch_status(kubectl: Kubectl, ns: str, name: str, status: dict[str, Any]) -> None:
    kubectl(
        "patch", "taobrevjob", name, "-n", ns, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip


def _patch_spec(
    kubectl: Kubectl, ns: str, name: str, spec: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    return kubectl(
        "patch", "taobrevjob", name, "-n", ns, "--type=merge", "-p", json.dumps({"spec": spec}), check=False
    )


def _get(kubectl: Kubectl, ns: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(kubectl("get", "taobrevjob", name, "-n", ns, "-o", "json").stdout)
    return obj


@pytest.mark.parametrize("example", sorted(EXAMPLES_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_example_is_accepted(kubectl: Kubectl, tbj_ns: str, example: Path) -> None:
    """Every file in crds/examples applies cleanly and every object it holds is stored."""
    out = kubectl("apply", "-n", tbj_ns, "-f", str(example), "-o", "name").stdout.split()
    assert out, f"{example.name} applied nothing"
    for name in out:
        kubectl("get", "-n", tbj_ns, name)


def test_server_fills_defaults(kubectl: Kubectl, tbj_ns: str) -> None:
    """Omitted fields come back with the CRD defaults (image, shmSize, region, key names, timeouts)."""
    job = valid_job("defaults")
    _apply(kubectl, tbj_ns, job).check_returncode()
    spec = _get(kubectl, tbj_ns, "defaults")["spec"]
    assert spec["task"]["image"].startswith("nvcr.io/nvidia/tao/tao-toolkit:")
    assert spec["task"]["shmSize"] == "16g"
    assert spec["data"]["s3Region"] == "us-east-1"
    assert spec["credentials"]["ngcApiKey"]["key"] == "NGC_API_KEY"
    assert spec["credentials"]["s3"]["accessKeyIdKey"] == "AWS_ACCESS_KEY_ID"
    assert spec["timeouts"]["waitingExecSeconds"] == 900
    assert "onCompletion" not in spec["instance"]  # its default depends on reuse/ephemeral


@pytest.mark.parametrize("case", INVALID_SPECS, ids=lambda c: c.id)
def test_invalid_spec_is_rejected_naming_the_field(kubectl: Kubectl, tbj_ns: str, case: InvalidSpec) -> None:
    """The API server refuses the manifest and its message names the offending field."""
    proc = _apply(kubectl, tbj_ns, case.manifest())
    assert proc.returncode != 0, f"accepted: {case.id}\n{proc.stdout}"
    assert "is invalid" in proc.stderr, proc.stderr
    assert case.field in proc.stderr, proc.stderr
    assert case.server_says in proc.stderr, proc.stderr


def test_unknown_field_is_refused_by_default_and_pruned_otherwise(kubectl: Kubectl, tbj_ns: str) -> None:
    """A misspelled field never reaches the operator: `kubectl apply` (strict field validation)
    refuses it by name, and a client that skips validation gets it pruned by the schema."""
    job = valid_job("typo")
    job["spec"]["task"]["specContnet"] = "typo"
    strict = _apply(kubectl, tbj_ns, job)
    assert strict.returncode != 0
    assert 'unknown field "spec.task.specContnet"' in strict.stderr, strict.stderr
    lax = kubectl("apply", "--validate=false", "-n", tbj_ns, "-f", "-", input=json.dumps(job), check=False)
    assert lax.returncode == 0, lax.stderr
    assert "specContnet" not in _get(kubectl, tbj_ns, "typo")["spec"]["task"]


# --- immutability ----------------------------------------------------------------------------

SPEC_CHANGES: dict[str, dict[str, Any]] = {
    "task": {"task": {"action": "evaluate"}},
    "instance": {"instance": {"ephemeral": {"gpuName": "H100"}}},
    "data": {"data": {"resultsUri": "s3://tao-results/elsewhere"}},
    "credentials": {"credentials": {"s3": {"name": "other-s3"}}},
}


@pytest.mark.parametrize("section", sorted(SPEC_CHANGES))
def test_spec_is_frozen_once_running(kubectl: Kubectl, tbj_ns: str, section: str) -> None:
    """With status.phase Running, changing spec.<section> is refused with a message that names
    it and says to create a new TaoBrevJob; the stored spec is unchanged."""
    _apply(kubectl, tbj_ns, valid_job("frozen")).check_returncode()
    _patch_status(kubectl, tbj_ns, "frozen", {"phase": "Running"})
    before = _get(kubectl, tbj_ns, "frozen")["spec"]
    proc = _patch_spec(kubectl, tbj_ns, "frozen", SPEC_CHANGES[section])
    assert proc.returncode != 0, proc.stdout
    assert f"spec.{section} is immutable" in proc.stderr, proc.stderr
    assert "create a new TaoBrevJob" in proc.stderr
    assert _get(kubectl, tbj_ns, "frozen")["spec"] == before


def test_timeouts_stay_mutable_while_running(kubectl: Kubectl, tbj_ns: str) -> None:
    """spec.timeouts may change at any phase (e.g. to give a long run more time)."""
    _apply(kubectl, tbj_ns, valid_job("longer")).check_returncode()
    _patch_status(kubectl, tbj_ns, "longer", {"phase": "Running"})
    proc = _patch_spec(kubectl, tbj_ns, "longer", {"timeouts": {"runningSeconds": 172800}})
    assert proc.returncode == 0, proc.stderr
    assert _get(kubectl, tbj_ns, "longer")["spec"]["timeouts"]["runningSeconds"] == 172800


@pytest.mark.parametrize("status", [None, {"phase": "Pending"}], ids=["no-status", "pending"])
def test_spec_is_editable_before_the_job_starts(
    kubectl: Kubectl, tbj_ns: str, status: dict[str, Any] | None
) -> None:
    """Before the operator leaves Pending, the user may still fix any part of the spec."""
    _apply(kubectl, tbj_ns, valid_job("editable")).check_returncode()
    if status is not None:
        _patch_status(kubectl, tbj_ns, "editable", status)
    proc = _patch_spec(kubectl, tbj_ns, "editable", SPEC_CHANGES["task"])
    assert proc.returncode == 0, proc.stderr
    assert _get(kubectl, tbj_ns, "editable")["spec"]["task"]["action"] == "evaluate"


def test_status_updates_are_not_blocked_by_the_spec_freeze(kubectl: Kubectl, tbj_ns: str) -> None:
    """The operator can keep writing status (through the subresource) after Running."""
    _apply(kubectl, tbj_ns, valid_job("progress")).check_returncode()
    _patch_status(kubectl, tbj_ns, "progress", {"phase": "Running"})
    attempt = {"attempt": 1, "instance": {"name": "tbj-progress"}, "run": {"exitCode": 0}}
    _patch_status(kubectl, tbj_ns, "progress", {"phase": "Uploading", "attempts": [attempt]})
    status = _get(kubectl, tbj_ns, "progress")["status"]
    assert status["phase"] == "Uploading"
    assert run(status)["exitCode"] == 0


def test_status_schema_is_enforced(kubectl: Kubectl, tbj_ns: str) -> None:
    """A phase outside the vocabulary is refused even from the status subresource."""
    _apply(kubectl, tbj_ns, valid_job("badphase")).check_returncode()
    proc = kubectl(
        "patch", "taobrevjob", "badphase", "-n", tbj_ns, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"phase": "Exploded"}}), check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "status.phase" in proc.stderr, proc.stderr
    assert "Unsupported value" in proc.stderr, proc.stderr


# --- kubectl UX ------------------------------------------------------------------------------


def test_printer_columns(kubectl: Kubectl, tbj_ns: str) -> None:
    """`kubectl get tbj` shows PHASE/OUTCOME/INSTANCE/GPU/QUEUE/PROGRESS/ETA/AGE (PROGRESS in
    percent, ETA as TAO estimated it); `-o wide` adds QUEUED (the limit holding it back), ACTION,
    REASON, FAILURE (whose move it is), KEPT-UNTIL and the recovery figures
    ATTEMPT, BILLED (seconds) and COST (dollars). INSTANCE, GPU and ATTEMPT are the current
    (last) attempt's, not an earlier one's. A finished job has no queue place: those cells are
    blank."""
    _apply(kubectl, tbj_ns, valid_job("cols")).check_returncode()
    _patch_status(
        kubectl, tbj_ns, "cols",
        {"phase": "Deleted", "outcome": "Failed", "reason": "RunningTimeout", "failureClass": "Program",
         "attempts": [
             {"attempt": 1, "instance": {"name": "tbj-abc123-old", "gpu": "A100"}},
             {"attempt": 2, "instance": {"name": "tbj-abc123", "gpu": "L40S"}},
         ],
         "billedSeconds": 1234, "estimatedCostDollars": 0.51,
         "progress": {"epoch": 3, "maxEpoch": 10, "percent": 30, "eta": "1:02:03", "etaSeconds": 3723}},
    )  # fmt: skip
    narrow = kubectl("get", "tbj", "-n", tbj_ns).stdout.splitlines()
    assert narrow[0].split() == [
        "NAME",
        "PHASE",
        "OUTCOME",
        "INSTANCE",
        "GPU",
        "QUEUE",
        "PROGRESS",
        "ETA",
        "STEP",
        "AGE",
    ]
    assert narrow[1].split()[:7] == ["cols", "Deleted", "Failed", "tbj-abc123", "L40S", "30", "1:02:03"]
    wide = kubectl("get", "tbj", "-n", tbj_ns, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == [
        "NAME", "PHASE", "OUTCOME", "INSTANCE", "GPU", "QUEUE", "PROGRESS", "ETA", "STEP", "QUEUED", "ACTION",
        "REASON", "FAILURE", "KEPT-UNTIL", "ATTEMPT", "BILLED", "COST", "AGE",
    ]  # fmt: skip
    assert wide[1].split()[:13] == [
        "cols",
        "Deleted",
        "Failed",
        "tbj-abc123",
        "L40S",
        "30",
        "1:02:03",
        "train",
        "RunningTimeout",
        "Program",
        "2",
        "1234",
        "0.51",
    ]


def test_category_lists_jobs(kubectl: Kubectl, tbj_ns: str) -> None:
    """`kubectl get tao` (the CRD's category) lists TaoBrevJobs."""
    _apply(kubectl, tbj_ns, valid_job("cat")).check_returncode()
    assert "taobrevjob.taobrev.io/cat" in kubectl("get", "tao", "-n", tbj_ns, "-o", "name").stdout


def _explain(kubectl: Kubectl, field: str) -> str:
    # The API server publishes a new CRD's OpenAPI asynchronously after Established; poll until
    # explain finds it (bounded, only guards against a hang).
    deadline = time.monotonic() + 60
    while True:
        proc = kubectl("explain", field, check=False)
        if proc.returncode == 0 or time.monotonic() > deadline:
            assert proc.returncode == 0, proc.stderr
            return proc.stdout
        time.sleep(0.5)


def test_explain_documents_the_task(kubectl: Kubectl, crds_installed: list[Path]) -> None:
    """`kubectl explain taobrevjob.spec.task` describes every task field."""
    out = _explain(kubectl, "taobrevjob.spec.task")
    for field in (
        "image",
        "networkArch",
        "action",
        "specPath",
        "specContent",
        "args",
        "env",
        "gpus",
        "shmSize",
    ):
        assert field in out
    prose = " ".join(out.split())  # explain wraps descriptions
    assert "Exactly one of specPath and specContent" in prose
    assert "visual_changenet" in prose


def test_explain_documents_the_first_exec_wait(kubectl: Kubectl, crds_installed: list[Path]) -> None:
    """The waitingExecSeconds doc tells users the first exec on a fresh instance can take 600 s."""
    out = _explain(kubectl, "taobrevjob.spec.timeouts.waitingExecSeconds")
    assert "first `brev exec` succeeds" in " ".join(out.split())
    assert "600" in out
    assert "<integer>" in out
