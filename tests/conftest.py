"""Shared fixtures. Each plugin module is owned by one part of the system:

- cluster: the real local control plane (kube-apiserver + etcd + kubectl), a namespace per test;
- s3: moto in server mode on loopback;
- brevsim: the Brev CLI simulator (bin dir to put first on PATH, fault injection, call record);
- operator: the operator as a separate process against all of the above;
- kueue: the real kueue-controller-manager against the control plane (on demand).

It also holds the unit tier to its promise (no I/O, seconds): while a test under tests/unit is set
up and runs, starting a program or touching the network raises `UnitTierIOError`. The
check is a PEP 578 audit hook, so nothing is patched. Reading repository files stays allowed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from pathlib import Path

import pytest

from tests import durations

pytest_plugins = [
    "tests.fixtures.cluster",
    "tests.fixtures.s3",
    "tests.fixtures.brevsim",
    "tests.fixtures.operator",
    "tests.fixtures.webhook",
    "tests.fixtures.kueue",
]

UNIT_DIR = Path(__file__).resolve().parent / "unit"
# Audit events that mean a unit test left the process: running a program, or the network.
IO_EVENTS = frozenset(
    {
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "socket.connect",
        "socket.bind",
        "socket.getaddrinfo",
        "urllib.Request",
    }
)


class UnitTierIOError(RuntimeError):
    """A unit test started a program or used the network; it belongs in tests/integration."""


class _UnitGuard:
    active = False


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _UnitGuard.active and event in IO_EVENTS:
        raise UnitTierIOError(
            f"unit tests do no I/O, but this one raised the audit event {event} {args!r:.200}: "
            "drive the code with a fake instead, or move the test to tests/integration"
        )


# An audit hook cannot be removed; _UnitGuard.active limits it to unit tests.
sys.addaudithook(_audit)


def _guarded(item: pytest.Item) -> Generator[None, object, object]:
    if not item.path.is_relative_to(UNIT_DIR):
        return (yield)
    _UnitGuard.active = True
    try:
        return (yield)
    finally:
        _UnitGuard.active = False


# Setup and call only: the last test of a session tears down the session-scoped fixtures (control
# plane, S3, operator) of the e2e tests that ran before it, and that teardown is rightly I/O.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


# The tier a test is in is its directory: every test under tests/e2e is marked e2e and every test
# under tests/integration integration, so `-m "not e2e"` (or `-m "not e2e and not integration"`
# for the no-I/O tiers) is really the fast lane; a per-file `pytestmark` was missing from most
# e2e files, and `-m "not e2e"` ran them all.
TIER_MARKS = {
    Path(__file__).resolve().parent / "e2e": "e2e",
    Path(__file__).resolve().parent / "integration": "integration",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for directory, mark in TIER_MARKS.items():
            if item.path.is_relative_to(directory):
                item.add_marker(mark)
    # Long tests first, spread over the workers (tests/durations.py says why). Every worker
    # collects and must reach the same order: it depends only on the items and the file.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = durations.spread(items, [item.nodeid for item in items], durations.load(), workers)
