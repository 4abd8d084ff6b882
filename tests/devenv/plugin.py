"""Running the kubectl plugin (`kubectl taobrev ...`) against a local control plane as a user does:
kubectl finds `kubectl-taobrev` (the package's entry point, in the venv's bin beside this
interpreter) on PATH and hands it the arguments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.devenv.controlplane import ControlPlane, kubectl_path


def kubectl_taobrev(cp: ControlPlane, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [kubectl_path(), "taobrev", *args, f"--kubeconfig={cp.kubeconfig}", "--context=admin"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=timeout,
    )


def plugin_env() -> dict[str, str]:
    """The environment in which kubectl finds `kubectl-taobrev` (the venv's bin first on PATH)."""
    bin_dir = Path(sys.executable).parent
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def user_argv(kubeconfig: Path, *args: str) -> list[str]:
    """`kubectl taobrev ARGS` as the user whose kubeconfig this is (its own context)."""
    return [kubectl_path(), "taobrev", *args, f"--kubeconfig={kubeconfig}"]
