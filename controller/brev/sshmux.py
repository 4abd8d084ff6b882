"""The argv of the operator's own `ssh` calls and the ControlMaster they share (pure).

`brev refresh` writes, per instance, `ControlMaster auto`, `ControlPath ~/.ssh/brev-control-%C`
and `ControlPersist 10m` (docs: brev-cli.md section 11): the first ssh to an instance becomes a
background master that daemonises (reparented to PID 1: the image runs tini as PID 1 to reap it)
and every later ssh to that instance is a small mux client over the master's one connection.

The three options are spelled out on the command line rather than taken from the config:
- ControlPath: ssh expands `~` with the passwd home, not $HOME. In the image both are
  /home/operator, so this is exactly the path brev writes (brev exec's probe and our calls share
  one master); elsewhere it keeps the socket under the client's own home. A home too deep for a
  unix socket path gets a short per-home directory in the temp dir instead.
- ControlMaster/ControlPersist: the memory bound per job (docs/sizing.md) counts one master per instance
  living at most ControlPersist after its last use; it must not depend on brev's template.

Long sessions (a running job's `docker wait`, a followed log stream) take a connection of their
own instead (`ControlMaster=no`, `ControlPath=none`): over a master they would cost two ssh
processes per running job for as long as it runs (the master, ~1.4 MiB PSS, and the mux client,
~1.1 MiB: 2.5 GiB at 1,000 jobs, issue 30), alone one. Short calls (probes, pulls, starts,
syncs) still share a master, which then lives only ControlPersist after a job's last short call.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

# sun_path is 108 bytes; ssh binds `<ControlPath>.<16 random chars>` first, then renames.
_MAX_CONTROL_PATH = 108 - 1 - 17
# %C is 40 hex digits (SHA-1 of local host, host, port, user, jump host).
_HASH_LEN = 40
# ssh's own exit status for a connection (not remote) failure.
SSH_CONNECTION_FAILED = 255


def control_dir(home: Path) -> Path:
    """Where this client's master sockets live: `<home>/.ssh`, or a short per-home directory in
    the temp dir when `<home>/.ssh/brev-control-%C` would not fit a unix socket path."""
    candidate = home / ".ssh"
    if len(str(candidate / "brev-control-")) + _HASH_LEN <= _MAX_CONTROL_PATH:
        return candidate
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"taobrev-ssh-{digest}"


def control_path(home: Path) -> str:
    """ControlPath option value (`%` tokens expanded by ssh)."""
    return str(control_dir(home) / "brev-control-%C")


def mux_options(home: Path, *, persist_s: int, connect_timeout_s: int, shared: bool = True) -> list[str]:
    """`shared`: through the instance's master (started if none); otherwise a connection of the
    call's own that no other call joins and that ends with it."""
    options = [
        "BatchMode=yes",
        # As brev exec does: no "Permanently added ... to the list of known hosts" on every first
        # connection (brev's config sends known hosts to /dev/null); errors still reach stderr.
        "LogLevel=ERROR",
        f"ConnectTimeout={int(connect_timeout_s)}",
    ]
    if shared:
        options += [
            "ControlMaster=auto",
            f"ControlPath={control_path(home)}",
            f"ControlPersist={int(persist_s)}",
        ]
    else:
        options += ["ControlMaster=no", "ControlPath=none"]
    return [word for option in options for word in ("-o", option)]


def ssh_argv(
    binary: str,
    config: Path,
    home: Path,
    alias: str,
    command: str,
    *,
    persist_s: int,
    connect_timeout_s: int,
    shared: bool = True,
) -> list[str]:
    """`ssh -T ... -F <config> <alias> <command>`: no TTY (brev's config says RequestTTY yes, which
    would merge stderr into stdout and turn stdin into a terminal). `-F` names the config so ssh
    does not depend on the passwd home matching $HOME. `command` is one argv element, which ssh
    hands to the remote shell as is."""
    return [
        binary,
        "-T",
        *mux_options(home, persist_s=persist_s, connect_timeout_s=connect_timeout_s, shared=shared),
        "-F",
        str(config),
        alias,
        command,
    ]


def exit_master_argv(binary: str, config: Path, home: Path, alias: str) -> list[str]:
    """`ssh -O exit <alias>`: ask the instance's master to exit now (its instance is being
    deleted), instead of lingering ControlPersist with a dead connection."""
    return [
        binary,
        "-o",
        "BatchMode=yes",
        "-o",
        f"ControlPath={control_path(home)}",
        "-F",
        str(config),
        "-O",
        "exit",
        alias,
    ]


def unwrap_ssh(stdout: str, marker: str) -> tuple[int, str] | None:
    """(status, the command's own stdout) from a sentinel-wrapped command's stdout over plain ssh
    (no preamble to strip: ssh adds nothing to stdout), or None when the sentinel is missing."""
    key = f"\n{marker} "
    idx = stdout.rfind(key)
    if idx < 0:
        return None
    status_text = stdout[idx + len(key) :].split("\n", 1)[0].strip()
    try:
        return int(status_text), stdout[:idx]
    except ValueError:
        return None
