"""The import-linter contracts (.importlinter, run by `make lint`) catch what they claim to.

Each case copies the real source tree, adds one forbidden import and runs `lint-imports` on the
copy: the contract must break and name the offending chain. `make lint` checks the real tree.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _python_sources_only(directory: str, names: list[str]) -> set[str]:
    """copytree filter: keep packages and .py files (the graph needs nothing else)."""
    return {
        name
        for name in names
        if name == "__pycache__" or (not name.endswith(".py") and not Path(directory, name).is_dir())
    }


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    for package in ("controller", "tests"):
        shutil.copytree(REPO / package, root / package, ignore=_python_sources_only)
    shutil.copy(REPO / ".importlinter", root / ".importlinter")
    return root


def _lint(root: Path, contract: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", "--contract", contract],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _append(root: Path, rel: str, source: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write("\n" + source + "\n")


CASES = [
    # (contract id, {file: appended source}, text the broken contract must print)
    pytest.param(
        "pure-core",
        {"controller/api/timestamps.py": "import subprocess"},
        "controller.api.timestamps is not allowed to import subprocess",
        id="pure-direct-stdlib",
    ),
    pytest.param(
        "pure-core",
        {"controller/lifecycle/conditions.py": "def _late():\n    import kubernetes"},
        "controller.lifecycle.conditions is not allowed to import kubernetes",
        id="pure-function-level-import",
    ),
    pytest.param(
        # The case the old AST checker missed: the pure module imports a harmless-looking helper
        # that does the I/O.
        "pure-core",
        {
            "controller/helper_with_io.py": "import socket",
            "controller/api/naming.py": "from controller import helper_with_io",
        },
        "controller.api.naming is not allowed to import socket",
        id="pure-transitive",
    ),
    pytest.param(
        "pure-core",
        {"controller/brev/client.py": "from controller.brev.runner import Runner"},
        "controller.brev.client is not allowed to import controller.brev.runner",
        id="pure-brev-client-to-runner",
    ),
    pytest.param(
        "kopf-edge",
        {"controller/reconciler.py": "import kopf"},
        "controller.reconciler -> kopf",
        id="kopf-outside-handlers",
    ),
    pytest.param(
        "handlers-top",
        {"controller/app.py": "from controller import handlers"},
        "controller.app -> controller.handlers",
        id="handlers-imported-below-entry-point",
    ),
    pytest.param(
        "operator-not-tests",
        {"controller/brev/cli.py": "from tests.brevsim import cli as _sim"},
        "controller.brev.cli -> tests.brevsim.cli",
        id="operator-imports-simulator",
    ),
    pytest.param(
        "operator-not-tests",
        {"controller/handlers.py": "import tests.devenv.controlplane"},
        "controller.handlers -> tests.devenv.controlplane",
        id="operator-imports-devenv",
    ),
    pytest.param(
        "brevsim-independent",
        {"tests/brevsim/__init__.py": "from controller.brev import commands as _ops"},
        "tests.brevsim -> controller.brev.commands",
        id="simulator-imports-operator",
    ),
]


@pytest.mark.parametrize(("contract", "additions", "expected"), CASES)
def test_forbidden_import_breaks_the_contract(
    pristine: Path, tmp_path: Path, contract: str, additions: dict[str, str], expected: str
) -> None:
    root = tmp_path / "tree"
    shutil.copytree(pristine, root)
    before = _lint(root, contract)
    for rel, source in additions.items():
        _append(root, rel, source)
    after = _lint(root, contract)
    assert after.returncode == 1, f"contract {contract} did not break:\n{after.stdout}\n{after.stderr}"
    assert expected in after.stdout, after.stdout
    # The violation is the one added here, not one the tree already had.
    assert expected not in before.stdout, before.stdout


def test_unknown_module_in_a_contract_is_an_error(pristine: Path, tmp_path: Path) -> None:
    """A contract naming a module that does not exist fails loudly instead of checking nothing."""
    root = tmp_path / "tree"
    shutil.copytree(pristine, root)
    config = root / ".importlinter"
    config.write_text(
        config.read_text().replace("    controller.api.naming\n", "    controller.nameing\n", 1)
    )
    proc = _lint(root, "pure-core")
    assert proc.returncode != 0
    assert "controller.nameing" in proc.stdout + proc.stderr


def test_tests_may_drive_the_handlers_with_kopf(pristine: Path, tmp_path: Path) -> None:
    """The kopf edge binds the operator, not its tests: a test importing kopf and the handlers is fine."""
    root = tmp_path / "tree"
    shutil.copytree(pristine, root)
    _append(root, "tests/unit/test_drives_handlers.py", "import kopf\nfrom controller import handlers")
    for contract in ("kopf-edge", "handlers-top"):
        proc = _lint(root, contract)
        assert proc.returncode == 0, f"{contract}:\n{proc.stdout}\n{proc.stderr}"
