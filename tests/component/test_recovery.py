"""Recovery end to end in the in-memory world (issue 12): the real Reconciler, ActionRunner and
machine; the fake instance trains epochs, syncs checkpoints detached, and resumes from the one
restored. Losses are injected at a chosen epoch; crashes restart the operator from status."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from controller.api import naming
from controller.brev.client import FAILURE, STOPPED
from controller.lifecycle.tunables import Tunables
from tests.fakes.brev import Faults
from tests.fakes.harness import NAME, NAMESPACE, UID, Harness, job_spec
from tests.status_paths import attempt_no

T = TypeVar("T")
BASE = naming.instance_name(NAMESPACE, NAME, UID, cluster_id=Tunables().cluster_id)
EPOCH_S = 120.0
SYNC_INTERVAL = 60


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def harness(max_attempts: int = 2, **spec: Any) -> Harness:
    recovery = {"maxAttempts": max_attempts, "checkpointIntervalSeconds": SYNC_INTERVAL}
    faults = Faults(epoch_s=EPOCH_S, epochs=6, sync_s=5.0, deploy_s=30.0, sshd_lag_s=10.0, pull_s=10.0)
    return Harness(job_spec(recovery=recovery, **spec), faults=faults)


def current_epoch(h: Harness) -> int:
    name = h.instance_name
    if name is None:
        return 0
    now = h.brev.clock.monotonic()
    return max(
        (c.epoch_at(now) for i in h.brev.by_name(name) for c in i.containers.values()),
        default=0,
    )


def lose_at_epoch(h: Harness, epoch: int, how: str = "vanish") -> str:
    """Run until attempt 1 finished `epoch`, then lose its instance; returns its id."""
    assert run(h.run_until(lambda x: current_epoch(x) >= epoch, seconds=7200))
    (first,) = h.brev.created_ids(BASE)
    if how == "vanish":
        h.brev.vanish(first)
    else:
        h.brev.set_status(first, how)
    return first


def test_a_lost_instance_resumes_on_attempt_two_from_the_synced_checkpoint() -> None:
    h = harness()
    first = lose_at_epoch(h, 3)
    run(h.run(seconds=4 * 3600))
    assert h.status["outcome"] == "Succeeded"
    assert attempt_no(h.status) == 2
    attempts = h.status["attempts"]
    assert [a["instance"]["name"] for a in attempts] == [BASE, f"{BASE}-a2"]
    assert attempts[0]["endedReason"] in ("InstanceNotListed", "InstanceLost")
    assert attempts[0]["instance"]["deletedAt"]
    assert attempts[1]["instance"]["deletedAt"]
    created = h.all_created_ids(BASE)
    assert len(created) == 2  # exactly two creates
    assert created[0] == first
    assert not any(h.brev.exists(i) for i in created)
    # Attempt 2 did not redo attempt 1's synced epochs (the sync lags by at most one interval).
    starts = h.brev.container_starts
    assert [s.instance_id for s in starts] == created
    assert starts[0].first_epoch == 1
    assert starts[1].first_epoch == attempts[1]["resumedFromEpoch"] + 1
    assert attempts[1]["resumedFromEpoch"] >= 2
    assert h.brev.results_epochs[h.status["jobId"]] == 6  # the final upload has the last epoch
    # Attempt 2 was created only after attempt 1's instance was confirmed gone.
    deletes = [d for d in h.brev.deletes if first in (d.target, d.id)]
    create2 = next(c for c in h.brev.creates if c.id == created[1])
    assert any(d.seq < create2.seq and d.outcome == "not-found" for d in deletes)
    assert h.status["billedSeconds"] > 0
    assert h.status["costKnown"] is True
    assert h.status["estimatedCostDollars"] > 0


def test_failure_and_stopped_instances_are_recovered_too() -> None:
    for how in (FAILURE, STOPPED):
        h = harness()
        first = lose_at_epoch(h, 2, how)
        run(h.run(seconds=4 * 3600))
        assert h.status["outcome"] == "Succeeded", how
        assert h.status["attempts"][0]["endedReason"] == (
            "InstanceFailed" if how == FAILURE else "InstanceStopped"
        )
        assert not h.brev.exists(first)
        assert len(h.all_created_ids(BASE)) == 2


def test_exhausted_attempts_fail_with_every_attempt_listed_and_deleted() -> None:
    h = harness(max_attempts=2)
    lose_at_epoch(h, 1)
    second = f"{BASE}-a2"
    assert run(h.run_until(lambda x: x.instance_name == second and current_epoch(x) >= 1, seconds=7200))
    (inst2,) = h.brev.created_ids(second)
    h.brev.vanish(inst2)
    run(h.run(seconds=4 * 3600))
    assert h.status["outcome"] == "Failed"
    assert [a["attempt"] for a in h.status["attempts"]] == [1, 2]
    assert all(a["instance"]["deletedAt"] for a in h.status["attempts"])
    assert len(h.all_created_ids(BASE)) == 2
    assert not any(h.brev.exists(i) for i in h.all_created_ids(BASE))


def test_a_crash_at_every_pass_of_a_recovery_creates_no_extra_instance() -> None:
    h = harness()
    lose_at_epoch(h, 3)
    for _ in range(60):
        if h.finished:
            break
        run(h.reconcile_once())
        h.restart()  # a new operator process: only status survives
        h.brev.clock.advance(5)
    run(h.run(seconds=4 * 3600))
    assert h.status["outcome"] == "Succeeded"
    assert len(h.all_created_ids(BASE)) == 2
    assert not any(h.brev.exists(i) for i in h.all_created_ids(BASE))


def test_failed_checkpoint_syncs_are_counted_and_the_job_still_finishes() -> None:
    h = harness()
    h.brev.set_faults(sync_failures=3)
    assert run(
        h.run_until(lambda x: (x.status.get("checkpoint") or {}).get("failures", 0) >= 1, seconds=7200)
    )
    assert h.status.get("outcome") is None
    run(h.run(seconds=4 * 3600))
    assert h.status["outcome"] == "Succeeded"
    assert attempt_no(h.status) == 1
    # A later good sync clears the count in the STORED status (a nested field needs a null).
    assert "failures" not in h.status["checkpoint"]
    assert "lastError" not in h.status["checkpoint"]
    assert h.status["checkpoint"]["epoch"] >= 4


def test_a_restore_that_finds_nothing_starts_attempt_two_from_scratch() -> None:
    h = harness()
    h.brev.set_faults(sync_failures=10**6)  # nothing ever reaches checkpoints/
    lose_at_epoch(h, 2)
    run(h.run(seconds=4 * 3600))
    assert h.status["outcome"] == "Succeeded"
    assert [s.first_epoch for s in h.brev.container_starts] == [1, 1]
    assert "resumedFrom" not in h.status["attempts"][1]


def test_a_budget_stops_the_job_uploads_and_deletes() -> None:
    h = harness(budget={"maxBilledSeconds": 400})
    run(h.run(seconds=4 * 3600))
    assert h.status["outcome"] == "Failed"
    assert h.status["reason"] == "BudgetExceeded"
    assert "maxBilledSeconds=400" in h.status["message"]
    assert [u.ok for u in h.brev.uploads] == [True]
    assert not any(h.brev.exists(i) for i in h.all_created_ids(BASE))
