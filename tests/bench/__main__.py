"""`make bench` (`python -m tests.bench`): every figure of issue 11 from one run, in real-time
ratios. `--quick` is a small version for development (a few minutes)."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from tests.bench import scenario_idle, scenario_recovery, scenario_scale
from tests.bench.figures import MIB, Figure, mean, ratio, slope
from tests.bench.printer import scale_header, table
from tests.bench.scale import Scale
from tests.bench.stack import Bench

GOAL_RSS_AT_1000 = 300.0  # MiB


def _waves(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split(",")]
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"--waves takes three job counts like 50,50,100, got {text!r}")
    return parts[0], parts[1], parts[2]


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    ap.add_argument("--scale", type=float, default=0.02, help="the factor F on every duration (0.02)")
    ap.add_argument("--quick", action="store_true", help="small waves and workloads (development)")
    ap.add_argument("--waves", type=_waves, help="jobs per wave of the scale scenario (default 50,50,100)")
    ap.add_argument("--idle-jobs", type=int, help="jobs of the billed-idle workload, per operator (20)")
    ap.add_argument("--window", type=float, help="seconds of the steady-state CPU/calls window (20)")
    args = ap.parse_args(argv)
    quick = args.quick
    args.waves = args.waves or ((3, 3, 6) if quick else (50, 50, 100))
    args.idle_jobs = args.idle_jobs or (3 if quick else 20)
    args.window = args.window or (5.0 if quick else 20.0)
    return args


def _bounds(name: str, wall: float | None, scale: Scale, goal: float, note: str) -> list[Figure]:
    """A latency made of unscaled costs (processes, API calls) and scaled waits: wall / F is its
    upper bound at real speed, wall its lower bound."""
    return [
        Figure(f"{name} (upper bound, wall/F)", None if wall is None else scale.real(wall), "real s", goal,
               note=note),
        Figure(f"{name} (lower bound, wall)", wall, "real s", goal),
    ]  # fmt: skip


def scale_figures(res: scenario_scale.ScaleResult, scale: Scale) -> list[Figure]:
    phys = scenario_scale.physical_to_running(scale.brev_durations())
    figs: list[Figure] = []
    complete = res.burst_reached == res.burst_jobs
    label = f"burst: {res.burst_jobs} jobs -> all Running / one job's boot+ready+pull"
    if res.burst_wall is not None:
        value = ratio(res.burst_wall, scale.wall(phys))
        figs.append(
            Figure(
                label if complete else f"{label} (of the {res.burst_reached} that got there)",
                value,
                "x",
                1.1,
                note=f"{res.burst_reached}/{res.burst_jobs} Running after {res.burst_wall:.1f} s wall = "
                f"{scale.real(res.burst_wall):.0f} real s (ratio {value:.2f}); physical boot+ready+pull "
                f"{phys:.0f} real s (deploy+first exec+build+pull, the same for every simulated "
                f"instance); slowest create->Running "
                f"{scale.real(res.burst_create_to_running_max or 0):.0f} real s; {res.burst_failed} failed "
                f"{res.burst_reasons or ''}",
                incomplete=not complete,
            )
        )
    else:
        figs.append(Figure(label, None, "x", 1.1, note=f"none Running; failed: {res.burst_reasons}"))
    exit_note = (
        f"{res.exiter_others_busy} others in WaitingExec/Pulling at its exit "
        f"(next wave's phases then: {res.exiter_others_phases}); own upload "
        f"{res.exiter_upload_wall:.2f} s wall subtracted"
    )
    to_delete = None if res.exit_to_delete_wall is None else res.exit_to_delete_wall - res.exiter_upload_wall
    figs += _bounds("isolation: exit -> brev delete - upload", to_delete, scale, 2.0, exit_note)
    figs += _bounds(
        "isolation: kubectl delete -> container stopped",
        res.delete_to_stop_wall,
        scale,
        2.0,
        f"while {res.memory[-1][0] if res.memory else 0} jobs run",
    )
    points = [(float(n), float(m.pod)) for n, m in res.memory]
    mem_note = "; ".join(f"{n} running: {m.text()}" for n, m in res.memory)
    try:
        per_job = slope(points) / MIB
    except ValueError:
        per_job = None
    figs.append(Figure("footprint: pod memory slope (RSS sum)", per_job, "MiB/job", 12.0, note=mem_note))
    try:
        pss_per_job = slope([(float(n), float(m.pod_pss)) for n, m in res.memory]) / MIB
    except ValueError:
        pss_per_job = None
    figs.append(Figure("footprint: pod memory slope (PSS sum)", pss_per_job, "MiB/job", 12.0))
    if res.memory:
        n_max, m_max = res.memory[-1]
        op_slope = (
            slope([(float(n), float(m.operator)) for n, m in res.memory]) / MIB if len(points) > 1 else 0.0
        )
        figs.append(Figure(f"footprint: operator RSS at {n_max} running", m_max.operator / MIB, "MiB"))
        if n_max >= 1000:
            figs.append(Figure("footprint: operator RSS at 1,000 running", m_max.operator / MIB, "MiB",
                               GOAL_RSS_AT_1000))  # fmt: skip
        else:
            estimate = m_max.operator / MIB + op_slope * (1000 - n_max)
            cpu_note = (
                f"; a job's start cost the pod {res.burst_pod_cpu_per_job:.2f} CPU s in the burst "
                f"(simulated brev/ssh processes included), so 1,000 starts need ~"
                f"{1000 * res.burst_pod_cpu_per_job / 2 / 60:.0f} min of both cores"
                if res.burst_pod_cpu_per_job
                else ""
            )
            figs.append(
                Figure(
                    "footprint: operator RSS at 1,000 running",
                    None,
                    "MiB",
                    GOAL_RSS_AT_1000,
                    note=f"NOT MEASURED: the largest N this run reached is {n_max}; 1,000 do not "
                    f"fit the 15-minute budget on 2 shared cores{cpu_note}. Linear extrapolation "
                    f"from the operator's RSS slope ({op_slope:.2f} MiB/job): ~{estimate:.0f} MiB "
                    "(an estimate, not a figure)",
                )
            )
    figs.append(
        Figure(
            "footprint: operator CPU at real speed (wall cores x F)",
            None if res.operator_cores is None else res.operator_cores * scale.factor,
            "cores",
            0.1,
            note=f"{res.window_jobs} running, {res.window_wall:.0f} s window: operator process "
            f"{res.operator_cores or 0:.3f} cores wall; pod incl. simulated brev/ssh processes "
            f"{res.pod_cores or 0:.3f} cores wall (x F = {(res.pod_cores or 0) * scale.factor:.4f})",
        )
    )
    figs.append(Figure("footprint: operator CPU measured (wall cores)", res.operator_cores, "cores", 0.1))
    figs.append(
        Figure(
            "footprint: brev+ssh calls per running job per minute",
            res.calls_per_job_min,
            "calls",
            2.0,
            note="local brev and ssh processes in the window, per real minute (window / F)",
        )
    )
    return figs


def idle_figures(
    ours: scenario_idle.IdleResult, base: scenario_idle.IdleResult, scale: Scale
) -> list[Figure]:
    o, b = mean(ours.idle_wall), mean(base.idle_wall)
    o_real = None if o is None else scale.real(o)
    b_real = None if b is None else scale.real(b)
    both = f"ours {ours.outcomes}, {ours.wall:.0f} s wall; baseline {base.outcomes}, {base.wall:.0f} s wall"
    return [
        Figure("billed idle per job: ours", o_real, "real s", note=both),
        Figure("billed idle per job: baseline (1 pool of 8, poll 30 s)", b_real, "real s"),
        Figure(
            "billed idle: baseline / ours",
            None if not o or b is None else b / o,
            "x",
            10.0,
            ">=",
        ),
        Figure(
            "Kubernetes API writes per job (whole lifecycle)",
            ours.writes_per_job,
            "writes",
            20.0,
            note=f"baseline {base.writes_per_job:.1f}; brev+ssh processes per job: ours "
            f"{ours.brev_ssh_calls_per_job:.1f}, baseline {base.brev_ssh_calls_per_job:.1f}",
        ),
    ]


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # run the finally blocks: stop the operator, simulator, stack


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    args = parse(argv)
    scale = Scale(args.scale)
    began = time.monotonic()
    print(scale_header(scale), flush=True)
    bench = Bench.start(scale)
    print(f"bench workdir: {bench.work}", flush=True)
    figures: list[Figure] = []
    try:
        print(f"\n-- scale: waves {args.waves}", flush=True)
        res = scenario_scale.run(bench, args.waves, args.window)
        for problem in res.problems:
            print(f"   problem: {problem}", flush=True)
        figures += scale_figures(res, scale)
        print(table(figures), flush=True)  # now: a later scenario may not finish in time
        print(f"-- billed idle, ours: {args.idle_jobs} jobs", flush=True)
        ours = scenario_idle.run_workload(bench, "idle-ours", args.idle_jobs)
        print(f"-- billed idle, baseline: {args.idle_jobs} jobs", flush=True)
        base_env = scenario_idle.baseline_env(bench)
        base = scenario_idle.run_workload(bench, "idle-base", args.idle_jobs, base_env)
        figures += idle_figures(ours, base, scale)
        print(table(figures[-4:]), flush=True)
    finally:
        bench.close()
    print("-- recovery", flush=True)
    figures += scenario_recovery.run(scale.factor)
    total = time.monotonic() - began
    print(f"\n== results (F = {scale.factor:g}; total {total / 60:.1f} min wall)\n")
    print(table(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
