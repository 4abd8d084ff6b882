"""~/.brev/ssh_config as `brev refresh` writes it, and the subset of ssh_config(5) the ssh stand-in reads."""

from __future__ import annotations

import fnmatch
import os
import shlex
from pathlib import Path

ENTRY = """Host {alias}
  Hostname {hostname}
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
  Port 22

"""

FAKE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "c2ltdWxhdGVkIGJyZXYga2V5OyBub3QgYSByZWFsIGtleQ==\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)


def write_brev_ssh_files(home: Path, running: list[tuple[str, str]]) -> None:
    """ConfigUpdater.Run: one entry per RUNNING instance (+ `-host`), the Include, the key."""
    brev_dir = home / ".brev"
    ssh_dir = home / ".ssh"
    brev_dir.mkdir(parents=True, exist_ok=True)
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    pem = brev_dir / "brev.pem"
    if not pem.exists():
        fd = os.open(pem, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(FAKE_KEY)
    body = "".join(
        ENTRY.format(alias=alias, hostname=host, identity=pem)
        for name, host in running
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


def _expand(path: str, home: Path) -> Path:
    if path.startswith("~/"):
        return home / path[2:]
    p = Path(path)
    return p if p.is_absolute() else home / ".ssh" / p


def lookup(config_file: Path, alias: str, home: Path, _depth: int = 0) -> dict[str, str]:
    """First-obtained-value-wins resolution of `alias` through Host blocks and Include."""
    found: dict[str, str] = {}
    if _depth > 8 or not config_file.is_file():
        return found
    active = True
    for raw in config_file.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, rest = line.partition(" ")
        if "=" in key:
            key, _, rest = line.partition("=")
        key = key.strip().lower()
        rest = rest.strip()
        if key == "host":
            patterns = shlex.split(rest)
            active = any(fnmatch.fnmatchcase(alias, p) for p in patterns if not p.startswith("!"))
            continue
        if not active:
            continue
        if key == "include":
            for inc in shlex.split(rest):
                for k, v in lookup(_expand(inc, home), alias, home, _depth + 1).items():
                    found.setdefault(k, v)
            continue
        values = shlex.split(rest) if rest else [""]
        found.setdefault(key, values[0] if values else "")
    return found
