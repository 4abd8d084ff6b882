r"""The TAO Toolkit container stand-in: `<networkArch> <action> -e <spec> [key=value ...]`.

It reads the spec YAML (container path, mapped to the sandbox), prints epoch/loss lines, writes
checkpoints and TAO's `status.json` under results_dir/<action> as TAO 6 writes it (JSON lines: per
epoch "Eval metrics generated." with KPIs, the Lightning callback's epoch line with a 0-based
`epoch`, `max_epoch` = epochs - 1, `time_per_epoch`/`eta` as str(timedelta), then "Train metrics
generated." with `train_loss`; see `_StatusLog`), stops on request (docker stop) and exits with the
chosen code. A top-level `simulation:` mapping in the spec may set `epochs`,
`epoch_seconds` (nominal, x speed), `exit_code` and `fail_at_epoch`; the `train_exit_code` fault
overrides the exit code. The `tao_progress_bars` and `tao_long_line_bytes` faults add what real
training prints: tqdm `\r` redraws and one multi-megabyte line. `train.resume_training_checkpoint_path`
(override or spec) resumes after that checkpoint's epoch; the `*_at_epoch` faults lose the instance
when an epoch ends (SIM-CONTRACT.md section 6).

`run()` is usable in-process (a thread per container): it never exits the interpreter, installs
no signal handler and sleeps only through `stop.wait()`, so setting `stop` is what SIGTERM is to
the process form. `main()` is that process form: a thin wrapper turning SIGTERM into `stop`.

A test harness control, not TAO: SIGUSR1 (or `stop` set with its `finishing` attribute true) ends
training now as if its last epoch had just completed, exit 0 with its outputs written (the
benchmarks stop an endless job at a moment they choose and time how fast the exit is noticed).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import os
import re
import signal
import sys
import threading
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from tests.brevsim import faults as knobs
from tests.brevsim.awsbridge import checkpoint_sync
from tests.brevsim.backend import Backend
from tests.brevsim.container import Docker, host_path, parse_iso
from tests.brevsim.model import NOMINAL
from tests.brevsim.record import record_call
from tests.brevsim.store import Store, read_json

USAGE = "usage: {net} [-h] {{train,evaluate,export,inference,dataset_convert}} ...\n"
ACTIONS = {
    "train",
    "evaluate",
    "export",
    "inference",
    "dataset_convert",
    "prune",
    "retrain",
    "gen_trt_engine",
}
# What each action reads from an earlier one (TAO's spec keys: `<action>.<key>`, in the spec's
# `<action>:` mapping or as an override) and the file it writes under results_dir/<action>/.
INPUT_KEYS = {
    "evaluate": "checkpoint",
    "prune": "checkpoint",
    "retrain": "pruned_model_path",
    "export": "checkpoint",
    "gen_trt_engine": "onnx_file",
    "inference": "checkpoint",
}
OUTPUT_FILES = {
    "evaluate": "results.json",
    "prune": "model_pruned.pth",
    "export": "model.onnx",
    "gen_trt_engine": "model.engine",
    "inference": "inference.txt",
}
SIGTERM_EXIT = 128 + signal.SIGTERM
KILLED_EXIT = 137  # the VM died under the container
RESUME_KEY = "resume_training_checkpoint_path"
CHECKPOINT_NAME = re.compile(r"_epoch_(\d+)\.pth$")
CHECKPOINT_MEMBER = "archive/data.pkl"  # torch.save's pickle inside the zip


class CheckpointError(Exception):
    """A resume checkpoint that cannot be loaded; the text is what TAO (Lightning/torch) prints."""


def checkpoint_bytes(epoch: int | None) -> bytes:
    """A checkpoint as torch.save writes one: a zip archive (its central directory last), here
    holding `checkpoint N` (`final checkpoint` for the last model)."""
    buf = io.BytesIO()
    member = zipfile.ZipInfo(CHECKPOINT_MEMBER, date_time=(1980, 1, 1, 0, 0, 0))  # same bytes every time
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(member, "final checkpoint\n" if epoch is None else f"checkpoint {epoch}\n")
    return buf.getvalue()


def checkpoint_text(data: bytes) -> str:
    """What a checkpoint holds, or "" when it is no whole archive (cut short, or not one)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return z.read(CHECKPOINT_MEMBER).decode()
    except (zipfile.BadZipFile, KeyError, UnicodeDecodeError):
        return ""


