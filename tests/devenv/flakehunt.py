"""Flake hunt: run test tiers again and again on a loaded machine and list every test that failed.

``python -m tests.devenv.flakehunt [--runs N] [--parallel P] [--load W] [PATH ...] [-- PYTEST-ARGS]``
(``make flake-hunt``). A race that a quiet developer machine never loses shows up when every core
is busy, as on a shared 2-core CI machine: W busy-loop processes (default: one per core, not niced,
so they really compete) run beside the whole hunt, and with P > 1 that many repetitions run at
once, each loading the others (every run has its own control plane, simulator, S3 and temporary
directories). Each repetition is a separate pytest process with its own JUnit report; the hunt
prints one line per run and, at the end, every test that failed at least once with how often and
its first failure. Exit 0 only when every run passed.

The report is also written as Markdown under ``$TAOBREV_CACHE/flake-hunt/`` (outside the repo).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.devenv.kubebuild import cache_root

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TIERS = ("tests/integration", "tests/e2e")
_MESSAGE_LINES = 12


@dataclass(frozen=True)
class Failure:
    test: str  # pytest's node id (file::name), as `pytest` would take it back
    kind: str  # "failure" (the test's assertion) or "error" (setup/teardown)
    message: str


@dataclass
class RunResult:
    index: int
    seconds: float
    returncode: int
    tests: int = 0
    skipped: int = 0
    failures: list[Failure] = field(default_factory=list)

    @property
    def green(self) -> bool:
        return self.returncode == 0 and not self.failures


def node_id(case: ET.Element) -> str:
    """JUnit's classname is the dotted module path (plus classes); pytest's node id is the file."""
    parts = (case.get("classname") or "").split(".")
    name = case.get("name") or "?"
    for cut in range(len(parts), 0, -1):
        candidate = Path(*parts[:cut]).with_suffix(".py")
        if (REPO_ROOT / candidate).is_file():
            return "::".join([candidate.as_posix(), *parts[cut:], name])
    return "::".join([*parts, name])


def parse_junit(path: Path) -> tuple[int, int, list[Failure]]:
    """(tests, skipped, failures) of one pytest JUnit XML report."""
    root = ET.parse(path).getroot()  # noqa: S314 - our own pytest's report, not foreign input
    tests = skipped = 0
    failures: list[Failure] = []
    for case in root.iter("testcase"):
        tests += 1
        for child in case:
            if child.tag == "skipped":
                skipped += 1
            elif child.tag in ("failure", "error"):
                text = (child.get("message") or "") + "\n" + (child.text or "")
                lines = [line for line in text.strip().splitlines() if line.strip()]
                tail = "\n".join(lines[-_MESSAGE_LINES:])
                failures.append(Failure(test=node_id(case), kind=child.tag, message=tail))
    return tests, skipped, failures


def _busy(parent: int) -> None:
    # Spin until the hunt is gone; check the parent now and then so an interrupted hunt (SIGKILL)
    # does not leave cores burning.
    while os.getppid() == parent:
        for _ in range(2_000_000):
            pass


@contextmanager
def load(workers: int) -> Iterator[None]:
    procs = [
        multiprocessing.Process(target=_busy, args=(os.getpid(),), daemon=True, name=f"flakehunt-load-{i}")
        for i in range(workers)
    ]
    for proc in procs:
        proc.start()
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(timeout=10)


def run_once(index: int, tiers: Sequence[str], pytest_args: Sequence[str], out_dir: Path) -> RunResult:
    report = out_dir / f"run-{index}.xml"
    log_path = out_dir / f"run-{index}.log"
    argv = [sys.executable, "-m", "pytest", *tiers, "-p", "no:cacheprovider", f"--junitxml={report}"]
    argv += ["-q", *pytest_args]
    started = time.monotonic()
    with log_path.open("wb") as log:
        rc = subprocess.run(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    return collect(index, rc, time.monotonic() - started, report, log_path)


def collect(index: int, rc: int, seconds: float, report: Path, log_path: Path) -> RunResult:
    result = RunResult(index=index, seconds=seconds, returncode=rc)
    if report.is_file():
        result.tests, result.skipped, result.failures = parse_junit(report)
    elif rc != 0:
        result.failures.append(
            Failure("<session>", "error", f"pytest exited {rc} without a report: {log_path}")
        )
    return result


def render(
    results: Sequence[RunResult], *, tiers: Sequence[str], workers: int, parallel: int, commit: str
) -> str:
    by_test: dict[str, list[tuple[int, Failure]]] = {}
    for result in results:
        for failure in result.failures:
            by_test.setdefault(failure.test, []).append((result.index, failure))
    lines = [
        f"# Flake hunt: {len(results)} run(s) of {' '.join(tiers)}, {parallel} at once, with "
        f"{workers} busy loop(s) on {os.cpu_count()} core(s), commit {commit}",
        "",
        "| run | tests | skipped | failed | seconds | pytest rc |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.index} | {r.tests} | {r.skipped} | {len(r.failures)} | {r.seconds:.0f} | {r.returncode} |"
        )
    lines.append("")
    if not by_test:
        lines.append("No test failed in any run.")
    else:
        lines.append(f"{len(by_test)} test(s) failed at least once:")
        for test, seen in sorted(by_test.items()):
            runs = ", ".join(str(i) for i, _f in seen)
            first = seen[0][1]
            lines += [
                "",
                f"## {test}",
                f"failed in {len(seen)} of {len(results)} run(s) (runs {runs}), first as {first.kind}:",
                "```",
                first.message,
                "```",
            ]
    return "\n".join(lines) + "\n"


def _commit() -> str:
    proc = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() or "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, pytest_args = args[:cut], args[cut + 1 :]
    parser = argparse.ArgumentParser(prog="make flake-hunt", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="repetitions of the tiers (default 5)")
    parser.add_argument("--parallel", type=int, default=1, help="repetitions running at once (default 1)")
    parser.add_argument("--load", type=int, default=os.cpu_count() or 2, help="busy loops beside the runs")
    parser.add_argument(
        "tiers", nargs="*", default=list(DEFAULT_TIERS), help="test paths (default: %(default)s)"
    )
    opts = parser.parse_args(args)
    if opts.runs < 1 or opts.parallel < 1 or opts.load < 0:
        parser.error("--runs and --parallel must be >= 1, --load >= 0")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = cache_root() / "flake-hunt" / stamp
    out_dir.mkdir(parents=True, exist_ok=True)
    commit = _commit()
    results: list[RunResult] = []
    print(
        f"flake hunt: {opts.runs} run(s) of {' '.join(opts.tiers)}, {opts.load} busy loop(s); "
        f"logs in {out_dir}"
    )
    with load(opts.load), ThreadPoolExecutor(max_workers=opts.parallel) as pool:
        futures = [
            pool.submit(run_once, i, opts.tiers, pytest_args, out_dir) for i in range(1, opts.runs + 1)
        ]
        for future in as_completed(futures):
            result = future.result()
            results.append(result)
            names = ", ".join(sorted({f.test for f in result.failures})) or "-"
            print(
                f"run {result.index}/{opts.runs}: {result.tests} tests, {len(result.failures)} failed "
                f"in {result.seconds:.0f} s (rc {result.returncode}); failed: {names}",
                flush=True,
            )
    results.sort(key=lambda r: r.index)
    text = render(results, tiers=opts.tiers, workers=opts.load, parallel=opts.parallel, commit=commit)
    (out_dir / "report.md").write_text(text)
    print()
    print(text)
    print(f"report: {out_dir / 'report.md'}")
    return 0 if all(r.green for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
