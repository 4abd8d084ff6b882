"""`ssh` and `ssh-agent` on the simulator's PATH: the REAL OpenSSH programs, recorded.

Each wrapper appends the call to the call log (argv only, as every simulator program does), marks
the environment (control.MARKER, so the reaper finds the process and whatever it daemonises: a
ControlPersist master, an agent) and then `exec`s the real binary in place: the process that
talks to the instance IS OpenSSH, with its real memory, its real ControlMaster and its real
messages. `ssh` also asks to send BREVSIM_CALL (SendEnv): the instance's sshd adds the session's
stdin byte count to this call record. Without `-F` it reads $HOME/.ssh/config (see ssh_main).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.brevsim.control import marked_env
from tests.brevsim.record import record_call
from tests.brevsim.store import Store


def _exec(real: str, argv0: str, argv: list[str], env: dict[str, str]) -> int:
    try:
        os.execve(real, [argv0, *argv], env)  # noqa: S606 - exec IS the point: the real program
    except OSError as e:
        sys.stderr.write(f"{argv0}: cannot run {real}: {e.strerror}\n")
        return 255
    return 255  # not reached


def ssh_main(state: str, real: str, argv: list[str]) -> int:
    store = Store(state)
    call_id = record_call(store.calls_path, "ssh", argv)
    env = marked_env(state)
    env["BREVSIM_CALL"] = call_id
    extra = ["-o", "SendEnv=BREVSIM_CALL"]  # accumulates; never overrides the caller's options
    if not any(a.startswith("-F") for a in argv) and os.environ.get("HOME"):
        # OpenSSH reads ~/.ssh/config from the passwd home, not $HOME; on a real machine they are
        # the same directory, the one `brev refresh` writes its Include into. Keep them the same.
        user_config = Path(os.environ["HOME"]) / ".ssh" / "config"
        extra += ["-F", str(user_config) if user_config.is_file() else "none"]
    return _exec(real, "ssh", [*extra, *argv], env)


def agent_main(state: str, real: str, argv: list[str]) -> int:
    store = Store(state)
    record_call(store.calls_path, "ssh-agent", argv)
    return _exec(real, "ssh-agent", argv, marked_env(state))
