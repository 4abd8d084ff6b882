"""The footprint scenario as a background child of `make bench`, at the lowest CPU priority.

Filling 1,000 Running jobs takes 6-10 minutes of both cores, more than the 15-minute bench has
left after the scenarios that measure time. So it runs beside the burst (which shrugs it off:
1.08x instead of 1.05-1.06x): `nice -n 19` (inherited by its own control plane, simulator,
operator and every brev/ssh child), on its own control plane, so it only takes CPU the burst
leaves idle and never sits in its API server's queue. Not beside the billed-idle pair or
isolation: their small fixed costs (process starts) tripled even at nice 19. Its memory figures do
not depend on CPU priority; its CPU and calls window waits until the parent says the machine is
quiet (a line on the child's stdin), so that window is measured alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import IO

from tests.bench.figures import Figure

NICE = 19


class Background:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path, figures: Path, out: IO[bytes]) -> None:
        self.proc, self.log, self.figures, self._out = proc, log, figures, out

    @classmethod
    def start(cls, work: Path, argv: list[str]) -> Background:
        """`python -m tests.bench --rss-only <argv>` at nice 19, logging to `work`."""
        work.mkdir(parents=True, exist_ok=True)
        log, figures = work / "footprint.log", work / "footprint-figures.json"
        out = log.open("wb")
        cmd = ["nice", "-n", str(NICE), sys.executable, "-m", "tests.bench", "--rss-only"]
        cmd += [*argv, "--figures-json", str(figures), "--wait-quiet"]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT)
        return cls(proc, log, figures, out)

    def quiet(self) -> None:
        """The timed scenarios are done: the child may take its CPU window now."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.write(b"quiet\n")
                self.proc.stdin.close()
            except BrokenPipeError:  # it ended already; collect() says how
                pass

    def collect(self, timeout: float) -> tuple[list[Figure], str]:
        """Wait for the child; its figures (none if it failed) and its log."""
        self.quiet()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            code = None
        self._out.close()
        text = self.log.read_text(errors="replace")
        if code != 0 or not self.figures.exists():
            return [], text + f"\n   problem: the footprint child ended with {code} (log {self.log})\n"
        return [Figure(**d) for d in json.loads(self.figures.read_text())], text

    def stop(self) -> None:
        """Interrupted: the child's own finally blocks stop its stack (SIGTERM), then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def write_figures(path: Path, figures: list[Figure]) -> None:
    path.write_text(json.dumps([asdict(f) for f in figures]))
