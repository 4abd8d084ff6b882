"""The benchmark's arithmetic (tests/bench/figures.py) and what its scale factor scales
(tests/bench/scale.py): pure, no stack."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.bench.__main__ import parse
from tests.bench.figures import (
    MIB,
    Figure,
    boot_and_ready,
    cores,
    idle_billed,
    per_job_per_minute,
    percentile,
    ratio,
    slope,
    union_seconds,
)
from tests.bench.report import failover_figures, idle_figures, isolation_figures, rss_figures, slope_figures
from tests.bench.sampling import Memory
from tests.bench.scale import SCALED_SETTINGS, Scale
from tests.bench.scenario_failover import AFTER, EXITING, LATE, FailoverResult, _exit_groups, _shares
from tests.bench.scenario_idle import IdleResult, attempts_of, billed_spans
from tests.bench.scenario_isolation import IsolationResult, durations
from tests.bench.scenario_rss import RssResult, ssh_host
from tests.brevsim.faults import check, durations_for
from tests.brevsim.harness import SimCall


def test_slope_is_the_least_squares_fit() -> None:
    # 100 MiB base + 10 MiB per job, one point off by +/- 2 MiB around the line
    points = [(50.0, 600.0), (100.0, 1102.0), (200.0, 2100.0)]
    assert slope(points) == pytest.approx(9.99, abs=0.05)


def test_slope_needs_two_distinct_x() -> None:
    with pytest.raises(ValueError, match="two different x"):
        slope([(100.0, 1.0), (100.0, 2.0)])


def test_calls_per_minute_count_real_minutes() -> None:
    # 60 calls for 10 jobs in 12 wall seconds at F = 0.02 = 600 real seconds = 10 real minutes
    assert per_job_per_minute(60, 10, 12.0, 0.02) == pytest.approx(0.6)


def test_cores_and_ratio() -> None:
    assert cores(3.0, 30.0) == pytest.approx(0.1)
    assert ratio(33.0, 30.0) == pytest.approx(1.1)
    with pytest.raises(ValueError, match="denominator"):
        ratio(1.0, 0.0)


def test_idle_billed_is_the_span_beyond_the_physical_minimum() -> None:
    assert idle_billed(100.0, 160.0, 50.0) == pytest.approx(10.0)
    # the simulated durations start a little after the recorded call: never negative
    assert idle_billed(100.0, 149.9, 50.0) == 0.0


def test_union_counts_overlaps_once() -> None:
    assert union_seconds([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == pytest.approx(4.0)
    assert union_seconds([]) == 0.0


def test_percentile() -> None:
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([], 0.5) is None


@pytest.mark.parametrize(
    ("value", "goal", "sense", "verdict"),
    [
        (1.05, 1.1, "<=", "pass"),
        (1.2, 1.1, "<=", "MISS"),
        (12.0, 10.0, ">=", "pass"),
        (9.0, 10.0, ">=", "MISS"),
        (None, 10.0, ">=", "n/a"),
        (3.0, None, "<=", "-"),
    ],
)
def test_verdict(value: float | None, goal: float | None, sense: str, verdict: str) -> None:
    fig = Figure("f", value, "x", goal, sense)  # type: ignore[arg-type]
    assert fig.verdict == verdict


def test_a_figure_measured_on_part_of_its_sample_is_a_miss() -> None:
    assert Figure("burst", 1.05, "x", 1.1, incomplete=True).verdict == "MISS"


def test_scale_multiplies_every_operator_interval_and_reports_floors() -> None:
    scale = Scale(0.02)
    knobs = {k.name: k for k in scale.settings()}
    assert len(knobs) == len(SCALED_SETTINGS)
    assert knobs["TAOBREV_POLL_INTERVAL"].used == pytest.approx(0.1)
    assert not knobs["TAOBREV_POLL_INTERVAL"].floored
    # exec_timeout may not go below 60 s: the run uses the floor and says so
    assert knobs["TAOBREV_EXEC_TIMEOUT"].used == 60.0
    assert knobs["TAOBREV_EXEC_TIMEOUT"].floored
    env = scale.operator_env()
    assert env["TAOBREV_LEADER_ELECTION"] == "false"
    assert env["TAOBREV_CREATE_SETTLE"] == "2.4"


def test_scale_timeouts_are_whole_seconds_at_least_the_minimum() -> None:
    timeouts = Scale(0.02, timeout_floor=0).timeouts()
    assert timeouts["waitingExecSeconds"] == 18
    assert timeouts["runningSeconds"] == 1728
    assert min(Scale(0.001, timeout_floor=0).timeouts().values()) == 10
    floored = Scale(0.02, timeout_floor=60).timeout_knobs()
    by_name = {k.name: k for k in floored}
    assert by_name["spec.timeouts.waitingExecSeconds"].used == 60
    assert by_name["spec.timeouts.waitingExecSeconds"].floored
    assert not by_name["spec.timeouts.runningSeconds"].floored


def test_scale_factor_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="--scale"):
        Scale(0.0)
    assert Scale(0.5).real(1.0) == 2.0
    assert Scale(0.5).wall(4.0) == 2.0


def _memory(operator_mib: float, children_mib: float = 0.0, n_children: int = 0) -> Memory:
    return Memory(int(operator_mib * MIB), int(children_mib * MIB), n_children, int(operator_mib * MIB))


def test_isolation_is_real_seconds_and_a_miss_when_the_others_were_not_busy() -> None:
    res = IsolationResult(busy_jobs=50, busy_reached=50, exit_to_delete=1.2, exiter_upload=3.0)
    res.busy_at_exit, res.delete_to_stop, res.busy_at_delete = 50, 0.8, 50
    exit_fig, delete_fig = isolation_figures(res)
    assert exit_fig.value == 1.2
    assert exit_fig.verdict == "pass"
    assert delete_fig.verdict == "pass"
    res.busy_at_exit = 49  # one of the others was done: the figure does not show what it claims
    assert isolation_figures(res)[0].verdict == "MISS"


def test_isolation_not_measured_is_not_a_pass() -> None:
    fig = isolation_figures(IsolationResult(busy_jobs=50))[0]
    assert fig.value is None
    assert fig.verdict == "n/a"


def test_rss_short_of_the_target_is_reported_at_the_count_reached_never_extrapolated() -> None:
    res = RssResult(target=1000, budget=300.0, applied=700, running=640, memory=_memory(180.0, 900.0, 1300))
    head = rss_figures(res)[0]
    assert head.value == pytest.approx(180.0)
    assert "at 640 running" in head.name
    assert head.note.startswith("NOT 1,000")
    assert head.verdict == "MISS"
    reached = RssResult(target=1000, budget=300.0, applied=1000, running=1000, memory=_memory(180.0))
    assert rss_figures(reached)[0].verdict == "pass"
    assert rss_figures(reached)[3].value == 1.0  # the operator alone


def test_default_factor_is_0_05_and_quick_is_small() -> None:
    args = parse([])
    assert args.scale == 0.05
    assert (args.stops, args.burst) == ((50, 100, 200), 100)
    assert (args.busy, args.rss_jobs, args.budget) == (50, 1000, 1800.0)
    assert parse(["--quick"]).budget == 180.0
    with pytest.raises(SystemExit):
        parse(["--busy", "0"])
    with pytest.raises(SystemExit):
        parse(["--stops", "100,50,200"])  # the stops must rise


def test_the_memory_slope_is_per_running_job_over_the_stops() -> None:
    res = RssResult(target=1000, budget=600.0)
    res.points = [(50, _memory(120.0, 400.0)), (100, _memory(130.0, 880.0)), (200, _memory(150.0, 1840.0))]
    figs = slope_figures(res)
    assert figs[0].value == pytest.approx(9.8, abs=0.05)  # (150 + 1840 - 120 - 400) / 150
    assert figs[0].name == "footprint: pod memory slope (RSS sum, 50/100/200 running)"
    assert figs[0].verdict == "pass"
    assert len(figs) == 2  # RSS and PSS: CPU and calls are the final window's (rss_figures)


def test_isolation_durations_keep_the_others_busy_for_600_real_seconds() -> None:
    knobs = durations()
    check(knobs)
    inst = "tbj-0a1b2c3d-isolation-busy-e-007-12345678"
    assert durations_for(knobs["instance_durations"], inst, "i1") == {"ssh_delay_s": 600.0}
    assert durations_for(knobs["instance_durations"], inst.replace("busy-e", "busy-p"), "i2") == {
        "pull_seconds": 600.0
    }
    assert durations_for(knobs["instance_durations"], "tbj-0a1b2c3d-isolation-exiter-1", "i3") == {}


def test_the_build_runs_during_the_first_exec_wait_not_after_it() -> None:
    nominal = {"deploy_s": 300.0, "ssh_delay_s": 600.0, "build_s": 15.0}
    assert boot_and_ready(nominal) == 900.0
    assert boot_and_ready({**nominal, "ssh_delay_s": 5.0}) == 315.0


def _idle(label: str, idle_wall: list[float], outcomes: dict[str, int]) -> IdleResult:
    return IdleResult(label, sum(outcomes.values()), idle_wall, Counter(outcomes), 100.0, 18.0, 50.0)


def test_billed_idle_ratio_is_baseline_over_ours_and_a_miss_when_jobs_failed() -> None:
    scale = Scale(0.1)
    ours = _idle("ours", [1.0, 3.0], {"Succeeded": 2})
    base = _idle("base", [30.0, 50.0], {"Succeeded": 2})
    figs = {f.name: f for f in idle_figures(ours, base, scale)}
    assert figs["billed idle per job: ours (F = 0.1)"].value == pytest.approx(20.0)  # 2 s wall / 0.1
    ratio_fig = figs["billed idle: baseline / ours"]
    assert ratio_fig.value == pytest.approx(20.0)
    assert ratio_fig.verdict == "pass"
    failed = _idle("base", [30.0], {"Succeeded": 1, "Failed": 1})
    assert {f.name: f for f in idle_figures(ours, failed, scale)}[
        "billed idle: baseline / ours"
    ].verdict == "MISS"


def test_burst_boots_are_spread_evenly_and_match_one_instance_each() -> None:
    from tests.bench.scenario_scale import spread_boots
    from tests.brevsim.faults import durations_for

    names = [f"w3-{i:03d}" for i in range(11)]
    spread = spread_boots(names, 180.0, 600.0)
    deploys = [d["deploy_s"] for d in spread.values()]
    assert deploys[0] == 180.0
    assert deploys[-1] == 600.0
    assert deploys == sorted(deploys)
    # w3-001 must not also match w3-010 (and every instance gets its own entry)
    assert durations_for(spread, "tbj-abcd1234-scale-w3-010-0badc0de", "i-1") == {"deploy_s": 600.0}
    assert durations_for(spread, "tbj-abcd1234-scale-w3-001-0badc0de", "i-2") == {"deploy_s": 222.0}


def test_rss_fill_rate_and_a_window_taken_while_jobs_started_is_a_miss() -> None:
    res = RssResult(target=100, budget=300.0, applied=100, running=100, fill_wall=120.0, operator_cores=0.01)
    figs = {f.name.split(" at ")[0].split(" to ")[0]: f for f in rss_figures(res)}
    assert figs["footprint: fill rate"].value == pytest.approx(50.0)
    assert figs["footprint: operator CPU"].verdict == "MISS"  # window_steady False
    res.window_steady = True
    assert {f.name: f for f in rss_figures(res)}[
        "footprint: operator CPU at 100 running (F = 1)"
    ].verdict == "pass"


def _brev(verb: str, ref: str, ts: float) -> SimCall:
    return SimCall("brev", [verb, ref], "local", None, ts, 0)


def test_a_retried_job_is_billed_for_every_instance_it_had() -> None:
    """The first instance of a job whose probe overran its deadline was billed too: from its
    create to its delete (by id), then the retry's (`-a2`) from create to delete. The instances
    come from the job's own `status.attempts`."""
    status = {
        "attempts": [
            {"attempt": 1, "instance": {"name": "tbj-m-ns-job-1234abcd", "id": "aaa", "created": True}},
            {"attempt": 2, "instance": {"name": "tbj-m-ns-job-1234abcd-a2", "id": "bbb", "created": True}},
        ],
    }
    mine = attempts_of(status)
    assert mine == [("tbj-m-ns-job-1234abcd", "aaa"), ("tbj-m-ns-job-1234abcd-a2", "bbb")]
    calls = [
        _brev("create", "tbj-m-ns-job-1234abcd", 10.0),
        _brev("delete", "aaa", 100.0),
        _brev("delete", "aaa", 101.0),  # the confirming delete (not-found): not a second span
        _brev("create", "tbj-m-ns-job-1234abcd-a2", 105.0),
        _brev("delete", "bbb", 300.0),
    ]
    assert billed_spans(calls, mine) == [(10.0, 100.0), (105.0, 300.0)]
    assert billed_spans(calls[:4], mine) is None  # the retry is not deleted yet: nothing to measure
    # A job on its first attempt: its current instance alone (with no id yet, matched by name).
    assert attempts_of({"attempts": [{"attempt": 1, "instance": {"name": "tbj-x", "id": "ccc"}}]}) == [
        ("tbj-x", "ccc")
    ]
    assert attempts_of({"attempts": [{"attempt": 1, "instance": {"name": "tbj-y"}}]}) == [("tbj-y", "")]
    assert attempts_of({"phase": "Pending"}) == []  # before the first attempt: nothing was created


