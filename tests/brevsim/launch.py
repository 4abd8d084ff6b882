"""Executables of the simulator, with the state directory baked in.

`brev`, `ssh`/`ssh-agent` and the instances' `docker`/`nvidia-smi` are native programs
(native.py) with their arguments baked into each copy: the ssh wrapper execs the real OpenSSH
after recording the call; `brev`, `docker` and `nvidia-smi` are clients of the simulator's zygote
(zygote.py), which runs the Python program (standard library only) in a warm fork. Either costs
milliseconds of CPU instead of a Python start and imports (~90 ms for the brev CLI).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from tests.brevsim import native, zygote
from tests.brevsim.store import Store, write_json

REPO = str(Path(__file__).resolve().parents[2])


def script(python: str, module: str, func: str, *baked: str) -> str:
    """A program as a `python -IS` script: what `brev` was before the zygote (the native tests
    compare the two)."""
    args = "".join(f"{a!r}, " for a in baked)
    return (
        f"#!{python} -IS\n"
        "import sys\n"
        f"sys.path.insert(0, {REPO!r})\n"
        f"from {module} import {func}\n"
        f"sys.exit({func}({args}sys.argv[1:]))\n"
    )


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


def native_template(store: Store, name: str) -> Path:
    """A compiled native program, kept in the state directory: `brev create` (HOME = the
    simulated home, so another cache directory) installs instance programs from this copy."""
    path = store.root / "native" / name
    if not path.is_file():
        built = native.build() / name
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
        shutil.copyfile(built, tmp)
        tmp.replace(path)
    return path


def write_local_bin(store: Store, bin_dir: Path) -> None:
    state = str(store.root)
    bin_dir.mkdir(parents=True, exist_ok=True)
    # `brev` is a native client of the zygote (zygote.py) like an instance's `docker`: a fork of
    # a warm interpreter per call, not a Python start (`script` writes the same CLI as a Python script).
    native.install(
        native_template(store, "zclient"),
        bin_dir / "brev",
        [zygote.address(state), "brev", state, str(bin_dir)],
    )
    real_ssh, real_agent = real_program("ssh", bin_dir), real_program("ssh-agent", bin_dir)
    calls, marker = str(store.root / "calls.jsonl"), str(store.root.resolve())
    wrapper = native_template(store, "sshwrap")
    native.install(wrapper, bin_dir / "ssh", ["ssh", calls, marker, real_ssh])
    native.install(wrapper, bin_dir / "ssh-agent", ["ssh-agent", calls, marker, real_agent])


def make_sandbox(store: Store, inst: dict[str, Any]) -> Path:
    """An instance's files: home (= /home/ubuntu), bin (docker, nvidia-smi), docker state."""
    d = store.instance_dir(str(inst["id"]))
    (d / "home").mkdir(parents=True, exist_ok=True)
    (d / "docker" / "containers").mkdir(parents=True, exist_ok=True)
    (d / "bin").mkdir(exist_ok=True)
    state = str(store.root)
    iid = str(inst["id"])
    client, address = native_template(store, "zclient"), zygote.address(state)
    for program in zygote.INSTANCE_PROGRAMS:
        native.install(client, d / "bin" / program, [address, program, state, iid])
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
