"""checkov in its own venv outside the repository (its pins conflict with ours), installed once.

``python -m tests.devenv.checkov`` prints the checkov executable, installing it first if needed.
`make policy` and tests/integration/test_policy.py share the venv, so two suites on one machine
(a developer's, or `make flake-hunt --parallel 2`) may want it at the same moment: the install
runs under an exclusive lock on a file beside the venv, and a stamp written after a successful
install — not the executable's mere presence, which an install killed half-way also leaves —
says it is whole. The flake hunt found the race: one run's `rm -rf` of a half-made venv broke the
other's `ensurepip`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

VERSION = "3.3.30"
VENV = Path(os.environ.get("CHECKOV_VENV", Path.home() / ".cache" / "taobrev-operator" / "checkov-venv"))


class CheckovUnavailable(RuntimeError):
    """checkov could not be installed; the message carries the installer's error."""


def ensure(venv: Path = VENV, version: str = VERSION) -> Path:
    exe = venv / "bin" / "checkov"
    stamp = venv / f".installed-{version}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with (venv.parent / f"{venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if stamp.exists() and exe.exists():
            return exe
        print(f"installing checkov=={version} into {venv} (once; a few minutes)", file=sys.stderr)
        shutil.rmtree(venv, ignore_errors=True)
        for cmd in (
            [sys.executable, "-m", "venv", str(venv)],
            [str(venv / "bin" / "pip"), "install", "--quiet", f"checkov=={version}"],
        ):
            done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1200)
            if done.returncode != 0:
                raise CheckovUnavailable(f"cannot install checkov=={version} into {venv}:\n{done.stderr}")
        stamp.touch()
    return exe


def main() -> int:
    try:
        print(ensure())
    except CheckovUnavailable as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
