"""status.progress costs at most one status write per job per epoch or per progress interval,
whichever is longer (controller/lifecycle/progress.py): what decide() writes and asks for."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from controller.api.status import TaoBrevJobStatus, merge_patch
from controller.brev.progress_parse import TaoProgress
from controller.lifecycle import machine
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import Decision, Observation, WaitForExit
from tests.fakes.workload import epoch_progress
from tests.unit.test_machine import EPHEMERAL, T0, at, running

TUN = machine.Tunables(poll_interval=5, wait_timeout=30, progress_interval=600)


def decide(status: TaoBrevJobStatus, now_s: float, **obs: Any) -> Decision:
    observation = Observation(now=T0 + timedelta(seconds=now_s), instance_known=True, **obs)
    return machine.decide(
        EPHEMERAL, status, observation, namespace="ns", name="job", uid="uid-1", generation=1, tunables=TUN
    )


def job() -> TaoBrevJobStatus:
    return at(Phase.RUNNING, container_started_at=T0).model_copy(update={"job_id": "job-progress-1"})


def reading(epoch: int, epochs: int = 10) -> TaoProgress:
    got = epoch_progress(epoch, epochs, 60.0)
    assert got is not None
    return got


def test_the_wait_reads_the_actions_status_json() -> None:
    (wait,) = decide(job(), 0, instance=running()).actions
    assert isinstance(wait, WaitForExit)
    assert (wait.progress_of, wait.progress) == ("train", True)  # nothing read yet: every wait looks


def test_the_first_reading_is_written_with_when_it_was_read() -> None:
    st = decide(job(), 100, instance=running(), progress=reading(2)).status
    assert st.to_k8s()["progress"] == {
        "epoch": 2,
        "maxEpoch": 10,
        "percent": 20,
        "eta": "0:08:00",
        "etaSeconds": 480,
        "timePerEpochSeconds": 60.0,
        "loss": 0.7071,
        "metrics": {"train_loss": 0.7071},
        "readAt": "2026-11-29T12:01:40Z",
    }


def test_a_change_within_the_interval_costs_no_write_and_one_after_it_does() -> None:
    st = decide(job(), 100, instance=running(), progress=reading(2)).status
    stored = st.to_k8s()
    sooner = decide(st, 400, instance=running(), progress=reading(7)).status
    assert merge_patch(stored, sooner.to_k8s()) == stored | {}  # nothing of progress changed
    assert sooner.to_k8s() == stored
    later = decide(st, 100 + 600, instance=running(), progress=reading(9)).status
    assert later.progress.epoch == 9
    assert merge_patch(stored, later.to_k8s())["progress"]["epoch"] == 9


def test_the_same_reading_after_the_interval_writes_nothing() -> None:
    st = decide(job(), 100, instance=running(), progress=reading(2)).status
    again = decide(st, 5000, instance=running(), progress=reading(2)).status
    assert again.to_k8s() == st.to_k8s()  # readAt stays: unchanged progress is no write


def test_the_exits_reading_is_written_at_once() -> None:
    st = decide(job(), 100, instance=running(), progress=reading(2)).status
    done = decide(st, 130, instance=running(), exit_code=0, progress=reading(10)).status
    assert (done.progress.percent, done.progress.eta) == (100, "0:00:00")
    assert done.phase is Phase.UPLOADING  # in the exit's own write


def _run(epoch_s: float, seconds: float) -> tuple[int, int, int]:
    """(status writes of progress, waits, waits that read it) over a run of `epoch_s` epochs,
    each wait ending its whole bound later."""
    st, now, writes, waits, reads = job(), 0.0, 0, 0, 0
    read_progress = True
    epochs = int(seconds // epoch_s) + 1
    while now < seconds:
        got = epoch_progress(int(now // epoch_s), epochs, epoch_s) if read_progress else None
        d = decide(st, now, instance=running(), progress=got)
        if d.status.to_k8s().get("progress") != st.to_k8s().get("progress"):
            writes += 1
        st = d.status
        (wait,) = d.actions
        assert isinstance(wait, WaitForExit)
        read_progress = wait.progress
        reads += wait.progress
        waits += 1
        now += int(wait.timeout_seconds) + 0.3
    return writes, waits, reads


def test_short_epochs_cost_one_write_per_interval() -> None:
    writes, waits, reads = _run(epoch_s=20, seconds=3000)
    assert 3000 / 600 - 1 <= writes <= 3000 / 600 + 1, writes
    assert reads <= waits // 4, (reads, waits)  # not every wait reads once the interval is known


def test_long_epochs_cost_one_write_per_epoch() -> None:
    writes, _, _ = _run(epoch_s=1000, seconds=3500)  # within runningSeconds
    assert writes == 3, writes  # epochs 1, 2 and 3, each when it ended


def test_progress_is_kept_across_attempts() -> None:
    st = decide(job(), 100, instance=running(), progress=reading(4)).status
    st.start_attempt("tbj-next-a2", created=True)
    assert st.progress.epoch == 4
    assert st.to_k8s()["progress"]["epoch"] == 4


def test_no_progress_is_no_key_in_stored_status() -> None:
    assert "progress" not in job().to_k8s()
    assert "progress" not in TaoBrevJobStatus.from_k8s({"progress": {}}).to_k8s()
