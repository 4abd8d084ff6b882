r"""The TAO Toolkit container stand-in: `<networkArch> <action> -e <spec> [key=value ...]`.

It reads the spec YAML (container path, mapped to the sandbox), prints epoch/loss lines, writes
checkpoints and TAO's `status.json` (JSON lines) under results_dir, stops on request (docker stop)
and exits with the chosen code. A top-level `simulation:` mapping in the spec may set `epochs`,
`epoch_seconds` (nominal, x speed), `exit_code` and `fail_at_epoch`; the `train_exit_code` fault
overrides the exit code. The `tao_progress_bars` and `tao_long_line_bytes` faults add what real
training prints: tqdm `\r` redraws and one multi-megabyte line. `train.resume_training_checkpoint_path`
(override or spec) resumes after that checkpoint's epoch; the `*_at_epoch` faults lose the instance
when an epoch ends (SIM-CONTRACT.md section 6).

`run()` is usable in-process (a thread per container): it never exits the interpreter, installs
no signal handler and sleeps only through `stop.wait()`, so setting `stop` is what SIGTERM is to
the process form. `main()` is that process form: a thin wrapper turning SIGTERM into `stop`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from tests.brevsim import faults as knobs
from tests.brevsim.backend import Backend
from tests.brevsim.container import host_path
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
SIGTERM_EXIT = 128 + signal.SIGTERM
KILLED_EXIT = 137  # the VM died under the container
RESUME_KEY = "resume_training_checkpoint_path"
CHECKPOINT_NAME = re.compile(r"_epoch_(\d+)\.pth$")


class CheckpointError(Exception):
    """A resume checkpoint that cannot be loaded; the text is what TAO (Lightning/torch) prints."""


def checkpoint_epoch(ctr_path: str, host: Path) -> int:
    """The epoch of a checkpoint the stand-in wrote: from its name (`*_epoch_NNN.pth`), verified
    against its content (`checkpoint N`). Stricter than TAO: a mismatch is a corrupt file."""
    if not host.is_file():
        raise CheckpointError(f"FileNotFoundError: Checkpoint at {ctr_path} not found. Aborting training.\n")
    named = CHECKPOINT_NAME.search(host.name)
    try:
        content = host.read_bytes().decode()
    except UnicodeDecodeError:
        content = ""
    if named is None or content != f"checkpoint {int(named.group(1))}\n":
        raise CheckpointError(
            f"RuntimeError: Error(s) in loading checkpoint {ctr_path}: PytorchStreamReader failed "
            "reading zip archive: failed finding central directory\n"
        )
    return int(named.group(1))


def _strike(state: str, instance_id: str, name: str, epoch: int, own_container: str) -> bool:
    """Fire an `*_at_epoch` fault aimed at this instance for this epoch (faults re-read: a test may
    aim one after the container started). True when the instance was lost."""
    store = Store(state)
    for knob, how in knobs.EPOCH_STRIKES.items():
        if knobs.epoch_for(store.fault(knob), name, instance_id) == epoch:
            Backend(store).strike(instance_id, how, spare_container=own_container)
            return True
    return False


def _status(path: Path, status: str, message: str, **extra: Any) -> None:
    now = dt.datetime.now(tz=dt.UTC)
    entry = {
        "date": now.strftime("%-m/%-d/%Y"),
        "time": now.strftime("%H:%M:%S"),
        "status": status,
        "verbosity": "INFO",
        "message": message,
        **extra,
    }
    with path.open("a") as f:
        f.write(json.dumps(entry) + "\n")


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
    status = out_dir / "status.json"

    def stopped() -> int:
        con.log("Received SIGTERM: stopping")
        _status(status, "FAILURE", "Training was interrupted (SIGTERM)")
        return SIGTERM_EXIT

    # Resume only when asked (override or the spec's train: mapping): no auto-resume.
    resume = overrides.get(f"train.{RESUME_KEY}") or train.get(RESUME_KEY)
    first = 1
    if resume and action in ("train", "retrain"):
        try:
            done = checkpoint_epoch(str(resume), Path(host_path(mounts, rootfs, str(resume))))
        except CheckpointError as e:
            con.error(f"Traceback (most recent call last):\n{e}")
            _status(status, "FAILURE", f"Cannot resume from {resume}")
            return 1
        first = done + 1
    con.log(f"Starting {network} {action} with spec {spec_path}")
    if first > 1:
        con.log(f"Resuming training from checkpoint {resume} (epoch {first - 1})")
        _status(status, "STARTED", f"Starting {network} {action}", resumed_from_epoch=first - 1)
    else:
        _status(status, "STARTED", f"Starting {network} {action}")
    bars = bool(store.fault("tao_progress_bars"))
    long_line = int(store.fault("tao_long_line_bytes") or 0)
    if long_line > 0:
        con.long_line(long_line)
    own_container = Path(rootfs).parent.name
    for epoch in range(first, epochs + 1):
        if bars:
            if not con.progress_bar(epoch, epochs, epoch_s):
                return stopped()
        elif stop.wait(epoch_s):
            return stopped()
        if fail_at is not None and epoch == int(fail_at):
            con.error(
                f"Traceback (most recent call last):\nRuntimeError: simulated failure at epoch {epoch}\n"
            )
            _status(status, "FAILURE", f"Error at epoch {epoch}")
            return int(sim.get("exit_code", 1)) or 1
        loss = round(1.0 / math.sqrt(epoch), 4)
        con.log(f"Epoch {epoch}/{epochs}: loss={loss} lr=0.0001")
        if action in ("train", "retrain"):
            (out_dir / f"model_epoch_{epoch:03d}.pth").write_bytes(f"checkpoint {epoch}\n".encode())
        _status(status, "RUNNING", f"Epoch {epoch} finished", epoch=epoch, max_epoch=epochs, loss=loss)
        if _strike(state, instance_id, str(meta.get("name") or ""), epoch, own_container):
            return KILLED_EXIT
    if exit_code:
        con.error(f"Execution failed with exit code {exit_code}\n")
        _status(status, "FAILURE", f"{action} failed")
        return exit_code
    if action in ("train", "retrain"):
        (out_dir / "model_latest.pth").write_bytes(b"final checkpoint\n")
    _status(status, "SUCCESS", f"{action} finished successfully")
    con.log(f"{action} finished successfully")
    return 0


def main(state: str, instance_id: str, mounts: list[dict[str, Any]], rootfs: str, argv: list[str]) -> int:
    """The container process (container.program): SIGTERM (docker stop) sets the stop event."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    return run(
        state, instance_id, mounts, rootfs, argv, env=os.environ, out=sys.stdout, err=sys.stderr, stop=stop
    )
