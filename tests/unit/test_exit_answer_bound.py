"""Issue 25, scenario 5 at the pure tier: after a non-zero exit with attempts left, the wait for
the still-listed instance to answer a probe has its own bound (Tunables.exit_answer_timeout past
the settle listings), not the Running timeout."""

from __future__ import annotations

from datetime import timedelta

from controller.models import Outcome, TaoBrevJobStatus
from controller.phases import Phase
from controller.steps import CleanupWorkload, DeleteInstance, ProbeExec, UploadResults
from tests.unit.test_machine import T0, TUN, kinds
from tests.unit.test_recovery import ID, inst, running_job, step

EXITED = T0 + timedelta(seconds=100)
BOUND = 300.0  # Tunables.exit_answer_timeout's default
# The settle listings after the exit, then the bound.
SILENT_LIMIT = TUN.absent_listings * TUN.poll_interval + BOUND


def exited_137() -> TaoBrevJobStatus:
    return running_job(exit_code=137, container_exited_at=EXITED)


def test_a_silent_instance_is_probed_until_the_bound() -> None:
    d = step(exited_137(), instance=inst(), probe_ok=False, now=EXITED + timedelta(seconds=SILENT_LIMIT - 1))
    assert d.status.outcome is None
    assert ProbeExec in kinds(d)


def test_past_the_bound_the_run_ends_unreached_and_the_instance_is_deleted() -> None:
    late = EXITED + timedelta(seconds=SILENT_LIMIT + 1)
    d = step(exited_137(), instance=inst(), probe_ok=False, now=late)
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == "InstanceUnresponsive"
    assert "not uploaded" in (d.status.message or "")
    assert any(e.type == "Warning" and "not uploaded" in e.message for e in d.events)
    assert d.status.phase is Phase.UPLOADING
    assert UploadResults not in kinds(d)
    d = step(d.status, instance=inst(), now=late + timedelta(seconds=1))
    assert d.status.phase is Phase.DELETED
    assert CleanupWorkload not in kinds(d), "a cleanup would hang as the probes did"
    assert DeleteInstance(ID) in d.actions
    assert TUN.exit_answer_timeout == BOUND
