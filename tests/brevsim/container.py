"""Simulated containers: on-disk records, the per-container shim, and the image -> program mapping.

A detached TAO container (`docker run -d`) runs IN the simulator daemon (engine.py): a thread, no
OS process. Other detached containers (the short aws-cli uploads) are a real detached process
tree: a shim (setsid, stdio redirected to the container's log file, so it never holds an ssh
session's pipes open) runs the container's program as a child, records Pid/StartedAt, then
ExitCode/FinishedAt. Both keep the same records. `docker stop` signals the program; an instance
deleted, stopped or vanished kills its containers (the shim or the daemon watches the instance's
`gone` marker and its `disappear_at`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tests.brevsim import control, wakeup
from tests.brevsim.store import Store, flocked, read_json, write_json

if TYPE_CHECKING:
    from tests.brevsim.engine import Engine

ZERO_TIME = "0001-01-01T00:00:00Z"
# Set inside the daemon process: in-process containers are signalled directly, not over control.
LOCAL_ENGINE: Engine | None = None


def iso(ts: float | None = None) -> str:
    t = dt.datetime.fromtimestamp(time.time() if ts is None else ts, tz=dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def parse_iso(text: str) -> float:
    if text.startswith("0001"):
        return 0.0
    return dt.datetime.strptime(text[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=dt.UTC).timestamp()


class Docker:
    """The docker 'daemon' state of one instance."""

    def __init__(self, store: Store, instance_id: str) -> None:
        self.store = store
        self.instance_id = instance_id
        self.root = store.instance_dir(instance_id) / "docker"
        self.containers_dir = self.root / "containers"
        self.images_path = self.root / "images.json"
        self.lock_path = self.root / "lock"
        self.home = store.instance_dir(instance_id) / "home"

    def lock(self) -> Any:
        return flocked(self.lock_path)

    # containers
    def ids(self) -> list[str]:
        try:
            return sorted(p.name for p in self.containers_dir.iterdir())
        except FileNotFoundError:
            return []

    def config(self, cid: str) -> dict[str, Any] | None:
        value = read_json(self.containers_dir / cid / "config.json", None)
        return value if isinstance(value, dict) else None

    def state(self, cid: str) -> dict[str, Any] | None:
        value = read_json(self.containers_dir / cid / "state.json", None)
        return value if isinstance(value, dict) else None

    def set_state(self, cid: str, **changes: Any) -> None:
        d = self.containers_dir / cid
        if not d.is_dir():
            return
        with self.lock():
            st = self.state(cid) or {}
            st.update(changes)
            if d.is_dir():
                write_json(d / "state.json", st)
        wakeup.poke(d)  # every waiting `docker wait` re-reads the state now

    def resolve(self, ref: str) -> str | None:
        """A container by name (with or without /), full id or unique id prefix."""
        name = ref.lstrip("/")
        ids = self.ids()
        for cid in ids:
            cfg = self.config(cid)
            if cfg and cfg.get("Name") == "/" + name:
                return cid
        if len(ref) >= 1:
            matches = [cid for cid in ids if cid.startswith(ref)]
            if len(matches) == 1:
                return matches[0]
        return None

    def log_path(self, cid: str) -> Path:
        return self.containers_dir / cid / "log"

    def log_times_path(self, cid: str) -> Path:
        """One RFC3339Nano time per completed log line, in order: what docker's json-file driver
        keeps beside each line, so `docker logs -t` / `--since` answer as docker's do."""
        return self.containers_dir / cid / "log.times"

    # images
    def images(self) -> dict[str, Any]:
        value = read_json(self.images_path, {})
        return value if isinstance(value, dict) else {}


def proc_starttime(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()[19]


def alive(pid: int, starttime: str | None) -> bool:
    return pid > 0 and starttime is not None and proc_starttime(pid) == starttime


def kill_tree(state: dict[str, Any], sig: int) -> None:
    """Signal a container's process group, only if the recorded pid is still that process."""
    for pid_key, start_key in (("Pid", "PidStart"), ("ShimPid", "ShimStart")):
        pid = int(state.get(pid_key) or 0)
        if alive(pid, state.get(start_key)):
            try:
                os.killpg(pid, sig)
            except OSError:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)


def signal_container(store: Store, instance_id: str, cid: str, state: dict[str, Any], sig: int) -> None:
    """Signal a running container: its process group, or (in-process) through the daemon."""
    if not state.get("InProcess"):
        kill_tree(state, sig)
        return
    name = {signal.SIGKILL: "KILL", signal.SIGUSR1: "USR1"}.get(signal.Signals(sig), "TERM")
    if LOCAL_ENGINE is not None:
        LOCAL_ENGINE.signal(instance_id, cid, name)
        return
    # no daemon, no container: `docker wait` records it dead (its ShimPid is gone)
    with contextlib.suppress(control.DaemonDown):
        control.request(store.root, "signal", instance=instance_id, cid=cid, signal=name)


