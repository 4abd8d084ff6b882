"""The phase table (controller/lifecycle/phases.py) is whole and says what the scattered checks said."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller.api.models import Timeouts, phase_timeout
from controller.api.status import TaoBrevJobStatus
from controller.fleet.admission import JobFacts
from controller.lifecycle import machine
from controller.lifecycle.conditions import is_admitted
from controller.lifecycle.phases import PHASES, TRANSITIONS, Phase, entered_any, row

T = datetime(2026, 12, 5, tzinfo=UTC)


def test_every_phase_has_a_row_and_a_step() -> None:
    assert set(PHASES) == set(Phase)
    assert set(machine.STEPS) == set(Phase)
    assert {p: r.next for p, r in PHASES.items()} == TRANSITIONS
    assert machine.TRANSITIONS is TRANSITIONS


def test_every_timeout_field_is_a_spec_timeouts_field() -> None:
    fields = set(Timeouts.model_fields)
    for phase, spec in PHASES.items():
        assert spec.timeout is None or spec.timeout in fields, phase
    assert phase_timeout(None, Phase.RUNNING) == Timeouts().running_seconds
    assert phase_timeout(None, Phase.DELETED) == Timeouts().deleting_seconds
    assert phase_timeout(None, Phase.PENDING) is None  # pendingSeconds counts from a failure


def test_the_run_is_ahead_only_before_running_and_the_flags_follow_the_graph() -> None:
    assert {p for p, r in PHASES.items() if r.pre_run} == {
        Phase.PENDING,
        Phase.PROVISIONING,
        Phase.WAITING_EXEC,
        Phase.PULLING,
    }
    # A job holds its slot from admission (Provisioning) until it is through (Deleted).
    assert not PHASES[Phase.PENDING].holds_slot and not PHASES[Phase.DELETED].holds_slot
    # Secrets are read until the run starts (the pre-flight, then Pulling delivers them).
    assert {p for p, r in PHASES.items() if r.needs_secrets} == {p for p, r in PHASES.items() if r.pre_run}
    # The workload reaches the instance in Pulling, and every later phase of a run follows it.
    first = Phase.PULLING
    assert all(PHASES[n].workload for n in TRANSITIONS[first] if n not in (Phase.DELETED, Phase.PROVISIONING))
    assert PHASES[Phase.DELETED].next == frozenset()


def test_no_phase_yet_reads_as_pending_and_an_unknown_name_is_refused() -> None:
    assert row(None) is PHASES[Phase.PENDING]
    with pytest.raises(ValueError):
        row("Hibernating")


@pytest.mark.parametrize(
    ("phase", "times", "admitted"),
    [
        (None, {}, False),
        ("Pending", {"Pending": T}, False),
        ("Provisioning", {"Pending": T, "Provisioning": T}, True),
        ("Running", {"Running": T}, True),
        # Straight from Pending to Deleted: never admitted.
        ("Deleted", {"Pending": T, "Deleted": T}, False),
        # Through a run, then Deleted: it was admitted.
        ("Deleted", {"Pending": T, "Provisioning": T, "Deleted": T}, True),
    ],
)
def test_admission_reads_the_slot_flag_from_raw_objects_and_from_status(
    phase: str | None, times: dict[str, datetime], admitted: bool
) -> None:
    body = {
        "metadata": {"namespace": "ns", "name": "j", "uid": "u"},
        "spec": {},
        "status": {"phase": phase, "phaseTimes": {k: v.isoformat() for k, v in times.items()}},
    }
    assert JobFacts.from_body(body).admitted is admitted
    status = TaoBrevJobStatus(phase=Phase(phase) if phase else None, phase_times=times)
    assert is_admitted(status) is admitted


def test_a_phase_a_newer_release_wrote_is_taken_to_hold_a_slot() -> None:
    body = {"metadata": {"name": "j"}, "spec": {}, "status": {"phase": "Hibernating"}}
    assert JobFacts.from_body(body).admitted is True
    assert entered_any({"Hibernating": T}, lambda r: r.holds_slot) is False