def test_every_duration_setting_is_scaled_or_says_why_not() -> None:
    """Compressed time hides real-time bugs only if every operator interval shrinks with the
    simulator's durations: a new duration setting left at its real value would make the bench
    measure the wrong ratio (issue 30's pace and node-cost intervals were)."""
    import re

    from controller.settings import Settings
    from tests.bench.scale import SCALED_RATES, UNSCALED_SETTINGS

    timing = re.compile(r"interval|timeout|grace|max_age|settle|backoff|period|_wait$")
    durations = {
        n
        for n, f in Settings.model_fields.items()
        if timing.search(n) and f.annotation in (float, float | None)
    }
    assert durations, "the pattern found no duration setting"
    left = durations - set(SCALED_SETTINGS) - set(UNSCALED_SETTINGS) - set(SCALED_RATES)
    assert not left, (
        f"scale these in tests/bench/scale.py, or list them in UNSCALED_SETTINGS with why: {left}"
    )


def test_the_failover_bench_stops_each_exit_group_and_never_more_than_half_the_fleet() -> None:
    during, after, late = _exit_groups([f"j{i:04d}" for i in range(1000)])
    assert (len(during), len(after), len(late)) == (EXITING, AFTER, LATE)
    assert len({*during, *after, *late}) == EXITING + AFTER + LATE
    small = _exit_groups([f"j{i}" for i in range(20)])
    assert sum(map(len, small)) == 10 and all(small)


