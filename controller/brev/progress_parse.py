"""Training progress from the tail of TAO's own `status.json` (PURE).

TAO's status logger appends one JSON object per line to `<results_dir>/<action>/status.json`
(nvidia_tao_pytorch.core.loggers.api_logging.StatusLogger): `date`, `time`, `status`
(STARTED/RUNNING/SUCCESS/FAILURE/SKIPPED), `verbosity`, `message`, and, when set on the logger,
`categorical`, `graphical` and `kpi` maps. At the end of every training epoch its Lightning
callback (nvidia_tao_pytorch.core.callbacks.loggers.TAOStatusLogger) adds `epoch`, `max_epoch`,
`time_per_epoch` and `eta` (both `str(timedelta)`, e.g. "0:00:12.345678"). The two TAO
generations count differently:

- TAO 6 (and 5.5's Lightning trainer fields): `epoch` is Lightning's 0-based current epoch and
  `max_epoch` is max_epochs - 1, with `step`, `max_step` and `time_per_step` beside them;
- TAO 5 (and the TF1 callback): `epoch` counts finished epochs from 1 and `max_epoch` is the
  number of epochs.

The epoch line is usually NOT the last line: the model's own `on_train_epoch_end` writes "Train
metrics generated." (kpi only) right after it, and validation writes "Eval metrics generated."
before the next one. So the operator reads a bounded tail of the file, and this module finds
the last epoch line in it and the KPIs written since. Anything else is tolerated: a line cut
by the byte cap or still being written, garbage, missing keys or strings where numbers belong
cost that line only, never the progress already known.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Final

# How much of status.json crosses ssh with a wait: a few epochs' lines. A KPI map can make one
# line large (per-class APs); a line longer than this is skipped, never read whole.
STATUS_TAIL_BYTES: Final = 16384
# Metrics kept in status (the last KPIs, newest first, then sorted by name).
MAX_METRICS: Final = 8
METRIC_KEY_CHARS: Final = 63
# An ETA past this (~3 years) is no estimate anyone can use: left out.
MAX_ETA_SECONDS: Final = 10**8
# Keys that name the training loss, in preference order; else the first other "*loss*" KPI that
# is no validation or test loss.
LOSS_KEYS: Final = ("train_loss", "loss", "training_loss", "total_loss")
_NOT_TRAINING = ("val", "validation", "test", "eval")
# str(timedelta): "H:MM:SS[.ffffff]", with "N day[s], " in front past 24 h.
_TIMEDELTA_RE = re.compile(
    r"^\s*(?:(?P<days>-?\d+) days?, )?(?P<h>\d+):(?P<m>\d{1,2}):(?P<s>\d{1,2}(?:\.\d+)?)\s*$"
)
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@/ -]*$")


@dataclass(frozen=True)
class TaoProgress:
    """Where training is, as TAO's last epoch line says (counts normalised to 1-based)."""

    epoch: int  # epochs finished
    max_epoch: int  # epochs in the run
    percent: int  # 0-100, floor(epoch / max_epoch)
    eta: str | None  # H:MM:SS, no fraction (None: TAO gave none)
    eta_seconds: int | None
    time_per_epoch_seconds: float | None
    loss: float | None
    metrics: tuple[tuple[str, float], ...] = ()  # sorted by name, at most MAX_METRICS

    @property
    def ratio(self) -> float:
        return self.epoch / self.max_epoch


def parse_status_tail(text: str, *, head_cut: bool = False) -> TaoProgress | None:
    """The progress in the tail of a status.json, or None when it holds no whole epoch line.
    `head_cut`: the tail was cut from a longer file (its first line is a fragment)."""
    lines = text.split("\n")
    if head_cut:
        lines = lines[1:]
    entries = [entry for line in lines if (entry := _entry(line)) is not None]
    for i in range(len(entries) - 1, -1, -1):
        counts = _counts(entries[i])
        if counts is None:
            continue
        done, total = counts
        metrics = _metrics(list(reversed(entries[i:])))
        eta_s = seconds_of(entries[i].get("eta"))
        per_epoch = seconds_of(entries[i].get("time_per_epoch"))
        if eta_s is None and per_epoch is not None:
            eta_s = (total - done) * per_epoch
        eta_whole = None if eta_s is None or eta_s > MAX_ETA_SECONDS else max(0, round(eta_s))
        return TaoProgress(
            epoch=done,
            max_epoch=total,
            percent=min(100, max(0, done * 100 // total)),
            eta=None if eta_whole is None else clock_text(eta_whole),
            eta_seconds=eta_whole,
            time_per_epoch_seconds=None if per_epoch is None else round(per_epoch, 3),
            loss=_loss(metrics),
            metrics=tuple(sorted(metrics[:MAX_METRICS])),
        )
    return None


def seconds_of(value: Any) -> float | None:
    """Seconds in a `str(timedelta)` ("1 day, 2:03:04.5"), or a plain number; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) and value >= 0 else None
    if not isinstance(value, str) or len(value) > 64:
        return None
    m = _TIMEDELTA_RE.match(value)
    if m is None:
        number = _number(value)
        return number if number is not None and number >= 0 else None
    days = int(m.group("days") or 0)
    total = days * 86400 + int(m.group("h")) * 3600 + int(m.group("m")) * 60 + float(m.group("s"))
    return total if total >= 0 else None


def clock_text(seconds: int) -> str:
    """H:MM:SS (hours past 24 kept as hours, as a countdown reads)."""
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"


def _entry(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None  # cut by the byte cap, still being written, or not TAO's
    return entry if isinstance(entry, dict) else None


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _counts(entry: dict[str, Any]) -> tuple[int, int] | None:
    """(epochs finished, epochs in the run) from an epoch line; None if it is none."""
    epoch, last = _integer(entry.get("epoch")), _integer(entry.get("max_epoch"))
    if epoch is None or last is None or epoch < 0:
        return None
    zero_based = epoch == 0 or "max_step" in entry or "time_per_step" in entry
    done, total = (epoch + 1, last + 1) if zero_based else (epoch, last)
    if total < 1:
        return None
    return min(done, total), total


def _number(value: Any) -> float | None:
    """A finite float from a number or a numeric string (TAO writes some KPIs as str(x))."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str) and len(value) <= 64:
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _metrics(newest_first: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """The last value of each KPI (kpi, then graphical) over the lines, newest first."""
    seen: dict[str, float] = {}
    for entry in newest_first:
        for group in ("kpi", "graphical"):
            values = entry.get(group)
            if not isinstance(values, dict):
                continue
            for key, value in values.items():
                number = _number(value)
                if (
                    number is None
                    or not isinstance(key, str)
                    or key in seen
                    or len(key) > METRIC_KEY_CHARS
                    or not _KEY_RE.match(key)
                ):
                    continue
                seen[key] = number
    return list(seen.items())


def _loss(metrics: list[tuple[str, float]]) -> float | None:
    values = dict(metrics)
    for key in LOSS_KEYS:
        if key in values:
            return values[key]
    for key, value in metrics:
        low = key.lower()
        if "loss" in low and not low.startswith(_NOT_TRAINING):
            return value
    return None
