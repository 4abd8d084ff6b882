"""The flake hunt's report: every test that failed in any run is listed with its pytest node id,
how often it failed and its first failure; a run is green only with rc 0 and no failure."""

from __future__ import annotations

from pathlib import Path

from tests.devenv.flakehunt import Failure, RunResult, node_id, parse_junit, render

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.integration.test_ssh_transport" name="test_a" time="1.0"/>
<testcase classname="tests.integration.test_ssh_transport" name="test_b" time="1.0">
  <failure message="AssertionError: assert ['delete', 'ssh_close'] == ['ssh_close', 'delete']">trace line
E   AssertionError</failure>
</testcase>
<testcase classname="tests.e2e.test_crd" name="test_c" time="0.1"><skipped message="no"/></testcase>
</testsuite></testsuites>
"""


def test_a_junit_report_gives_counts_and_each_failure_by_node_id(tmp_path: Path) -> None:
    report = tmp_path / "run-1.xml"
    report.write_text(JUNIT)
    tests, skipped, failures = parse_junit(report)
    assert (tests, skipped) == (3, 1)
    assert [f.test for f in failures] == ["tests/integration/test_ssh_transport.py::test_b"]
    assert "['delete', 'ssh_close']" in failures[0].message
    assert failures[0].kind == "failure"


def test_a_class_in_the_classname_stays_part_of_the_node_id() -> None:
    import xml.etree.ElementTree as ET

    case = ET.fromstring('<testcase classname="tests.unit.test_flakehunt.TestX" name="test_y"/>')  # noqa: S314
    assert node_id(case) == "tests/unit/test_flakehunt.py::TestX::test_y"


def test_the_report_lists_every_test_that_failed_once_with_its_runs() -> None:
    flaky = Failure("tests/e2e/test_x.py::test_y", "failure", "AssertionError: boom")
    runs = [
        RunResult(index=1, seconds=10, returncode=0, tests=5),
        RunResult(index=2, seconds=11, returncode=1, tests=5, failures=[flaky]),
        RunResult(index=3, seconds=12, returncode=1, tests=5, failures=[flaky]),
    ]
    text = render(runs, tiers=["tests/e2e"], workers=2, parallel=1, commit="abc1234")
    assert "## tests/e2e/test_x.py::test_y" in text
    assert "failed in 2 of 3 run(s) (runs 2, 3)" in text
    assert "AssertionError: boom" in text
    assert [r.green for r in runs] == [True, False, False]
    assert "No test failed" in render(runs[:1], tiers=["t"], workers=0, parallel=1, commit="c")


def test_a_run_that_failed_without_tests_failing_is_not_green() -> None:
    # pytest exit 5 (nothing collected) or an internal error: no failure element, still red.
    assert not RunResult(index=1, seconds=1, returncode=5).green
