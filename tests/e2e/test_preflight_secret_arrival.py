"""A job applied before its Secret (GitOps: sync waves, External Secrets, Sealed Secrets) waits
Pending and starts by itself the moment the Secret appears, not at its next scheduled re-check
(issue 32). The operator here backs off as in production (the other e2e modules cap the backoff
at 5 s, which would hide whether the Secret's arrival or the backoff woke the job)."""

from __future__ import annotations

import pytest

from tests.fixtures.operator import NGC_KEY, Stack


@pytest.fixture
def operator_env() -> dict[str, str]:
    return {"TAOBREV_BACKOFF_MAX": "600"}


def creates(stack: Stack) -> int:
    """`brev create` calls that could create (the client's `create --help` flag probe cannot)."""
    calls = stack.sim.calls()
    return sum(
        1 for c in calls if c.program == "brev" and c.argv[:1] == ["create"] and "--help" not in c.argv
    )


def test_a_job_applied_before_its_secret_starts_by_itself_when_the_secret_appears(stack: Stack) -> None:
    job = stack.job_manifest("latesecret")
    job["spec"]["credentials"]["ngcApiKey"] = {"name": "late-ngc"}
    stack.apply(job)
    # Let the re-check back off past 30 s, so only the Secret's arrival can explain a quick start.
    stack.wait_for(
        "latesecret",
        lambda o: "checked again in 32s" in str(((o or {}).get("status") or {}).get("message")),
        "the pre-flight's re-check to back off to 32 s",
        timeout=120,
    )
    status = stack.status("latesecret")
    assert status["phase"] == "Pending" and status["reason"] == "SecretNotFound"
    assert "late-ngc" in status["message"] and "spec.credentials.ngcApiKey" in status["message"]
    assert creates(stack) == 0
    stack.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "late-ngc"},
            "stringData": {"NGC_API_KEY": NGC_KEY},
        }
    )
    # Within the 32 s backoff: the Secret's arrival, not the next scheduled re-check, woke it.
    stack.wait_for(
        "latesecret",
        lambda o: "Provisioning" in (((o or {}).get("status") or {}).get("phaseTimes") or {}),
        "the job to leave Pending after its Secret appeared",
        timeout=25,
    )
    events = [e["reason"] for e in stack.events("latesecret")]
    assert "PreflightPassed" in events
    status = stack.wait_finished("latesecret", timeout=240)
    assert status["outcome"] == "Succeeded"
