"""A finished job's billed figures survive a round trip through the API server: status stores
whole seconds, so figures computed from sub-second times in the process that finished the job
must not change when the next process (a restart, an upgrade) recomputes them from the stored
times. Found by tests/e2e/test_upgrade.py: the new release rewrote a finished job's
billedSeconds from 10 to 11."""

from __future__ import annotations

from datetime import timedelta

from controller.api.models import AttemptRecord, Outcome, TaoBrevJobStatus
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


def test_billed_figures_of_a_finished_job_are_the_same_after_a_round_trip() -> None:
    here = step(finished(), now=DELETED).status
    stored = TaoBrevJobStatus.from_k8s(here.to_k8s())
    again = step(stored, now=DELETED + timedelta(hours=1)).status
    assert here.billed_seconds == again.billed_seconds == 10
    assert here.estimated_cost_dollars == again.estimated_cost_dollars
    assert again.to_k8s() == stored.to_k8s(), "the next process writes nothing for a finished job"
