"""A CPU cgroup at idle priority for the bench's background footprint fill.

`nice -n 19` does not keep the fill off the timed scenarios' CPU: with the kernel's autogroup
scheduling (`/proc/sys/kernel/sched_autogroup_enabled` = 1, the default on desktop and many cloud
kernels), every `setsid` starts a new task group that competes at full weight whatever its nice
value, and the operator, the simulator and ssh start a new session for nearly every process they
spawn. Measured: beside the fill at nice 19, ours' billed idle per job tripled (its fixed process
costs); in this cgroup by 15-48% (33 real s alone; 38, 49, 42 in three runs).

A cgroup holds: its members and every descendant stay in it across `setsid`, and a task in a
non-root cgroup is not autogrouped. With `cpu.idle = 1` (Linux >= 5.15; else the smallest
`cpu.shares` / `cpu.weight`) the whole fill only gets CPU the timed scenarios leave unused.
The cgroup also lists every process the fill started, so `kill_all` reaps stragglers.

Needs a writable cgroup `cpu` controller (root, or a delegated subtree). Without one, `create`
returns None and says why; the bench then keeps the fill away from the timed scenarios instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

V1 = Path("/sys/fs/cgroup/cpu")  # cgroup v1 (hybrid): the cpu controller's own hierarchy
V2 = Path("/sys/fs/cgroup")  # cgroup v2 (unified)


class IdleCgroup:
    def __init__(self, path: Path, how: str) -> None:
        self.path, self.how = path, how

    @classmethod
    def create(cls, name: str) -> tuple[IdleCgroup | None, str]:
        """(the cgroup, how its priority is set) or (None, why there is none). Tries v1's cpu
        hierarchy, then v2; a hierarchy that refuses goes on to the next."""
        why: list[str] = []
        for root, low in ((V1, "cpu.shares"), (V2, "cpu.weight")):
            if root is V2 and "cpu" not in _read(V2 / "cgroup.controllers").split():
                continue
            if not (root / "cgroup.procs").exists():
                continue
            path = root / f"{name}-{os.getpid()}"
            try:
                path.mkdir(exist_ok=True)
            except OSError as e:
                why.append(f"cannot create a cgroup under {root}: {e}")
                continue
            for knob, value in (("cpu.idle", "1"), (low, "2" if low == "cpu.shares" else "1")):
                try:
                    (path / knob).write_text(value)
                except OSError:
                    continue
                return cls(path, f"cgroup {path} with {knob} = {value}"), ""
            path.rmdir()
            why.append(f"{path}: neither cpu.idle nor {low} is writable")
        return None, "; ".join(why) or (
            "no cgroup cpu controller is mounted (/sys/fs/cgroup/cpu or a v2 cgroup.controllers)"
        )

    def wrap(self, cmd: list[str]) -> list[str]:
        """`cmd` started inside the cgroup: the shell moves itself in, then execs `cmd`, so no
        process of the fill ever runs outside it."""
        procs = self.path / "cgroup.procs"
        return ["sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh", *cmd]

    def pids(self) -> list[int]:
        return [int(p) for p in _read(self.path / "cgroup.procs").split()]

    def kill_all(self, grace: float = 10.0) -> list[str]:
        """SIGTERM whatever the fill left running, SIGKILL after `grace`, then remove the cgroup.
        Returns what was left ("pid comm"): a clean stop leaves nothing, so any is a leak."""
        left = [f"{pid} {_read(Path(f'/proc/{pid}/comm')).strip()}" for pid in self.pids()]
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.1)  # no event exists for "a cgroup emptied" in v1
        with contextlib.suppress(OSError):  # a process that would not die keeps the group
            self.path.rmdir()
        return left


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
