"""deploy/gitops/argocd-health.lua on TaoBrevJob objects from real runs through the e2e stack.

A `kubectl get --watch` follows the job, so every status the operator wrote is seen (no polling
gaps); the Lua health check is evaluated on each one. Representative snapshots are kept as
tests/data/health/real-*.yaml, which the unit test (tests/unit/test_argocd_health.py) evaluates
too. Those files must keep matching what the operator really writes: if the operator's status
changes, this test says so; regenerate them with

    TAOBREV_UPDATE_HEALTH_FIXTURES=1 .venv/bin/pytest tests/e2e/test_argocd_health_real.py
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests import status_paths as paths
from tests.devenv.controlplane import kubectl_path
from tests.fixtures.operator import Stack
from tests.unit.test_argocd_health import run_health

REPO = Path(__file__).resolve().parents[2]
HEALTH_DIR = REPO / "tests" / "data" / "health"
UPDATE_ENV = "TAOBREV_UPDATE_HEALTH_FIXTURES"
FIXTURE_HEADER = """\
# Argo CD health fixture CAPTURED FROM A REAL RUN (tests/e2e/test_argocd_health_real.py): `object`
# is the TaoBrevJob as the API server returned it (uid, resourceVersion, managedFields, spec and
# kopf's annotations stripped), `expected` the health deploy/gitops/argocd-health.lua must report.
# Regenerate: TAOBREV_UPDATE_HEALTH_FIXTURES=1 .venv/bin/pytest tests/e2e/test_argocd_health_real.py
"""


@contextmanager
def watched(stack: Stack, name: str) -> Iterator[queue.Queue[dict[str, Any] | None]]:
    """Every version of the job object, in order, from `kubectl get --watch -o json`.

    Started before the job is created (a field-selected list-watch may start empty), so the
    first status the operator writes is seen too. None is queued when kubectl exits.
    """
    cp = stack.cp
    proc = subprocess.Popen(
        [
            kubectl_path(), f"--kubeconfig={cp.kubeconfig}", "--context=admin",
            f"--cache-dir={cp.workdir / 'kube-cache'}",
            "get", "taobrevjobs.taobrev.io", "-n", stack.namespace,
            f"--field-selector=metadata.name={name}", "--watch", "-o", "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    objects: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def read() -> None:
        # kubectl prints one pretty-printed JSON document per event; decode them as they complete.
        assert proc.stdout is not None
        decoder, buffer = json.JSONDecoder(), ""
        for line in proc.stdout:
            buffer += line
            try:
                obj, end = decoder.raw_decode(buffer.strip())
            except json.JSONDecodeError:
                continue
            objects.put(obj)
            buffer = buffer.strip()[end:]
        objects.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield objects
    finally:
        proc.terminate()
        proc.wait(10)
        reader.join(10)


def run_job(stack: Stack, name: str, **manifest: Any) -> list[dict[str, Any]]:
    """Create the job and return every version of it with a status, until it has finished."""
    versions: list[dict[str, Any]] = []
    deadline = time.monotonic() + 180
    with watched(stack, name) as objects:
        stack.apply(stack.job_manifest(name, **manifest))
        while True:
            remaining = deadline - time.monotonic()
            try:
                obj = objects.get(timeout=max(remaining, 0.1))
            except queue.Empty:
                obj = None
            if obj is None or remaining <= 0:
                seen = [(v["status"].get("phase"), v["status"].get("outcome")) for v in versions]
                raise AssertionError(
                    f"{name} did not finish (watch ended or timed out); states seen: {seen}\n"
                    f"operator log:\n{stack.operator.log_tail(80)}"
                )
            if obj.get("status"):
                versions.append(obj)
                if obj["status"].get("finishedAt"):
                    return versions


def signature(obj: dict[str, Any]) -> dict[str, Any]:
    """What the health depends on, without times and ids: stable from run to run."""
    status = obj["status"]
    return {
        "phase": status.get("phase"),
        "outcome": status.get("outcome"),
        "reason": status.get("reason"),
        "exitCode": paths.run(status).get("exitCode"),
        "conditions": sorted((c["type"], c["status"], c["reason"]) for c in status.get("conditions", [])),
    }


def fixture_object(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "generation": meta["generation"]},
        "status": obj["status"],
    }


def check_fixture(name: str, obj: dict[str, Any], status: str, message_contains: list[str]) -> None:
    """tests/data/health/<name>.yaml holds a run like this one (same signature and health); in
    update mode, (re)write it from `obj`."""
    path = HEALTH_DIR / f"{name}.yaml"
    if os.environ.get(UPDATE_ENV) == "1":
        data = {
            "expected": {"status": status, "message_contains": message_contains},
            "object": fixture_object(obj),
        }
        path.write_text(FIXTURE_HEADER + yaml.safe_dump(data, sort_keys=False, width=110))
        return
    assert path.exists(), f"{path} is missing; create it with {UPDATE_ENV}=1"
    saved = yaml.safe_load(path.read_text())
    assert saved["expected"] == {"status": status, "message_contains": message_contains}, path
    assert signature(saved["object"]) == signature(obj), (
        f"{path.name} no longer matches what the operator writes; regenerate it with {UPDATE_ENV}=1"
    )


def health(obj: dict[str, Any]) -> dict[str, str]:
    result = run_health(obj)
    assert result["message"], ("every health carries a message", obj["status"])
    return result


def test_argocd_health_of_a_succeeding_run(stack: Stack) -> None:
    """Every status of a successful run is Progressing until the run has finished (results
    uploaded, instance deleted, even after outcome is Succeeded), then Healthy. While the results
    upload after the exit, outcome is not Succeeded yet (issue 32)."""
    versions = run_job(stack, "argo-ok")
    running = [
        v for v in versions if v["status"].get("phase") == "Running" and not v["status"].get("outcome")
    ]
    uploading = [v for v in versions if v["status"].get("phase") == "Uploading"]
    tearing_down = [v for v in versions if v["status"].get("outcome") and not v["status"].get("finishedAt")]
    assert running, [signature(v) for v in versions]
    assert uploading, [signature(v) for v in versions]
    assert tearing_down, [signature(v) for v in versions]
    assert all("outcome" not in v["status"] for v in uploading), [signature(v) for v in uploading]

    for v in versions:
        status, result = v["status"], health(v)
        if status.get("finishedAt"):
            assert result["status"] == "Healthy", (result, signature(v))
            assert "outcome Succeeded" in result["message"]
        else:
            assert result["status"] == "Progressing", (result, signature(v))
            assert f"phase {status['phase']}" in result["message"]

    check_fixture("real-running", running[0], "Progressing", ["phase Running"])
    check_fixture("real-succeeded-uploading", uploading[0], "Progressing", ["phase Uploading"])
    check_fixture(
        "real-succeeded-tearing-down", tearing_down[0], "Progressing", ["phase Deleted", "outcome Succeeded"]
    )
    check_fixture("real-succeeded", versions[-1], "Healthy", ["phase Deleted", "outcome Succeeded"])


def test_argocd_health_of_a_run_whose_training_exits_non_zero(stack: Stack) -> None:
    """A run whose training exits 3 is Progressing until the exit, then Degraded at once, with
    "(cleaning up)" while it uploads and deletes the instance, and naming the exit code."""
    versions = run_job(stack, "argo-fail", simulation={"exit_code": 3})
    tearing_down = [v for v in versions if v["status"].get("outcome") and not v["status"].get("finishedAt")]
    assert any(v["status"].get("phase") == "Running" for v in versions), [signature(v) for v in versions]
    assert tearing_down, [signature(v) for v in versions]

    final = versions[-1]["status"]
    assert final["outcome"] == "Failed", final
    assert paths.run(final)["exitCode"] == 3, final
    assert final["failureClass"] == "Program", final  # the training's doing, not Brev's
    for v in versions:
        status, result = v["status"], health(v)
        if not status.get("outcome"):
            assert result["status"] == "Progressing", (result, signature(v))
            continue
        assert result["status"] == "Degraded", (result, signature(v))
        assert "outcome Failed" in result["message"], result
        assert "exit code 3" in result["message"], result
        assert ("(cleaning up)" in result["message"]) == (not status.get("finishedAt")), result

    check_fixture(
        "real-failed-uploading",
        tearing_down[0],
        "Degraded",
        ["phase Uploading", "exit code 3", "(cleaning up)"],
    )
    check_fixture("real-failed", versions[-1], "Degraded", ["phase Deleted", "outcome Failed", "exit code 3"])
