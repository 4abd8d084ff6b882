"""What `kubectl taobrev get` and `describe` print (pure): kubectl's table layout and AGE, the
PROGRESS / ETA / COST cells from status.progress and the billing totals, and describe's sections
for a failed job written by a real run (tests/data/health)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.plugin import describe, get, jobs, output

NOW = datetime(2026, 12, 5, 11, 0, tzinfo=UTC)
HEALTH = Path(__file__).resolve().parents[1] / "data" / "health"


def real(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((HEALTH / f"{name}.yaml").read_text())["object"]
    obj["metadata"]["creationTimestamp"] = "2026-12-05T10:13:00Z"
    return obj


def test_a_table_is_laid_out_as_kubectl_does() -> None:
    text = output.table(("NAME", "PHASE"), [["a-long-name", "Running"], ["b", "-"]])
    assert text.splitlines() == ["NAME          PHASE", "a-long-name   Running", "b             -"]


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0, "0s"),
        (119, "119s"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600 + 600, "3h10m"),
        (30 * 3600, "30h"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (400 * 86400, "400d"),
        (3 * 365 * 86400 + 86400, "3y1d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_age_reads_like_kubectls(seconds: int, expected: str) -> None:
    assert output.age(NOW - timedelta(seconds=seconds), NOW) == expected


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("20m", 1200), ("1h30m", 5400), ("7d", 604800), ("45", 45), ("1x", None)],
)
def test_durations_are_typed_as_kubectl_users_type_them(text: str, seconds: int | None) -> None:
    assert output.parse_duration(text) == seconds


def test_money_and_sizes_read_as_a_person_reads_them() -> None:
    assert [output.dollars(v) for v in (0, 0.0031, 1234.5)] == ["$0.00", "<$0.01", "$1,234.50"]
    assert [output.size(v) for v in (512, 1744, 3 * 1024**3, None)] == ["512 B", "1.7 KiB", "3.0 GiB", "-"]
    assert output.duration(3725) == "1h02m"


RUNNING: dict[str, Any] = {
    "phase": "Running",
    "attempts": [{"attempt": 2, "instance": {"name": "i-a2"}, "run": {"startedAt": "2026-12-05T10:00:00Z"}}],
    "progress": {"epoch": 3, "maxEpoch": 10, "percent": 30.0, "eta": "1:02:03", "etaSeconds": 3723},
    "estimatedCostDollars": 12.5,
    "costKnown": True,
}


def test_progress_eta_attempt_and_cost_come_from_status_while_the_job_runs() -> None:
    assert jobs.progress_text(RUNNING) == "3/10 30%"
    assert jobs.eta_text(RUNNING) == "1:02:03"
    assert jobs.attempt_text(RUNNING) == "2"
    assert jobs.cost_text(RUNNING) == "$12.50"


def test_eta_comes_from_seconds_when_tao_wrote_no_string_and_goes_once_the_run_ends() -> None:
    only_seconds = {**RUNNING, "progress": {"epoch": 3, "maxEpoch": 10, "etaSeconds": 3723}}
    assert jobs.eta_text(only_seconds) == "1:02:03"
    assert jobs.progress_text(only_seconds) == "3/10 30%"
    finished = {**RUNNING, "phase": "Deleted"}
    assert jobs.eta_text(finished) == "-"
    assert jobs.progress_text(finished) == "3/10 30%"  # how far it got stays


def test_without_progress_or_billing_the_cells_read_dash_and_an_unknown_price_unknown() -> None:
    bare: dict[str, Any] = {"phase": "Pending"}
    assert [jobs.progress_text(bare), jobs.eta_text(bare), jobs.attempt_text(bare), jobs.cost_text(bare)] == [
        "-",
        "-",
        "-",
        "-",
    ]
    assert jobs.cost_text({"costKnown": False, "billedSeconds": 60}) == "unknown"


def test_a_status_stored_flat_by_an_older_release_is_read_through_its_attempt() -> None:
    flat = {"status": {"phase": "Running", "attempt": 1, "instanceName": "old-i", "gpu": "A100"}}
    st = jobs.status(flat)
    assert jobs.instance(jobs.current(st))["name"] == "old-i"
    assert jobs.attempt_text(st) == "1"


def test_get_prints_one_row_per_job_with_namespace_under_all_namespaces_and_wide_columns() -> None:
    status = copy.deepcopy(RUNNING)
    status["reason"] = "Running"
    status["attempts"][0]["instance"]["gpu"] = "L40S"
    job = {"metadata": {"name": "train", "namespace": "ml", "creationTimestamp": "2026-12-05T10:00:00Z"}}
    job["status"] = status
    text = get.render([job], NOW, wide=True, with_namespace=True)
    header, row = text.splitlines()
    assert header.split() == [
        "NAMESPACE", "NAME", "PHASE", "PROGRESS", "ETA", "ATTEMPT", "COST", "AGE",
        "INSTANCE", "GPU", "FAILURE", "REASON",
    ]  # fmt: skip
    assert row.split() == ["ml", "train", "Running", "3/10", "30%", "1:02:03", "2", "$12.50", "60m",
                           "i-a2", "L40S", "-", "Running"]  # fmt: skip
    narrow = get.render([job], NOW, wide=False, with_namespace=False).splitlines()[0]
    assert narrow.split() == ["NAME", "PHASE", "PROGRESS", "ETA", "ATTEMPT", "COST", "AGE"]


def test_describe_shows_the_failure_class_what_to_do_results_attempts_log_and_last_events() -> None:
    job = real("real-failed")
    job["status"]["failureClass"] = "Program"
    events = [
        {"type": "Normal", "reason": f"Step{i}", "message": f"step {i}", "count": 1,
         "lastTimestamp": f"2026-12-05T10:13:{i:02d}Z", "firstTimestamp": "2026-12-05T10:13:00Z",
         "source": {"component": "taobrev-operator"}}
        for i in range(12)
    ]  # fmt: skip
    events[-1]["count"] = 3
    text = describe.render(job, events, NOW, last=10)
    lines = text.splitlines()
    assert "Outcome:        Failed (TrainingFailed)" in lines
    assert "Failure class:  Program" in lines
    assert any(line.startswith("  What to do:   the training itself failed") for line in lines)
    assert any(
        line.startswith("Results:        s3://results-") and "(6 objects, 1.5 KiB)" in line for line in lines
    )
    assert "Cost:           <$0.01 (7s billed over 1 attempt)" in lines
    assert "    Instance:   tbj-4cb3e0a4-test-argocd-argo-fail-e44f3994, id 4c4wxzumb, g6e.xlarge, L40S, " \
        "$1.86/h, created by the job" in lines  # fmt: skip
    assert any("exited 2026-12-05T10:13:20Z with code 3" in line for line in lines)
    assert "    Ended:      TrainingFailed: training container exited with code 3" in lines
    assert "  Execution failed with exit code 3" in lines  # the log tail
    assert "Events (last 10 of 12):" in lines
    assert [line.split()[1] for line in lines[lines.index("Events (last 10 of 12):") + 2 :]] == [
        f"Step{i}" for i in range(2, 12)
    ]
    assert "(x3 over 47m)" in lines[-1]


def test_describe_still_describes_when_events_cannot_be_listed() -> None:
    text = describe.render(real("real-succeeded"), "events is forbidden", NOW)
    assert text.splitlines()[-1] == "Events:         <cannot list: events is forbidden>"
    assert "Failure class" not in text


def test_describe_lists_a_workflows_steps_and_the_failed_one() -> None:
    job = real("real-failed")
    job["status"]["step"] = "2/3 evaluate"
    job["status"]["failedStep"] = "evaluate"
    job["status"]["steps"] = [
        {"name": "train", "phase": "Succeeded", "attempt": 1, "exitCode": 0,
         "results": {"uri": "s3://b/out/train/"}},
        {"name": "evaluate", "phase": "Failed", "attempt": 1, "exitCode": 3, "message": "exited 3"},
        {"name": "export", "phase": "Skipped"},
    ]  # fmt: skip
    lines = describe.render(job, [], NOW).splitlines()
    at = lines.index("Steps:          2/3 evaluate")
    assert lines[at + 1 : at + 5] == [
        "  train:        Succeeded (attempt 1), exit 0  s3://b/out/train/",
        "  evaluate:     Failed (attempt 1), exit 3  exited 3",
        "  export:       Skipped",
        "  Failed step:  evaluate",
    ]
    assert "Steps:" not in describe.render(real("real-failed"), [], NOW)
