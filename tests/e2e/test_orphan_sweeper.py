"""The orphan sweeper end to end: real control plane + operator process + Brev simulator + S3,
with a short grace and sweep interval (settings, not sleeps).

- A Running job whose finalizer is stripped by hand and whose object is deleted leaves its
  instance billing: the sweeper deletes it after the grace (read from the simulator: the instance
  gone, `brev delete <id>` in its call log) and counts it once confirmed.
- An instance carrying ANOTHER cluster's or another deployment's mark is never touched over many
  sweeps (counted through the sweep metric), and one with our mark for a namespace we do not watch
  is only reported, while an orphan of ours created at the same time is deleted (so those sweeps
  did run past the grace).
- Policy Report reports the orphan (gauge, log) and deletes nothing.

Every wait is on an observable signal: the object, the simulator's state, the metrics endpoint.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.api import naming
from tests.fixtures.operator import Stack
from tests.fixtures.polling import until
from tests.status_paths import instance

GRACE = 4.0
INTERVAL = 0.5
SWEEPER_ENV = {
    "TAOBREV_ORPHAN_GRACE": str(GRACE),
    "TAOBREV_ORPHAN_SWEEP_INTERVAL": str(INTERVAL),
}
# A run that outlasts the test: the job must still be Running when its object is deleted.
LONG_RUN = {"epochs": 1000, "epoch_seconds": 100}


@pytest.fixture
def operator_env(request: pytest.FixtureRequest) -> dict[str, str]:
    extra: dict[str, str] = getattr(request, "param", {})
    return {**SWEEPER_ENV, **extra}


def metric(stack: Stack, name: str, **labels: str) -> float:
    with urllib.request.urlopen(stack.operator.metrics_url, timeout=5) as resp:  # noqa: S310 - loopback
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"{name}{labels} not exposed")


def sweeps(stack: Stack) -> float:
    return metric(stack, "taobrev_orphan_sweeps_total", result="done")


def wait_until(stack: Stack, check: Callable[[], bool], what: str, timeout: float = 120) -> None:
    until(
        check,
        what,
        guard=timeout,
        interval=0.2,
        alive=stack.operator_death,
        detail=lambda: stack.operator.log_tail(80),
    )


def cluster_id(stack: Stack) -> str:
    return str(stack.kubectl("get", "namespace", "kube-system", "-o", "jsonpath={.metadata.uid}").stdout)


def live(stack: Stack, instance_id: str) -> bool:
    return any(i["id"] == instance_id for i in stack.live_instances())


def deletes_of(stack: Stack) -> list[list[str]]:
    return [c.argv for c in stack.sim.calls() if c.program == "brev" and c.argv[:1] == ["delete"]]


def brev_create(stack: Stack, name: str) -> str:
    """`brev create` through the simulator's CLI, as someone (or something) outside the operator."""
    stack.sim.login_api_key()
    subprocess.run(
        ["brev", "create", name, "--detached", "--type", "g6e.xlarge"],
        env=stack.sim.env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    (inst,) = [i for i in stack.live_instances() if i["name"] == name]
    return str(inst["id"])


def orphan_events(stack: Stack, instance: str) -> list[str]:
    lines = [json.loads(line) for line in stack.operator.log_text().splitlines() if line.startswith("{")]
    return [
        str(e["event"])
        for e in lines
        if e.get("instance") == instance and str(e.get("event", "")).startswith("orphan_")
    ]


def run_until_phase(stack: Stack, name: str, phase: str) -> dict[str, Any]:
    obj = stack.wait_for(
        name, lambda o: ((o or {}).get("status") or {}).get("phase") == phase, f"phase {phase}", 180
    )
    assert obj is not None
    return dict(obj["status"])


def test_an_instance_left_by_a_stripped_finalizer_is_deleted_after_the_grace(stack: Stack) -> None:
    stack.apply(stack.job_manifest("stripped", simulation=LONG_RUN))
    status = run_until_phase(stack, "stripped", "Running")
    name, instance_id = instance(status)["name"], instance(status)["id"]
    assert naming.owned_by(name, cluster_id(stack)), name

    # The hostile path: the finalizer is removed by hand, then the object deleted; no teardown
    # runs. Done while the operator is down (as in a namespace deleted during an outage): a
    # running operator would put its finalizer straight back before the delete arrives.
    stack.operator.stop()
    stack.kubectl(
        "patch", "tbj", "stripped", "-n", stack.namespace, "--type=merge",
        "-p", '{"metadata":{"finalizers":null}}',
    )  # fmt: skip
    stack.kubectl("delete", "tbj", "stripped", "-n", stack.namespace, "--wait=false")
    stack.wait_gone("stripped", timeout=30)
    assert live(stack, instance_id)
    stack.operator.start()
    stack.operator.wait_leading()

    wait_until(
        stack,
        lambda: metric(stack, "taobrev_orphans_deleted_total", reason="orphan") >= 1,
        "the orphan to be deleted and confirmed",
    )
    assert not live(stack, instance_id)
    assert ["delete", instance_id] in deletes_of(stack)
    # Deleted by id, once accepted, then one confirming not-found: never by name.
    assert all(argv[1:] == [instance_id] for argv in deletes_of(stack))
    # The grace was honoured: it was seen waiting before the delete was sent.
    events = orphan_events(stack, name)
    assert "orphan_pending_grace" in events, events
    assert events.index("orphan_pending_grace") < events.index("orphan_delete_requested"), events
    assert metric(stack, "taobrev_orphan_instances", state="deleting") == 0


def test_another_clusters_or_deployments_instance_is_never_touched(stack: Stack) -> None:
    """Issue 25 scenario 2 on the real stack: the operator under test watches only its namespace
    (TAOBREV_NAMESPACES). Beside its own orphan it sees, in one Brev org, an instance of another
    cluster, one of another operator deployment of this cluster in the SAME namespace (a second
    namespaced operator sharing the org), and one with its own mark for a namespace it does not
    watch. Only its own orphan is deleted; the last is reported, never deleted."""
    cid = cluster_id(stack)
    ns = stack.namespace
    foreign = naming.instance_name(ns, "train", "uid-elsewhere", cluster_id="another-cluster")
    neighbour = naming.instance_name(ns, "train", "uid-neighbour", cluster_id=cid, deployment="team-b/ops-b")
    unwatched = naming.instance_name("not-watched", "train", "uid-unwatched", cluster_id=cid)
    ours = naming.instance_name(ns, "crashed", "uid-crashed", cluster_id=cid)  # its job object was lost
    untouchable = {n: brev_create(stack, n) for n in (foreign, neighbour, unwatched)}
    ours_id = brev_create(stack, ours)
    start = sweeps(stack)

    wait_until(stack, lambda: not live(stack, ours_id), "our unreferenced instance to be swept")
    # Keep watching for as many sweeps again as it took ours to pass the grace and go.
    taken = sweeps(stack) - start
    wait_until(stack, lambda: sweeps(stack) >= start + 2 * taken, "further sweeps")

    for name, instance_id in untouchable.items():
        assert [i["status"] for i in stack.live_instances() if i["id"] == instance_id] == ["RUNNING"], name
        touched = [argv for argv in deletes_of(stack) if name in argv or instance_id in argv]
        assert touched == [], name
    assert orphan_events(stack, foreign) == []
    assert orphan_events(stack, neighbour) == []
    # Our mark outside TAOBREV_NAMESPACES: not provably an orphan, so reported only.
    events = orphan_events(stack, unwatched)
    assert "orphan_reported" in events, events
    assert not [e for e in events if e.startswith("orphan_delet")], events


@pytest.mark.parametrize("operator_env", [{"TAOBREV_ORPHAN_POLICY": "Report"}], indirect=True)
def test_policy_report_reports_and_deletes_nothing(stack: Stack) -> None:
    orphan = naming.instance_name(stack.namespace, "lost", "uid-lost", cluster_id=cluster_id(stack))
    orphan_id = brev_create(stack, orphan)
    wait_until(
        stack,
        lambda: metric(stack, "taobrev_orphan_instances", state="reported") == 1,
        "the orphan to be reported",
    )
    start = sweeps(stack)
    wait_until(stack, lambda: sweeps(stack) >= start + 5, "more sweeps")

    assert live(stack, orphan_id)
    assert deletes_of(stack) == []
    assert metric(stack, "taobrev_orphans_deleted_total", reason="orphan") == 0
    assert "orphan_reported" in orphan_events(stack, orphan)


def retained_record(stack: Stack) -> dict[str, Any]:
    """The records of every shard (controller/fleet/retained.py: taobrev-retained-00 .. -3f)."""
    r = stack.kubectl("get", "configmap", "-n", "taobrev-system", "-o", "json", check=False)
    if r.returncode != 0:
        return {}
    records: dict[str, Any] = {}
    for cm in json.loads(r.stdout).get("items") or []:
        if cm["metadata"]["name"].startswith("taobrev-retained"):
            records.update(cm.get("data") or {})
    return records


def test_retained_instances_outlive_their_job_until_retain_for_expires(stack: Stack) -> None:
    machine: dict[str, Any] = {"gpuName": "L40S", "types": ["g6e.xlarge"]}
    retain = {"onCompletion": "Retain", "ephemeral": machine}
    ttl = {"onCompletion": "Retain", "ephemeral": {**machine, "retainFor": "8s"}}
    stack.apply(stack.job_manifest("kept", instance=retain))
    stack.apply(stack.job_manifest("ttl", instance=ttl))
    kept, expiring = stack.wait_finished("kept"), stack.wait_finished("ttl")
    assert kept["outcome"] == "Succeeded"
    assert expiring["outcome"] == "Succeeded"
    kept_inst, expiring_inst = instance(kept), instance(expiring)
    # Recorded (through deploy/base's RBAC) before the jobs finished.
    record = retained_record(stack)
    assert set(record) == {kept_inst["name"], expiring_inst["name"]}
    assert json.loads(record[kept_inst["name"]])["until"] is None

    # Deleting the jobs hands the instances over: nothing references them any more.
    for name in ("kept", "ttl"):
        stack.kubectl("delete", "tbj", name, "-n", stack.namespace, "--wait=false")
        stack.wait_gone(name)
    wait_until(
        stack,
        lambda: metric(stack, "taobrev_orphans_deleted_total", reason="retention_expired") >= 1,
        "the instance whose retainFor expired to be deleted",
    )
    assert not live(stack, expiring_inst["id"])
    assert expiring_inst["name"] not in retained_record(stack)
    # The one retained without a deadline stays, sweep after sweep, well past the grace.
    start = sweeps(stack)
    wait_until(stack, lambda: sweeps(stack) >= start + 2 * GRACE / INTERVAL, "sweeps past the grace")
    assert live(stack, kept_inst["id"])
    assert [a for a in deletes_of(stack) if kept_inst["id"] in a or kept_inst["name"] in a] == []
    assert metric(stack, "taobrev_orphans_deleted_total", reason="orphan") == 0
