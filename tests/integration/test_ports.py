"""tests/devenv/ports.free_port: the ports handed to the local servers are ones nothing binding
port 0 can take (an instance's sshd once took an operator's metrics port between pick and bind)."""

from __future__ import annotations

import socket
from contextlib import ExitStack

from tests.devenv.ports import ephemeral_range, free_port, pick_region


def test_picks_are_outside_the_kernels_range_and_bindable() -> None:
    first, last = ephemeral_range()
    picks = {free_port() for _ in range(20)}
    region = pick_region()
    if region is not None:
        assert all(region[0] <= p < region[1] for p in picks), (sorted(picks), region)
        assert not any(first <= p <= last for p in picks), (sorted(picks), (first, last))
        assert len(picks) > 1  # at random, not one port for every caller
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", picks.pop()))
        s.listen()


def test_what_binds_port_0_never_lands_where_the_picks_are() -> None:
    # The premise of the fix: the kernel's own picks (servers on port 0, clients' source ports)
    # stay inside its ephemeral range.
    first, last = ephemeral_range()
    with ExitStack() as stack:
        ports = []
        for _ in range(50):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    assert all(first <= p <= last for p in ports), (sorted(ports), (first, last))
