"""Loopback ports for the local servers (control plane, S3, Prometheus, the operator's endpoints)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it). Another process
    may take it before the caller's server binds: a small race, accepted for loopback tests."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
