"""Status written by the previous release (flat) is read into sub-records with nothing lost.

tests/data/status-f73585a/ holds statuses release f73585a wrote, captured from the whole-operator
simulation in every phase (queued, recovering on attempts 2 and 3, uploading, deleting,
finished; see its README), and those that release captured from the real control plane.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.api import status_legacy
from controller.api.status import AttemptRecord, TaoBrevJobStatus, merge_patch

REPO = Path(__file__).resolve().parents[2]
CAPTURED = sorted((REPO / "tests" / "data" / "status-f73585a").glob("*.json"))
# The hand-written Argo CD fixtures hold flat status too (the real-* ones: what this release writes).
HEALTH = sorted(
    f for f in (REPO / "tests" / "data" / "health").glob("*.yaml") if not f.stem.startswith("real-")
)
FLAT_KEYS = {*status_legacy.CURRENT, *status_legacy.JOB, "attempt"}


def _captured() -> list[tuple[str, dict[str, Any]]]:
    out = [(f.stem, json.loads(f.read_text())) for f in CAPTURED]
    for f in HEALTH:
        status = yaml.safe_load(f.read_text())["object"].get("status")
        if status:
            out.append((f"health-{f.stem}", status))
    return out


CASES = _captured()


def _get(record: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = record
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def test_the_captures_cover_every_phase_and_recovery() -> None:
    phases = {status.get("phase") for _, status in CASES}
    assert {"Pending", "Provisioning", "WaitingExec", "Pulling", "Running", "Uploading", "Deleted"} <= phases
    assert any(len(status.get("attempts") or []) >= 3 for _, status in CASES), "a third attempt"
    assert any(status.get("queueReason") for _, status in CASES), "a queued job"
    assert any(status.get("absentListings") for _, status in CASES), "absence evidence"


@pytest.mark.parametrize(("name", "flat"), CASES, ids=[n for n, _ in CASES])
def test_every_flat_field_lands_in_its_sub_record(name: str, flat: dict[str, Any]) -> None:
    stored = TaoBrevJobStatus.from_k8s(flat).to_k8s()
    assert not FLAT_KEYS & stored.keys(), f"{name}: flat keys left at the top"
    current = stored["attempts"][-1] if stored.get("attempts") else {}
    # Without an instance nothing ran: a Pending job deleted before its first pass has only
    # runEndedAt, which the new shape does not keep (no attempt, no run).
    for key, path in status_legacy.CURRENT.items() if flat.get("instanceName") else ():
        if flat.get(key) not in (None, []):
            assert _get(current, path) == flat[key], (name, key)
    for key, (record, field) in status_legacy.JOB.items():
        if flat.get(key) is not None:
            assert stored[record][field] == flat[key], (name, key)
    if flat.get("attempt") is not None:
        assert current["attempt"] == flat["attempt"], name
    old_attempts = flat.get("attempts") or []
    assert len(stored.get("attempts") or []) == max(len(old_attempts), 1 if flat.get("instanceName") else 0)
    for old, new in zip(old_attempts, stored.get("attempts") or [], strict=False):
        for key, path in status_legacy.ATTEMPT.items():
            if old.get(key) is not None:
                assert _get(new, path) == old[key], (name, old["attempt"], key)
        for key in ("endedAt", "endedReason", "billedSeconds", "estimatedCostDollars", "resumedFrom"):
            assert new.get(key) == old.get(key), (name, key)
    # Everything else at the top level is kept as it was.
    for key, value in flat.items():
        if key not in FLAT_KEYS and key != "attempts" and value not in (None, [], {}):
            assert stored.get(key) == value, (name, key)


@pytest.mark.parametrize(("name", "flat"), CASES, ids=[n for n, _ in CASES])
def test_the_next_write_stores_the_new_shape_and_nulls_the_flat_keys(name: str, flat: dict[str, Any]) -> None:
    stored = TaoBrevJobStatus.from_k8s(flat).to_k8s()
    patch = merge_patch(flat, stored)
    for key in FLAT_KEYS & flat.keys():
        assert patch[key] is None, (name, key)
    # Read again, it is the same status (the conversion is a fixed point).
    assert TaoBrevJobStatus.from_k8s(stored).to_k8s() == stored


def test_billing_of_a_converted_status_is_unchanged() -> None:
    from controller.lifecycle import budget

    for name, flat in CASES:
        if not flat.get("finishedAt") or not flat.get("attempts"):
            continue
        status = TaoBrevJobStatus.from_k8s(flat)
        secs, _ = budget.exact_totals(status, status.finished_at)  # type: ignore[arg-type]
        assert int(secs) == sum(a.get("billedSeconds") or 0 for a in flat["attempts"]), name


def test_a_reused_instance_gets_an_attempt_that_does_not_own_it() -> None:
    status = TaoBrevJobStatus.from_k8s(
        {"phase": "Running", "instanceName": "shared-box", "instanceCreated": False, "exitCode": 3}
    )
    assert status.attempt == 1
    assert status.instance.name == "shared-box" and status.instance.created is False
    assert status.run.exit_code == 3


def test_flat_attempt_entries_are_instances_the_job_created() -> None:
    rec = AttemptRecord.model_validate(
        {"attempt": 2, "instanceName": "x-a2", "createRequestedAt": "2026-01-01T00:00:00Z"}
    )
    assert rec.instance.name == "x-a2" and rec.instance.created is True
    assert rec.instance.billed_from is not None and rec.instance.create_requested_at is None


def test_before_the_first_attempt_the_records_read_empty_and_refuse_writes() -> None:
    status = TaoBrevJobStatus()
    assert status.attempt is None and status.instance.name == "" and status.run.exit_code is None
    with pytest.raises(ValueError, match="frozen"):
        status.instance.id = "lost"
    with pytest.raises(ValueError, match="frozen"):
        status.run.exit_code = 1
    assert status.to_k8s() == {"retries": 0, "phaseTimes": {}, "conditions": []}


def test_the_crd_keeps_every_flat_field_so_an_upgrade_loses_nothing() -> None:
    """Fields the schema does not name are pruned, also from objects already stored: the flat
    fields stay in the CRD until no object can hold them."""
    crd = yaml.safe_load((REPO / "crds" / "taobrevjob.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"].keys() >= FLAT_KEYS
    items = status["properties"]["attempts"]["items"]["properties"]
    assert set(status_legacy.ATTEMPT) <= items.keys()
    assert {"instance", "run", "upload"} <= items.keys()


def test_what_is_not_a_status_dict_is_left_to_pydantic_to_refuse() -> None:
    assert status_legacy.status_from_flat(None) is None
    assert status_legacy.stored_flat(None) == frozenset()
    assert status_legacy.stored_flat({"phase": "Running"}) == frozenset()
    assert status_legacy.stored_flat(
        {"instanceName": "x", "attempts": [{"attempt": 1, "instanceName": "x"}]}
    ) == {
        "instanceName",
        "attempts",
    }
    # An attempts[] entry that is not a record becomes an empty one (and pydantic names it).
    converted = status_legacy.status_from_flat({"instanceName": "x", "attempts": ["junk"]})
    assert converted["attempts"][-1]["instance"]["name"] == "x"


def test_the_log_context_reads_the_instance_name_from_either_shape_without_parsing() -> None:
    for _, stored in CASES:
        parsed = TaoBrevJobStatus.from_k8s(stored)
        assert status_legacy.instance_name(stored) == (parsed.instance.name or None)
    rewritten = TaoBrevJobStatus.from_k8s({"instanceName": "x"}).to_k8s()
    assert status_legacy.instance_name(rewritten) == "x"
    assert status_legacy.instance_name(None) is None
    assert status_legacy.instance_name({"attempts": ["junk"]}) is None