def checkpoint_epoch(ctr_path: str, host: Path) -> int:
    """The epoch of a checkpoint the stand-in wrote: from its name (`*_epoch_NNN.pth`), verified
    against its content (`checkpoint N` in a whole zip archive). Stricter than TAO: a mismatch
    is a corrupt file."""
    if not host.is_file():
        raise CheckpointError(f"FileNotFoundError: Checkpoint at {ctr_path} not found. Aborting training.\n")
    named = CHECKPOINT_NAME.search(host.name)
    content = checkpoint_text(host.read_bytes())
    if named is None or content != f"checkpoint {int(named.group(1))}\n":
        raise CheckpointError(
            f"RuntimeError: Error(s) in loading checkpoint {ctr_path}: PytorchStreamReader failed "
            "reading zip archive: failed finding central directory\n"
        )
    return int(named.group(1))


def _strike_due(store: Store, instance_id: str, name: str, epoch: int) -> str | None:
    """Which `*_at_epoch` fault aims at this instance for this epoch, if any."""
    for knob, how in knobs.EPOCH_STRIKES.items():
        if knobs.epoch_for(store.fault(knob), name, instance_id) == epoch:
            return how
    return None


def _sync_ended(store: Store, instance_id: str, own: str, since: float, seen: set[str]) -> bool:
    """Whether a checkpoint sync container (not `own`) created at or after `since` has ended
    (exited, or removed after it was seen). `seen` collects the ones found running."""
    docker = Docker(store, instance_id)
    present = set(docker.ids())
    if seen - present:
        return True  # a seen sync finished and was removed (--rm)
    for cid in present - {own}:
        cfg = docker.config(cid)
        if cfg is None or parse_iso(str(cfg.get("Created", ""))) < since:
            continue
        if checkpoint_sync([str(a) for a in cfg.get("Args", [])]) != "to":
            continue
        st = docker.state(cid) or {}
        if st.get("Status") == "exited":
            return True
        seen.add(cid)
    return False


def _await_sync(store: Store, instance_id: str, own: str, since: float, stop: threading.Event) -> bool:
    """Hold (no training) until a checkpoint sync that can see this epoch's checkpoint has ended,
    at most `epoch_fault_sync_wait_s`; False when stopped meanwhile."""
    limit = store.delay("epoch_fault_sync_wait_s", 0.0)
    deadline = time.monotonic() + limit
    seen: set[str] = set()
    while time.monotonic() < deadline:
        if _sync_ended(store, instance_id, own, since, seen):
            return True
        if stop.wait(0.02):
            return False
    return True


