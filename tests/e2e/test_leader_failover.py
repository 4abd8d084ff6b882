"""Leader election end to end: two operator processes against the real control plane, the Brev
simulator and S3, with the production election timing (lease 15 s, renew 10 s, retry 2 s).

- SIGKILL the leader (a node loss: no cleanup, no release) while jobs are being created and run:
  the standby takes over once the lease expires, and every job finishes with exactly one instance
  created and every instance deleted.
- SIGTERM the leader (a rollout): it releases the Lease and the standby takes over at once.
- Until it leads, the standby runs no reconcile pass and makes no Brev call (its own metrics).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.api.timestamps import parse_time
from tests.brevsim.harness import BrevSim
from tests.devenv.controlplane import ControlPlane
from tests.devenv.operator import OPERATOR_NAMESPACE, OperatorProcess, install_operator_identity
from tests.devenv.s3 import S3Server
from tests.fixtures.operator import Stack
from tests.fixtures.polling import until
from tests.status_paths import instance

LEASE = "taobrev-operator"
LEASE_DURATION = 15.0
RETRY_PERIOD = 2.0
# The deployment's timing (client-go's defaults), not the shortened test timing.
ELECTION = {
    "TAOBREV_LEADER_LEASE_DURATION": str(int(LEASE_DURATION)),
    "TAOBREV_LEADER_RENEW_DEADLINE": "10",
    "TAOBREV_LEADER_RETRY_PERIOD": str(RETRY_PERIOD),
}
# "within the lease duration + a few seconds": one retry period plus slack for a loaded machine.
TAKEOVER_SLACK = RETRY_PERIOD + 4.0


@dataclass
class Pair:
    stack: Stack
    a: OperatorProcess
    b: OperatorProcess


def lease(cp: ControlPlane) -> dict[str, Any]:
    r = cp.kubectl("get", "lease", LEASE, "-n", OPERATOR_NAMESPACE, "-o", "json", check=False)
    return dict(json.loads(r.stdout)["spec"]) if r.returncode == 0 else {}


def holder(cp: ControlPlane) -> str:
    return str(lease(cp).get("holderIdentity") or "")


def metrics(op: OperatorProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(op.metrics_url, timeout=5) as resp:  # noqa: S310 - loopback
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def metric_sum(op: OperatorProcess, name: str, skip: dict[str, str] | None = None) -> float:
    return sum(
        value
        for (n, labels), value in metrics(op).items()
        if n == name and not any((k, v) in labels for k, v in (skip or {}).items())
    )


def wait_until(what: str, predicate: Any, timeout: float, *ops: OperatorProcess) -> float:
    """Poll `predicate` (an observable signal); returns when it held (monotonic seconds)."""

    def death() -> str | None:
        for op in ops:
            assert op.proc is not None
            if op.proc.poll() is not None:
                return f"operator died:\n{op.log_tail()}"
        return None

    return until(
        lambda: time.monotonic() if predicate() else None,
        what,
        guard=timeout,
        interval=0.1,
        alive=death,
        detail=lambda: "\n".join(o.log_tail() for o in ops),
    )


def assert_idle_standby(op: OperatorProcess) -> None:
    assert metric_sum(op, "taobrev_leader") == 0
    assert metric_sum(op, "taobrev_reconcile_duration_seconds_count") == 0, "no pass on a standby"
    # `brev --version` is the local start-up check; nothing that reaches Brev.
    assert metric_sum(op, "taobrev_brev_cli_calls_total", skip={"verb": "version"}) == 0


@pytest.fixture
def pair(
    control_plane: ControlPlane,
    crds_installed: list[Path],
    brev_sim: BrevSim,
    s3_server: S3Server,
    namespace: str,
    tmp_path: Path,
) -> Iterator[Pair]:
    install_operator_identity(control_plane, brev_sim, job_namespaces=[namespace])
    bucket = f"results-{namespace}"[:63].rstrip("-")
    s3_server.create_bucket(bucket)

    def operator(name: str) -> OperatorProcess:
        env = {"TAOBREV_NAMESPACES": namespace, "POD_ID": name, **ELECTION}
        return OperatorProcess(control_plane, brev_sim, tmp_path / name, extra_env=env)

    a, b = operator("operator-a"), operator("operator-b")
    try:
        a.start()
        # An earlier test's operator may still hold the Lease until it expires.
        wait_until("operator-a to lead", lambda: holder(control_plane).startswith("operator-a_"), 60, a)
        b.start()
        stack = Stack(control_plane, brev_sim, s3_server, a, namespace, bucket)
        stack.create_job_secrets()
        yield Pair(stack, a, b)
    finally:
        b.stop()
        a.stop()


def test_sigkilled_leader_is_replaced_within_the_lease_duration_without_duplicate_creates(
    pair: Pair,
) -> None:
    stack, a, b = pair.stack, pair.a, pair.b
    names = [f"failover-{i}" for i in range(4)]
    for name in names:
        stack.apply(stack.job_manifest(name, simulation={"epochs": 4, "epoch_seconds": 200}))

    def created_requested() -> int:
        return sum(1 for n in names if instance(stack.status(n)).get("createRequestedAt"))

    # Kill while creates are in flight: names are in status, instances may or may not exist yet.
    wait_until("two creates to be requested", lambda: created_requested() >= 2, 120, a, b)
    assert_idle_standby(b)
    assert holder(stack.cp).startswith("operator-a_")

    killing = time.time()
    a.kill()
    killed = time.time()  # a is gone (reaped) by now
    wait_until(
        "operator-b to take the Lease",
        lambda: holder(stack.cp).startswith("operator-b_"),
        LEASE_DURATION + 60,
        b,
    )
    # The takeover's own timestamp (b writes acquireTime just before its update), not when this
    # poll noticed it: a kubectl per poll on a loaded machine can notice seconds late.
    acquired = parse_time(lease(stack.cp).get("acquireTime"))
    assert acquired is not None, "the new holder wrote its acquireTime"
    takeover = acquired.timestamp() - killed
    print(f"\nfailover: standby took the Lease {takeover:.1f} s after SIGKILL of the leader")
    # Not before the lease could have expired (the last renewal was at most a retry period old) ...
    assert acquired.timestamp() - killing >= LEASE_DURATION - RETRY_PERIOD - 1
    # ... and within the lease duration plus a few seconds.
    assert takeover <= LEASE_DURATION + TAKEOVER_SLACK
    assert lease(stack.cp)["leaseTransitions"] >= 1
    wait_until("the leader gauge of operator-b", lambda: metric_sum(b, "taobrev_leader") == 1, 30, b)

    stack.operator = b  # the stack's waits now watch the new leader
    for name in names:
        status = stack.wait_finished(name)
        assert status["outcome"] == "Succeeded", (name, status)
        assert stack.sim.created_count(instance(status)["name"]) == 1, f"{name}: exactly one create"
    assert stack.sim.created_count() == len(names)
    assert stack.live_instances() == [], "every instance deleted"
    # Calls, not creations: a create the dead leader started may be repeated (same name) by the
    # new one after TAOBREV_CREATE_SETTLE; brev answers "already exists" or creates it once.
    creates = [c for c in stack.sim.calls() if c.program == "brev" and c.argv[:1] == ["create"]]
    calls = sum(1 for c in creates if "--help" not in c.argv)
    print(
        f"failover: {calls} `brev create` calls, {stack.sim.created_count()} instances for {len(names)} jobs"
    )

    for name in names:  # teardown through the finalizer, by the new leader
        stack.kubectl("delete", "tbj", name, "-n", stack.namespace, "--wait=false")
    for name in names:
        stack.wait_gone(name)


def test_sigterm_releases_the_lease_and_the_standby_takes_over_at_once(pair: Pair) -> None:
    stack, a, b = pair.stack, pair.a, pair.b
    stack.apply(stack.job_manifest("handover", simulation={"epochs": 3, "epoch_seconds": 200}))
    stack.wait_for("handover", lambda o: ((o or {}).get("status") or {}).get("phase") == "Running", "Running")
    assert_idle_standby(b)

    stopping = time.time()
    a.stop()
    assert a.proc is not None
    assert a.proc.returncode == 0, a.log_tail()
    assert "released the leader lease" in a.log_text()
    wait_until(
        "operator-b to take the released Lease",
        lambda: holder(stack.cp).startswith("operator-b_"),
        LEASE_DURATION + 60,
        b,
    )
    # The takeover's own timestamp, not when this poll noticed it (see the SIGKILL test).
    acquired = parse_time(lease(stack.cp).get("acquireTime"))
    assert acquired is not None, "the new holder wrote its acquireTime"
    took_over = acquired.timestamp() - stopping
    print(f"\nhandover: standby took the released Lease {took_over:.1f} s after SIGTERM")
    # Sooner than an expiry could have made it: the lease was handed over, not abandoned.
    assert took_over < LEASE_DURATION - RETRY_PERIOD

    stack.operator = b
    status = stack.wait_finished("handover")
    assert status["outcome"] == "Succeeded"
    assert stack.sim.created_count() == 1
    assert stack.live_instances() == []


def steal_lease(cp: ControlPlane, thief: str) -> None:
    """Write another holder into the Lease, as a replica that wrongly believed it expired would."""
    for _ in range(10):
        obj = json.loads(cp.kubectl("get", "lease", LEASE, "-n", OPERATOR_NAMESPACE, "-o", "json").stdout)
        obj["spec"]["holderIdentity"] = thief
        obj["spec"]["renewTime"] = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        # resourceVersion stays in the object: a leader renewal in between makes this a 409.
        if cp.kubectl("replace", "-f", "-", input=json.dumps(obj), check=False).returncode == 0:
            return
    raise AssertionError("could not write the Lease ten times in a row")


def test_a_leader_that_loses_its_lease_stops_acting_at_once(pair: Pair) -> None:
    stack, a, b = pair.stack, pair.a, pair.b
    names = [f"lost-{i}" for i in range(2)]
    for name in names:
        stack.apply(stack.job_manifest(name, simulation={"epochs": 6, "epoch_seconds": 200}))
    for name in names:
        stack.wait_for(name, lambda o: ((o or {}).get("status") or {}).get("phase") == "Running", "Running")

    stolen = time.monotonic()
    steal_lease(stack.cp, "thief")
    lost = wait_until("operator-a to stop leading", lambda: metric_sum(a, "taobrev_leader") == 0, 30, a, b)
    print(f"\nlost lease: the leader stopped {lost - stolen:.1f} s after another holder appeared")
    assert lost - stolen <= RETRY_PERIOD + 4.0, "noticed at its next renewal attempt"
    quiet_from = time.time() + 1.0  # passes in flight are cancelled by now

    # Nobody may act until the thief's lease expires and a replica takes it over (either one:
    # both saw the thief's record and wait for its expiry on their own clocks). The jobs'
    # resourceVersions are sampled while the thief still holds the Lease (read before the holder
    # is), so a write by the next leader right after its takeover is not counted against the gap.
    samples: list[dict[str, str]] = []

    def taken_over() -> bool:
        at = time.time()
        seen = {n: (stack.get(n) or {})["metadata"]["resourceVersion"] for n in names}
        if holder(stack.cp).startswith(("operator-a_", "operator-b_")):
            return True
        if at >= quiet_from:
            samples.append(seen)
        return False

    wait_until("a replica to take the Lease over from the thief", taken_over, LEASE_DURATION + 60, a, b)
    # The takeover's own timestamp, not when this poll noticed it (three kubectl reads later): the
    # new leader writes acquireTime just before its update and acts only after that update.
    acquired = parse_time(lease(stack.cp).get("acquireTime"))
    assert acquired is not None, "the new holder wrote its acquireTime"
    taken = acquired.timestamp()
    assert taken > quiet_from, "the takeover comes after the thief's lease expired: the gap is not empty"
    acted = [c for c in stack.sim.calls() if c.program == "brev" and quiet_from < c.ts < taken]
    assert acted == [], (
        f"brev calls while no replica held the Lease (acquired at {taken:.3f}): {acted}\n"
        + "\n".join(o.log_tail() for o in (a, b))
    )
    assert len(samples) >= 2, "the leaderless gap was sampled"
    assert all(s == samples[0] for s in samples), (
        f"no writes to the jobs while no replica held the Lease: {samples}"
    )

    for name in names:
        status = stack.wait_finished(name)
        assert status["outcome"] == "Succeeded", (name, status)
        assert stack.sim.created_count(instance(status)["name"]) == 1
    assert stack.live_instances() == []
