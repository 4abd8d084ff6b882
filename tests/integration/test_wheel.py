"""What ships is the operator only: the wheel holds controller/ (and its metadata), nothing from
tests/ (the Brev simulator, the dev environment, the CRD generator); the image copies controller/
from the build context and nothing else that holds code.

The wheel is built offline from a copy of the working tree with the venv's pinned setuptools
(`pip wheel --no-build-isolation --no-index`), so an untracked or misplaced file that would end up
in a release shows up here too.
"""

from __future__ import annotations

import email.parser
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DIST_INFO = re.compile(
    r"^taobrev_operator-[^/]+\.dist-info/(METADATA|WHEEL|RECORD|entry_points\.txt|top_level\.txt)$"
)
# Build-context files the image may COPY: build inputs of the wheel, and the runtime pins file.
IMAGE_CONTEXT_ALLOWED = {
    "pyproject.toml",
    "README.md",
    "requirements/constraints.txt",
    "controller",
    "versions.yaml",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    src = tmp_path_factory.mktemp("src") / "tree"
    # Local state only (venv, git, caches, earlier build output); bytecode stays, as in a dev tree.
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(
            ".venv",
            ".git",
            "build",
            "dist",
            "*.egg-info",
            ".mypy_cache",
            ".ruff_cache",
            ".pytest_cache",
            ".devenv",
        ),
    )
    out = tmp_path_factory.mktemp("wheelhouse")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            ".",
            "-w",
            str(out),
        ],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    built = sorted(out.glob("*.whl"))
    assert len(built) == 1, built
    return zipfile.ZipFile(built[0])


# The operator's data files: the shell programs it runs on instances (package-data in pyproject).
REMOTE_TEMPLATES = re.compile(r"^controller/brev/remote/[a-z_]+\.sh$")


def _operator_files() -> set[str]:
    """Every module of controller/ and every remote program template, as wheel paths."""
    files = [*(REPO / "controller").rglob("*.py"), *(REPO / "controller/brev/remote").glob("*.sh")]
    return {p.relative_to(REPO).as_posix() for p in files}


def test_wheel_holds_only_the_operator_package(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    stray = [
        n
        for n in names
        if not (n.startswith("controller/") and n.endswith(".py"))
        and not REMOTE_TEMPLATES.match(n)
        and not DIST_INFO.match(n)
    ]
    assert stray == [], f"the wheel ships files that are not operator code or metadata: {stray}"


def test_wheel_holds_every_operator_module(wheel: zipfile.ZipFile) -> None:
    """Nothing of the operator is lost on the way (a package without __init__.py, a bad find rule,
    a remote program template left out of package-data)."""
    expected = _operator_files()
    packaged = {n for n in wheel.namelist() if n.startswith("controller/")}
    assert expected - packaged == set()
    assert packaged - expected == set()


def test_wheel_has_no_test_code_by_any_name(wheel: zipfile.ZipFile) -> None:
    for needle in ("tests/", "brevsim", "devenv", "crdgen", "conftest"):
        assert not [n for n in wheel.namelist() if needle in n], needle


def test_wheel_metadata_names_the_entry_point_and_top_level(wheel: zipfile.ZipFile) -> None:
    dist_info = next(n.split("/")[0] for n in wheel.namelist() if DIST_INFO.match(n))
    assert wheel.read(f"{dist_info}/top_level.txt").decode().split() == ["controller"]
    entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
    assert "taobrev-operator = controller.__main__:main" in entry_points
    metadata = email.parser.Parser().parsestr(wheel.read(f"{dist_info}/METADATA").decode())
    assert metadata["Name"] == "taobrev-operator"
    assert metadata["License-Expression"] == "Apache-2.0"


def _context_copies(dockerfile: str) -> list[str]:
    """Sources of every COPY/ADD that reads the build context (not `--from=` another stage)."""
    sources: list[str] = []
    for line in dockerfile.replace("\\\n", " ").splitlines():
        instruction, _, rest = line.strip().partition(" ")
        if instruction.upper() not in {"COPY", "ADD"}:
            continue
        operands, flags = rest.strip(), []
        while operands.startswith("--"):
            flag, _, operands = operands.partition(" ")
            flags.append(flag)
            operands = operands.strip()
        if any(f.startswith("--from=") for f in flags):
            continue
        # Exec form: COPY ["src", ..., "dest"]; shell form: COPY src ... dest.
        paths = json.loads(operands) if operands.startswith("[") else operands.split()
        sources += [p.removeprefix("./").rstrip("/") for p in paths[:-1]]
    return sources


def test_context_copies_reads_both_forms_and_skips_other_stages() -> None:
    dockerfile = (
        "FROM x AS a\n"
        "COPY --from=a /bin/tool /bin/tool\n"
        "COPY --chown=1:1 pyproject.toml \\\n    README.md ./\n"
        'ADD ["tests/", "/src/tests"]\n'
        "copy ./controller/ controller\n"
    )
    assert _context_copies(dockerfile) == ["pyproject.toml", "README.md", "tests", "controller"]


def test_image_copies_only_the_operator_from_the_context() -> None:
    sources = _context_copies((REPO / "deploy/image/Dockerfile").read_text())
    assert "controller" in sources
    assert set(sources) <= IMAGE_CONTEXT_ALLOWED, sources
