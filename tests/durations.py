"""The suite's long tests and how long each took, so the workers start them first.

pytest-xdist's worksteal gives each worker a contiguous share of the collected tests and lets an
idle worker take the tail of another's share. In collection order the long tests (e2e with real
timers, the model test, the old-code searches) sat late in some shares: the last 3% of the suite
ran on one or two workers for minutes. `spread` deals the known long tests to the workers
longest-first, each to the share with the least work so far, and fills every share with the
short tests to the size xdist will cut it to: each worker starts with its long tests, and what
is stolen at the end is short.

`durations.txt` holds `<seconds> <node id>` of every test whose call took at least
`KEPT_SECONDS`; `make durations` measures the suite and rewrites it (from pytest's
`--durations=0` report on stdin: `python -m tests.durations < report`). A stale or missing entry
only changes the order the tests run in, never what they check.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

FILE = Path(__file__).resolve().parent / "durations.txt"
KEPT_SECONDS = 5.0
# What a test not in the file is taken to cost (most are unit tests of milliseconds).
UNKNOWN_SECONDS = 0.05
_REPORT_LINE = re.compile(r"^\s*(?P<seconds>\d+(?:\.\d+)?)s call\s+(?P<nodeid>\S.*?)\s*$")

T = TypeVar("T")


def load(path: Path = FILE) -> dict[str, float]:
    """Node id -> seconds, from the file (empty when it is missing)."""
    if not path.is_file():
        return {}
    known: dict[str, float] = {}
    for line in path.read_text().splitlines():
        seconds, _, nodeid = line.strip().partition(" ")
        if nodeid and not line.startswith("#"):
            known[nodeid] = float(seconds)
    return known


def share_sizes(count: int, workers: int) -> list[int]:
    """How many tests xdist's worksteal hands each worker at the start: it gives the first idle
    worker len(pending) // workers, the next len(pending) // (workers - 1) of the rest, and so on."""
    sizes = []
    left = count
    for i in range(workers):
        size = left // (workers - i)
        sizes.append(size)
        left -= size
    return sizes


def spread(items: Sequence[T], ids: Sequence[str], known: dict[str, float], workers: int) -> list[T]:
    """`items` reordered into `workers` consecutive shares of xdist's sizes, each starting with
    its long tests (longest first, dealt to the least-loaded share), the short ones after them
    in collection order."""
    if workers <= 1:
        order = sorted(range(len(items)), key=lambda i: -known.get(ids[i], 0.0))
        return [items[i] for i in order]
    sizes = share_sizes(len(items), workers)
    long_ones = sorted((i for i in range(len(items)) if ids[i] in known), key=lambda i: -known[ids[i]])
    shares: list[list[int]] = [[] for _ in range(workers)]
    work = [0.0] * workers
    for i in long_ones:
        open_shares = [w for w in range(workers) if len(shares[w]) < sizes[w]]
        w = min(open_shares, key=lambda s: (work[s], s))
        shares[w].append(i)
        work[w] += known[ids[i]]
    rest = iter(i for i in range(len(items)) if ids[i] not in known)
    for w in range(workers):
        shares[w].extend(next(rest) for _ in range(sizes[w] - len(shares[w])))
    return [items[i] for share in shares for i in share]


def from_report(lines: Sequence[str]) -> dict[str, float]:
    """Node id -> seconds of each test's call in a `--durations=0` report, at least KEPT_SECONDS."""
    found: dict[str, float] = {}
    for line in lines:
        match = _REPORT_LINE.match(line)
        if match and float(match["seconds"]) >= KEPT_SECONDS:
            found[match["nodeid"]] = float(match["seconds"])
    return found


def main() -> int:
    found = from_report(sys.stdin.read().splitlines())
    if not found:
        print(
            "no `<seconds>s call <node id>` lines on stdin: pipe pytest --durations=0 into it",
            file=sys.stderr,
        )
        return 1
    header = (
        "# <seconds> <node id>: each test's call that took >= 5 s (make durations); the order tests run in\n"
    )
    body = "".join(f"{s:.1f} {nodeid}\n" for nodeid, s in sorted(found.items(), key=lambda kv: -kv[1]))
    FILE.write_text(header + body)
    print(f"{FILE}: {len(found)} tests of {KEPT_SECONDS:g} s or more", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
