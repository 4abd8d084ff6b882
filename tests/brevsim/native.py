"""The simulator's native programs (tests/brevsim/native/*.c): compiled once, copied per use.

`ssh`/`ssh-agent` (sshwrap.c) and the instance programs' zygote client (zclient.c) are C so a
call costs a millisecond, not a Python start (~50-90 ms CPU). They are compiled with the system
gcc on first use into `$TAOBREV_CACHE/brevsim-native/<sha of sources + gcc version + flags>/`
(default `~/.cache/taobrev-operator`), atomically (a temporary directory renamed into place:
parallel test processes may race, the first rename wins). Their arguments (state dir, instance
id, real ssh path, ...) are baked into each installed copy by patching a marked data region
(`native/baked.h`), so no shell script or argument file sits between the caller and the program.
Standard library only: `brev create` (a zygote worker) installs an instance's programs.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent / "native"
PROGRAMS = {"sshwrap": "sshwrap.c", "zclient": "zclient.c"}
CFLAGS = ("-O2", "-Wall", "-Wextra", "-std=gnu11")
MARK = b"@@BREVSIM-BAKED-ARGS@@"
BAKED_SIZE, BAKED_OFFSET = 4096, 32  # as in native/baked.h

_built: dict[str, Path] = {}  # this process already checked these


class NativeBuildError(RuntimeError):
    """The native programs cannot be compiled (no gcc, or a compiler error)."""


def cache_root() -> Path:
    base = os.environ.get("TAOBREV_CACHE") or str(Path.home() / ".cache" / "taobrev-operator")
    return Path(base) / "brevsim-native"


def _gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise NativeBuildError(
            "the Brev simulator compiles its native programs (tests/brevsim/native) with gcc, "
            "which is not on PATH: install it (Debian: apt-get install gcc)"
        )
    return gcc


def key(gcc: str) -> str:
    h = hashlib.sha256()
    for path in sorted(SOURCE_DIR.iterdir()):
        if path.suffix in (".c", ".h"):
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    version = subprocess.run([gcc, "--version"], capture_output=True, check=True).stdout
    h.update(version + b"\0" + " ".join(CFLAGS).encode())
    return h.hexdigest()[:16]


def build() -> Path:
    """The directory holding the compiled programs (compiled now if not cached yet)."""
    gcc = _gcc()
    final = cache_root() / key(gcc)
    if str(final) in _built:
        return _built[str(final)]
    if not all((final / name).is_file() for name in PROGRAMS):
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f".tmp-{final.name}-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir()
        sys.stderr.write(f"brevsim: compiling the simulator's native programs into {final}\n")
        try:
            for name, source in PROGRAMS.items():
                res = subprocess.run(
                    [gcc, *CFLAGS, "-o", str(tmp / name), str(SOURCE_DIR / source)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if res.returncode != 0:
                    raise NativeBuildError(f"gcc failed on tests/brevsim/native/{source}:\n{res.stderr}")
            try:
                tmp.rename(final)
            except OSError:
                if not all((final / name).is_file() for name in PROGRAMS):
                    raise
                # another process renamed its identical build first: use that one
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    _built[str(final)] = final
    return final


def baked(template: bytes, args: list[str]) -> bytes:
    """`template` (a compiled program) with `args` baked into its marked region."""
    if template.count(MARK) != 1:
        raise NativeBuildError("a native program without exactly one baked-arguments region")
    encoded = [os.fsencode(a) for a in args]
    if any(not a or b"\0" in a for a in encoded):
        raise ValueError(f"baked arguments must be non-empty and NUL-free: {args!r}")
    blob = b"\0".join(encoded) + b"\0\0"
    if len(blob) > BAKED_SIZE - BAKED_OFFSET:
        raise ValueError(f"baked arguments too long ({len(blob)} bytes): {args!r}")
    start = template.index(MARK) + BAKED_OFFSET
    return template[:start] + blob + template[start + len(blob) :]


def install(template: Path, dest: Path, args: list[str]) -> None:
    """Write an executable copy of `template` with `args` baked in (tmp + rename)."""
    data = baked(template.read_bytes(), args)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.replace(dest)
