"""Finding and killing every process a simulator started, by its marker (control.MARKER).

Processes are found by the environment variable every simulator process carries (remote shells,
containers run as processes, the `brev` CLI's ssh pipelines, ssh-agents that daemonised themselves
and left every process group), not by process tree, which daemonising breaks. An ssh ControlPersist
master overwrites its environment with its process title (`ssh: <ControlPath> [mux]`), so masters
are found by their ControlPath: `~/.ssh/brev-control-%C`, where %C is OpenSSH's connection hash of
(local hostname, 127.0.0.1, the instance's port, ubuntu) over every port the daemon ever served
(state/ports.json). Standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import time
from pathlib import Path

from tests.brevsim.control import MARKER


def control_hashes(state: Path | str) -> set[bytes]:
    """OpenSSH's %C (ssh_connection_hash) of every connection to this simulator's instances."""
    try:
        ports = json.loads((Path(state) / "ports.json").read_text())
    except (OSError, ValueError):
        return set()
    host = socket.gethostname()
    hashes = set()
    for port in ports:
        digest = hashlib.sha1(f"{host}127.0.0.1{port}ubuntu".encode()).hexdigest()  # noqa: S324 - OpenSSH's %C
        hashes.add(b"brev-control-" + digest.encode())
    return hashes


def marked(state: Path | str) -> list[int]:
    """Pids of live (non-zombie) processes carrying this simulator's marker, and its ssh masters."""
    needle = f"{MARKER}={Path(state).resolve()}".encode()
    masters = control_hashes(state)
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry.name}/environ").read_bytes()
            stat = Path(f"/proc/{entry.name}/stat").read_bytes()
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes() if masters else b""
        except OSError:
            continue
        if stat.rsplit(b")", 1)[-1].split()[0] == b"Z":
            continue
        own = needle + b"\0" in env or env.endswith(needle)
        master = cmdline.startswith(b"ssh: ") and any(h in cmdline for h in masters)
        if own or master:
            found.append(int(entry.name))
    return found


def reap(state: Path | str, *, spare: set[int] | None = None, rounds: int = 20) -> int:
    """SIGKILL every marked process (a process may fork while we look: repeat until none is left).
    Returns how many were killed."""
    spare = {os.getpid(), *(spare or set())}
    killed = 0
    for _ in range(rounds):
        pids = [p for p in marked(state) if p not in spare]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.02)
    return killed
