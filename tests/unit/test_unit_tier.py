"""The unit tier's no-I/O rule is enforced (tests/conftest.py), not only stated."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

NO_IO = "unit tests do no I/O"


def test_starting_a_program_is_refused() -> None:
    with pytest.raises(RuntimeError, match=NO_IO):
        subprocess.run([sys.executable, "-c", "pass"], check=False)


def test_connecting_is_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s, pytest.raises(RuntimeError, match=NO_IO):
        s.connect(("127.0.0.1", 9))


def test_listening_is_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s, pytest.raises(RuntimeError, match=NO_IO):
        s.bind(("127.0.0.1", 0))


def test_name_resolution_is_refused() -> None:
    with pytest.raises(RuntimeError, match=NO_IO):
        socket.getaddrinfo("localhost", 80)
