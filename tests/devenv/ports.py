"""Loopback ports for the local servers (control plane, S3, Prometheus, the operator's endpoints)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Where our picks start: above the ports services commonly listen on.
_LOWEST = 10000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_start() -> int:
    """The first port the kernel hands out for port 0 and for clients' source ports."""
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, BELOW the kernel's ephemeral range.

    A port the kernel picked (bind to port 0) is one any other process binding port 0 may get
    next: a simulated instance's sshd took the port just handed to an operator's metrics server
    (`BadStatusLine: SSH-2.0-AsyncSSH`). Nothing that binds port 0 or connects out gets a port
    below the range, so the only race left is with another caller of this function, picking at
    random among ~20,000 ports."""
    top = ephemeral_start()
    if top - _LOWEST < 1000:  # an unusual range: let the kernel pick, as before
        return _kernel_pick()
    pick = random.SystemRandom()
    for _ in range(500):
        port = pick.randrange(_LOWEST, top)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {_LOWEST}..{top - 1} after 500 tries")


def _kernel_pick() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
