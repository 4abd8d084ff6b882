"""Issue 25, scenario 4: one listing counts once. The shared directory serves one `brev ls` to
every pass for up to `listing_max_age` (10 s), while absence was counted once per poll interval
(5 s): one listing that omitted the instance counted two or three times, and before any exec
evidence (Provisioning, WaitingExec) that single glitch ended in `brev delete` of a healthy
instance. The real Reconciler and InstanceDirectory on the fakes: only distinct listings count."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from controller.lifecycle.phases import Phase
from tests.fakes.brev import Faults
from tests.fakes.harness import Harness
from tests.status_paths import instance

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def seen_in(phase: Phase) -> Any:
    """In `phase` with the instance's id recorded (a later absence is a suspected loss)."""
    return lambda h: h.phase == str(phase) and instance(h.status).get("id")


def test_one_omitted_listing_in_waiting_exec_never_deletes_the_healthy_instance() -> None:
    # sshd answers only after 400 s: no exec evidence while the glitch is counted.
    h = Harness(faults=Faults(deploy_s=30, sshd_lag_s=400))
    assert run(h.run_until(seen_in(Phase.WAITING_EXEC)))
    h.brev.omit(str(h.instance_name), listings=1)
    run(h.run(seconds=120))
    assert h.brev.deletes == [], [d.outcome for d in h.brev.deletes]
    assert h.phase == str(Phase.WAITING_EXEC), h.status.get("message")
    assert not h.status.get("outcome"), h.status.get("message")


def test_one_omitted_listing_in_provisioning_never_deletes_the_booting_instance() -> None:
    h = Harness(faults=Faults(deploy_s=300))
    assert run(h.run_until(seen_in(Phase.PROVISIONING)))
    h.brev.omit(str(h.instance_name), listings=1)
    run(h.run(seconds=120))
    assert h.brev.deletes == [], [d.outcome for d in h.brev.deletes]
    assert h.phase == str(Phase.PROVISIONING), h.status.get("message")
    assert not h.status.get("outcome"), h.status.get("message")


def test_a_real_absence_is_still_confirmed_after_three_distinct_listings() -> None:
    """The fix must not stop counting: the instance missing from every listing (no exec evidence)
    is confirmed by `brev delete` once three distinct listings said so, not one listing earlier."""
    h = Harness(faults=Faults(deploy_s=30, sshd_lag_s=400))
    assert run(h.run_until(seen_in(Phase.WAITING_EXEC)))
    h.brev.omit(str(h.instance_name), listings=1_000)
    listings_before = h.directory.listings
    assert run(h.run_until(lambda h: bool(h.brev.deletes), seconds=300))
    # Three listings without it (the third decides), none counted twice.
    assert h.directory.listings - listings_before >= 3


def test_one_slow_listing_counts_once() -> None:
    """A `brev ls` that takes longer than the poll interval (real ones take seconds): its age was
    subtracted from a clock read before the pass waited for it, so the same listing looked like
    two taken a poll interval apart and counted twice (found by the simulation, seed 194)."""
    h = Harness(faults=Faults(deploy_s=30, sshd_lag_s=400))
    assert run(h.run_until(seen_in(Phase.WAITING_EXEC)))
    h.brev.set_faults(list_s=7.0)
    h.brev.omit(str(h.instance_name), listings=1)
    run(h.run(seconds=120))
    counted = [int(n) for w in h.kube.writes if (n := instance(w.status).get("absence", {}).get("listings"))]
    assert counted and max(counted) == 1, counted
    assert h.brev.deletes == [], [d.outcome for d in h.brev.deletes]
    assert h.phase == str(Phase.WAITING_EXEC), h.status.get("message")
