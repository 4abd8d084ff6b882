"""Workflows end to end (issue 28): real control plane + operator process + Brev simulator + S3.

A 4-step chain (train, evaluate, export in the -deploy image, inference) runs on ONE instance:
one create, one delete, each image pulled once, each step's results in <resultsUri>/<step>/. An
instance lost in step 2 is replaced and the chain resumes at step 2 (train is never run again); a
rerun from step 3 (spec.startAtStep) reads the stored results of steps 1-2; a failed step is
followed by the `when: Always` step after it. The simulated TAO reads each input it is given
(`<action>.checkpoint`) and fails, as TAO does, when it is not there. Every wait polls observable
state (status, the simulator's records) with a hang guard.
"""

from __future__ import annotations

import json
from typing import Any

from controller.api.naming import attempt_instance_name
from controller.versions import load_versions
from tests.fixtures.operator import Stack
from tests.status_paths import attempt_no, instance

PINS = load_versions().images.tao_toolkit
INPUTS = "/workspace/inputs"
STEPS = ("train", "evaluate", "export", "inference")


def _spec(action: str, epochs: int, reads: str | None = None, exit_code: int = 0) -> str:
    lines = [f"simulation:\n  epochs: {epochs}\n  epoch_seconds: 2\n  exit_code: {exit_code}\n"]
    if action == "train":
        lines.append(f"train:\n  num_epochs: {epochs}\n")
    if reads is not None:
        lines.append(f"{action}:\n  checkpoint: {reads}\n")
    return "".join(lines)


def chain(*, evaluate_exit: int = 0, evaluate_epochs: int = 1) -> list[dict[str, Any]]:
    """train -> evaluate (reads train's model) -> export (-deploy; reads train's model) ->
    inference (-deploy; reads export's ONNX file)."""
    model = {"fromStep": "train", "path": "train/model_latest.pth"}
    onnx = {"fromStep": "export", "path": "export/model.onnx"}
    return [
        {"name": "train", "networkArch": "dino", "action": "train", "specContent": _spec("train", 2)},
        {
            "name": "evaluate",
            "networkArch": "dino",
            "action": "evaluate",
            "specContent": _spec(
                "evaluate", evaluate_epochs, f"{INPUTS}/train/train/model_latest.pth", evaluate_exit
            ),
            "inputs": [model],
        },
        {
            "name": "export",
            "networkArch": "dino",
            "action": "export",
            "specContent": _spec("export", 1, f"{INPUTS}/train/train/model_latest.pth"),
            "inputs": [model],
        },
        {
            "name": "inference",
            "networkArch": "dino",
            "action": "inference",
            "specContent": _spec("inference", 1, f"{INPUTS}/export/export/model.onnx"),
            "inputs": [onnx],
        },
    ]


