"""Workflows (spec.steps) end to end in the in-memory world: the real Reconciler, ActionRunner and
machine; each step is its own container on ONE instance, its results are uploaded to
<resultsUri>/<step>/ before the next starts, and a step whose input is missing fails as TAO would."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from controller.api import naming
from controller.api.container_paths import step_container
from controller.lifecycle.tunables import Tunables
from tests.fakes.brev import Faults
from tests.fakes.harness import NAME, NAMESPACE, UID, Harness, job_spec

T = TypeVar("T")
BASE = naming.instance_name(NAMESPACE, NAME, UID, cluster_id=Tunables().cluster_id)
PYT = "nvcr.io/nvidia/tao/tao-toolkit:5.5.0-pyt"
DEPLOY = "nvcr.io/nvidia/tao/tao-toolkit:5.5.0-deploy"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def step(name: str, action: str, *, image: str = PYT, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "networkArch": "dino",
        "action": action,
        "image": image,
        "specContent": "a: 1\n",
        **extra,
    }


def chain() -> list[dict[str, Any]]:
    """train -> evaluate -> export (deploy image) -> inference, each reading the one before."""
    return [
        step("train", "train"),
        step("evaluate", "evaluate", inputs=[{"fromStep": "train", "path": "train/model_latest.pth"}]),
        step("export", "export", image=DEPLOY, inputs=[{"fromStep": "train"}]),
        step("inference", "inference", image=DEPLOY, inputs=[{"fromStep": "export"}]),
    ]


def harness(steps: list[dict[str, Any]], *, max_attempts: int = 2, **spec: Any) -> Harness:
    workflow = job_spec(steps=steps, recovery={"maxAttempts": max_attempts}, **spec)
    del workflow["task"]
    faults = Faults(run_s=60.0, deploy_s=30.0, sshd_lag_s=10.0, pull_s=10.0)
    return Harness(workflow, faults=faults)


def job_id() -> str:
    return naming.job_id(NAME, UID)


def started(h: Harness) -> list[str]:
    return [s.job_id for s in h.brev.container_starts]


def phases(h: Harness) -> dict[str, str]:
    return {s["name"]: s["phase"] for s in h.status.get("steps", [])}


def test_a_four_step_chain_runs_on_one_instance_pulling_each_image_once() -> None:
    h = harness(chain())
    run(h.run(seconds=4 * 3600))
    assert h.status["outcome"] == "Succeeded", h.status.get("message")
    created = h.all_created_ids(BASE)
    assert len(created) == 1  # one boot for the whole chain
    assert not h.brev.exists(created[0])
    assert sorted(image for _, image in h.brev.pulls) == [DEPLOY, PYT]  # each image once
    assert started(h) == [step_container(job_id(), s) for s in ("train", "evaluate", "export", "inference")]
    assert phases(h) == dict.fromkeys(("train", "evaluate", "export", "inference"), "Succeeded")
    for record in h.status["steps"]:
        assert record["resultsVerified"] is True
        assert record["results"]["uri"] == f"s3://bucket/out/{record['name']}/"
    # Each step's results went up before the next step started.
    uploads = [u for u in h.brev.uploads if u.step is not None and u.ok]
    assert [u.step for u in uploads] == ["train", "evaluate", "export", "inference"]
    starts = h.brev.container_starts
    for upload, nxt in zip(uploads, starts[1:], strict=False):
        assert upload.seq < nxt.seq
    assert h.status["step"] == "4/4 inference"
    reasons = [e.reason for e in h.events.events]
    assert reasons.count("StepStarted") == 4
    assert reasons.count("StepSucceeded") == 4


def test_a_failed_step_skips_on_success_steps_and_runs_always_steps() -> None:
    steps = chain()
    steps[2]["when"] = "OnSuccess"
    steps[3]["when"] = "Always"
    steps[3]["inputs"] = [{"fromStep": "train"}]
    h = harness(steps)
    h.brev.set_faults(step_exit_codes={"evaluate": 2})
    run(h.run(seconds=4 * 3600))
    assert h.status["outcome"] == "Failed"
    assert h.status["reason"] == "StepFailed"
    assert h.status["failureClass"] == "Program"
    assert h.status["failedStep"] == "evaluate"
    assert "step evaluate failed" in h.status["message"]
    assert phases(h) == {
        "train": "Succeeded",
        "evaluate": "Failed",
        "export": "Skipped",
        "inference": "Succeeded",
    }
    evaluate = h.status["steps"][1]
    assert evaluate["exitCode"] == 2
    assert evaluate["resultsVerified"] is True  # a failed step's results are uploaded too
    assert started(h) == [step_container(job_id(), s) for s in ("train", "evaluate", "inference")]
    assert len(h.all_created_ids(BASE)) == 1


def test_a_step_whose_input_is_missing_fails_like_tao() -> None:
    """inference reads export's results, but export is skipped after evaluate failed: the Always
    step runs without its input on the instance, and fails as TAO would (exit 1)."""
    steps = chain()
    steps[3]["when"] = "Always"
    h = harness(steps)
    h.brev.set_faults(step_exit_codes={"evaluate": 2})
    run(h.run(seconds=4 * 3600))
    assert phases(h) == {
        "train": "Succeeded",
        "evaluate": "Failed",
        "export": "Skipped",
        "inference": "Failed",
    }
    assert h.status["steps"][3]["exitCode"] == 1
    assert h.status["failedStep"] == "evaluate"


def test_an_instance_lost_in_step_two_resumes_at_step_two_without_rerunning_step_one() -> None:
    h = harness(chain())
    evaluate = step_container(job_id(), "evaluate")
    assert run(h.run_until(lambda x: evaluate in started(x), seconds=7200))
    (first,) = h.brev.created_ids(BASE)
    h.brev.vanish(first)
    run(h.run(seconds=6 * 3600))
    assert h.status["outcome"] == "Succeeded", h.status.get("message")
    created = h.all_created_ids(BASE)
    assert len(created) == 2
    assert not any(h.brev.exists(i) for i in created)
    # train ran once (attempt 1); evaluate ran on both; the rest on attempt 2 only.
    names = started(h)
    assert names.count(step_container(job_id(), "train")) == 1
    assert names.count(evaluate) == 2
    train = h.status["steps"][0]
    assert train["attempt"] == 1
    assert [s["attempt"] for s in h.status["steps"][1:]] == [2, 2, 2]
    # Attempt 2's instance got train's results back from S3 before evaluate started.
    assert h.brev.restores == [(created[1], job_id(), ("train",))]
    reasons = [e.reason for e in h.events.events]
    assert "StepInterrupted" in reasons


def test_start_at_step_reuses_stored_results_and_runs_only_the_rest() -> None:
    """A rerun from step 3 (a new object over the same resultsUri, where an earlier run uploaded
    train and evaluate): those two are Reused, never started; their results come back from S3."""
    h = harness(chain(), startAtStep="export")
    h.brev.stored_steps.update({("s3://bucket/out", "train"), ("s3://bucket/out", "evaluate")})
    run(h.run(seconds=4 * 3600))
    assert h.status["outcome"] == "Succeeded", h.status.get("message")
    assert phases(h) == {
        "train": "Reused",
        "evaluate": "Reused",
        "export": "Succeeded",
        "inference": "Succeeded",
    }
    assert started(h) == [step_container(job_id(), s) for s in ("export", "inference")]
    (created,) = h.all_created_ids(BASE)
    assert h.brev.restores == [(created, job_id(), ("train", "evaluate"))]
    assert h.status["step"] == "4/4 inference"


def test_start_at_step_without_stored_results_fails_naming_the_step() -> None:
    h = harness(chain(), startAtStep="export")
    run(h.run(seconds=4 * 3600))
    assert h.status["outcome"] == "Failed"
    assert h.status["failureClass"] == "Configuration"
    assert "no results of step train" in h.status["message"]
    assert started(h) == []
    assert not any(h.brev.exists(i) for i in h.all_created_ids(BASE))


def test_a_step_past_its_timeout_ends_the_run_naming_the_step() -> None:
    steps = chain()
    steps[1]["timeoutSeconds"] = 30  # evaluate runs 60 s
    h = harness(steps)
    run(h.run(seconds=4 * 3600))
    assert h.status["outcome"] == "Failed"
    assert h.status["reason"] == "StepTimedOut"
    assert h.status["failureClass"] == "Program"
    assert h.status["failedStep"] == "evaluate"
    assert phases(h) == {
        "train": "Succeeded",
        "evaluate": "Failed",
        "export": "Skipped",
        "inference": "Skipped",
    }
    assert not any(h.brev.exists(i) for i in h.all_created_ids(BASE))


def test_the_old_single_action_form_keeps_its_layout_and_status() -> None:
    """An object applied before workflows existed: its one container is named for the job, its
    results go to <resultsUri>/results, and its status has no steps."""
    h = Harness(job_spec(), faults=Faults(run_s=60.0, deploy_s=30.0, sshd_lag_s=10.0, pull_s=10.0))
    run(h.run(seconds=4 * 3600))
    assert h.status["outcome"] == "Succeeded"
    assert started(h) == [job_id()]
    assert "steps" not in h.status and "step" not in h.status
    assert [u.step for u in h.brev.uploads] == [None]