def test_ssh_host_skips_options_and_their_values() -> None:
    argv = ["-T", "-o", "BatchMode=yes", "-F", "/home/x/.ssh/config", "-4", "tbj-a-r-1", "bash", "-c", "x"]
    assert ssh_host(argv) == "tbj-a-r-1"
    assert ssh_host(["-oBatchMode=yes", "-p22", "host"]) == "host"  # values glued to the option
    assert ssh_host(["-o", "x"]) is None


def test_re_arm_shares_count_the_missing_as_not_reached() -> None:
    times = [float(t) for t in range(1, 101)]
    assert _shares(times) == {50: 50.0, 90: 90.0, 99: 99.0}
    # 10 of 100 never re-armed: 90% is the last of those timed, 99% was never reached
    assert _shares(times[:90], 100) == {50: 50.0, 90: 90.0}


def test_the_re_arm_figures_tell_the_operators_part_from_the_instances() -> None:
    res = FailoverResult(mode="failover", running=1000, takeover=17.2, rearm=164.5, cgroups=True)
    res.launch_shares, res.connect_shares = {50: 17.5, 90: 39.0, 99: 44.2}, {50: 90.4, 99: 144.9}
    figs = {f.name: f for f in failover_figures([res], 9000)}
    on_instance = figs["failover at 1,000 running: Lease taken -> every exit wait re-armed"]
    at = "failover at 1,000 running: Lease taken -> "
    started = figs[at + "99% of the re-arm's ssh started (the operator's part)"]
    assert (on_instance.verdict, started.verdict) == ("MISS", "pass")
    assert "50% 90.4 s" in started.note
    res.launch_shares = {50: 17.5}  # 99% never started: not a pass
    figs = {f.name: f for f in failover_figures([res], 9000)}
    assert figs[started.name].verdict == "n/a"
