r"""The TAO Toolkit container stand-in: `<networkArch> <action> -e <spec> [key=value ...]`.

It reads the spec YAML (container path, mapped to the sandbox), prints epoch/loss lines, writes
checkpoints and TAO's `status.json` (JSON lines) under results_dir, honours SIGTERM (docker stop)
and exits with the chosen code. A top-level `simulation:` mapping in the spec may set `epochs`,
`epoch_seconds` (nominal, x speed), `exit_code` and `fail_at_epoch`; the `train_exit_code` fault
overrides the exit code. The `tao_progress_bars` and `tao_long_line_bytes` faults add what real
training prints: tqdm `\r` redraws and one multi-megabyte line.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

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


def _log(text: str) -> None:
    stamp = dt.datetime.now(tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    sys.stdout.write(f"{stamp} [TAO Toolkit] [INFO] {text}\n")
    sys.stdout.flush()


BAR_STEPS = 20


def _progress_bar(epoch: int, epochs: int, epoch_s: float) -> None:
    r"""tqdm's redraws on stderr: `\r`-separated, one `\n` only when the bar closes. Real docker
    stores the whole run as ONE log line; a reader splitting on `\r` sees BAR_STEPS+1 lines."""
    for step in range(BAR_STEPS + 1):
        pct = step * 100 // BAR_STEPS
        bar = "#" * (step // 2) + " " * (BAR_STEPS // 2 - step // 2)
        sys.stderr.write(
            f"\rEpoch {epoch}/{epochs}: {pct:3d}%|{bar}| {step}/{BAR_STEPS} [00:0{step % 10}<00:00, 9.87it/s]"
        )
        sys.stderr.flush()
        if step < BAR_STEPS:
            time.sleep(epoch_s / BAR_STEPS)
    sys.stderr.write("\n")
    sys.stderr.flush()


def _long_line(nbytes: int) -> None:
    r"""One log line of `nbytes` (a dumped config or tensor repr), written in chunks, no `\n` inside."""
    prefix = "[TAO Toolkit] [INFO] experiment config: "
    sys.stdout.write(prefix)
    left = max(0, nbytes - len(prefix))
    chunk = "x" * 65536
    while left > 0:
        sys.stdout.write(chunk[: min(left, len(chunk))])
        left -= len(chunk)
    sys.stdout.write("\n")
    sys.stdout.flush()


def main(state: str, instance_id: str, mounts: list[dict[str, Any]], rootfs: str, argv: list[str]) -> int:
    store = Store(state)
    meta = read_json(store.instance_dir(instance_id) / "meta.json", {})
    record_call(store.calls_path, "tao", argv, where="remote", instance=meta.get("name"))
    if len(argv) < 2 or argv[1] not in ACTIONS:
        net = argv[0] if argv else "tao"
        sys.stderr.write(USAGE.format(net=net))
        sys.stderr.write(f"{net}: error: the following arguments are required: action\n")
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
        sys.stderr.write(
            f"{network} {action}: error: the following arguments are required: -e/--experiment_spec_file\n"
        )
        return 2
    spec_file = Path(host_path(mounts, rootfs, spec_path))
    try:
        import yaml

        spec = yaml.safe_load(spec_file.read_text()) or {}
    except FileNotFoundError:
        sys.stderr.write(f"FileNotFoundError: [Errno 2] No such file or directory: '{spec_path}'\n")
        return 1
    if not isinstance(spec, dict):
        sys.stderr.write(f"omegaconf.errors.ConfigTypeError: spec {spec_path} is not a mapping\n")
        return 1
    if not os.environ.get("NVIDIA_VISIBLE_DEVICES"):
        sys.stderr.write("RuntimeError: No CUDA GPUs are available (did you pass --gpus to docker run?)\n")
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

    def on_term(signum: int, frame: object) -> None:
        _log("Received SIGTERM: stopping")
        _status(status, "FAILURE", "Training was interrupted (SIGTERM)")
        sys.stdout.flush()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    _log(f"Starting {network} {action} with spec {spec_path}")
    _status(status, "STARTED", f"Starting {network} {action}")
    bars = bool(store.fault("tao_progress_bars"))
    long_line = int(store.fault("tao_long_line_bytes") or 0)
    if long_line > 0:
        _long_line(long_line)
    for epoch in range(1, epochs + 1):
        if bars:
            _progress_bar(epoch, epochs, epoch_s)
        else:
            time.sleep(epoch_s)
        if fail_at is not None and epoch == int(fail_at):
            sys.stderr.write(
                f"Traceback (most recent call last):\nRuntimeError: simulated failure at epoch {epoch}\n"
            )
            _status(status, "FAILURE", f"Error at epoch {epoch}")
            return int(sim.get("exit_code", 1)) or 1
        loss = round(1.0 / math.sqrt(epoch), 4)
        _log(f"Epoch {epoch}/{epochs}: loss={loss} lr=0.0001")
        if action in ("train", "retrain"):
            (out_dir / f"model_epoch_{epoch:03d}.pth").write_bytes(f"checkpoint {epoch}\n".encode())
        _status(status, "RUNNING", f"Epoch {epoch} finished", epoch=epoch, max_epoch=epochs, loss=loss)
    if exit_code:
        sys.stderr.write(f"Execution failed with exit code {exit_code}\n")
        _status(status, "FAILURE", f"{action} failed")
        return exit_code
    if action in ("train", "retrain"):
        (out_dir / "model_latest.pth").write_bytes(b"final checkpoint\n")
    _status(status, "SUCCESS", f"{action} finished successfully")
    _log(f"{action} finished successfully")
    return 0