def workflow(stack: Stack, name: str, steps: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    manifest = stack.job_manifest(name, extra_env=False)
    del manifest["spec"]["task"]
    manifest["spec"]["steps"] = steps
    manifest["spec"].update(spec)
    return manifest


def s3_keys(stack: Stack, prefix: str) -> dict[str, int]:
    resp = stack.s3.client().list_objects_v2(Bucket=stack.bucket, Prefix=prefix)
    return {o["Key"]: o["Size"] for o in resp.get("Contents", [])}


def tao_runs(stack: Stack) -> list[tuple[str | None, str]]:
    """(instance, action) of every TAO container the simulator ran, in order."""
    return [(c.instance, c.argv[1]) for c in stack.sim.calls() if c.program == "tao" and len(c.argv) > 1]


def pulls(stack: Stack) -> list[str]:
    return [c.argv[1] for c in stack.sim.calls() if c.program == "docker" and c.argv[:1] == ["pull"]]


def logins(stack: Stack) -> int:
    return sum(1 for c in stack.sim.calls() if c.program == "docker" and c.argv[:1] == ["login"])


def steps_of(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in status.get("steps", [])}


def test_a_chain_runs_on_one_instance_then_reruns_from_step_3_with_stored_results(stack: Stack) -> None:
    stack.apply(workflow(stack, "chain", chain()))
    status = stack.wait_finished("chain", timeout=300)
    print(json.dumps(status, indent=1))  # shown when an assertion below fails
    assert status["outcome"] == "Succeeded"
    steps = steps_of(status)
    assert [s["phase"] for s in steps.values()] == ["Succeeded"] * 4
    assert all(s["resultsVerified"] for s in steps.values())
    assert status["step"] == "4/4 inference"
    # One boot, one delete, one registry login, each image pulled once (-pyt, then -deploy).
    (name,) = {instance(status)["name"]}
    assert stack.sim.created_count() == 1
    assert stack.live_instances() == []
    assert sorted(pulls(stack)) == sorted([PINS.pyt, PINS.deploy])
    assert logins(stack) == 1
    assert tao_runs(stack) == [(name, a) for a in STEPS]
    # Each step's results and log under <resultsUri>/<step>/ and logs/<step>/.
    keys = s3_keys(stack, "chain/")
    for key in (
        "chain/train/train/model_latest.pth",
        "chain/evaluate/evaluate/results.json",
        "chain/export/export/model.onnx",
        "chain/inference/inference/inference.txt",
    ):
        assert key in keys, sorted(keys)
    for step in STEPS:
        assert f"chain/logs/{step}/container.log" in keys
    # `kubectl get tbj` shows the STEP column.
    table = stack.kubectl("get", "tbj", "chain", "-n", stack.namespace).stdout
    assert "STEP" in table.splitlines()[0] and "4/4 inference" in table

    # A rerun from step 3 over the same resultsUri: train and evaluate are not run again; export
    # reads train's model, restored from S3 onto the new instance.
    rerun = workflow(stack, "rerun", chain(), startAtStep="export")
    rerun["spec"]["data"]["resultsUri"] = f"s3://{stack.bucket}/chain"
    before = len(tao_runs(stack))
    stack.apply(rerun)
    again = stack.wait_finished("rerun", timeout=300)
    print(json.dumps(again, indent=1))
    assert again["outcome"] == "Succeeded"
    assert [s["phase"] for s in steps_of(again).values()] == ["Reused", "Reused", "Succeeded", "Succeeded"]
    second = instance(again)["name"]
    assert tao_runs(stack)[before:] == [(second, "export"), (second, "inference")]
    assert stack.sim.created_count() == 2
    assert stack.live_instances() == []


def test_an_instance_lost_in_step_2_resumes_there_without_rerunning_step_1(stack: Stack) -> None:
    stack.apply(workflow(stack, "lost2", chain(evaluate_epochs=4), recovery={"maxAttempts": 2}))
    obj = stack.wait_for(
        "lost2", lambda o: bool(instance((o or {}).get("status")).get("name")), "the instance name"
    )
    assert obj is not None
    first = str(instance(obj["status"])["name"])
    # The first container to reach epoch 3 is evaluate's (train has 2): its instance vanishes then.
    stack.sim.set_faults(vanish_at_epoch={first: 3})
    status = stack.wait_finished("lost2", timeout=300)
    print(json.dumps(status, indent=1))
    assert status["outcome"] == "Succeeded"
    assert attempt_no(status) == 2
    second = attempt_instance_name(first, 2)
    assert [a["instance"]["name"] for a in status["attempts"]] == [first, second]
    steps = steps_of(status)
    assert steps["train"]["attempt"] == 1
    assert [steps[s]["attempt"] for s in STEPS[1:]] == [2, 2, 2]
    runs = tao_runs(stack)
    assert runs.count((first, "train")) == 1
    assert (second, "train") not in runs  # never re-run: its results came back from S3
    assert [a for i, a in runs if i == second] == ["evaluate", "export", "inference"]
    assert stack.sim.created_count() == 2
    assert stack.live_instances() == []


def test_a_failed_step_is_followed_by_the_always_step_after_it(stack: Stack) -> None:
    steps = chain(evaluate_exit=3)
    steps[2]["when"] = "Always"  # export still runs after evaluate failed
    stack.apply(workflow(stack, "always", steps))
    status = stack.wait_finished("always", timeout=300)
    print(json.dumps(status, indent=1))
    assert status["outcome"] == "Failed"
    assert status["reason"] == "StepFailed"
    assert status["failureClass"] == "Program"
    assert status["failedStep"] == "evaluate"
    assert "step evaluate failed" in status["message"]
    by_name = steps_of(status)
    assert {n: s["phase"] for n, s in by_name.items()} == {
        "train": "Succeeded", "evaluate": "Failed", "export": "Succeeded", "inference": "Skipped",
    }  # fmt: skip
    assert by_name["evaluate"]["exitCode"] == 3
    assert "always/export/export/model.onnx" in s3_keys(stack, "always/")
    name = instance(status)["name"]
    assert tao_runs(stack) == [(name, "train"), (name, "evaluate"), (name, "export")]
    assert stack.sim.created_count() == 1
    assert stack.live_instances() == []
    # `kubectl taobrev logs always --step NAME` asks the log API for that step's archived log.
    path = f"/apis/logs.taobrev.io/v1alpha1/namespaces/{stack.namespace}/taobrevjobs/always/log"
    evaluate = stack.kubectl("get", "--raw", f"{path}?step=evaluate").stdout
    assert "Starting dino evaluate" in evaluate and "Execution failed with exit code 3" in evaluate
    export = stack.kubectl("get", "--raw", f"{path}?step=export").stdout
    assert "Starting dino export" in export and "evaluate" not in export
    skipped = stack.kubectl("get", "--raw", f"{path}?step=inference", check=False)
    assert skipped.returncode != 0 and "step inference has not run (Skipped" in skipped.stderr
