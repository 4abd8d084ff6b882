"""Training progress from the tail of TAO's status.json (controller/brev/progress_parse.py).

The lines are shaped as TAO writes them: nvidia_tao_pytorch's StatusLogger puts the callback's
data first, then date ("M/D/YYYY"), time ("H:M:S", unpadded), status, verbosity, message and the
logger's kpi/graphical maps; TAO 6's Lightning callback writes a 0-based `epoch` with
`max_epoch` = max_epochs - 1 and `step`/`max_step`/`time_per_step`, and the model's own
on_train_epoch_end writes "Train metrics generated." (kpi only) right after the epoch line.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller.brev.progress_parse import (
    MAX_METRICS,
    STATUS_TAIL_BYTES,
    TaoProgress,
    clock_text,
    parse_status_tail,
    seconds_of,
)


def line(
    data: dict[str, Any] | None = None, *, status: str = "RUNNING", message: str = "", **maps: Any
) -> str:
    entry = dict(data or {})
    entry |= {"date": "12/5/2026", "time": "9:4:7", "status": status, "verbosity": "INFO"}
    if message:
        entry["message"] = message
    entry |= {k: v for k, v in maps.items() if v}
    return json.dumps(entry) + "\n"


def tao6_epoch(epoch: int, epochs: int, per_epoch: str, eta: str, kpi: dict[str, Any] | None = None) -> str:
    data = {
        "epoch": epoch,
        "step": (epoch + 1) * 50,
        "max_epoch": epochs - 1,
        "max_step": epochs * 50,
        "time_per_epoch": per_epoch,
        "time_per_step": "0:00:00.246913",
        "eta": eta,
    }
    return line(data, message="Training loop in progress", kpi=kpi)


def tao6_run(done: int, epochs: int = 10) -> str:
    """What TAO 6 has written after `done` epochs of a train with validation every epoch."""
    text = line(status="STARTED", message="Starting classification_pyt train.")
    text += line(status="STARTED", message="Starting Training Loop.")
    kpi: dict[str, Any] | None = None
    for e in range(done):
        kpi = {"val_loss": 0.9 / (e + 1), "val_acc": str(0.5 + e / 100)}
        text += line(message="Eval metrics generated.", kpi=kpi)
        text += tao6_epoch(
            e,
            epochs,
            "0:00:12.345678",
            f"0:{(epochs - 1 - e) * 12 // 60:02d}:{(epochs - 1 - e) * 12 % 60:02d}.111111",
            kpi,
        )
        kpi = {"train_loss": round(1.0 / (e + 1) ** 0.5, 4)}
        text += line(message="Train metrics generated.", kpi=kpi)
    return text


def test_tao6_epochs_count_from_zero_and_the_last_line_is_the_train_metrics() -> None:
    got = parse_status_tail(tao6_run(3))
    assert got == TaoProgress(
        epoch=3,
        max_epoch=10,
        percent=30,
        eta="0:01:24",  # 7 epochs x 12 s, fraction dropped
        eta_seconds=84,
        time_per_epoch_seconds=12.346,
        loss=0.5774,  # the "Train metrics generated." line after the epoch line
        metrics=(("train_loss", 0.5774), ("val_acc", 0.52), ("val_loss", 0.3)),
    )


def test_the_last_epoch_is_one_hundred_percent_and_no_time_left() -> None:
    got = parse_status_tail(tao6_run(10) + line(message="Train finished successfully."))
    assert got is not None
    assert (got.epoch, got.max_epoch, got.percent, got.eta, got.eta_seconds) == (10, 10, 100, "0:00:00", 0)


def test_tao5_and_tf_callbacks_count_finished_epochs_from_one() -> None:
    """TAO 5's callback: epoch = epochs finished, max_epoch = epochs; the TF one puts the loss in
    `graphical` as strings."""
    text = line(
        {"epoch": 4, "max_epoch": 8, "time_per_epoch": "0:01:00", "eta": "0:04:00"},
        message="Training loop in progress",
        graphical={"loss": "0.25", "validation_loss": "0.5", "learning_rate": "1e-4"},
        kpi={"mean average precision": "0.61"},
    )
    got = parse_status_tail(text)
    assert got is not None
    assert (got.epoch, got.max_epoch, got.percent, got.eta_seconds, got.loss) == (4, 8, 50, 240, 0.25)
    assert dict(got.metrics)["mean average precision"] == 0.61


def test_a_half_written_last_line_keeps_the_progress_before_it() -> None:
    text = tao6_run(2) + tao6_epoch(2, 10, "0:00:12", "0:01:24")[:40]
    got = parse_status_tail(text)
    assert got is not None and got.epoch == 2


def test_a_head_cut_by_the_byte_cap_drops_its_first_fragment() -> None:
    whole = tao6_run(5)
    tail = whole[-600:]
    got = parse_status_tail(tail, head_cut=True)
    assert got is not None and got.epoch == 5
    # Without the flag a fragment that happens to be JSON-looking is still only skipped.
    assert parse_status_tail('{"epoch": 9, \n' + tail) == got


def test_no_epoch_line_yet_missing_keys_and_garbage_give_nothing() -> None:
    assert parse_status_tail("") is None
    assert parse_status_tail(line(status="STARTED", message="Starting Training Loop.")) is None
    assert parse_status_tail(line({"epoch": 3}, message="no max_epoch")) is None
    assert parse_status_tail(line({"epoch": "three", "max_epoch": 9})) is None
    assert parse_status_tail(line({"epoch": True, "max_epoch": 9})) is None
    assert parse_status_tail(line({"epoch": -1, "max_epoch": 9})) is None
    assert parse_status_tail(line({"epoch": 0, "max_epoch": -1})) is None
    assert parse_status_tail('\x00\xff not json\n[1, 2]\n"a string"\n{broken\n') is None


def test_an_epoch_line_without_times_or_kpis_still_counts() -> None:
    got = parse_status_tail(line({"epoch": 1, "max_epoch": 3}))
    assert got == TaoProgress(1, 3, 33, None, None, None, None, ())


def test_eta_is_derived_from_the_time_per_epoch_when_missing() -> None:
    got = parse_status_tail(line({"epoch": 2, "max_epoch": 5, "time_per_epoch": "0:00:30.5"}))
    assert got is not None and (got.eta, got.eta_seconds) == ("0:01:32", 92)


def test_junk_in_the_kpis_is_skipped_and_they_are_bounded() -> None:
    kpi: dict[str, Any] = {f"ap_class_{i:02d}": i / 100 for i in range(20)}
    kpi |= {
        "nan": float("nan"),
        "flag": True,
        "x" * 100: 1.0,
        "list": [1, 2],
        "bad\nkey": 1.0,
        "words": "n/a",
    }
    text = line({"epoch": 1, "max_epoch": 2}, kpi=kpi).replace("NaN", '"NaN"')
    got = parse_status_tail(text)
    assert got is not None
    names = [k for k, _ in got.metrics]
    assert len(names) == MAX_METRICS and names == sorted(names)
    assert all(k.startswith("ap_class_") for k in names)
    assert got.loss is None


def test_a_validation_loss_is_no_training_loss() -> None:
    got = parse_status_tail(line({"epoch": 1, "max_epoch": 2}, kpi={"val_loss": 0.4, "test_loss": 0.3}))
    assert got is not None and got.loss is None
    got = parse_status_tail(line({"epoch": 1, "max_epoch": 2}, kpi={"val_loss": 0.4, "rpn_loss": 0.3}))
    assert got is not None and got.loss == 0.3


def test_a_status_longer_than_the_cap_is_read_from_its_tail() -> None:
    big = tao6_run(40, epochs=40)
    assert len(big.encode()) > STATUS_TAIL_BYTES
    cut = big.encode()[-STATUS_TAIL_BYTES:].decode()
    got = parse_status_tail(cut, head_cut=True)
    assert got is not None and (got.epoch, got.percent) == (40, 100)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0:00:12.345678", 12.345678),
        ("1:02:03", 3723.0),
        ("1 day, 2:03:04.5", 93784.5),
        ("3 days, 0:00:00", 259200.0),
        (42, 42.0),
        ("17.5", 17.5),
        ("-1 day, 23:59:59", None),
        ("soon", None),
        (None, None),
        (True, None),
    ],
)
def test_seconds_of_reads_str_timedelta(text: Any, seconds: float | None) -> None:
    assert seconds_of(text) == seconds


def test_clock_text_keeps_hours_past_a_day() -> None:
    assert clock_text(0) == "0:00:00"
    assert clock_text(93784) == "26:03:04"
