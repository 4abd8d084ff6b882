"""Finding and killing every process a simulator started, by its marker (control.MARKER).

Processes are found by the environment variable every simulator process carries (remote shells,
containers run as processes, the `brev` CLI's ssh pipelines, ssh-agents and ssh ControlPersist
masters that daemonised themselves and left every process group), not by process tree, which
daemonising breaks. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from tests.brevsim.control import MARKER


def marked(state: Path | str) -> list[int]:
    """Pids of live (non-zombie) processes carrying this simulator's marker."""
    needle = f"{MARKER}={Path(state).resolve()}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry.name}/environ").read_bytes()
            stat = Path(f"/proc/{entry.name}/stat").read_bytes()
        except OSError:
            continue
        if stat.rsplit(b")", 1)[-1].split()[0] == b"Z":
            continue
        if needle + b"\0" in env or env.endswith(needle):
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
