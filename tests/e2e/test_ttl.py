"""spec.ttlSecondsAfterFinished on the real control plane and operator process: a finished job
with a TTL is deleted that long after status.finishedAt (through its finalizer, its instance long
gone); one without the field stays."""

from __future__ import annotations

from typing import Any

from tests.fixtures.operator import Stack


def _finished(o: dict[str, Any] | None) -> bool:
    return bool(((o or {}).get("status") or {}).get("finishedAt"))


def test_a_finished_job_with_a_ttl_is_deleted_and_one_without_stays(stack: Stack) -> None:
    short = stack.job_manifest("short-lived")
    short["spec"]["ttlSecondsAfterFinished"] = 5
    stack.apply(short)
    stack.apply(stack.job_manifest("kept"))
    done = stack.wait_for("short-lived", _finished, "the job with a TTL to finish", timeout=300)
    assert (done or {})["status"]["outcome"] == "Succeeded"
    stack.wait_for("kept", _finished, "the job without a TTL to finish", timeout=300)
    stack.wait_gone("short-lived", timeout=120)
    assert stack.get("kept") is not None, "a job without ttlSecondsAfterFinished was deleted"
    assert stack.live_instances() == []
