"""`python -m tests.devenv.levels [--max N]`: the operator's import graph drawn in levels.

A module stands one level above the highest module of `controller` it imports (a module that
imports none of them is level 1), as the renovation issue (26) draws it. Prints the levels, the
modules on each and the longest chain; with `--max N` exits 1 when there are more than N levels,
so `make lint` fails on a new arrow that makes the house taller, and when a module of `controller`
has no layer in the `layers` contract of `.importlinter`. Uses grimp, the graph library
import-linter is built on (already pinned), so both read the same graph.
"""

from __future__ import annotations

import argparse
import configparser
import functools
import sys
from pathlib import Path

import grimp


@functools.cache
def _graph(package: str) -> grimp.ImportGraph:
    return grimp.build_graph(package)


@functools.cache
def levels(package: str = "controller") -> dict[str, int]:
    """Each module of `package` (its own top-level `__init__` left out) and its level."""
    graph = _graph(package)
    modules = {m for m in graph.modules if m.startswith(package + ".")}
    imports = {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}

    @functools.cache
    def level(module: str) -> int:
        below = [level(m) for m in imports[module] if m != module]
        return 1 + max(below, default=0)

    return {m: level(m) for m in sorted(modules)}


def longest_chain(package: str = "controller") -> list[str]:
    graph = _graph(package)
    lv = levels(package)
    top = max(lv, key=lambda m: lv[m])
    chain = [top]
    while lv[chain[-1]] > 1:
        below = graph.find_modules_directly_imported_by(chain[-1])
        chain.append(max((m for m in below if m in lv), key=lambda m: lv[m]))
    return chain


def unplaced(package: str = "controller", config: Path = Path(".importlinter")) -> list[str]:
    """Modules of `package` that the `layers` contract does not name (itself, or a package that
    holds it, such as `controller.brev`): a new module must be given its layer, or the contract
    would not guard its imports. Packages themselves (their `__init__`) hold no code to place."""
    parser = configparser.ConfigParser()
    parser.read(config)
    text = parser.get("importlinter:contract:layers", "layers")
    placed = {name.strip() for line in text.splitlines() for name in line.replace("|", ":").split(":")}
    modules = set(levels(package))
    packages = {m for m in modules if any(o.startswith(m + ".") for o in modules)}

    def is_placed(module: str) -> bool:
        parts = module.split(".")
        return any(".".join(parts[:i]) in placed for i in range(2, len(parts) + 1))

    return sorted(m for m in modules - packages if not is_placed(m))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.devenv.levels")
    parser.add_argument("--max", type=int, default=None, help="fail (exit 1) above this many levels")
    parser.add_argument("--quiet", action="store_true", help="print only the count")
    args = parser.parse_args()
    lv = levels()
    top = max(lv.values())
    if not args.quiet:
        for n in range(top, 0, -1):
            print(
                f"{n:2d}: {' '.join(sorted(m.removeprefix('controller.') for m, v in lv.items() if v == n))}"
            )
        print("longest chain: " + " -> ".join(m.removeprefix("controller.") for m in longest_chain()))
    print(f"{len(lv)} modules on {top} levels")
    if args.max is not None and top > args.max:
        print(f"more than {args.max} levels: an import made the house taller (see the chain above)")
        return 1
    missing = unplaced()
    if missing:
        print(f"not in the layers contract of .importlinter (give each its layer): {' '.join(missing)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
