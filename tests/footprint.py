"""Memory of an operator pod, read from /proc: the operator process plus every process that lives
in its pod (the brev/ssh calls it runs and the ssh ControlPersist masters they leave behind).

A master daemonises: it leaves the operator's process tree (reparented to PID 1, or to the
nearest subreaper) although in a container it stays in the pod and counts against its memory
limit. So the pod is the operator's descendants PLUS whatever `include` says belongs to it;
`masters_of(home)` picks the masters of the operator whose brev home is `home` (their proctitle
names the ControlPath, which lives in that home's control directory). Inside a PID namespace
whose PID 1 is the pod's init, pass that init as `root_pid` and everything is a descendant.

Used by the PID 1 test and importable by the benchmark:
    mem = pod_memory(operator_pid, include=masters_of(home))
    mem.operator_rss, mem.children_rss, mem.n_children   # bytes, bytes, count
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from controller.brev.sshmux import control_dir

PROC = Path("/proc")


class PodMemory(NamedTuple):
    operator_rss: int  # bytes (or PSS bytes with metric="pss")
    children_rss: int  # bytes, summed over every other process of the pod
    n_children: int  # processes counted in children_rss (zombies included: they hold PIDs)


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    state: str  # "R", "S", "Z", ...
    comm: str


def processes(proc: Path = PROC) -> Iterator[ProcInfo]:
    """Every process visible in `proc` (a process that exits while being read is skipped)."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        # comm may contain spaces and ')': it is everything between the first '(' and the last ')'.
        head, _, rest = text.rpartition(")")
        fields = rest.split()
        yield ProcInfo(int(entry.name), int(fields[1]), fields[0], head.partition("(")[2])


def descendants(root_pid: int, proc: Path = PROC) -> set[int]:
    children: dict[int, list[int]] = {}
    for p in processes(proc):
        children.setdefault(p.ppid, []).append(p.pid)
    found: set[int] = set()
    todo = [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def zombies(proc: Path = PROC) -> list[ProcInfo]:
    """Processes that exited and were never reaped by their parent."""
    return [p for p in processes(proc) if p.state == "Z"]


def memory_of(pid: int, metric: Literal["rss", "pss"] = "rss", proc: Path = PROC) -> int:
    """Resident bytes of one process (0 for a zombie or a process that is gone). PSS splits
    shared pages (libc, libcrypto of 100 ssh processes) among their users: the honest sum."""
    try:
        if metric == "pss":
            text = (proc / str(pid) / "smaps_rollup").read_text()
            key = "Pss:"
        else:
            text = (proc / str(pid) / "status").read_text()
            key = "VmRSS:"
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0


def cmdline(pid: int, proc: Path = PROC) -> str:
    try:
        return (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def masters_of(home: Path, proc: Path = PROC) -> Callable[[int], bool]:
    """Whether a pid is an ssh ControlPersist master of the operator whose brev home is `home`:
    OpenSSH titles it `ssh: <ControlPath> [mux]`."""
    prefix = f"ssh: {control_dir(home)}/"

    def test(pid: int) -> bool:
        text = cmdline(pid, proc)
        return text.startswith(prefix) and "[mux]" in text

    return test


def ssh_masters(home: Path, proc: Path = PROC) -> list[int]:
    test = masters_of(home, proc)
    return [p.pid for p in processes(proc) if p.comm == "ssh" and test(p.pid)]


def pod_memory(
    root_pid: int,
    *,
    metric: Literal["rss", "pss"] = "rss",
    include: Callable[[int], bool] | None = None,
    proc: Path = PROC,
) -> PodMemory:
    """(operator, every other process of the pod, how many of them). `root_pid` is the operator
    (or the pod's init); `include` adds processes outside its tree that belong to the pod."""
    members = descendants(root_pid, proc)
    if include is not None:
        members |= {p.pid for p in processes(proc) if p.pid != root_pid and include(p.pid)}
    return PodMemory(
        operator_rss=memory_of(root_pid, metric, proc),
        children_rss=sum(memory_of(pid, metric, proc) for pid in members),
        n_children=len(members),
    )
