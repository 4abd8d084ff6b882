"""The model test's invariants can fail: each is shown a world that breaks it."""

from __future__ import annotations

import asyncio

import pytest

from controller.brev.client import CreateRequest
from tests.fakes.harness import NAME, NAMESPACE, Harness
from tests.fakes.workload import FakeWorkload
from tests.model import invariants

INSTANCE = "tbj-under-test"


def write(h: Harness, status: dict[str, object]) -> None:
    asyncio.run(h.kube.patch_status(NAMESPACE, NAME, status))


def test_finished_with_a_live_instance_is_caught() -> None:
    h = Harness()
    asyncio.run(h.brev.create_instance(CreateRequest(name=INSTANCE)))
    write(h, {"phase": "Deleted", "finishedAt": "2026-11-29T12:00:00Z"})
    with pytest.raises(AssertionError, match="live"):
        invariants.no_live_instance_after_finish(h, INSTANCE)


def test_a_second_create_is_caught() -> None:
    h = Harness()
    h.brev.set_faults(deleting_s=0)
    asyncio.run(h.brev.create_instance(CreateRequest(name=INSTANCE)))
    asyncio.run(h.brev.delete_instance(INSTANCE))
    asyncio.run(h.brev.create_instance(CreateRequest(name=INSTANCE)))
    with pytest.raises(AssertionError, match="2 creates"):
        invariants.at_most_one_create(h, INSTANCE)


def test_a_create_after_brev_lost_the_instance_is_no_duplicate_but_a_third_is() -> None:
    h = Harness()
    asyncio.run(h.brev.create_instance(CreateRequest(name=INSTANCE)))
    h.brev.vanish(INSTANCE)
    asyncio.run(h.brev.create_instance(CreateRequest(name=INSTANCE)))
    invariants.at_most_one_create(h, INSTANCE)
    h.brev.set_faults(deleting_s=0)
    asyncio.run(h.brev.delete_instance(INSTANCE))
    asyncio.run(h.brev.create_instance(CreateRequest(name=INSTANCE)))
    with pytest.raises(AssertionError, match="3 creates"):
        invariants.at_most_one_create(h, INSTANCE)


def test_two_live_instances_of_one_job_are_caught_unless_the_older_is_pending_deletion() -> None:
    h = Harness()
    asyncio.run(h.brev.create_instance(CreateRequest(name=INSTANCE)))
    asyncio.run(h.brev.create_instance(CreateRequest(name=f"{INSTANCE}-a2")))
    with pytest.raises(AssertionError, match="2 live instances"):
        invariants.never_two_live_instances(h, INSTANCE)
    (first,) = h.brev.created_ids(INSTANCE)
    ended = {"attempt": 1, "instance": {"name": INSTANCE, "id": first}, "endedAt": "t"}
    write(h, {"attempts": [ended]})
    invariants.never_two_live_instances(h, INSTANCE)
    # Once its deletion is recorded it is no longer pending: a live one is caught again.
    write(h, {"attempts": [{**ended, "instance": {"name": INSTANCE, "id": first, "deletedAt": "t"}}]})
    with pytest.raises(AssertionError, match="2 live instances"):
        invariants.never_two_live_instances(h, INSTANCE)


def test_too_many_attempts_are_caught() -> None:
    h = Harness()
    write(h, {"attempts": [{"attempt": n, "instance": {"name": "x"}} for n in (1, 2, 3)]})
    with pytest.raises(AssertionError, match="maxAttempts=2"):
        invariants.attempts_within_limit(h, INSTANCE, 2)


def test_a_create_after_finish_is_caught() -> None:
    h = Harness()
    checker = invariants.FinishedNeverCreates()
    write(h, {"phase": "Deleted", "finishedAt": "2026-11-29T12:00:00Z"})
    checker.check(h)
    asyncio.run(h.brev.create_instance(CreateRequest(name=INSTANCE)))
    with pytest.raises(AssertionError, match="after the job finished"):
        checker.check(h)


def test_delete_without_upload_after_a_run_is_caught() -> None:
    h = Harness()
    h.brev.set_faults(deploy_s=0, sshd_lag_s=0)
    asyncio.run(h.brev.create_instance(CreateRequest(name=INSTANCE)))
    wl = FakeWorkload(h.brev, INSTANCE, "job-1")
    asyncio.run(wl.pull_image("img", ngc_api_key=b"nvapi-fake"))  # `docker run` never pulls
    asyncio.run(wl.start_container("img", "arch", "train"))
    asyncio.run(h.brev.delete_instance(INSTANCE))
    with pytest.raises(AssertionError, match="without an upload attempt"):
        invariants.upload_before_delete(h)


def test_illegal_transition_is_caught() -> None:
    h = Harness()
    write(h, {"phase": "Pending", "phaseTimes": {"Pending": "t0"}})
    write(h, {"phase": "Running", "phaseTimes": {"Running": "t1"}})
    with pytest.raises(AssertionError, match="illegal transition Pending -> Running"):
        invariants.WriteChecker().check(h)


def test_flipped_success_is_caught() -> None:
    h = Harness()
    write(h, {"phase": "Pending", "conditions": [{"type": "Succeeded", "status": "True"}]})
    write(h, {"conditions": [{"type": "Succeeded", "status": "False"}]})
    with pytest.raises(AssertionError, match="flipped"):
        invariants.WriteChecker().check(h)


def test_a_hot_loop_is_caught() -> None:
    checker = invariants.DelayChecker()
    with pytest.raises(AssertionError, match="in a row"):
        for _ in range(invariants.MAX_ZERO_DELAY_CHAIN + 1):
            checker.feed(0.0, 0.0)
