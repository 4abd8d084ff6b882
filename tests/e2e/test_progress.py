"""Progress and ETA you can watch (issue 27, part 3): `kubectl get taobrevjobs` shows PROGRESS and
ETA move while a job runs, from TAO's own status.json on the instance (the simulator's TAO
stand-in writes it as TAO 6 does), and the per-job gauges follow.

The operator here waits 2 s per `docker wait` and may write every changed reading
(TAOBREV_PROGRESS_INTERVAL=0): at the defaults (120 s waits, one write per 600 s) a run would have
to last half an hour to show two readings. The throttle itself is pinned by the unit tests
(tests/unit/test_progress_writes.py) and the simulation's invariant."""

from __future__ import annotations

import re
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.operator import Stack
from tests.fixtures.polling import until

pytestmark = pytest.mark.e2e

EPOCHS = 6
# x the simulator's speed 0.01: 3 s per epoch, ~18 s of Running, several 2 s waits per epoch.
EPOCH_SECONDS = 300


@pytest.fixture
def operator_env() -> dict[str, str]:
    return {"TAOBREV_WAIT_TIMEOUT": "2", "TAOBREV_PROGRESS_INTERVAL": "0"}


def row(stack: Stack, name: str) -> dict[str, str]:
    """`kubectl get taobrevjobs NAME` as a user reads it: column header -> value."""
    out = stack.kubectl("get", "taobrevjobs", name, "-n", stack.namespace).stdout.splitlines()
    header, values = out[0], out[1]
    # Columns start where their header starts (values never run into the next column here).
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    cells = [values[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    return dict(zip(names, cells, strict=True))


def progress_gauges(stack: Stack, name: str) -> dict[str, float]:
    with urllib.request.urlopen(stack.operator.metrics_url, timeout=10) as resp:  # noqa: S310 - loopback
        text = resp.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name in ("taobrev_job_progress_ratio", "taobrev_job_eta_seconds", "taobrev_job_loss"):
            for sample in family.samples:
                if sample.labels == {"namespace": stack.namespace, "name": name}:
                    found[family.name] = sample.value
    return found


def test_kubectl_get_shows_progress_and_eta_moving_during_a_run(stack: Stack) -> None:
    stack.apply(stack.job_manifest("watched", simulation={"epochs": EPOCHS, "epoch_seconds": EPOCH_SECONDS}))
    header = stack.kubectl("get", "taobrevjobs", "-n", stack.namespace).stdout.splitlines()[0].split()
    assert header == [
        "NAME", "PHASE", "OUTCOME", "INSTANCE", "GPU", "QUEUE", "PROGRESS", "ETA", "STEP", "AGE"
    ]  # fmt: skip

    seen: list[tuple[int, str]] = []
    gauges: dict[str, float] = {}

    def watch() -> bool:
        nonlocal gauges
        cols = row(stack, "watched")
        if cols["PHASE"] == "Running" and cols["PROGRESS"]:
            reading = (int(cols["PROGRESS"]), cols["ETA"])
            if not seen or seen[-1] != reading:
                seen.append(reading)
                gauges = gauges or progress_gauges(stack, "watched")
        return cols["PHASE"] in ("Uploading", "Deleted")

    until(
        watch,
        "the run to end, watching PROGRESS and ETA",
        guard=180,
        interval=0.3,
        alive=stack.operator_death,
    )
    print(seen)
    # Two readings or more while Running, each one later in the run and with less time left.
    assert len(seen) >= 2, seen
    percents, etas = [p for p, _ in seen], [e for _, e in seen]
    assert percents == sorted(percents) and len(set(percents)) == len(percents), seen
    assert all(re.fullmatch(r"\d+:\d{2}:\d{2}", e) for e in etas), seen
    seconds = [int(h) * 3600 + int(m) * 60 + int(s) for h, m, s in (e.split(":") for e in etas)]
    assert seconds == sorted(seconds, reverse=True), seen
    assert all(0 < p < 100 for p in percents[:-1]), seen
    # The gauges said the same while it ran, with the job's namespace and name as labels.
    assert set(gauges) == {"taobrev_job_progress_ratio", "taobrev_job_eta_seconds", "taobrev_job_loss"}, (
        gauges
    )
    assert 0 < gauges["taobrev_job_progress_ratio"] <= 1

    status = stack.wait_finished("watched")
    assert status["outcome"] == "Succeeded"
    progress = status["progress"]
    # The exit's reading is written with the exit: the last epoch, nothing left.
    assert (progress["epoch"], progress["maxEpoch"], progress["percent"]) == (EPOCHS, EPOCHS, 100)
    assert (progress["eta"], progress["etaSeconds"]) == ("0:00:00", 0)
    assert progress["loss"] == round(1 / EPOCHS**0.5, 4)
    assert set(progress["metrics"]) == {"train_loss", "val_loss", "val_mAP"}
    assert row(stack, "watched")["PROGRESS"] == "100"
    # The run ended: its progress gauges are gone (the status keeps the last reading).
    assert progress_gauges(stack, "watched") == {}
