"""Talking to the simulator daemon (daemon.py) from short-lived simulator processes and the harness.

One JSON request per connection on an abstract unix socket named after the state directory (no
path-length limit, no file to clean up). Standard library only: the zygote's programs (`brev`,
`docker`) run in forks of a `python -IS` interpreter.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

# Every process the simulator starts carries this variable (value: the state directory), so the
# reaper can find them all, however they were daemonised or re-parented.
MARKER = "BREVSIM_STATE"


class DaemonDown(Exception):
    """The daemon does not answer (not started, or already stopped)."""


def address(state: Path | str) -> str:
    digest = hashlib.sha256(str(Path(state).resolve()).encode()).hexdigest()[:24]
    return f"\0brevsim-{digest}"


def request(state: Path | str, op: str, timeout: float = 30.0, **args: Any) -> dict[str, Any]:
    """Send one request; raises DaemonDown when nobody listens, RuntimeError on a daemon error."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(address(state))
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise DaemonDown(f"the simulator daemon of {state} is not running") from e
        s.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    if not data:
        raise DaemonDown(f"the simulator daemon of {state} closed the connection")
    reply: dict[str, Any] = json.loads(data)
    if "error" in reply:
        raise RuntimeError(f"simulator daemon: {reply['error']}")
    return reply


def marked_env(state: Path | str, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env[MARKER] = str(Path(state).resolve())
    return env


def ping(state: Path | str) -> bool:
    with contextlib.suppress(DaemonDown, OSError):
        request(state, "ping", timeout=2.0)
        return True
    return False
