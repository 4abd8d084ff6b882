"""Questions answer, processes act (issue 26, part 3): the detect_* queries of a pass read the
observation and the status and write nothing; the process_* steps beside them are the writers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from controller.brev.client import DELETING, FAILURE, RUNNING
from controller.lifecycle.absence import Listed, detect_listing
from controller.lifecycle.decision_pass import Pass
from controller.lifecycle.steps import Observation
from tests.unit.test_machine import T0, TUN, spec
from tests.unit.test_recovery import inst, running_job


def a_pass(status_fields: dict[str, Any] | None = None, **obs: Any) -> Pass:
    return Pass(spec(), running_job(**(status_fields or {})), Observation(now=T0, **obs), TUN)


@pytest.mark.parametrize(
    ("obs", "listed"),
    [
        ({}, Listed.UNKNOWN),
        ({"instance_known": True, "instance_ambiguous": True}, Listed.AMBIGUOUS),
        ({"instance_known": True}, Listed.MISSING),
        ({"instance_known": True, "instance": inst(DELETING)}, Listed.DELETING),
        ({"instance_known": True, "instance": inst(FAILURE)}, Listed.FAILED),
        ({"instance_known": True, "instance": inst(RUNNING)}, Listed.PRESENT),
    ],
)
def test_detect_listing_answers_without_writing(obs: dict[str, Any], listed: Listed) -> None:
    p = a_pass({"absent_listings": 1, "absent_since": T0, "absent_checked_at": T0}, **obs)
    before = p.s.model_copy(deep=True)
    assert detect_listing(p) is listed
    assert p.s == before and not p.actions and not p.events


def test_detect_identity_change_answers_and_only_process_identity_lifts_the_stall() -> None:
    stalled = {"stalled_reason": "InstanceNotAccessible", "stalled_message": "x"}
    p = a_pass(stalled, identity="bob")
    assert p.detect_identity_change() is True
    p = a_pass(stalled, identity="alice")
    assert p.detect_identity_change() is False
    assert p.s.stalled_reason == "InstanceNotAccessible", "a question changes nothing"
    assert p.process_identity() is False
    assert p.s.stalled_reason is None


def test_detect_new_listing_counts_a_listing_once_and_only_process_absence_counts() -> None:
    counted = {"absent_listings": 1, "absent_since": T0, "absent_checked_at": T0}
    same = a_pass(counted, instance_known=True, listed_at=T0 + timedelta(seconds=1))
    assert same.detect_new_listing() is False
    assert same.process_absence() == 1
    later = a_pass(counted, instance_known=True, listed_at=T0 + timedelta(seconds=TUN.poll_interval))
    assert later.detect_new_listing() is True
    assert later.s.instance.absence.listings == 1, "a question changes nothing"
    assert later.process_absence() == 2