def _write_in_place(path: Path, data: bytes, seconds: float, stop: threading.Event) -> bool:
    """Write a checkpoint as torch.save does, in place: the first half, then (after `seconds`,
    the `checkpoint_write_s` knob) the rest, the zip's central directory last. Whoever reads the
    file meanwhile (a checkpoint sync) sees it cut short. False when stopped meanwhile: the
    file stays cut short, as a killed TAO leaves it."""
    with path.open("wb") as f:
        f.write(data[: len(data) // 2])
        f.flush()
        if seconds > 0 and stop.wait(seconds):
            return False
        f.write(data[len(data) // 2 :])
    return True


class _StatusLog:
    """TAO's status.json as TAO 6 writes it (nvidia_tao_pytorch.core.loggers.api_logging
    StatusLogger): one JSON object per line, appended; the caller's data first, then `date`
    ("M/D/YYYY") and `time` ("H:M:S", unpadded, local time), `status`, `verbosity`, `message`,
    and the logger's `kpi` map, which stays set between writes until the next KPIs replace it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.kpi: dict[str, Any] = {}

    def write(self, status: str, message: str, data: Mapping[str, Any] | None = None, **extra: Any) -> None:
        now = dt.datetime.now()
        entry = {
            **(data or {}),
            "date": f"{now.month}/{now.day}/{now.year}",
            "time": f"{now.hour}:{now.minute}:{now.second}",
            "status": status,
            "verbosity": "INFO",
            "message": message,
            **({"kpi": self.kpi} if self.kpi else {}),
            **extra,
        }
        with self.path.open("a") as f:
            f.write(json.dumps(entry) + "\n")

    def metrics(self, message: str, kpi: dict[str, Any]) -> None:
        """A model's own KPI write ("Eval metrics generated.", "Train metrics generated.")."""
        self.kpi = kpi
        self.write("RUNNING", message)

    def epoch_end(self, epoch: int, epochs: int, seconds: float) -> None:
        """The Lightning callback's line at the end of 1-based `epoch` (TAOStatusLogger in
        nvidia_tao_pytorch.core.callbacks.loggers: the trainer's 0-based current_epoch,
        max_epochs - 1, and str(timedelta) times)."""
        data = {
            "epoch": epoch - 1,
            "step": epoch * STEPS_PER_EPOCH,
            "max_epoch": epochs - 1,
            "max_step": epochs * STEPS_PER_EPOCH,
            "time_per_epoch": str(dt.timedelta(seconds=seconds)),
            "time_per_step": str(dt.timedelta(seconds=seconds / STEPS_PER_EPOCH)),
            "eta": str(dt.timedelta(seconds=(epochs - epoch) * seconds)),
        }
        self.write("RUNNING", "Training loop in progress", data)


STEPS_PER_EPOCH = 50


BAR_STEPS = 20


class _Console:
    """The container's stdout/stderr and its stop request."""

    def __init__(self, out: TextIO, err: TextIO, stop: threading.Event) -> None:
        self.out = out
        self.err = err
        self.stop = stop

    def log(self, text: str) -> None:
        stamp = dt.datetime.now(tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
        self.out.write(f"{stamp} [TAO Toolkit] [INFO] {text}\n")
        self.out.flush()

    def error(self, text: str) -> None:
        self.err.write(text)
        self.err.flush()

    def progress_bar(self, epoch: int, epochs: int, epoch_s: float) -> bool:
        r"""tqdm's redraws on stderr: `\r`-separated, one `\n` only when the bar closes. Real docker
        stores the whole run as ONE log line; a reader splitting on `\r` sees BAR_STEPS+1 lines.
        False when stopped midway."""
        for step in range(BAR_STEPS + 1):
            pct = step * 100 // BAR_STEPS
            bar = "#" * (step // 2) + " " * (BAR_STEPS // 2 - step // 2)
            self.err.write(
                f"\rEpoch {epoch}/{epochs}: {pct:3d}%|{bar}| {step}/{BAR_STEPS} "
                f"[00:0{step % 10}<00:00, 9.87it/s]"
            )
            self.err.flush()
            if step < BAR_STEPS and self.stop.wait(epoch_s / BAR_STEPS):
                return False
        self.err.write("\n")
        self.err.flush()
        return True

    def long_line(self, nbytes: int) -> None:
        r"""One log line of `nbytes` (a dumped config or tensor repr), written in chunks, no `\n` inside."""
        prefix = "[TAO Toolkit] [INFO] experiment config: "
        self.out.write(prefix)
        left = max(0, nbytes - len(prefix))
        chunk = "x" * 65536
        while left > 0:
            self.out.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
        self.out.write("\n")
        self.out.flush()


def run(
    state: str,
    instance_id: str,
    mounts: list[dict[str, Any]],
    rootfs: str,
    argv: list[str],
    *,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    stop: threading.Event,
) -> int:
    """One container run of the TAO image; returns its exit code (143 when `stop` was set)."""
    con = _Console(out, err, stop)
    store = Store(state)
    meta = read_json(store.instance_dir(instance_id) / "meta.json", {})
    record_call(store.calls_path, "tao", argv, where="remote", instance=meta.get("name"))
    if len(argv) < 2 or argv[1] not in ACTIONS:
        net = argv[0] if argv else "tao"
        con.error(USAGE.format(net=net))
        con.error(f"{net}: error: the following arguments are required: action\n")
        return 2
    network, action = argv[0], argv[1]
    spec_path: str | None = None
    overrides: dict[str, str] = {}
    rest = argv[2:]
    i = 0
    while i < len(rest):
        a = rest[i]
        if a in ("-e", "--experiment_spec_file", "--experiment_spec"):
            spec_path = rest[i + 1] if i + 1 < len(rest) else None
            i += 2
            continue
        if a in ("-r", "--results_dir") and i + 1 < len(rest):
            overrides["results_dir"] = rest[i + 1]
            i += 2
            continue
        k, eq, v = a.partition("=")
        if eq:
            overrides[k] = v
        i += 1
    if spec_path is None:
        con.error(
            f"{network} {action}: error: the following arguments are required: -e/--experiment_spec_file\n"
        )
        return 2
    spec_file = Path(host_path(mounts, rootfs, spec_path))
    try:
        import yaml

        spec = yaml.safe_load(spec_file.read_text()) or {}
    except FileNotFoundError:
        con.error(f"FileNotFoundError: [Errno 2] No such file or directory: '{spec_path}'\n")
        return 1
    if not isinstance(spec, dict):
        con.error(f"omegaconf.errors.ConfigTypeError: spec {spec_path} is not a mapping\n")
        return 1
    if not env.get("NVIDIA_VISIBLE_DEVICES"):
        con.error("RuntimeError: No CUDA GPUs are available (did you pass --gpus to docker run?)\n")
        return 1
    sim = spec.get("simulation") or {}
    train = spec.get("train") or {}
    epochs = int(sim.get("epochs", train.get("num_epochs", 3)))
    epoch_s = (
        float(sim.get("epoch_seconds", store.nominal("epoch_seconds", NOMINAL["epoch_seconds"])))
        * store.speed
    )
    fault_code = store.fault("train_exit_code")
    exit_code = int(fault_code if fault_code is not None else sim.get("exit_code", 0))
    fail_at = sim.get("fail_at_epoch")
    results_ctr = overrides.get("results_dir") or str(spec.get("results_dir") or "/results")
    results = Path(host_path(mounts, rootfs, results_ctr))
    out_dir = results / action
    out_dir.mkdir(parents=True, exist_ok=True)
    status = _StatusLog(out_dir / "status.json")
    mode = action.capitalize()

    def stopped() -> int:
        con.log("Received SIGTERM: stopping")
        status.write("FAILURE", f"User/System interruption: {mode} was interrupted")
        return SIGTERM_EXIT

    # Resume only when asked (override or the spec's train: mapping): no auto-resume.
    resume = overrides.get(f"train.{RESUME_KEY}") or train.get(RESUME_KEY)
    first = 1
    if resume and action in ("train", "retrain"):
        try:
            done = checkpoint_epoch(str(resume), Path(host_path(mounts, rootfs, str(resume))))
        except CheckpointError as e:
            con.error(f"Traceback (most recent call last):\n{e}")
            status.write("FAILURE", f"File system error: Cannot resume from {resume}")
            return 1
        first = done + 1
    # An earlier step's output this action reads (a workflow step's read-only input): missing, or
    # a directory where a file belongs (dockerd makes a missing bind source a directory), fails
    # as TAO does, before anything runs.
    key = INPUT_KEYS.get(action)
    needed = overrides.get(f"{action}.{key}") or (spec.get(action) or {}).get(key) if key else None
    if needed and not Path(host_path(mounts, rootfs, str(needed))).is_file():
        con.error(f"FileNotFoundError: [Errno 2] No such file or directory: '{needed}'\n")
        status.write("FAILURE", f"File system error: {needed} not found")
        return 1
    con.log(f"Starting {network} {action} with spec {spec_path}")
    for key in str(sim.get("echo_env") or "").split(","):  # a careless script printing its env
        if key.strip():
            con.log(f"environment {key.strip()}={env.get(key.strip(), '')}")
    # `resumed_from_epoch` is the stand-in's own key (TAO logs the resume, it does not record it).
    if first > 1:
        con.log(f"Resuming training from checkpoint {resume} (epoch {first - 1})")
        status.write("STARTED", f"Starting {network} {action}.", resumed_from_epoch=first - 1)
    else:
        status.write("STARTED", f"Starting {network} {action}.")
    status.write("STARTED", "Starting Training Loop.")
    bars = bool(store.fault("tao_progress_bars"))
    long_line = int(store.fault("tao_long_line_bytes") or 0)
    if long_line > 0:
        con.long_line(long_line)
    own_container = Path(rootfs).parent.name
    for epoch in range(first, epochs + 1):
        began = time.monotonic()
        if bars:
            if not con.progress_bar(epoch, epochs, epoch_s):
                if _finishing(stop):
                    break
                return stopped()
        elif stop.wait(epoch_s):
            if _finishing(stop):
                break
            return stopped()
        if fail_at is not None and epoch == int(fail_at):
            con.error(
                f"Traceback (most recent call last):\nRuntimeError: simulated failure at epoch {epoch}\n"
            )
            status.write("FAILURE", f"Error at epoch {epoch}")
            return int(sim.get("exit_code", 1)) or 1
        loss = round(1.0 / math.sqrt(epoch), 4)
        con.log(f"Epoch {epoch}/{epochs}: loss={loss} lr=0.0001")
        # Validation runs before the epoch's end hooks; TAO writes some KPIs as str(x).
        status.metrics(
            "Eval metrics generated.",
            {"val_loss": round(loss * 1.1, 4), "val_mAP": str(round(1 - loss / 2, 4))},
        )
        if action in ("train", "retrain") and not _write_in_place(
            out_dir / f"model_epoch_{epoch:03d}.pth",
            checkpoint_bytes(epoch),
            store.delay("checkpoint_write_s", 0.0),
            stop,
        ):
            return stopped()
        status.epoch_end(epoch, epochs, time.monotonic() - began)
        status.metrics("Train metrics generated.", {"train_loss": loss})
        # Faults are re-read: a test may aim one at an instance id after the container started.
        written = time.time()  # a sync created after this sees epoch's checkpoint
        now = Store(state)
        strike = _strike_due(now, instance_id, str(meta.get("name") or ""), epoch)
        if strike is not None:
            if not _await_sync(now, instance_id, own_container, written, stop):
                return stopped()
            Backend(now).strike(instance_id, strike, spare_container=own_container)
            if strike == "stop":
                return stopped()  # a graceful shutdown: dockerd sends SIGTERM (exit 143)
            # A VM that vanished or failed reports nothing ever again: no exit code reaches an
            # in-flight `docker wait`; the program stays until its runner stops it (test teardown).
            stop.wait()
            return KILLED_EXIT
    status.write("RUNNING", "Training loop complete.")
    if exit_code:
        con.error(f"Execution failed with exit code {exit_code}\n")
        status.write("FAILURE", f"{action} failed")
        return exit_code
    if action in ("train", "retrain"):
        (out_dir / "model_latest.pth").write_bytes(checkpoint_bytes(None))
    elif action in OUTPUT_FILES:
        (out_dir / OUTPUT_FILES[action]).write_text(f"{network} {action} output\n")
    # TAO 6's monitor_status ends a good run with RUNNING, not SUCCESS (nothing writes SUCCESS).
    status.write("RUNNING", f"{mode} finished successfully.")
    con.log(f"{action} finished successfully")
    return 0


def _finishing(stop: threading.Event) -> bool:
    """The harness asked training to end now, successfully (module docstring)."""
    return bool(getattr(stop, "finishing", False))


def main(state: str, instance_id: str, mounts: list[dict[str, Any]], rootfs: str, argv: list[str]) -> int:
    """The container process (container.program): SIGTERM (docker stop) sets the stop event;
    SIGUSR1 (the harness) sets it as a request to finish now."""
    stop = threading.Event()

    def finish(signum: int, frame: object) -> None:
        stop.finishing = True  # type: ignore[attr-defined]
        stop.set()

    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGUSR1, finish)
    return run(
        state, instance_id, mounts, rootfs, argv, env=os.environ, out=sys.stdout, err=sys.stderr, stop=stop
    )
