"""`make bench` (`python -m tests.bench`): every figure of issue 11 from one run, in real-time
ratios. `--quick` is a small version for development (a few minutes)."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from tests.bench import (
    scenario_chain,
    scenario_failover,
    scenario_idle,
    scenario_isolation,
    scenario_recovery,
    scenario_rss,
    scenario_scale,
)
from tests.bench.background import NICE, Background, write_figures
from tests.bench.figures import Figure
from tests.bench.idle_cgroup import IdleCgroup
from tests.bench.printer import scale_header, table
from tests.bench.report import (
    burst_figures,
    failover_figures,
    idle_figures,
    isolation_figures,
    limited_burst_figures,
    rss_figures,
    slope_figures,
)
from tests.bench.scale import Scale
from tests.bench.stack import Bench, Scenario

BUDGET = 30 * 60.0  # s: the whole `make bench` (the chain pair and the limited burst added ~12 min)
# s: the footprint child's restart and failover after its window (two 5-minute call windows, 9,000
# finished objects created, a standby started): on top of BUDGET, when the timed scenarios are done.
FAILOVER_EXTRA = 20 * 60.0
BURST_SCALE = 0.1  # F of the burst (scenario_scale's docstring says why not --scale)
IDLE_SCALE = 0.1  # F of the billed-idle pair (scenario_idle's docstring says why)
RESERVE = 100.0  # s: what the RSS scenario leaves for its last container starts, memory sample and
# window (~45 s at 800 running: reading 1,500 processes' smaps and CPU takes seconds), its shutdown
# (~30 s) and the table
END_MARGIN = 20.0  # s: what the background footprint leaves the parent for collecting it


def _stops(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split(",")]
    if len(parts) != 3 or min(parts) < 1 or sorted(set(parts)) != parts:
        raise argparse.ArgumentTypeError(
            f"--stops takes three rising Running counts like 50,100,200, got {text!r}"
        )
    return parts[0], parts[1], parts[2]


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    ap.add_argument("--scale", type=float, default=0.05, help="the factor F on every duration (0.05)")
    ap.add_argument(
        "--burst-scale", type=float, help="the factor F of the burst scenario alone (0.1; --quick: --scale)"
    )
    ap.add_argument(
        "--idle-scale", type=float, help="the factor F of the billed-idle pair alone (0.1; --quick: --scale)"
    )
    ap.add_argument("--quick", action="store_true", help="small waves and workloads (development)")
    ap.add_argument(
        "--stops",
        type=_stops,
        help="Running counts of the memory slope; CPU window at the middle (50,100,200)",
    )
    ap.add_argument("--burst", type=int, help="jobs of the burst (100)")
    ap.add_argument(
        "--brev-limit",
        type=float,
        default=12.0,
        help="Brev's rate limit (calls per nominal second) of the limited burst (12: above the pace's 5 + 5)",
    )
    ap.add_argument("--idle-jobs", type=int, help="jobs of the billed-idle workload, per operator (16)")
    ap.add_argument("--window", type=float, help="seconds of the steady-state CPU/calls window (20)")
    ap.add_argument("--busy", type=int, help="others kept busy in the isolation scenario (50)")
    ap.add_argument("--rss-jobs", type=int, help="Running jobs of the RSS scenario (1000)")
    ap.add_argument("--rss-wave", type=int, help="jobs per wave of the RSS scenario (100)")
    ap.add_argument("--budget", type=float, help="whole-run budget in seconds (1800; --quick 180)")
    ap.add_argument(
        "--chain-only",
        action="store_true",
        help="only the 5-step chain figure: one workflow vs five single jobs (~6 min; `make bench-chain`)",
    )
    ap.add_argument(
        "--with-recovery",
        action="store_true",
        help="also run the recovery figure (its own stack, ~2.5 min; `make bench-recovery` alone)",
    )
    ap.add_argument(
        "--rss-only",
        action="store_true",
        help="only the RSS scenario, with the whole budget to reach --rss-jobs (`make bench-rss`)",
    )
    ap.add_argument("--figures-json", type=Path, help="--rss-only: also write the figures to this file")
    ap.add_argument(
        "--failover",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="after the footprint's window: a restart and a failover on its fleet (default on)",
    )
    ap.add_argument(
        "--finished", type=int, help="finished jobs created during the restart (9000; --quick 100)"
    )
    ap.add_argument(
        "--wait-quiet",
        action="store_true",
        help="--rss-only: before the final CPU window, wait for a line on stdin (the machine is quiet)",
    )
    args = ap.parse_args(argv)
    quick = args.quick
    for name, own in (("burst_scale", BURST_SCALE), ("idle_scale", IDLE_SCALE)):
        if getattr(args, name) is None:
            setattr(args, name, args.scale if quick else own)
    for name in ("scale", "burst_scale", "idle_scale"):
        if not 0 < getattr(args, name) <= 1:
            ap.error(f"--{name.replace('_', '-')} must be in (0, 1], got {getattr(args, name)}")
    for name, small, full in (
        ("stops", (3, 6, 12), (50, 100, 200)),
        ("burst", 6, 100),
        ("idle_jobs", 3, 16),
        ("window", 5.0, 20.0),
        ("busy", 6, 50),
        ("rss_jobs", 20, 1000),
        ("rss_wave", 10, 100),
        ("finished", 100, 9000),
        ("budget", 180.0, BUDGET),
    ):
        if getattr(args, name) is None:  # 0 given is refused below, never replaced
            setattr(args, name, small if quick else full)
    for name in ("busy", "burst", "rss_jobs", "rss_wave", "idle_jobs", "window", "budget"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    return args


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # run the finally blocks: stop the operator, simulator, stack


def _section(figures: list[Figure], title: str, began: float) -> None:
    print(f"-- {title}: done at {(time.monotonic() - began) / 60:.1f} min", flush=True)
    print(table(figures), flush=True)  # now: a later scenario may not finish in time


def _rss_section(bench: Bench, args: argparse.Namespace, budget: float, began: float) -> list[Figure]:
    """The footprint scenario with `budget` wall seconds for its fill; prints and returns its
    figures."""
    print(f"\n-- footprint at F = 1 (operator intervals nominal): stops at {args.stops} Running, then up "
          f"to {args.rss_jobs} jobs in waves of {args.rss_wave}, {budget:.0f} s budget; simulator "
          f"(real s): {scenario_rss.FAST}", flush=True)  # fmt: skip
    failovers: list[scenario_failover.FailoverResult] = []

    def after_window(sc: Scenario) -> None:
        print(f"\n-- restart and failover on the footprint's fleet ({args.finished:,} finished jobs created "
              "during the restart)", flush=True)  # fmt: skip
        standby = None
        try:
            window = 30.0 if args.quick else scenario_failover.CALLS_WINDOW
            results, standby = scenario_failover.after_fill(sc, args.finished, window)
            failovers.extend(results)
        finally:
            if standby is not None:
                standby.stop()

    rss = scenario_rss.run(
        bench,
        args.rss_jobs,
        args.rss_wave,
        max(60.0, budget),
        args.window,
        stops=args.stops,
        before_window=_wait_quiet if args.wait_quiet else None,
        after_window=after_window if args.failover else None,
    )
    for problem in rss.problems:
        print(f"   problem: {problem}", flush=True)
    new = slope_figures(rss) + rss_figures(rss)
    _section(new, f"footprint from {args.stops[0]} to {args.rss_jobs:,} running (F = 1)", began)
    if failovers:
        more = failover_figures(failovers, args.finished)
        _section(more, "restart and failover (F = 1)", began)
        new += more
    return new


def _wait_quiet() -> None:
    print("   waiting for the other scenarios to end before the CPU window", flush=True)
    sys.stdin.readline()  # a line, or EOF: the parent is done or gone


def rss_only(args: argparse.Namespace) -> int:
    """`--rss-only`: the RSS scenario alone on its own stack, the whole budget for the fill."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    began = time.monotonic()
    bench = Bench.start(Scale(1.0))
    print(f"bench workdir: {bench.work}", flush=True)
    try:
        figures = _rss_section(bench, args, args.budget - RESERVE, began)
    finally:
        bench.close()
    if args.figures_json is not None:
        write_figures(args.figures_json, figures)
    return 0


