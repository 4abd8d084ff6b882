"""Recovery end to end (issue 12): real control plane + operator process + Brev simulator + S3.

The simulator loses an instance at a chosen epoch (`vanish_at_epoch`, after that epoch's
checkpoint sync: `epoch_fault_sync_wait_s`); the operator must notice, delete and confirm the old
instance, create exactly one new one, restore the synced checkpoints and resume TAO after them.
Every wait polls observable state (status, the simulator's records) with a hang guard.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from controller.api.naming import attempt_instance_name
from tests.fixtures.operator import Stack
from tests.status_paths import attempt_no, instance

EPOCHS = 6
EPOCH_NOMINAL_S = 200  # x speed 0.01 = 2 s real, so a 10 s checkpoint interval spans a few epochs
CHECKPOINT_INTERVAL_S = 10  # the spec minimum
# An epoch fault holds training until the checkpoint sync after its epoch has ended; this bound
# (nominal; 120 s real) only guards against an operator that never syncs: the test then fails on
# the resumed epoch, not on a hang.
SYNC_WAIT_NOMINAL = 12000
CKPT = "/workspace/results/train/model_epoch_{:03d}.pth"


def recovery_job(
    stack: Stack,
    name: str,
    *,
    epochs: int = EPOCHS,
    max_attempts: int = 2,
    budget: dict[str, Any] | None = None,
) -> dict[str, Any]:
    manifest = stack.job_manifest(name, simulation={"epochs": epochs, "epoch_seconds": EPOCH_NOMINAL_S})
    manifest["spec"]["recovery"] = {
        "maxAttempts": max_attempts,
        "checkpointIntervalSeconds": CHECKPOINT_INTERVAL_S,
    }
    if budget:
        manifest["spec"]["budget"] = budget
    return manifest


def first_instance_name(stack: Stack, name: str) -> str:
    """The attempt-1 instance name, written to status before `brev create` (long before epoch 1)."""
    obj = stack.wait_for(
        name, lambda o: bool(instance((o or {}).get("status")).get("name")), "the instance name"
    )
    assert obj is not None
    return str(instance(obj["status"])["name"])


def s3_keys(stack: Stack, prefix: str) -> dict[str, int]:
    resp = stack.s3.client().list_objects_v2(Bucket=stack.bucket, Prefix=prefix)
    return {o["Key"]: o["Size"] for o in resp.get("Contents", [])}


def s3_text(stack: Stack, key: str) -> str:
    return str(stack.s3.client().get_object(Bucket=stack.bucket, Key=key)["Body"].read().decode())


def trained_epochs(log: str) -> list[int]:
    return [
        int(line.split("] Epoch ", 1)[1].split("/", 1)[0]) for line in log.splitlines() if "] Epoch " in line
    ]


def instance_records(stack: Stack, names: list[str]) -> list[dict[str, Any]]:
    return [i for i in stack.sim.instances(include_deleted=True) if i["name"] in names]


def delete_calls(stack: Stack, inst: dict[str, Any]) -> list[list[str]]:
    refs = {str(inst["name"]), str(inst["id"])}
    return [
        c.argv
        for c in stack.sim.calls()
        if c.program == "brev" and c.argv[:1] == ["delete"] and refs & set(c.argv[1:])
    ]


def assert_lost_at_3_resumed_at_4(stack: Stack, name: str, first: str, status: dict[str, Any]) -> None:
    """Outcome (a): Succeeded on attempt 2, which trained only epochs 4-6; two creates, both
    instances deleted and confirmed; the results in S3 complete."""
    second = attempt_instance_name(first, 2)
    print(json.dumps(status, indent=1))  # shown when an assertion below fails
    assert status["outcome"] == "Succeeded"
    assert attempt_no(status) == 2
    attempts = status["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert [a["instance"]["name"] for a in attempts] == [first, second]
    assert attempts[0]["endedReason"]
    assert attempts[0]["endedReason"] not in ("Succeeded", "Finished")
    for a in attempts:
        assert a["instance"]["deletedAt"], f"attempt {a['attempt']}'s deletion confirmed"
        assert a["billedSeconds"] > 0
    assert attempts[1]["resumedFromEpoch"] == 3
    assert attempts[1]["resumedFrom"] == CKPT.format(3)
    assert attempts[1]["restoredAt"]
    # The count went on across the attempts: attempt 2's last epoch line is epoch 6 of 6.
    progress = status["progress"]
    assert (progress["epoch"], progress["maxEpoch"], progress["percent"]) == (EPOCHS, EPOCHS, 100)
    # Exactly two creates, one per name; nothing of the job is left in the simulated world.
    assert stack.sim.created_count() == 2
    assert stack.sim.created_count(first) == 1
    assert stack.sim.created_count(second) == 1
    assert stack.live_instances() == []
    records = instance_records(stack, [first, second])
    assert len(records) == 2
    for inst in records:
        assert inst["status"] == "DELETED"
        assert delete_calls(stack, inst), f"brev delete was sent for {inst['name']}"
    # Attempt 2's container got the resume override; the stand-in said so and trained 4..6 only.
    tao_calls = [c for c in stack.sim.calls() if c.program == "tao"]
    assert {c.instance for c in tao_calls} == {first, second}
    (resumed,) = [c for c in tao_calls if c.instance == second]
    assert f"train.resume_training_checkpoint_path={CKPT.format(3)}" in resumed.argv
    assert not any("resume_training" in a for c in tao_calls if c.instance == first for a in c.argv)
    log = s3_text(stack, f"{name}/logs/container.log")
    assert f"Resuming training from checkpoint {CKPT.format(3)} (epoch 3)" in log
    assert trained_epochs(log) == [4, 5, 6]
    entries = [json.loads(line) for line in s3_text(stack, f"{name}/results/train/status.json").splitlines()]
    (resumed_at,) = [i for i, e in enumerate(entries) if "resumed_from_epoch" in e]
    assert entries[resumed_at]["resumed_from_epoch"] == 3
    # TAO 6 counts epochs from 0 in status.json: epochs 4..6 are its 3..5.
    assert [e["epoch"] + 1 for e in entries[resumed_at:] if "epoch" in e] == [4, 5, 6]
    assert entries[-1]["message"] == "Train finished successfully."
    # Final results complete: every epoch's checkpoint (3 restored, 3 trained) and the final model.
    keys = s3_keys(stack, f"{name}/results/train/")
    expected = {f"{name}/results/train/model_epoch_{n:03d}.pth" for n in range(1, EPOCHS + 1)}
    assert expected <= set(keys)
    assert f"{name}/results/train/model_latest.pth" in keys
    # The periodic sync's copy lives under the job's own id (checkpoints/<job id>/).
    assert any(
        k.endswith("/train/model_epoch_003.pth") and k.count("/") == 4
        for k in s3_keys(stack, f"{name}/checkpoints/")
    )


def lose_first_instance_at_epoch_3(stack: Stack, name: str) -> str:
    stack.apply(recovery_job(stack, name))
    first = first_instance_name(stack, name)
    stack.sim.set_faults(vanish_at_epoch={first: 3}, epoch_fault_sync_wait_s=SYNC_WAIT_NOMINAL)
    return first


def table_row(header: str, line: str) -> dict[str, str]:
    """One row of kubectl's table by column position: an empty cell (QUEUE of a running job) is
    blank, so splitting on whitespace would shift every later column."""
    starts = [(m.group(), m.start()) for m in re.finditer(r"\S+", header)]
    ends = [start for _, start in starts[1:]] + [None]
    return {name: line[start:end].strip() for (name, start), end in zip(starts, ends, strict=True)}


def test_instance_lost_at_epoch_3_resumes_on_a_second_instance_from_epoch_4(stack: Stack) -> None:
    first = lose_first_instance_at_epoch_3(stack, "lost3")
    status = stack.wait_finished("lost3", timeout=300)
    assert_lost_at_3_resumed_at_4(stack, "lost3", first, status)
    # `kubectl get tbj -o wide` shows the attempt, billed seconds and cost columns.
    wide = stack.kubectl("get", "tbj", "lost3", "-n", stack.namespace, "-o", "wide").stdout.splitlines()
    row = table_row(wide[0], wide[1])
    for column in ("ATTEMPT", "BILLED", "COST"):
        assert column in row, wide[0]
    assert row["ATTEMPT"] == "2"
    assert row["BILLED"] == str(status["billedSeconds"])
    assert float(row["COST"]) == pytest.approx(status["estimatedCostDollars"])
    assert status["billedSeconds"] == sum(a["billedSeconds"] for a in status["attempts"])


def test_a_job_that_exhausts_its_attempts_fails_with_every_attempt_listed(stack: Stack) -> None:
    stack.apply(recovery_job(stack, "exhaust", max_attempts=2))
    first = first_instance_name(stack, "exhaust")
    second = attempt_instance_name(first, 2)
    stack.sim.set_faults(vanish_at_epoch={first: 1, second: 1})
    status = stack.wait_finished("exhaust", timeout=300)
    print(json.dumps(status, indent=1))  # shown when an assertion below fails
    assert status["outcome"] == "Failed"
    attempts = status["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert [a["instance"]["name"] for a in attempts] == [first, second]
    for a in attempts:
        assert a["endedReason"]
        assert a["instance"]["deletedAt"], f"attempt {a['attempt']}'s deletion confirmed"
    assert stack.sim.created_count() == 2
    assert stack.live_instances() == []
    for inst in instance_records(stack, [first, second]):
        assert delete_calls(stack, inst)


def test_sigkill_of_the_operator_during_recovery_changes_nothing(stack: Stack) -> None:
    first = lose_first_instance_at_epoch_3(stack, "killrec")

    def recovering(o: dict[str, Any] | None) -> bool:
        st = (o or {}).get("status") or {}
        attempts = st.get("attempts") or []
        # The loss is noticed (attempt 1 ended) and attempt 2 is not Running yet.
        return bool(attempts and attempts[0].get("endedAt")) and not (
            attempt_no(st) == 2 and st.get("phase") in ("Running", "Uploading", "Deleted")
        )

    stack.wait_for("killrec", recovering, "the loss to be noticed (attempt 1 ended)", timeout=240)
    stack.operator.kill()
    stack.operator.start()
    status = stack.wait_finished("killrec", timeout=300)
    assert stack.operator.starts == 2
    assert_lost_at_3_resumed_at_4(stack, "killrec", first, status)


def test_a_billed_time_budget_stops_the_job_failed_budget_exceeded(stack: Stack) -> None:
    stack.apply(recovery_job(stack, "budget", epochs=100000, budget={"maxBilledSeconds": 60}))
    first = first_instance_name(stack, "budget")
    status = stack.wait_finished("budget", timeout=300)
    assert status["outcome"] == "Failed", json.dumps(status, indent=1)
    assert status["reason"] == "BudgetExceeded"
    assert status["failureClass"] == "Budget"
    assert "60" in status["message"]
    assert status["billedSeconds"] >= 60
    assert stack.sim.created_count() == 1
    assert stack.live_instances() == []
    (inst,) = instance_records(stack, [first])
    assert delete_calls(stack, inst)
    # What existed was uploaded: the checkpoints trained before the budget ran out.
    assert any(k.endswith(".pth") for k in s3_keys(stack, "budget/results/"))
