"""Executables of the simulator: tiny Python scripts with the state directory baked in.

They run as `python -IS` (isolated, no site-packages): the `brev`/`ssh`/`docker` paths import
only the standard library, so each invocation costs tens of milliseconds.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from tests.brevsim.store import Store, write_json

REPO = str(Path(__file__).resolve().parents[2])


def script(python: str, module: str, func: str, *baked: str) -> str:
    args = "".join(f"{a!r}, " for a in baked)
    return (
        f"#!{python} -IS\n"
        "import sys\n"
        f"sys.path.insert(0, {REPO!r})\n"
        f"from {module} import {func}\n"
        f"sys.exit({func}({args}sys.argv[1:]))\n"
    )


def write_exe(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o755)
    tmp.replace(path)


def python_of(store: Store) -> str:
    return str(store.config().get("python") or "/usr/bin/python3")


def real_program(name: str, bin_dir: Path) -> str:
    """The real OpenSSH program the wrapper execs (never our own bin: that would loop)."""
    path = os.pathsep.join(
        p
        for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
        if Path(p).resolve() != bin_dir.resolve()
    )
    found = shutil.which(name, path=path) or shutil.which(name, path="/usr/bin:/bin")
    if found is None:
        raise FileNotFoundError(
            f"the simulator needs the real OpenSSH `{name}` (Debian: apt-get install openssh-client)"
        )
    return found


def write_local_bin(store: Store, bin_dir: Path) -> None:
    py = python_of(store)
    state = str(store.root)
    bin_dir.mkdir(parents=True, exist_ok=True)
    write_exe(bin_dir / "brev", script(py, "tests.brevsim.cli", "main", state, str(bin_dir)))
    real_ssh, real_agent = real_program("ssh", bin_dir), real_program("ssh-agent", bin_dir)
    write_exe(bin_dir / "ssh", script(py, "tests.brevsim.sshwrap", "ssh_main", state, real_ssh))
    write_exe(bin_dir / "ssh-agent", script(py, "tests.brevsim.sshwrap", "agent_main", state, real_agent))


def make_sandbox(store: Store, inst: dict[str, Any]) -> Path:
    """An instance's files: home (= /home/ubuntu), bin (docker, nvidia-smi), docker state."""
    d = store.instance_dir(str(inst["id"]))
    (d / "home").mkdir(parents=True, exist_ok=True)
    (d / "docker" / "containers").mkdir(parents=True, exist_ok=True)
    (d / "bin").mkdir(exist_ok=True)
    py = python_of(store)
    state = str(store.root)
    iid = str(inst["id"])
    write_exe(d / "bin" / "docker", script(py, "tests.brevsim.docker", "main", state, iid))
    write_exe(d / "bin" / "nvidia-smi", script(py, "tests.brevsim.gpu", "main", state, iid))
    write_json(
        d / "meta.json",
        {
            "id": iid,
            "name": inst["name"],
            "disappear_at": inst.get("disappear_at"),
            "gpu": inst.get("gpu", ""),
            "instance_type": inst.get("instance_type"),
        },
    )
    return d