def _footprint_argv(args: argparse.Namespace, budget: float) -> list[str]:
    return [
        "--budget", f"{budget:.0f}",
        "--window", f"{args.window:g}",
        "--rss-jobs", str(args.rss_jobs),
        "--rss-wave", str(args.rss_wave),
        "--stops", ",".join(str(n) for n in args.stops),
        "--finished", str(args.finished),
        "--failover" if args.failover else "--no-failover",
        *(["--quick"] if args.quick else []),
    ]  # fmt: skip


def _isolation(bench: Bench, args: argparse.Namespace, began: float) -> list[Figure]:
    print(
        f"\n-- isolation at F = 1 (operator settings at their defaults): {args.busy} others busy; "
        f"simulator (real s): {scenario_isolation.durations()}",
        flush=True,
    )
    iso = scenario_isolation.run(bench, args.busy)
    for problem in iso.problems:
        print(f"   problem: {problem}", flush=True)
    new = isolation_figures(iso)
    _section(new, "isolation (F = 1)", began)
    return new


def _idle(bench: Bench, args: argparse.Namespace, began: float) -> list[Figure]:
    idle_scale = Scale(args.idle_scale)
    print(f"\n-- billed idle at F = {idle_scale.factor:g}: {args.idle_jobs} jobs each, ours and "
          "baseline side by side", flush=True)  # fmt: skip
    ours, base = scenario_idle.run_side_by_side(bench, args.idle_jobs, idle_scale)
    new = idle_figures(ours, base, idle_scale)
    _section(new, f"billed idle (F = {idle_scale.factor:g})", began)
    return new


