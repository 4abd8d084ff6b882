"""The Secret allow-list (issue 10.3), against the real control plane: with
TAOBREV_REQUIRE_SECRET_LABEL=true a job may use only Secrets labelled taobrev.io/usable=true. An
unlabelled one holds the job Pending before any instance is created (the pre-flight), naming the
Secret and the label, until it is labelled; the operator's own Brev credentials Secret (installed
by the admin) is exempt."""

from __future__ import annotations

import pytest

from tests.fixtures.operator import Stack


@pytest.fixture
def operator_env() -> dict[str, str]:
    return {"TAOBREV_REQUIRE_SECRET_LABEL": "true"}


def test_unlabelled_secret_is_refused_and_labelled_ones_are_used(stack: Stack) -> None:
    for secret in ("ngc", "s3"):
        stack.kubectl("label", "secret", "-n", stack.namespace, secret, "taobrev.io/usable=true")
    # "hf" (extraEnv) stays unlabelled: the pre-flight holds the job Pending, nothing is created.
    stack.apply(stack.job_manifest("unlabelled"))
    obj = stack.wait_for(
        "unlabelled",
        lambda o: ((o or {}).get("status") or {}).get("reason") == "SecretNotAllowed",
        "the job to wait with SecretNotAllowed",
    )
    assert obj is not None
    status = obj["status"]
    assert status["phase"] == "Pending" and "outcome" not in status
    assert f"Secret {stack.namespace}/hf" in status["message"]
    assert f"kubectl label secret -n {stack.namespace} hf taobrev.io/usable=true" in status["message"]
    assert stack.sim.created_count() == 0

    # Labelled, the same job goes on by itself at its next re-check.
    stack.kubectl("label", "secret", "-n", stack.namespace, "hf", "taobrev.io/usable=true")
    assert stack.wait_finished("unlabelled")["outcome"] == "Succeeded"
    assert stack.live_instances() == []
