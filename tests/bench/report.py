"""Every figure of the final table, built from the scenarios' results (pure: unit-tested in
tests/unit/test_bench_figures.py)."""

from __future__ import annotations

from controller.api.models import RecoverySpec
from tests.bench import scenario_failover, scenario_idle, scenario_isolation, scenario_rss, scenario_scale
from tests.bench.figures import MIB, Figure, mean, ratio, slope
from tests.bench.scale import Scale

GOAL_RSS_AT_1000 = 300.0  # MiB
GOAL_ISOLATION = 2.0  # real s


def burst_figures(res: scenario_scale.ScaleResult) -> list[Figure]:
    burst = Scale(res.burst_factor)
    phys = res.burst_physical or scenario_scale.physical_to_running(burst.brev_durations())
    lo, hi = scenario_scale.BOOT_SPREAD
    figs: list[Figure] = []
    complete = res.burst_reached == res.burst_jobs
    label = f"burst: {res.burst_jobs} jobs -> all Running / one job's boot+ready+pull (F = {burst.factor:g})"
    if res.burst_wall is not None:
        real = res.burst_apply_wall + burst.real(res.burst_wall)
        value = ratio(real, phys)
        figs.append(
            Figure(
                label if complete else f"{label} (of the {res.burst_reached} that got there)",
                value,
                "x",
                1.1,
                note=f"{res.burst_reached}/{res.burst_jobs} Running {res.burst_wall:.1f} s wall after the "
                f"apply returned = {burst.real(res.burst_wall):.0f} real s, + the apply itself (one "
                f"kubectl create of {res.burst_jobs} objects, real seconds, not scaled) "
                f"{res.burst_apply_wall:.1f} s = {real:.0f} real s (ratio {value:.2f}); physical "
                "boot+ready+pull "
                f"{phys:.0f} real s for the slowest job (deploy {lo:.0f}-{hi:.0f} s spread over the "
                "jobs, + first exec, build meanwhile, + pull); slowest create->Running "
                f"{burst.real(res.burst_create_to_running_max or 0):.0f} real s; {res.burst_failed} failed "
                f"{res.burst_reasons or ''}",
                incomplete=not complete,
            )
        )
    else:
        figs.append(Figure(label, None, "x", 1.1, note=f"none Running; failed: {res.burst_reasons}"))
    return figs


def limited_burst_figures(res: scenario_scale.ScaleResult) -> list[Figure]:
    """The burst under Brev's rate limit: all Running within 1.1x of the physical time plus what
    the operator's pace forces, no call refused, and no second above the pace's bound."""
    burst = Scale(res.burst_factor)
    phys = res.burst_physical or scenario_scale.physical_to_running(burst.brev_durations())
    forced = scenario_scale.rate_forced(res)
    rate, cap = res.brev_pace or (0.0, 0)
    complete = res.burst_reached == res.burst_jobs
    label = (
        f"burst under Brev's limit ({res.brev_limit:g}/s): {res.burst_jobs} jobs -> all Running / "
        f"(boot+ready+pull + pace-forced) (F = {burst.factor:g})"
    )
    figs: list[Figure] = []
    if res.burst_wall is not None:
        real = res.burst_apply_wall + burst.real(res.burst_wall)
        figs.append(
            Figure(
                label,
                ratio(real, phys + forced),
                "x",
                1.1,
                note=f"{res.burst_reached}/{res.burst_jobs} Running {real:.0f} real s; physical "
                f"{phys:.0f} s + pace-forced {forced:.0f} s ({res.api_calls} API calls beyond a burst "
                f"of {cap} at {rate:g}/s); {res.burst_failed} failed {res.burst_reasons or ''}",
                incomplete=not complete,
            )
        )
    else:
        figs.append(Figure(label, None, "x", 1.1, note=f"none Running; failed: {res.burst_reasons}"))
    figs.append(
        Figure(
            "burst under Brev's limit: calls Brev refused (429)",
            float(res.api_refusals),
            "calls",
            0.0,
            note=f"of {res.api_calls} calls to Brev's API during the burst",
        )
    )
    w = res.api_window
    figs.append(
        Figure(
            "burst under Brev's limit: most API calls in one window / the pace's bound",
            ratio(float(res.api_max_per_s), cap + rate * w),
            "x",
            1.0,
            note=f"{res.api_max_per_s} calls in the busiest {w:g} nominal s (the simulator's window); "
            f"bound burst + rate x window = {cap} + {rate:g} x {w:g}; Brev's limit "
            f"{(res.brev_limit or 0) * w:g} in it",
        )
    )
    return figs


