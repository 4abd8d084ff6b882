"""The Secret allow-list (issue 10.3), against the real control plane: with
TAOBREV_REQUIRE_SECRET_LABEL=true a job may use only Secrets labelled taobrev.io/usable=true. An
unlabelled one fails the job before any instance is created, naming the Secret and the label; the
operator's own Brev credentials Secret (installed by the admin) is exempt."""

from __future__ import annotations

import pytest

from tests.fixtures.operator import Stack


@pytest.fixture
def operator_env() -> dict[str, str]:
    return {"TAOBREV_REQUIRE_SECRET_LABEL": "true"}


def test_unlabelled_secret_is_refused_and_labelled_ones_are_used(stack: Stack) -> None:
    for secret in ("ngc", "s3"):
        stack.kubectl("label", "secret", "-n", stack.namespace, secret, "taobrev.io/usable=true")
    # "hf" (extraEnv) stays unlabelled.
    stack.apply(stack.job_manifest("unlabelled"))
    status = stack.wait_finished("unlabelled")
    assert status["outcome"] == "Failed"
    assert status["reason"] == "SecretNotAllowed"
    assert f"Secret {stack.namespace}/hf" in status["message"]
    assert f"kubectl label secret -n {stack.namespace} hf taobrev.io/usable=true" in status["message"]
    assert stack.sim.created_count() == 0

    stack.kubectl("label", "secret", "-n", stack.namespace, "hf", "taobrev.io/usable=true")
    stack.apply(stack.job_manifest("labelled"))
    assert stack.wait_finished("labelled")["outcome"] == "Succeeded"
    assert stack.live_instances() == []
