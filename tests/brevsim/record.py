"""The append-only call log: one JSON line per argv received (never stdin content, only its size).

A call is written when it starts (so a process that is killed still counts); its stdin byte count
is appended as a second line keyed by the call id once known. `harness.BrevSim.calls()` merges them.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path


def _append(path: Path, entry: dict[str, object]) -> None:
    line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
    finally:
        os.close(fd)


def record_call(
    calls_path: Path, program: str, argv: list[str], *, where: str = "local", instance: str | None = None
) -> str:
    call_id = f"{os.getpid()}-{time.monotonic_ns()}"
    _append(
        calls_path,
        {
            "id": call_id,
            "program": program,
            "argv": argv,
            "where": where,
            "instance": instance,
            "ts": time.time(),
        },
    )
    return call_id


def record_stdin(calls_path: Path, call_id: str, nbytes: int) -> None:
    if nbytes:
        _append(calls_path, {"id": call_id, "stdin_bytes": nbytes})
