"""The fast middle tier: the real Reconciler, ActionRunner, InstanceDirectory and machine against
the in-memory Brev world, Kubernetes and clock (tests/fakes). No I/O: seconds for the file."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from controller.api.vocabulary import Outcome
from controller.lifecycle.phases import Phase
from tests.fakes.brev import Faults
from tests.fakes.clock import T0
from tests.fakes.harness import SECRETS, Harness, job_spec
from tests.fakes.workload import STOPPED_EXIT
from tests.status_paths import instance
from tests.status_paths import run as run_of

T = TypeVar("T")
ALL_PHASES = [str(p) for p in Phase]
# Generous bound for a teardown of simulated time: long enough for every stated deadline of
# job_spec() (uploading 300 s, deleting 300 s) plus stop grace and a hung transfer, far below
# "forever".
TEARDOWN_BOUND = 4 * 3600.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def in_phase(phase: Phase) -> Any:
    return lambda h: h.phase == str(phase)


def uploads_before_first_delete(h: Harness) -> int:
    first_delete = min((d.at for d in h.brev.deletes), default=float("inf"))
    return len([u for u in h.brev.uploads if u.at <= first_delete])


def assert_no_secret_leaked(h: Harness) -> None:
    values = [v.decode() for data in SECRETS.values() for v in data.values()]
    texts = [e.message for e in h.events.events] + [repr(w.status) for w in h.kube.writes]
    for value in values:
        assert not any(value in t for t in texts), f"secret value in events/status: {value!r}"


def test_happy_path_goes_through_every_phase_and_deletes_the_instance() -> None:
    h = Harness()
    run(h.run(seconds=7200))
    # A new job's Pending goes out with its Provisioning (reconciler._holdable): one write
    assert h.phases_written() == ALL_PHASES[1:]
    assert str(Phase.PENDING) in h.kube.writes[0].status["phaseTimes"]
    assert h.status["outcome"] == str(Outcome.SUCCEEDED)
    assert h.finished
    assert len(h.brev.accepted_creates(str(h.instance_name))) == 1
    assert [u.ok for u in h.brev.uploads] == [True]
    assert uploads_before_first_delete(h) == 1
    (instance_id,) = h.created_ids()
    assert not h.brev.exists(instance_id)
    for phase in ALL_PHASES:
        assert phase in h.events.reasons()
    assert_no_secret_leaked(h)
    h.delete_job()
    run(h.run(seconds=60))
    assert h.obj is None


def test_cancel_mid_run_stops_uploads_then_deletes() -> None:
    h = Harness(faults=Faults(run_s=3000))
    assert run(h.run_until(in_phase(Phase.RUNNING)))
    run(h.run(seconds=120, until_finished=False))  # the container really runs a while
    h.delete_job()
    run(h.run(seconds=TEARDOWN_BOUND))
    assert h.obj is None, "the finalizer was never released"
    assert h.status["outcome"] == str(Outcome.CANCELED)
    (instance_id,) = h.created_ids()
    container = h.brev.gone[instance_id].containers.get(str(h.status["jobId"]))
    assert container is None or container.final_code == STOPPED_EXIT
    assert uploads_before_first_delete(h) >= 1
    assert not h.brev.exists(instance_id)


def test_restart_mid_run_adopts_the_instance_and_container() -> None:
    h = Harness(faults=Faults(run_s=600))
    assert run(h.run_until(in_phase(Phase.RUNNING)))
    run(h.run(seconds=60, until_finished=False))
    h.restart()
    run(h.run(seconds=7200))
    assert h.status["outcome"] == str(Outcome.SUCCEEDED)
    assert len(h.brev.accepted_creates(str(h.instance_name))) == 1
    (instance_id,) = h.created_ids()
    assert not h.brev.exists(instance_id)
    assert h.restarts == 1


def test_restart_right_after_create_does_not_create_twice() -> None:
    # The listing lags the create by more than one pass; the new process only has status.
    h = Harness(faults=Faults(listing_lag_s=90))
    assert run(h.run_until(lambda h: bool(instance(h.status).get("createRequestedAt"))))
    run(h.run(seconds=5, until_finished=False))
    h.restart()
    run(h.run(seconds=7200))
    assert len(h.brev.accepted_creates(str(h.instance_name))) == 1
    assert h.status["outcome"] == str(Outcome.SUCCEEDED)


def test_one_listing_without_the_instance_does_not_end_the_run() -> None:
    """Issue 9 leak 1: a listing glitch is not proof that the instance is gone."""
    h = Harness(faults=Faults(run_s=600))
    assert run(h.run_until(in_phase(Phase.RUNNING)))
    h.brev.omit(str(h.instance_name), listings=1)
    run(h.run(seconds=7200))
    assert h.status["outcome"] == str(Outcome.SUCCEEDED), h.status.get("message")
    assert [u.ok for u in h.brev.uploads] == [True]


def test_instance_missing_from_listings_is_never_assumed_gone() -> None:
    """Issue 9 leak 1: absent from several listings, the instance still bills: the job may only
    finish once Brev confirmed the delete."""
    h = Harness(faults=Faults(run_s=600))
    assert run(h.run_until(in_phase(Phase.RUNNING)))
    h.brev.omit(str(h.instance_name), listings=6)
    run(h.run(seconds=7200))
    assert h.finished
    (instance_id,) = h.created_ids()
    assert not h.brev.live(instance_id), "finished with the instance running and no delete accepted"


def test_accepted_but_slow_delete_finishes_only_when_the_instance_is_gone() -> None:
    h = Harness(faults=Faults(delete_lag_s=200, deleting_s=100))
    assert run(h.run_until(in_phase(Phase.DELETED)))
    finished_while_present = False
    while not h.finished:
        run(h.run(seconds=5, until_finished=True, max_passes=1))
        (instance_id,) = h.created_ids()
        finished_while_present = finished_while_present or (h.finished and h.brev.exists(instance_id))
        assert h.clock.elapsed < 7200, "teardown never finished"
    assert not finished_while_present
    assert len([d for d in h.brev.deletes if d.outcome == "accepted"]) >= 1


def test_exec_hang_during_stop_still_deletes_the_instance() -> None:
    """Issue 9 leak 2: after a cancel, a broken exec must not keep the instance forever."""
    h = Harness(faults=Faults(run_s=3000))
    assert run(h.run_until(in_phase(Phase.RUNNING)))
    h.brev.set_faults(exec_hangs=10**9)
    h.delete_job()
    run(h.run(seconds=TEARDOWN_BOUND))
    (instance_id,) = h.created_ids()
    assert not h.brev.live(instance_id), f"instance still billing; status: {h.status.get('message')}"
    assert h.obj is None, "the finalizer was never released"


def test_upload_failure_is_retried_then_succeeds() -> None:
    h = Harness(faults=Faults(upload_failures=2))
    run(h.run(seconds=7200))
    assert [u.ok for u in h.brev.uploads] == [False, False, True]
    assert h.status["outcome"] == str(Outcome.SUCCEEDED)
    assert uploads_before_first_delete(h) == 3
    (instance_id,) = h.created_ids()
    assert not h.brev.exists(instance_id)


def test_upload_that_never_succeeds_still_deletes_the_instance() -> None:
    h = Harness(faults=Faults(upload_failures=10**9))
    run(h.run(seconds=7200))
    assert h.finished
    assert h.status["outcome"] == str(Outcome.FAILED)
    assert h.brev.uploads
    assert not any(u.ok for u in h.brev.uploads)
    (instance_id,) = h.created_ids()
    assert not h.brev.exists(instance_id)


def test_capacity_errors_are_retried_with_backoff() -> None:
    h = Harness(faults=Faults(capacity_errors=3))
    run(h.run(seconds=7200))
    assert h.status["outcome"] == str(Outcome.SUCCEEDED)
    refused = [c for c in h.brev.creates if not c.accepted]
    assert len(refused) == 3
    gaps = [b.at - a.at for a, b in zip(h.brev.creates, h.brev.creates[1:], strict=False)]
    assert all(g > 0 for g in gaps), gaps


def test_create_that_times_out_after_brev_accepted_it_is_adopted() -> None:
    h = Harness(faults=Faults(create_timeouts=1, create_s=300))
    run(h.run(seconds=7200))
    assert len(h.brev.accepted_creates(str(h.instance_name))) == 1
    assert h.status["outcome"] == str(Outcome.SUCCEEDED)


def test_spec_edit_while_pending_is_taken() -> None:
    h = Harness(job_spec(instance={"reuse": {"name": "shared-box"}}))
    h.brev.add_instance("shared-box")
    assert h.obj is not None
    h.obj.finalized = False  # the first pass came before kopf's finalizer patch: Pending is written
    run(h.reconcile_once())
    assert h.phase == str(Phase.PENDING)
    assert h.instance_name == "shared-box"
    h.obj.finalized = True
    h.kube.edit_spec("ns", "job", job_spec())
    run(h.run(seconds=7200))
    assert h.status["outcome"] == str(Outcome.SUCCEEDED)
    assert h.instance_name != "shared-box", "names from the first pass survived the spec edit"
    assert h.brev.by_name("shared-box"), "the shared instance was deleted"


def test_crash_just_before_the_upload_then_downtime_still_uploads_first() -> None:
    """Found by the model test: a crash between deciding the upload and making it, then
    downtime past uploadingSeconds, must not let the deadline skip the only attempt."""
    h = Harness(faults=Faults(run_s=30))
    h.brev.interrupt_before("upload", "crash")
    assert run(h.run_until(lambda h: h.restarts == 1))
    assert h.phase == str(Phase.UPLOADING)
    assert not h.brev.uploads
    h.clock.advance(400)  # the operator is down longer than uploadingSeconds (300)
    run(h.run(seconds=TEARDOWN_BOUND))
    assert h.finished
    assert uploads_before_first_delete(h) >= 1
    (instance_id,) = h.created_ids()
    assert not h.brev.exists(instance_id)


def test_operator_downtime_is_not_counted_as_run_time() -> None:
    """The container's own FinishedAt judges the run: an exit within runningSeconds (900) seen
    only after a long outage is a success, not a RunningTimeout."""
    h = Harness(faults=Faults(run_s=300))
    assert run(h.run_until(in_phase(Phase.RUNNING)))
    h.restart()
    h.clock.advance(2000)  # the operator is down; the container exits 300 s after it started
    run(h.run(seconds=TEARDOWN_BOUND))
    assert h.status["outcome"] == str(Outcome.SUCCEEDED), h.status.get("message")
    (start,) = h.brev.container_starts
    exited = T0 + timedelta(seconds=start.at + 300)
    assert run_of(h.status)["exitedAt"] == exited.isoformat().replace("+00:00", "Z")


def test_secret_files_exist_only_during_the_step_that_reads_them() -> None:
    h = Harness(faults=Faults(run_s=3000))
    assert run(h.run_until(in_phase(Phase.RUNNING)))
    (instance_id,) = h.created_ids()
    files = h.brev.instances[instance_id].files
    assert any(p.endswith("/spec/spec.yaml") for p in files)
    assert not [p for p in files if "/secrets/" in p], sorted(files)
