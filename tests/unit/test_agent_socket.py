"""Where the ssh agent of a brev home listens: unix-socket paths are limited (~108 bytes), and test
homes (and some HOMEs) are deep."""

from __future__ import annotations

import tempfile
from pathlib import Path

from controller.brev.runner import default_agent_socket


def test_a_short_home_keeps_its_socket_under_its_own_ssh_dir() -> None:
    assert default_agent_socket(Path("/home/operator")) == Path("/home/operator/.ssh/taobrev-agent.sock")


def test_a_deep_home_gets_a_short_stable_path_of_its_own_in_the_temp_dir() -> None:
    deep = Path("/home") / ("d" * 120)
    other = Path("/home") / ("e" * 120)
    sock = default_agent_socket(deep)
    assert len(str(sock)) <= 100
    assert sock.parent.parent == Path(tempfile.gettempdir())
    assert sock == default_agent_socket(deep), "the same home always gets the same socket"
    assert sock != default_agent_socket(other)
