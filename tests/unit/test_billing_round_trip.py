"""A finished job's billed figures survive a round trip through the API server: status stores
whole seconds, so figures computed from sub-second times in the process that finished the job
must not change when the next process (a restart, an upgrade) recomputes them from the stored
times. Found by tests/e2e/test_upgrade.py: the new release rewrote a finished job's
billedSeconds from 10 to 11."""

from __future__ import annotations

from datetime import timedelta

from controller.api.status import AttemptRecord, TaoBrevJobStatus
from controller.api.vocabulary import Outcome
from controller.lifecycle.budget import billed_seconds
from controller.lifecycle.phases import Phase
from tests.unit.test_machine import INST, T0, at
from tests.unit.test_recovery import ID, step

CREATED = T0 + timedelta(microseconds=600_000)  # 12:00:00.6, stored as 12:00:00
DELETED = T0 + timedelta(seconds=10, microseconds=400_000)  # 12:00:10.4, stored as 12:00:10


def finished() -> TaoBrevJobStatus:
    return at(
        Phase.DELETED,
        create_requested_at=CREATED,
        instance_id=ID,
        brev_identity="alice",
        outcome=Outcome.SUCCEEDED,
        run_outcome=Outcome.SUCCEEDED,
        finished_at=DELETED,
        attempt=1,
        attempts=[
            AttemptRecord(
                attempt=1,
                instance_name=INST,
                instance_id=ID,
                create_requested_at=CREATED,
                deleted_at=DELETED,
                price_per_hour=1.8,
            )
        ],
    )


def test_billed_figures_of_a_closed_attempt_are_the_same_after_a_round_trip() -> None:
    here = finished()
    stored = TaoBrevJobStatus.from_k8s(here.to_k8s())
    assert here.attempts is not None and stored.attempts is not None
    in_process = billed_seconds(here.attempts[0], DELETED, here.finished_at)
    next_process = billed_seconds(stored.attempts[0], DELETED + timedelta(hours=1), stored.finished_at)
    assert in_process == next_process == 10


def test_a_finished_job_is_not_rewritten_by_the_next_process() -> None:
    stored = TaoBrevJobStatus.from_k8s(finished().to_k8s())
    again = step(stored, now=DELETED + timedelta(hours=1)).status
    assert again.attempts == stored.attempts
    assert (again.billed_seconds, again.estimated_cost_dollars) == (
        stored.billed_seconds,
        stored.estimated_cost_dollars,
    )


def test_a_record_another_release_finished_is_left_as_it_was() -> None:
    """The previous release billed from sub-second times (9 s here); this one would count 10 s
    from the stored ones, but a finished job's record is final."""
    theirs = finished()
    assert theirs.attempts is not None
    theirs.attempts[0].billed_seconds = 9
    theirs.billed_seconds = 9
    stored = TaoBrevJobStatus.from_k8s(theirs.to_k8s())
    again = step(stored, now=DELETED + timedelta(hours=1)).status
    assert again.billed_seconds == 9
    assert again.attempts is not None and again.attempts[0].billed_seconds == 9
