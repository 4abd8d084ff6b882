"""`instance_durations` (tests/brevsim/faults.py) and the per-instance delays model.observe reads:
pure parts, no simulator process."""

from __future__ import annotations

import pytest

from tests.brevsim.faults import UnknownFault, check, durations_for
from tests.brevsim.model import observe

DELAYS = {"deploy_s": 100.0, "ssh_delay_s": 100.0, "build_s": 0.0, "delete_s": 1.0}


def test_first_entry_matching_id_name_or_substring_wins() -> None:
    knob = {"busy-p": {"pull_seconds": 600}, "busy": {"ssh_delay_s": 600}, "inst-7": {"deploy_s": 1}}
    assert durations_for(knob, "tbj-ab-ns-busy-p-003-x", "inst-1") == {"pull_seconds": 600.0}
    assert durations_for(knob, "tbj-ab-ns-busy-e-003-x", "inst-1") == {"ssh_delay_s": 600.0}
    assert durations_for(knob, "other", "inst-7") == {"deploy_s": 1.0}
    assert durations_for(knob, "other", "inst-8") == {}
    assert durations_for({}, "any", "inst-1") == {}


def test_check_refuses_malformed_values_naming_the_entry() -> None:
    with pytest.raises(ValueError, match=r"instance_durations\['x'\]: 'epochs'"):
        check({"instance_durations": {"x": {"epochs": 1}}})
    with pytest.raises(ValueError, match=r"instance_durations\['x'\]\['deploy_s'\]"):
        check({"instance_durations": {"x": {"deploy_s": True}}})
    with pytest.raises(ValueError, match="non-empty instance id"):
        check({"instance_durations": {"": {"deploy_s": 1}}})
    with pytest.raises(UnknownFault):
        check({"instance_duration": {}})
    check({"instance_durations": {"x": {"deploy_s": 0, "pull_seconds": 1.5}}})


def test_observe_uses_the_record_s_own_delays() -> None:
    plain = {"lifecycle": "create", "phase_at": 0.0}
    own = {**plain, "delays": {"deploy_s": 1.0, "ssh_delay_s": 2.0}}
    assert observe(plain, 50.0, DELAYS).status == "DEPLOYING"
    fast = observe(own, 50.0, DELAYS)
    assert fast.status == "RUNNING"
    assert fast.ssh_ready
    assert not observe(own, 2.5, DELAYS).ssh_ready  # RUNNING at 1 s, ssh from 1 + 2 s
