"""The tools that hold the shape run in CI too: ruff (lint + format), mypy --strict, the import
layers, and the CRD drift check. Each runs as the developer would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

CHECKS = {
    "ruff check": [str(BIN / "ruff"), "check", "controller", "tests"],
    "ruff format": [str(BIN / "ruff"), "format", "--check", "controller", "tests"],
    "mypy": [str(BIN / "mypy")],
    "import layers": [sys.executable, "-m", "tests.devenv.layers"],
    "crd drift": [sys.executable, "-m", "tests.devenv.crdgen", "--check"],
}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_check_is_clean(name: str) -> None:
    proc = subprocess.run(
        CHECKS[name],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
