"""Issue 25, scenario 5: after a non-zero exit with attempts left, the job asks whether the
instance stays (a VM going away reports 137 first). A listed instance that never answers again
was asked until the Running timeout (24 h by default), billing all along. That wait has its own
bound (Tunables.exit_answer_timeout): then the run ends, what could not be reached (upload,
cleanup) is skipped and said so, and the instance is deleted."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from tests.fakes.brev import Faults
from tests.fakes.harness import Harness, job_spec
from tests.status_paths import attempt_no
from tests.status_paths import run as run_of

T = TypeVar("T")
DAY = 86_400
# The bound under test: the default (300 s) plus the settle listings and a few probe intervals,
# far below the Running timeout.
WITHIN_S = 600.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def exited_137_then_silent() -> tuple[Harness, float]:
    """A job with a second attempt left whose container exits 137; from then on the instance is
    listed RUNNING but refuses every exec. Returns the harness and when the exit was seen."""
    timeouts = {**job_spec()["timeouts"], "runningSeconds": DAY}
    spec = job_spec(recovery={"maxAttempts": 2, "checkpointIntervalSeconds": 60}, timeouts=timeouts)
    h = Harness(spec, faults=Faults(deploy_s=30, sshd_lag_s=10, pull_s=10, run_s=120, exit_code=137))
    assert run(h.run_until(lambda h: run_of(h.status).get("exitCode") == 137, seconds=3600))
    seen_at = h.clock.monotonic()
    h.brev.set_faults(exec_failures=10**9)
    return h, seen_at


def test_a_listed_instance_that_never_answers_after_the_exit_is_deleted_within_its_bound() -> None:
    h, seen_at = exited_137_then_silent()
    accepted = lambda h: any(d.outcome == "accepted" for d in h.brev.deletes)  # noqa: E731
    assert run(h.run_until(accepted, seconds=3600)), (
        f"no brev delete within an hour of the exit: {h.phase} {h.status.get('message')!r}"
    )
    first_delete = min(d.at for d in h.brev.deletes if d.outcome == "accepted")
    assert first_delete - seen_at <= WITHIN_S, first_delete - seen_at
    assert attempt_no(h.status) == 1, "no second instance for an exit nobody could confirm"
    run(h.run(seconds=3600))
    assert h.finished
    assert h.status["outcome"] == "Failed"
    assert not any(h.brev.live(i) for i in h.created_ids())
    # What was skipped is said in status and in an Event.
    assert "not uploaded" in h.status["message"], h.status["message"]
    assert any("not uploaded" in e.message and e.type == "Warning" for e in h.events.events)
    assert h.brev.uploads == [], "an upload from an instance that does not answer"


def test_an_instance_that_answers_again_in_time_is_judged_by_its_exit() -> None:
    """The bound is a bound, not a shortcut: an instance that answers within it is a training
    failure with the results uploaded, as before."""
    h, _ = exited_137_then_silent()
    h.brev.set_faults(exec_failures=3)  # refuses a few probes, then answers
    run(h.run(seconds=3600))
    assert h.finished
    assert h.status["reason"] == "TrainingFailed", h.status.get("message")
    assert [u.ok for u in h.brev.uploads] == [True]
