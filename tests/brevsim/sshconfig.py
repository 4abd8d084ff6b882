"""~/.brev/ssh_config as `brev refresh` writes it (pkg/ssh/sshconfigurer.go, direct-Hostname form).

Every instance is reached at 127.0.0.1 on its own port (the daemon's sshd.py); the identity is
the simulator's user key, copied to ~/.brev/brev.pem as refresh downloads it. `ControlPath` keeps
the real `~/.ssh/...` form: OpenSSH expands `~` from the passwd entry, NOT from $HOME, and a
missing directory there makes every multiplexed ssh fail (clients must mind it).
"""

from __future__ import annotations

import os
from pathlib import Path

ENTRY = """Host {alias}
  Hostname 127.0.0.1
  IdentityFile "{identity}"
  User ubuntu
  ServerAliveInterval 30
  UserKnownHostsFile /dev/null
  IdentitiesOnly yes
  StrictHostKeyChecking no
  PasswordAuthentication no
  AddKeysToAgent yes
  ForwardAgent yes
  RequestTTY yes
  ControlMaster auto
  ControlPath ~/.ssh/brev-control-%C
  ControlPersist 10m
  Port {port}

"""

# What refresh leaves when the key cannot be fetched (no simulator daemon): ssh refuses it.
NO_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "c2ltdWxhdGVkIGJyZXYga2V5OyBub3QgYSByZWFsIGtleQ==\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)


def write_brev_ssh_files(home: Path, running: list[tuple[str, int]], key: bytes | None) -> None:
    """ConfigUpdater.Run: one entry per RUNNING instance (+ `-host`), the Include, the key."""
    brev_dir = home / ".brev"
    ssh_dir = home / ".ssh"
    brev_dir.mkdir(parents=True, exist_ok=True)
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    pem = brev_dir / "brev.pem"
    tmp_pem = brev_dir / f".brev.pem.{os.getpid()}"
    fd = os.open(tmp_pem, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key if key is not None else NO_KEY.encode())
    tmp_pem.replace(pem)
    body = "".join(
        ENTRY.format(alias=alias, identity=pem, port=port)
        for name, port in running
        for alias in (name, f"{name}-host")
    )
    tmp = brev_dir / f".ssh_config.{os.getpid()}"
    tmp.write_text(body)
    tmp.replace(brev_dir / "ssh_config")
    include = f'Include "{brev_dir / "ssh_config"}"'
    user_conf = ssh_dir / "config"
    current = user_conf.read_text() if user_conf.exists() else ""
    if include not in current:
        user_conf.write_text(include + "\n" + current)
        user_conf.chmod(0o600)
