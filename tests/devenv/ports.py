"""Loopback ports for the local servers (control plane, S3, Prometheus, the operator's endpoints)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Where our picks start: above the ports services commonly listen on.
_LOWEST = 10000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range() -> tuple[int, int]:
    """The ports (first, last) the kernel hands out for port 0 and for clients' source ports."""
    try:
        first, last = (int(v) for v in _RANGE_FILE.read_text().split()[:2])
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return first, last


def pick_region() -> tuple[int, int] | None:
    """Where `free_port` picks ([low, high)): below the ephemeral range, or above it when it
    starts low; None when neither leaves 1,000 ports (then the kernel picks, as before)."""
    first, last = ephemeral_range()
    if first - _LOWEST >= 1000:
        return _LOWEST, first
    if 65536 - (last + 1) >= 1000:
        return last + 1, 65536
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, OUTSIDE the kernel's ephemeral range.

    A port the kernel picked (bind to port 0) is one any other process binding port 0 may get
    next: a simulated instance's sshd took the port just handed to an operator's metrics server
    (`BadStatusLine: SSH-2.0-AsyncSSH`). Nothing that binds port 0 or connects out gets a port
    outside the range, so the only race left is with another caller of this function, picking
    at random among thousands of ports."""
    region = pick_region()
    if region is None:
        return _kernel_pick()
    pick = random.SystemRandom()
    for _ in range(500):
        port = pick.randrange(*region)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {region[0]}..{region[1] - 1} after 500 tries")


def _kernel_pick() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