def isolation_figures(res: scenario_isolation.IsolationResult) -> list[Figure]:
    """Measured at F = 1: real seconds, no bounds."""
    busy = f"{res.busy_reached}/{res.busy_jobs} others in WaitingExec/Pulling before"
    return [
        Figure(
            "isolation: exit -> brev delete - own upload (F = 1)",
            res.exit_to_delete,
            "real s",
            GOAL_ISOLATION,
            note=f"{busy}, {res.busy_at_exit} at the exit; own upload {res.exiter_upload:.2f} s subtracted",
            incomplete=bool(res.busy_at_exit is not None and res.busy_at_exit < res.busy_jobs),
        ),
        Figure(
            "isolation: kubectl delete -> container stopped (F = 1)",
            res.delete_to_stop,
            "real s",
            GOAL_ISOLATION,
            note=f"{res.busy_at_delete} others busy at the delete, {res.busy_at_end} at the end",
            incomplete=bool(res.busy_at_delete is not None and res.busy_at_delete < res.busy_jobs),
        ),
    ]


def slope_figures(res: scenario_rss.RssResult) -> list[Figure]:
    """The per-job slope of the pod's memory over the fill's stops (50/100/200 Running), at F = 1
    (CPU and calls come from the steady window at the end: rss_figures)."""
    points = res.points
    mem_note = "; ".join(f"{n} running: {m.text()}" for n, m in points)
    figs: list[Figure] = []
    for what in ("RSS", "PSS"):
        try:
            per_job: float | None = (
                slope([(float(n), float(m.pod if what == "RSS" else m.pod_pss)) for n, m in points]) / MIB
            )
        except ValueError:
            per_job = None
        figs.append(
            Figure(
                f"footprint: pod memory slope ({what} sum, {'/'.join(str(n) for n, _ in points)} running)",
                per_job,
                "MiB/job",
                12.0,
                note=mem_note if what == "RSS" else "",
            )
        )
    return figs


# The fill runs without checkpoint syncs; a job at the default interval makes one call per interval.
DEFAULT_SYNC_S = float(RecoverySpec.model_fields["checkpoint_interval_seconds"].default)
DEFAULT_SYNC_CALLS_PER_JOB_MIN = 60.0 / DEFAULT_SYNC_S


