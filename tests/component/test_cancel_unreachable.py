"""Issue 25 scenario 10: `kubectl delete` of a Running job whose instance refuses ssh. The stop,
the upload and the cleanup cannot reach it; the cancel must not spend `uploadingSeconds`
(30 min by default) retrying an upload nobody can receive: skip what cannot be reached, say so,
and delete. Goal: delete requested -> `brev delete` within 5 minutes."""

from __future__ import annotations

import asyncio

import pytest

from controller.api import reasons
from controller.api.vocabulary import Outcome
from controller.lifecycle.phases import Phase
from tests.fakes.brev import Faults
from tests.fakes.harness import Harness, job_spec
from tests.status_paths import teardown

CANCEL_BOUND_S = 300.0


def _spec_with_default_upload_bound() -> dict[str, object]:
    spec = job_spec()
    timeouts = dict(spec["timeouts"])
    timeouts["uploadingSeconds"] = 1800  # the CRD's default
    return job_spec(timeouts=timeouts)


@pytest.mark.parametrize("fault", ["exec_failures", "exec_hangs"])
def test_cancel_of_an_unanswering_instance_deletes_within_five_minutes(fault: str) -> None:
    h = Harness(_spec_with_default_upload_bound(), faults=Faults(run_s=3000))
    assert asyncio.run(h.run_until(lambda h: h.phase == str(Phase.RUNNING)))
    # sshd dead: every exec is refused at once, or hangs until the call's own timeout
    h.brev.set_faults(**{fault: 10**9})
    cancelled_at = h.clock.monotonic()
    h.delete_job()
    assert asyncio.run(h.run_until(lambda h: bool(h.brev.deletes), seconds=3600))
    took = h.brev.deletes[0].at - cancelled_at
    print(f"cancel -> brev delete: {took:.0f}s of simulated time")
    assert took <= CANCEL_BOUND_S, f"brev delete {took:.0f}s after the cancel; status: {h.status}"
    uploads = [u for u in h.brev.uploads if u.at >= cancelled_at]
    assert len(uploads) <= 1, f"{len(uploads)} upload attempts to an instance that never answers"
    assert h.status["outcome"] == str(Outcome.CANCELED)
    assert reasons.UPLOAD_SKIPPED in h.events.reasons()
    assert "not uploaded" in str(teardown(h.status).get("message") or h.status.get("message"))
    asyncio.run(h.run(seconds=3600))
    assert h.obj is None, "the finalizer was never released"
    assert "results not uploaded" in str(h.status["message"])
    (instance_id,) = h.created_ids()
    assert not h.brev.live(instance_id)
