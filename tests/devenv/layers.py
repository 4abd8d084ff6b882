"""Import-layer check (``python -m tests.devenv.layers [ROOT]``), run by ``make lint``.

The rules keep the operator's shape honest:

- pure modules (the state machine, conditions, naming, models) do no I/O and know nothing of
  Kubernetes, Brev or the dev environment, so they stay unit-testable in milliseconds;
- only the handler layer and the entry point touch kopf;
- the operator never imports the dev environment;
- the real Brev client never imports its simulator.

Missing files are fine: the check covers whatever exists under ``ROOT/controller``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PURE_MODULES = frozenset(
    {
        "controller/machine.py",
        "controller/conditions.py",
        "controller/naming.py",
        "controller/models.py",
        "controller/steps.py",
        "controller/timestamps.py",
        # The Brev value types and protocol: data only, so the state machine may use them.
        "controller/brev/client.py",
    }
)
# Pure modules that other pure modules may import although a forbidden prefix covers them.
PURE_IMPORTABLE = frozenset({"controller.brev.client"})
PURE_FORBIDDEN = (
    "kopf",
    "kubernetes",
    "subprocess",
    "asyncio.subprocess",
    "os",
    "socket",
    "boto3",
    "controller.brev",
    "tests.devenv",
    "controller.actions",
    "controller.reconciler",
    "controller.kube",
    "controller.handlers",
    "controller.app",
)
KOPF_ALLOWED = frozenset({"controller/handlers.py", "controller/__main__.py"})


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def _matches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _module_name(rel: str) -> str:
    parts = rel.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_names(node: ast.Import | ast.ImportFrom, rel: str) -> Iterator[str]:
    """Every dotted module name an import statement may bind (``from a import b`` -> a, a.b)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    base = node.module or ""
    if node.level:
        package = _module_name(rel).split(".")
        if not rel.endswith("__init__.py"):
            package.pop()  # a plain module's relative imports start from its package
        anchor = package[: len(package) - (node.level - 1)] if node.level > 1 else package
        base = ".".join([*anchor, base] if base else anchor)
    yield base
    for alias in node.names:
        if alias.name != "*":
            yield f"{base}.{alias.name}"


def _rules_for(rel: str) -> list[tuple[str, str]]:
    """(forbidden module prefix, why) pairs that apply to the file at ``rel``."""
    rules: list[tuple[str, str]] = []
    if rel in PURE_MODULES:
        rules += [(m, f"pure module must not import {m}") for m in PURE_FORBIDDEN]
    if rel not in KOPF_ALLOWED:
        rules.append(("kopf", "only controller/handlers.py and controller/__main__.py may import kopf"))
    if not rel.startswith("tests/devenv/"):
        rules.append(("tests.devenv", "the operator must never import the dev environment"))
    if rel.startswith("controller/"):
        rules.append(("tests.brevsim", "the operator must never import the Brev simulator"))
    return rules


def check_file(path: Path, rel: str) -> list[Violation]:
    try:
        tree = ast.parse(path.read_text(), filename=rel)
    except SyntaxError as exc:
        return [Violation(rel, exc.lineno or 0, f"cannot parse: {exc.msg}")]
    rules = _rules_for(rel)
    found: list[Violation] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        names = list(_imported_names(node, rel))
        for prefix, why in rules:
            hit = next(
                (
                    n
                    for n in names
                    if _matches(n, prefix) and not any(_matches(n, ok) for ok in PURE_IMPORTABLE)
                ),
                None,
            )
            if hit is not None:
                found.append(Violation(rel, node.lineno, f"imports {hit}: {why}"))
    return found


def check_tree(root: Path) -> list[Violation]:
    """Check every ``controller/**/*.py`` below ``root`` (the repository root)."""
    found: list[Violation] = []
    for path in sorted((root / "controller").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "__pycache__" in rel:
            continue
        found += check_file(path, rel)
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(__file__).resolve().parents[2]
    if not (root / "controller").is_dir():
        print(f"layers: no controller/ package under {root}", file=sys.stderr)
        return 2
    violations = check_tree(root)
    for v in violations:
        print(v)
    if violations:
        print(f"layers: {len(violations)} import-layer violation(s)", file=sys.stderr)
        return 1
    print("layers: ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