def kill_all(store: Store, instance_id: str, *, spare: str | None = None) -> None:
    """The VM went away: every running container dies (exit 137); `spare` is the caller's own
    container (a program striking its own instance dies by returning 137 itself)."""
    docker = Docker(store, instance_id)
    for cid in docker.ids():
        if cid == spare:
            continue
        st = docker.state(cid)
        if st and st.get("Running"):
            signal_container(store, instance_id, cid, st, signal.SIGKILL)
            docker.set_state(cid, Status="exited", Running=False, ExitCode=137, FinishedAt=iso(), Pid=0)


# -- what an image runs -------------------------------------------------------------------------
def image_kind(image: str) -> str | None:
    repo = (
        image.split("@", maxsplit=1)[0].rsplit(":", 1)[0]
        if ":" in image.rsplit("/", maxsplit=1)[-1]
        else image.split("@", maxsplit=1)[0]
    )
    if "/nvidia/tao/" in repo or repo.endswith("tao-toolkit"):
        return "tao"
    if repo.endswith("aws-cli"):
        return "aws"
    return None


def bootstrap(python: str, module: str, *baked: object, site: bool = False, func: str = "main") -> list[str]:
    """`python -c` argv running `module.func(*baked, argv)`; -S unless site-packages are needed."""
    repo = str(Path(__file__).resolve().parents[2])
    args = ", ".join(repr(a) for a in baked)
    code = (
        f"import sys; sys.path.insert(0, {repo!r}); from {module} import {func}; "
        f"sys.exit({func}({args}, sys.argv[1:]))"
    )
    return [python, "-I" if site else "-IS", "-c", code]


def program(store: Store, instance_id: str, cfg: dict[str, Any]) -> list[str]:
    python = str(store.config().get("python") or sys.executable)
    kind = image_kind(str(cfg["Image"]))
    mounts = cfg.get("Mounts", [])
    rootfs = str(store.instance_dir(instance_id) / "docker" / "containers" / cfg["Id"] / "rootfs")
    if kind == "tao":
        return [
            *bootstrap(python, "tests.brevsim.tao", str(store.root), instance_id, mounts, rootfs, site=True),
            *cfg["Args"],
        ]
    return [
        *bootstrap(python, "tests.brevsim.awsbridge", str(store.root), instance_id, mounts, rootfs),
        *cfg["Args"],
    ]


def host_path(mounts: list[dict[str, Any]], rootfs: str, path: str) -> str:
    """A container path -> the sandbox path behind it (longest mount prefix, else the rootfs)."""
    best: dict[str, Any] | None = None
    for m in mounts:
        dst = str(m["Destination"]).rstrip("/") or "/"
        if (path == dst or path.startswith(dst + "/")) and (
            best is None or len(dst) > len(best["Destination"])
        ):
            best = m
    if best is None:
        return rootfs + path if path.startswith("/") else path
    return str(best["Source"]) + path[len(str(best["Destination"]).rstrip("/")) :]


def container_env(cfg: dict[str, Any], rootfs: str) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": rootfs + "/root",
        "HOSTNAME": str(cfg["Id"])[:12],
    }
    for item in cfg.get("Env", []):
        k, _, v = str(item).partition("=")
        env[k] = v
    return env


def spawn(store: Store, instance_id: str, cid: str, *, stdout: Any, stderr: Any) -> subprocess.Popen[bytes]:
    docker = Docker(store, instance_id)
    cfg = docker.config(cid)
    assert cfg is not None
    rootfs = docker.containers_dir / cid / "rootfs"
    (rootfs / "root").mkdir(parents=True, exist_ok=True)
    workdir = host_path(cfg.get("Mounts", []), str(rootfs), str(cfg.get("WorkingDir") or "/"))
    Path(workdir).mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        program(store, instance_id, cfg),
        cwd=workdir,
        env=container_env(cfg, str(rootfs)),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
    )


def instance_gone(store: Store, instance_id: str, disappear_at: float | None) -> bool:
    if (store.instance_dir(instance_id) / "gone").exists():
        return True
    return disappear_at is not None and store.now() >= disappear_at