def _chain(bench: Bench, args: argparse.Namespace, began: float) -> list[Figure]:
    chain_scale = Scale(args.idle_scale)
    print(f"\n-- 5-step chain at F = {chain_scale.factor:g}: one workflow and five single jobs side by "
          "side", flush=True)  # fmt: skip
    flow, singles = scenario_chain.run(bench, chain_scale)
    new = scenario_chain.figures(flow, singles, chain_scale)
    _section(new, f"5-step chain billed idle (F = {chain_scale.factor:g})", began)
    return new


def chain_only(args: argparse.Namespace) -> int:
    """`--chain-only`: the chain figure alone on its own stack."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    began = time.monotonic()
    bench = Bench.start(Scale(args.idle_scale))
    print(f"bench workdir: {bench.work}", flush=True)
    try:
        figures = _chain(bench, args, began)
    finally:
        bench.close()
    print(f"\n== results (total {(time.monotonic() - began) / 60:.1f} min wall)\n")
    print(table(figures))
    return 0


def _burst(bench: Bench, args: argparse.Namespace, began: float) -> list[Figure]:
    print(
        f"\n-- burst of {args.burst} at F = {args.burst_scale:g} (the footprint fills beside it)", flush=True
    )
    res = scenario_scale.run(bench, args.burst, Scale(args.burst_scale))
    for problem in res.problems:
        print(f"   problem: {problem}", flush=True)
    new = burst_figures(res)
    _section(new, f"burst (F = {args.burst_scale:g})", began)
    return new


def _limited_burst(bench: Bench, args: argparse.Namespace, began: float) -> list[Figure]:
    print(
        f"\n-- burst of {args.burst} under Brev's rate limit ({args.brev_limit:g} calls a second, the "
        f"simulator refusing past it) at F = {args.burst_scale:g}",
        flush=True,
    )
    res = scenario_scale.run(bench, args.burst, Scale(args.burst_scale), brev_limit=args.brev_limit)
    for problem in res.problems:
        print(f"   problem: {problem}", flush=True)
    new = limited_burst_figures(res)
    _section(new, f"burst under Brev's limit (F = {args.burst_scale:g})", began)
    return new


def _start_footprint(
    bench: Bench, args: argparse.Namespace, began: float, cgroup: IdleCgroup | None, where: str
) -> Background:
    left = args.budget - (time.monotonic() - began) - END_MARGIN
    footprint = Background.start(bench.work / "footprint", _footprint_argv(args, left), cgroup)
    how = cgroup.how if cgroup is not None else f"nice {NICE}"
    print(f"\n-- footprint at F = 1 in the background ({where}; {how}), on its own control plane "
          f"(log: {footprint.log})", flush=True)  # fmt: skip
    return footprint


def _collect(footprint: Background, args: argparse.Namespace, began: float) -> list[Figure]:
    print("\n-- footprint (background): the timed scenarios are done", flush=True)
    try:
        extra = FAILOVER_EXTRA if args.failover else 0.0
        new, log = footprint.collect(max(60.0, args.budget - (time.monotonic() - began) + 120.0 + extra))
    except BaseException:
        footprint.stop()  # interrupted while waiting for it: its stack must not outlive us
        raise
    print(log, flush=True)
    return new


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    args = parse(argv)
    if args.rss_only:
        return rss_only(args)
    if args.chain_only:
        return chain_only(args)
    scale = Scale(args.scale)
    began = time.monotonic()
    print(scale_header(scale), flush=True)
    bench = Bench.start(scale)
    print(f"bench workdir: {bench.work}", flush=True)
    figures: list[Figure] = []
    footprint: Background | None = None
    cgroup, why = IdleCgroup.create("taobrev-bench-fill")
    try:
        # The footprint fill runs in the background on its own control plane
        # (tests/bench/background.py). In an idle-priority cgroup it starts first and takes only
        # the CPU the timed scenarios leave; at mere nice 19 it would triple the small fixed costs
        # (process starts, API round trips) the billed-idle pair and isolation measure, so it then
        # starts after them, beside the burst only.
        if cgroup is not None:
            footprint = _start_footprint(bench, args, began, cgroup, "first, beside every scenario")
        else:
            print(f"\n-- no idle-priority cgroup ({why}): the footprint starts after isolation", flush=True)
        figures += _idle(bench, args, began)
        figures += _chain(bench, args, began)
        figures += _isolation(bench, args, began)
        if footprint is None:
            footprint = _start_footprint(bench, args, began, None, "beside the burst")
        figures += _burst(bench, args, began)
        figures += _limited_burst(bench, args, began)
        if args.with_recovery:
            print("\n-- recovery", flush=True)
            new = scenario_recovery.run(scale.factor)
            figures += new
            _section(new, f"recovery (F = {scale.factor:g})", began)
    except BaseException:
        if footprint is not None:
            footprint.stop()  # interrupted: stop the background stack too
        elif cgroup is not None:
            cgroup.kill_all()  # removes the (empty) cgroup
        raise
    finally:
        bench.close()
    if footprint is not None:
        figures += _collect(footprint, args, began)
    total = time.monotonic() - began
    print(f"\n== results (each figure names its F; total {total / 60:.1f} min wall)\n")
    print(table(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
