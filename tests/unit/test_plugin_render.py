"""What `kubectl taobrev plan` prints (controller/plugin/plan.render) for a plan with problems and for a
reused instance; the command itself runs against the real control plane in tests/e2e/test_preflight.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.plugin import main
from controller.plugin.plan import render


def test_problems_are_listed_with_field_and_reason_and_a_reused_instance_bills_nothing_here() -> None:
    text = render(
        "ml/train",
        {"reuse": "my-box", "images": ["nvcr.io/nvidia/tao/tao-toolkit:6"], "uploads": ["s3://b/r/results/"]},
        [
            {
                "field": "spec.data.resultsUri",
                "reason": "ResultsBucketNotFound",
                "message": "bucket 'b' does not exist",
            }
        ],
    )
    assert text.splitlines()[0] == "Plan for TaoBrevJob ml/train (nothing was created)"
    assert "1 problem(s)" in text
    assert "- spec.data.resultsUri: ResultsBucketNotFound: bucket 'b' does not exist" in text
    assert "reuse my-box (not created, not deleted)" in text
    assert "most billed" not in text  # a reused instance bills its owner


def test_fallback_types_and_the_ceiling_are_shown_one_per_line() -> None:
    text = render(
        "ml/train",
        {
            "instanceTypes": ["a ($1.00/h)", "b ($2.00/h)"],
            "maxBilledSeconds": 5400,
            "costCeilingDollars": 3.0,
        },
        [],
    )
    assert "instance:     a ($1.00/h)\n                then b ($2.00/h)" in text
    assert "most billed:  1h30m (5400 s), at most $3.00" in text
    assert "pre-flight:   passed" in text


def test_a_manifest_without_a_taobrevjob_is_refused_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["plan", "-f", str(path)]) == 1
    assert "expected exactly one TaoBrevJob, found 0" in capsys.readouterr().err