def supervise(
    store: Store, instance_id: str, cid: str, proc: subprocess.Popen[bytes], *, remove: bool
) -> int:
    """Wait for the container program, dying with the instance; record the exit."""
    docker = Docker(store, instance_id)
    meta = read_json(store.instance_dir(instance_id) / "meta.json", {})
    disappear_at = meta.get("disappear_at")
    docker.set_state(
        cid,
        Status="running",
        Running=True,
        Pid=proc.pid,
        PidStart=proc_starttime(proc.pid),
        StartedAt=iso(),
        ShimPid=os.getpid(),
        ShimStart=proc_starttime(os.getpid()),
    )
    while True:
        try:
            code = proc.wait(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            pass
        if instance_gone(store, instance_id, disappear_at):
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            docker.set_state(cid, Status="exited", Running=False, ExitCode=137, FinishedAt=iso(), Pid=0)
            return 137
    exit_code = 128 - code if code < 0 else code
    st = docker.state(cid) or {}
    oom = bool(st.get("OOMKilled"))
    if remove:
        _remove_dir(docker.containers_dir / cid)
    else:
        docker.set_state(
            cid, Status="exited", Running=False, ExitCode=exit_code, FinishedAt=iso(), Pid=0, OOMKilled=oom
        )
    return exit_code


def remove_dir(path: Path) -> None:
    wakeup.poke(path)  # a container's waiting `docker wait`s see it gone now
    for _ in range(3):  # again if a waiter's FIFO came in while it was being removed
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            break


_remove_dir = remove_dir


def shim_main(state: str, instance_id: str, cid: str, remove: str, argv: list[str]) -> int:
    """The detached shim process of `docker run -d` (stdio already redirected to the log)."""
    store = Store(state)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # `docker stop` signals the program, not the shim
    try:
        proc = spawn(store, instance_id, cid, stdout=sys.stdout.buffer, stderr=sys.stderr.buffer)
    except OSError as e:
        Docker(store, instance_id).set_state(
            cid, Status="exited", Running=False, ExitCode=127, Error=str(e), FinishedAt=iso()
        )
        return 127
    return supervise(store, instance_id, cid, proc, remove=remove == "1")


def new_config(cid: str, name: str, image: str, args: list[str], opts: dict[str, Any]) -> dict[str, Any]:
    return {
        "Id": cid,
        "Name": "/" + name,
        "Created": iso(),
        "Path": args[0] if args else "",
        "Args": args,
        "Image": image,
        "Labels": opts["labels"],
        "Env": opts["env"],
        "Mounts": opts["mounts"],
        "WorkingDir": opts["workdir"],
        "ShmSize": opts["shm_size"],
        "Gpus": opts["gpus"],
        "AutoRemove": opts["rm"],
    }


def initial_state() -> dict[str, Any]:
    return {
        "Status": "created",
        "Running": False,
        "Paused": False,
        "Restarting": False,
        "OOMKilled": False,
        "Dead": False,
        "Pid": 0,
        "ExitCode": 0,
        "Error": "",
        "StartedAt": ZERO_TIME,
        "FinishedAt": ZERO_TIME,
    }


def public_state(st: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "Status",
        "Running",
        "Paused",
        "Restarting",
        "OOMKilled",
        "Dead",
        "Pid",
        "ExitCode",
        "Error",
        "StartedAt",
        "FinishedAt",
    )
    return {k: st.get(k, initial_state()[k]) for k in keys}


def inspect_object(docker: Docker, cid: str) -> dict[str, Any] | None:
    cfg = docker.config(cid)
    st = docker.state(cid)
    if cfg is None or st is None:
        return None
    image_id = docker.images().get(cfg["Image"], {}).get("Id", "")
    return {
        "Id": cid,
        "Created": cfg["Created"],
        "Path": cfg["Path"],
        "Args": cfg["Args"][1:],
        "State": public_state(st),
        "Image": image_id,
        "LogPath": str(docker.log_path(cid)),
        "Name": cfg["Name"],
        "RestartCount": 0,
        "Driver": "overlay2",
        "Platform": "linux",
        "HostConfig": {
            "AutoRemove": cfg["AutoRemove"],
            "ShmSize": cfg["ShmSize"],
            "Binds": [f"{m['Source']}:{m['Destination']}{'' if m['RW'] else ':ro'}" for m in cfg["Mounts"]],
            "DeviceRequests": (
                [{"Driver": "", "Count": -1 if cfg["Gpus"] == "all" else 1, "Capabilities": [["gpu"]]}]
                if cfg["Gpus"]
                else None
            ),
        },
        "Mounts": [
            {
                "Type": "bind",
                "Source": m["Source"],
                "Destination": m["Destination"],
                "Mode": "" if m["RW"] else "ro",
                "RW": m["RW"],
                "Propagation": "rprivate",
            }
            for m in cfg["Mounts"]
        ],
        "Config": {
            "Hostname": cid[:12],
            "Env": cfg["Env"],
            "Cmd": cfg["Args"],
            "Image": cfg["Image"],
            "WorkingDir": cfg["WorkingDir"],
            "Labels": cfg["Labels"],
        },
    }


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


class StampedLog(io.TextIOBase):
    """The container log as a text stream that records each completed line's time (when its
    newline was written) in the times file, as docker stamps a line when it reads it."""

    def __init__(self, log: IO[str], times: Path) -> None:
        self._log = log
        self._times = times

    def write(self, text: str) -> int:
        n = self._log.write(text)
        lines = text.count("\n")
        if lines:
            stamp = iso()
            with self._times.open("a", encoding="ascii") as f:
                f.write((stamp + "\n") * lines)
        return n

    def flush(self) -> None:
        self._log.flush()

    def writable(self) -> bool:
        return True
