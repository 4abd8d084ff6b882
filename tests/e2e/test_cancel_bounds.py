"""Issue 25 scenarios 1 and 10 on the real control plane, operator process and brev simulator:
a job deleted while its `brev create` is still in flight, and a cancel of a job whose instance
never answers again. Both must end in `brev delete` of the instance, within the bound README states,
and leave nothing live once the finalizer is gone."""

from __future__ import annotations

import time
from typing import Any

from tests.fixtures.operator import Stack
from tests.status_paths import instance

CANCEL_BOUND_S = 300.0  # README: kubectl delete -> brev delete when the instance never answers


def _status(o: dict[str, Any] | None) -> dict[str, Any]:
    return dict((o or {}).get("status") or {})


def _deletes_of(stack: Stack, inst: dict[str, Any]) -> list[float]:
    refs = {str(inst["name"]), str(inst["id"])}
    return [
        c.ts
        for c in stack.sim.calls()
        if c.program == "brev" and c.argv[:1] == ["delete"] and refs & set(c.argv[1:])
    ]


def test_a_job_deleted_while_its_create_is_in_flight_deletes_the_instance_the_create_made(
    stack: Stack,
) -> None:
    """Scenario 1: the create is slow at Brev (nothing exists or is listed until it is served,
    25 s after the request). The delete comes meanwhile; the teardown must not conclude "never
    created" while that create may still land (before the fix: `createSettle` after the marker,
    then the finalizer went and the instance landed with no job to delete it)."""
    stack.sim.set_faults(create_s=2500)  # 25 s of real time at the simulator's speed
    stack.apply(stack.job_manifest("inflight"))
    obj = stack.wait_for("inflight", lambda o: bool(instance(_status(o)).get("name")), "the create marker")
    name = instance(_status(obj))["name"]

    def sent() -> bool:
        return any(c.program == "brev" and c.argv[:2] == ["create", name] for c in stack.sim.calls())

    deadline = time.monotonic() + 120
    while not sent() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sent(), "the operator never sent brev create"
    stack.kubectl("delete", "tbj", "inflight", "-n", stack.namespace, "--wait=false")
    stack.wait_gone("inflight", timeout=240)
    made = [i for i in stack.sim.instances(include_deleted=True) if i["name"] == name]
    assert stack.sim.created_count(name) == 1, "released before its create in flight landed"
    assert stack.live_instances() == [], "an instance outlived its job"
    (inst,) = made
    assert inst["status"] == "DELETED"
    assert _deletes_of(stack, inst), "brev delete was sent for the instance the late create made"


def test_a_cancel_of_an_instance_that_never_answers_deletes_it_within_the_bound(stack: Stack) -> None:
    """Scenario 10: the instance refuses ssh from the moment of the cancel. Stop, upload and
    cleanup cannot reach it; the teardown says so (UploadSkipped) and deletes, instead of
    retrying the upload for uploadingSeconds (30 min by default)."""
    manifest = stack.job_manifest(
        "silent", simulation={"epochs": 50, "epoch_seconds": 200}, timeouts={"uploadingSeconds": 1800}
    )
    stack.apply(manifest)

    def training(o: dict[str, Any] | None) -> bool:
        st = _status(o)
        return st.get("phase") == "Running" and any(
            c.get("State", {}).get("Running") for c in stack.sim.containers(instance(st)["name"])
        )

    obj = stack.wait_for("silent", training, "the training container to run")
    name = instance(_status(obj))["name"]
    stack.sim.set_faults(sshd_dead=True)
    cancelled = time.time()
    stack.kubectl("delete", "tbj", "silent", "-n", stack.namespace, "--wait=false")
    stack.wait_gone("silent", timeout=CANCEL_BOUND_S + 120)
    (inst,) = [i for i in stack.sim.instances(include_deleted=True) if i["name"] == name]
    deletes = _deletes_of(stack, inst)
    assert deletes, "brev delete was never sent"
    took = min(t for t in deletes if t >= cancelled) - cancelled
    print(f"kubectl delete -> brev delete: {took:.1f} s")
    assert took <= CANCEL_BOUND_S, f"brev delete {took:.0f} s after the cancel"
    assert stack.live_instances() == []
    reasons = [e.get("reason") for e in stack.events("silent")]
    assert "UploadSkipped" in reasons, reasons