def rss_figures(res: scenario_rss.RssResult) -> list[Figure]:
    """The operator at its nominal intervals with `res.running` jobs Running: measured at the
    count reached, never extrapolated to the target. CPU and calls are a steady-state window (no
    job starting) unless its note says otherwise."""
    reached = res.running >= res.target
    at = f"at {res.running:,} running"
    rate = res.fill_rate
    how = (
        f"{res.applied:,} applied, {res.running:,} Running, {res.failed} failed after {res.fill_wall:.0f} s "
        f"(budget {res.budget:.0f} s)"
    )
    if not reached:
        how = f"NOT {res.target:,}: {how}; figures are those at {res.running:,}"
    every = scenario_rss.FOLLOW_EVERY
    how += f"; {res.followers} log followers open (kubectl taobrev logs -f, 1 per {every} running)"
    m = res.memory
    steady = (
        "steady: no job starting, every container waited on"
        if res.window_steady
        else "NOT steady: jobs were still starting"
    )

    calls = res.calls_per_job_min

    def groups(cpu: dict[str, float]) -> str:
        return ", ".join(f"{k} {v:.2f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))

    return [
        Figure(
            f"footprint: operator RSS {at} (goal at {res.target:,})",
            None if m is None else m.operator / MIB,
            "MiB",
            GOAL_RSS_AT_1000,
            note=how + ("" if m is None else f"; {m.text()}"),
            incomplete=not reached,
        ),
        Figure(f"footprint: pod RSS sum {at}", None if m is None else m.pod / MIB, "MiB"),
        Figure(f"footprint: pod PSS sum {at}", None if m is None else m.pod_pss / MIB, "MiB"),
        Figure(f"footprint: pod processes {at}", None if m is None else float(m.n_children + 1), ""),
        Figure(
            f"footprint: fill rate to {res.running:,} running (F = 1)",
            rate,
            "jobs/min",
            note=f"{res.fill_wall:.0f} s from the first apply; cores by process group over the fill: "
            f"{groups(res.fill_cpu)}",
        ),
        Figure(
            f"footprint: operator CPU {at} (F = 1)",
            res.operator_cores,
            "cores",
            0.1,
            note=f"{res.window_wall:.0f} s window, {res.window_jobs:,} running, {steady}; pod incl. brev/ssh "
            f"processes {res.pod_cores or 0:.3f} cores; by group: {groups(res.window_cpu)}",
            incomplete=not res.window_steady,
        ),
        Figure(
            f"footprint: brev+ssh calls per running job per minute {at} (F = 1)",
            None if calls is None else calls + DEFAULT_SYNC_CALLS_PER_JOB_MIN,
            "calls",
            2.0,
            note=f"measured {calls or 0:.3f} with checkpoint syncs off in the fill (scenario_rss.py says "
            f"why) + {DEFAULT_SYNC_CALLS_PER_JOB_MIN:.2f}: one sync call per job per {DEFAULT_SYNC_S:.0f} s, "
            "the default",
            incomplete=not res.window_steady,
        ),
    ]


def idle_figures(
    ours: scenario_idle.IdleResult, base: scenario_idle.IdleResult, scale: Scale
) -> list[Figure]:
    o, b = mean(ours.idle_wall), mean(base.idle_wall)
    o_real = None if o is None else scale.real(o)
    b_real = None if b is None else scale.real(b)
    both = (
        f"ours {dict(ours.outcomes)}, {ours.wall:.0f} s wall; baseline {dict(base.outcomes)}, "
        f"{base.wall:.0f} s wall; side by side at F = {scale.factor:g}. Idle per job in wall s: ours "
        f"{o or 0:.2f}, baseline {b or 0:.2f}. Jobs retried on a new instance (every instance "
        f"billed): ours {ours.retried}, baseline {base.retried}. Wall / F counts every step's fixed "
        "process cost (ssh, docker, API round trips: not scaled by F) as F-scaled waiting: an upper bound"
    )
    every = ours.outcomes["Succeeded"] == ours.jobs and base.outcomes["Succeeded"] == base.jobs
    return [
        Figure(f"billed idle per job: ours (F = {scale.factor:g})", o_real, "real s", note=both),
        Figure("billed idle per job: baseline (1 pool of 8, poll 30 s)", b_real, "real s"),
        Figure(
            "billed idle: baseline / ours",
            None if not o or b is None else b / o,
            "x",
            10.0,
            ">=",
            note="" if every else "not every job Succeeded: the idle means cover the Succeeded ones only",
            incomplete=not every,
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


GOAL_RSS_AT_10000 = 400.0  # MiB: 9,000 finished + 1,000 running (issue 30)
GOAL_START_READY = 60.0  # s: operator start -> healthy with 10,000 objects
GOAL_POD_PSS = 2048.0  # MiB: the whole pod at 1,000 running


def failover_figures(results: list[scenario_failover.FailoverResult], finished: int) -> list[Figure]:
    """The restart and the failover on the footprint's fleet (scenario_failover.py): the re-arm,
    the calls of the first 5 minutes, the exit notice, creates and the queue; the memory at
    10,000 objects and the pod's PSS at 1,000 running."""
    sf = scenario_failover
    figs: list[Figure] = []
    for r in results:
        at = f"{r.mode} at {r.running:,} running"
        taken = "the kill" if r.mode == "failover" else "the process start"
        figs += [
            Figure(
                f"{at}: Lease taken -> every exit wait re-armed",
                r.rearm,
                "s",
                sf.REARM_GOAL,
                note=f"Lease taken {r.takeover if r.takeover is None else round(r.takeover, 1)} s after "
                f"{taken}; {r.not_rearmed} not re-armed; ssh masters alive at once (peak) {r.masters_peak}; "
                f"CPU: {sf.CPU_SETUP[r.cgroups]}",
                incomplete=r.not_rearmed > 0,
            ),
            Figure(
                f"{at}: Lease taken -> 99% of the re-arm's ssh started (the operator's part)",
                r.launch_shares.get(99),
                "s",
                sf.REARM_GOAL,
                note="the rest of the re-arm is the connection, ssh start -> the wait running on the "
                "instance (the simulated sshd's): "
                + ", ".join(f"{q}% {t:.1f} s" for q, t in r.connect_shares.items()),
                incomplete=99 not in r.launch_shares,
            ),
            Figure(
                f"{at}: brev+ssh calls per job, first {r.calls_window:.0f} s after the Lease was taken",
                r.calls_per_job,
                "calls",
                sf.CALLS_GOAL if r.calls_window >= sf.CALLS_WINDOW else None,
                note=f"{r.steady_calls} calls of the {r.steady} jobs running throughout, and shared ones "
                f"(listings); all calls, ending or starting jobs too: {dict(r.calls.most_common())}",
            ),
            Figure(
                f"{at}: exit -> seen in status, jobs exiting from {sf.LATE_FROM:g} s after the Lease was "
                "taken (max)",
                max(r.notice_late) if r.notice_late else None,
                "s",
                sf.NOTICE_GOAL,
                note=f"{len(r.notice_late)} jobs, one a second; exit 0 (the simulator's finish control); "
                f"cores meanwhile: {sf.cores_text(r.cores_late)}",
                incomplete=not r.notice_late,
            ),
            Figure(
                f"{at}: exit -> seen in status, jobs exiting right after the re-arm (max)",
                max(r.notice_after) if r.notice_after else None,
                "s",
                note=f"{len(r.notice_after)} jobs, one a second; "
                f"cores meanwhile: {sf.cores_text(r.cores_after)}",
            ),
            Figure(
                f"{at}: exit -> seen in status, jobs exiting before and during the re-arm (max)",
                max(r.notice_during) if r.notice_during else None,
                "s",
                note=f"{len(r.notice_during)} jobs: half exit while no replica leads",
            ),
            Figure(f"{at}: duplicate creates", float(r.duplicate_creates), "", 0.0),
            Figure(
                f"{at}: queued jobs that lost their place",
                float(len(r.queue_problems)),
                "",
                0.0,
                note="; ".join(r.queue_problems)[:300],
            ),
        ]
        if r.start_to_healthy is not None:
            figs.append(
                Figure(
                    f"restart with {finished:,} finished + {r.running:,} running jobs: start -> healthy",
                    r.start_to_healthy,
                    "s",
                    GOAL_START_READY,
                )
            )
        if r.mode == "failover" and r.rss_before:
            figs.append(
                Figure(
                    f"operator RSS with {finished:,} finished + {r.running:,} running jobs (the leader)",
                    r.rss_before.get("acting"),
                    "MiB",
                    GOAL_RSS_AT_10000,
                    note=f"the standby: {r.rss_before.get('standby', 0):.0f} MiB",
                )
            )
        if r.mode == "failover" and r.pod_before:
            pss = sum(m for _, m in r.pod_before.values())
            parts = ", ".join(f"{k} {n} x {m / max(1, n):.2f} MiB" for k, (n, m) in r.pod_before.items())
            figs.append(
                Figure(
                    f"pod PSS at {r.running:,} running (the leader's pod)",
                    pss,
                    "MiB",
                    GOAL_POD_PSS,
                    note=parts,
                )
            )
    return figs
