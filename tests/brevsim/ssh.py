"""The `ssh` and `ssh-agent` stand-ins.

`ssh [opts] ALIAS [--] [command...]` resolves ALIAS like OpenSSH (~/.ssh/config -> Include ->
~/.brev/ssh_config), then runs the command with `bash -c` inside the instance sandbox, forwarding
stdin, and exits with the command's status. Connection problems exit 255 with OpenSSH's messages.
Like real ssh, it returns only when the remote stdout/stderr are closed by every process holding
them, so a backgrounded job that keeps them open hangs the caller (brevdev/brev-cli issue #429).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from tests.brevsim import faults as knobs
from tests.brevsim.model import NOMINAL, observe
from tests.brevsim.record import record_call, record_stdin
from tests.brevsim.sshconfig import lookup
from tests.brevsim.store import Store

OPTS_WITH_ARG = set("BbcDEeFIiJLlmOoPpQRSWw")
OPTS_FLAGS = set("46AaCfGgKkMNnqsTtVvXxYy")
QUIET_LEVELS = {"quiet", "fatal", "error"}


def _usage() -> int:
    sys.stderr.write(
        "usage: ssh [-46AaCfGgKkMNnqsTtVvXxYy] [-B bind_interface] [-b bind_address]\n"
        "           [-c cipher_spec] [-D [bind_address:]port] [-E log_file]\n"
        "           [-e escape_char] [-F configfile] [-I pkcs11] [-i identity_file]\n"
        "           [-J destination] [-L address] [-l login_name] [-m mac_spec]\n"
        "           [-O ctl_cmd] [-o option] [-P tag] [-p port] [-R address]\n"
        "           [-S ctl_path] [-W host:port] [-w local_tun[:remote_tun]]\n"
        "           destination [command [argument ...]]\n"
    )
    return 255


def parse_args(argv: list[str]) -> tuple[dict[str, Any], str | None, list[str]] | int:
    """OpenSSH getopt, including its re-parse of options placed after the destination."""
    opts: dict[str, Any] = {"o": {}, "flags": set()}
    host: str | None = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            if host is None and i < len(argv):
                host = argv[i]
                i += 1
            return opts, host, argv[i:]
        if a.startswith("-") and len(a) > 1:
            j = 1
            while j < len(a):
                c = a[j]
                if c in OPTS_FLAGS:
                    opts["flags"].add(c)
                    j += 1
                    continue
                if c in OPTS_WITH_ARG:
                    val = a[j + 1 :]
                    if not val:
                        i += 1
                        if i >= len(argv):
                            sys.stderr.write(f"option requires an argument -- {c}\n")
                            return _usage()
                        val = argv[i]
                    if c == "o":
                        key, _, v = val.replace("=", " ", 1).partition(" ")
                        opts["o"].setdefault(key.strip().lower(), v.strip())
                    else:
                        opts[c] = val
                    break
                sys.stderr.write(f"unknown option -- {c}\n")
                return _usage()
            i += 1
            continue
        if host is None:
            host = a
            i += 1
            continue
        return opts, host, argv[i:]
    return opts, host, []


def _pump(src: IO[bytes], dst: IO[bytes]) -> None:
    try:
        while True:
            chunk = os.read(src.fileno(), 65536)
            if not chunk:
                break
            dst.write(chunk)
            dst.flush()
    except OSError:
        pass


def _find_instance(store: Store, hostname: str) -> dict[str, Any] | None:
    for inst in store.read()["instances"].values():
        if inst.get("ip") == hostname:
            return dict(inst)
    return None


def main(state: str, argv: list[str]) -> int:
    store = Store(state)
    call_id = record_call(store.calls_path, "ssh", argv)
    parsed = parse_args(argv)
    if isinstance(parsed, int):
        return parsed
    opts, alias, command_words = parsed
    if alias is None:
        return _usage()
    home = Path(os.environ.get("HOME") or "/nonexistent")
    config_file = Path(opts["F"]) if "F" in opts else home / ".ssh" / "config"
    conf = lookup(config_file, alias, home)
    for key, value in opts["o"].items():
        conf[key] = value  # command-line -o wins over the config file
    hostname = conf.get("hostname", alias)
    loglevel = conf.get("loglevel", "info").lower()
    quiet = "q" in opts["flags"] or loglevel in QUIET_LEVELS
    connect_timeout = float(conf.get("connecttimeout") or 30)
    inst = _find_instance(store, hostname)
    if inst is None:
        sys.stderr.write(f"ssh: Could not resolve hostname {hostname.lower()}: Name or service not known\r\n")
        return 255
    delays = {k: store.delay(k, v) for k, v in NOMINAL.items()}
    obs = observe(inst, store.now(), delays)
    port = conf.get("port", "22")
    if obs.gone or obs.status != "RUNNING":
        time.sleep(min(connect_timeout, 10.0) * store.speed)
        sys.stderr.write(f"ssh: connect to host {hostname} port {port}: Connection timed out\r\n")
        return 255
    if not obs.ssh_ready or knobs.targets(
        store.fault("exec_never_ready"), str(inst["name"]), str(inst["id"])
    ):
        sys.stderr.write(f"ssh: connect to host {hostname} port {port}: Connection refused\r\n")
        return 255
    if knobs.targets(store.fault("sshd_dead"), str(inst["name"]), str(inst["id"])):
        # sshd crashed or the disk is full: TCP accepts, the handshake is reset
        sys.stderr.write(
            "kex_exchange_identification: read: Connection reset by peer\r\n"
            f"Connection reset by {hostname} port {port}\r\n"
        )
        return 255
    if knobs.targets(store.fault("exec_hangs"), str(inst["name"]), str(inst["id"])):
        _hang()
        return 255
    user = opts.get("l") or conf.get("user") or os.environ.get("USER", "ubuntu")
    identity = opts.get("i") or conf.get("identityfile")
    if identity:
        ipath = Path(identity.replace("~", str(home), 1))
        if not ipath.is_file():
            sys.stderr.write(
                f"Warning: Identity file {identity} not accessible: No such file or directory.\n"
            )
            sys.stderr.write(f"{user}@{hostname}: Permission denied (publickey).\r\n")
            return 255
    if not quiet and not _master_alive(store, home, alias, conf):
        sys.stderr.write(f"Warning: Permanently added '{hostname}' (ED25519) to the list of known hosts.\r\n")
    sys.stderr.flush()
    slow = float(store.fault("slow_exec_s") or 0)
    if slow:
        time.sleep(slow * store.speed)
    command = " ".join(command_words)
    name = str(inst["name"])
    record_call(store.calls_path, "bash", ["-c", command], where="remote", instance=name)
    sandbox = store.instance_dir(str(inst["id"]))
    env = {
        "HOME": str(sandbox / "home"),
        "PATH": f"{sandbox / 'bin'}:/usr/bin:/bin",
        "USER": "ubuntu",
        "LOGNAME": "ubuntu",
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        "PWD": str(sandbox / "home"),
    }
    argv_remote = ["bash", "-c", command] if command_words else ["bash", "-s"]
    no_stdin = "n" in opts["flags"] or _stdin_is_devnull()
    proc = subprocess.Popen(
        argv_remote,
        cwd=sandbox / "home",
        env=env,
        stdin=subprocess.DEVNULL if no_stdin else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    counted = [0]

    def forward_stdin() -> None:
        assert proc.stdin is not None
        try:
            while True:
                chunk = os.read(0, 65536)
                if not chunk:
                    break
                counted[0] += len(chunk)
                proc.stdin.write(chunk)
                proc.stdin.flush()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()

    def hangup(signum: int, frame: object) -> None:
        # sshd sends SIGHUP to the session when the client goes away
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGHUP)
        record_stdin(store.calls_path, call_id, counted[0])
        os._exit(255)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, hangup)
    if not no_stdin:
        threading.Thread(target=forward_stdin, daemon=True).start()
    assert proc.stdout is not None
    assert proc.stderr is not None
    t_out = threading.Thread(target=_pump, args=(proc.stdout, sys.stdout.buffer), daemon=True)
    t_err = threading.Thread(target=_pump, args=(proc.stderr, sys.stderr.buffer), daemon=True)
    t_out.start()
    t_err.start()
    t_out.join()
    t_err.join()
    code = proc.wait()
    record_stdin(store.calls_path, call_id, counted[0])
    if code < 0:
        return 255
    return code


def _hang() -> None:
    """A connection that never answers: block until the caller kills us (or our parent is gone,
    so an abandoned stand-in cannot outlive its test by more than a second)."""
    parent = os.getppid()
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline and os.getppid() == parent:
        time.sleep(1.0)


def _stdin_is_devnull() -> bool:
    try:
        st = os.fstat(0)
    except OSError:
        return True
    return stat.S_ISCHR(st.st_mode) and (st.st_rdev == Path("/dev/null").stat().st_rdev)


def _master_alive(store: Store, home: Path, alias: str, conf: dict[str, str]) -> bool:
    """ControlMaster auto + ControlPersist: only the first connection prints the host-key warning."""
    if conf.get("controlmaster", "no").lower() not in ("auto", "yes", "autoask"):
        return False
    masters = store.root / "ssh-masters"
    masters.mkdir(exist_ok=True)
    marker = masters / hashlib.sha256(f"{home}\0{alias}".encode()).hexdigest()[:20]
    persist = 600.0 * store.speed
    alive = marker.exists() and time.time() - marker.stat().st_mtime < persist
    marker.touch()
    return alive


def agent_main(state: str, argv: list[str]) -> int:
    """`ssh-agent -s`: recorded (each call without SSH_AUTH_SOCK would leak a real agent)."""
    store = Store(state)
    record_call(store.calls_path, "ssh-agent", argv)
    pid = 40000 + os.getpid() % 20000  # no agent process exists: callers must verify before killing
    sock = store.root / f"agent.{pid}"
    if "-a" in argv[:-1]:
        sock = Path(argv[argv.index("-a") + 1])
        sock.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.bind(str(sock))  # leaves a socket file, as a real agent's bind would
    sys.stdout.write(
        f"SSH_AUTH_SOCK={sock}; export SSH_AUTH_SOCK;\nSSH_AGENT_PID={pid}; export SSH_AGENT_PID;\n"
        f"echo Agent pid {pid};\n"
    )
    return 0
