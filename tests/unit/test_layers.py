"""The import-layer check (tests.devenv.layers) on throw-away source trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.devenv.layers import check_tree, main


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, source in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root


CLEAN = {
    "controller/__init__.py": "",
    "controller/machine.py": "import enum\nfrom controller import naming\nfrom controller.models import M\n",
    "controller/naming.py": "import hashlib\nimport re\n",
    "controller/models.py": "from pydantic import BaseModel\nfrom controller.naming import x\n",
    "controller/handlers.py": "import kopf\nimport os\nfrom controller import machine\n",
    "controller/__main__.py": "import kopf\n",
    "controller/brev/__init__.py": "",
    "controller/brev/client.py": "from dataclasses import dataclass\nfrom typing import Protocol\n",
    "controller/brev/cli.py": "import asyncio\nimport os\nfrom controller.brev import client\n",
    "tests/brevsim/__init__.py": "from tests.brevsim import state\nfrom . import state\n",
    "tests/devenv/__init__.py": "",
    "tests/devenv/demo.py": "import subprocess\nfrom tests.devenv import controlplane\n"
    "from tests.brevsim import x\n",
}


def test_clean_tree_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tree that respects every layer rule yields no violations and exit code 0."""
    root = _tree(tmp_path, CLEAN)
    assert check_tree(root) == []
    assert main([str(root)]) == 0
    assert "layers: ok" in capsys.readouterr().out


def test_missing_modules_are_fine(tmp_path: Path) -> None:
    """Pure modules that do not exist yet are simply not checked."""
    root = _tree(tmp_path, {"controller/__init__.py": "", "controller/errors.py": "import os\n"})
    assert check_tree(root) == []


@pytest.mark.parametrize(
    ("rel", "source", "needle"),
    [
        ("controller/machine.py", "import os\n", "imports os"),
        ("controller/conditions.py", "import os.path\n", "imports os.path"),
        ("controller/naming.py", "from os import path\n", "imports os"),
        ("controller/models.py", "import subprocess\n", "imports subprocess"),
        ("controller/machine.py", "from asyncio import subprocess\n", "imports asyncio.subprocess"),
        ("controller/machine.py", "import asyncio.subprocess\n", "imports asyncio.subprocess"),
        ("controller/machine.py", "import socket\n", "imports socket"),
        ("controller/machine.py", "import boto3\n", "imports boto3"),
        ("controller/machine.py", "from kubernetes import client\n", "imports kubernetes"),
        (
            "controller/machine.py",
            "from controller.brev.cli import BrevCLI\n",
            "imports controller.brev",
        ),
        ("controller/machine.py", "from controller import brev\n", "imports controller.brev"),
        ("controller/machine.py", "from .brev import client\n", "imports controller.brev"),
        ("controller/models.py", "def f():\n    import kopf\n", "pure module must not import kopf"),
        ("controller/reconciler.py", "import kopf\n", "only controller/handlers.py"),
        ("controller/handlers.py", "from tests.devenv import controlplane\n", "dev environment"),
        ("controller/brev/cli.py", "from tests.brevsim import fake\n", "Brev simulator"),
    ],
)
def test_violation_is_reported_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rel: str, source: str, needle: str
) -> None:
    """Each forbidden import fails the check (exit 1) and is listed as file:line with the rule."""
    root = _tree(tmp_path, {**CLEAN, rel: "from __future__ import annotations\n\n" + source})
    violations = check_tree(root)
    assert {v.path for v in violations} == {rel}
    assert any(needle in v.message for v in violations), violations
    assert main([str(root)]) == 1
    lineno = violations[0].line
    assert f"{rel}:{lineno}: " in capsys.readouterr().out
    assert lineno >= 3  # the import, not the __future__ line


def test_unparsable_file_fails(tmp_path: Path) -> None:
    """A file the checker cannot parse is a violation, not silently skipped."""
    root = _tree(tmp_path, {**CLEAN, "controller/naming.py": "def (:\n"})
    assert [str(v).split(":")[0] for v in check_tree(root)] == ["controller/naming.py"]
