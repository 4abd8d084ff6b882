"""The footprint scenario as a background child of `make bench`, at idle CPU priority.

Filling 1,000 Running jobs takes 6-10 minutes of both cores, more than the 15-minute bench has
left after the scenarios that measure time. So it runs beside them, on its own control plane (it
never sits in their API server's queue), in a cgroup at idle CPU priority (`idle_cgroup.py`: its
control plane, simulator, operator and every brev/ssh child only get CPU the timed scenarios leave
unused). Without such a cgroup it runs at `nice -n 19`, which autogroup scheduling defeats (ours'
billed idle per job tripled beside it), so the bench then starts it only beside the
burst, which shrugs it off. Its memory figures do not depend on CPU priority; its CPU and calls
window waits until the parent says the machine is quiet (a line on the child's stdin), so that
window is measured alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import IO

from tests.bench.figures import Figure
from tests.bench.idle_cgroup import IdleCgroup

NICE = 19


class Background:
    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        log: Path,
        figures: Path,
        out: IO[bytes],
        cgroup: IdleCgroup | None,
    ) -> None:
        self.proc, self.log, self.figures, self._out, self.cgroup = proc, log, figures, out, cgroup

    @classmethod
    def start(cls, work: Path, argv: list[str], cgroup: IdleCgroup | None) -> Background:
        """`python -m tests.bench --rss-only <argv>` at nice 19 (and in `cgroup` if given),
        logging to `work`."""
        work.mkdir(parents=True, exist_ok=True)
        log, figures = work / "footprint.log", work / "footprint-figures.json"
        out = log.open("wb")
        cmd = ["nice", "-n", str(NICE), sys.executable, "-m", "tests.bench", "--rss-only"]
        cmd += [*argv, "--figures-json", str(figures), "--wait-quiet"]
        if cgroup is not None:
            cmd = cgroup.wrap(cmd)
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT)
        return cls(proc, log, figures, out, cgroup)

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
        left = self._reap()
        self._out.close()
        text = self.log.read_text(errors="replace")
        if left:
            text += f"\n   problem: the footprint child left {len(left)} processes behind: {left[:10]}\n"
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
        self._reap()

    def _reap(self) -> list[str]:
        """Whatever the child's stack left behind in its cgroup (nothing, when it ends cleanly)."""
        return self.cgroup.kill_all() if self.cgroup is not None else []


def write_figures(path: Path, figures: list[Figure]) -> None:
    path.write_text(json.dumps([asdict(f) for f in figures]))
