"""The lane settings (TAOBREV_LANE_*): defaults, validation naming the variable, the old names,
and the lanes an operator builds from them (no I/O)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.effects.lanes import DEFAULT_SLOTS, LANES, Lane
from controller.settings import Settings


def test_every_lane_has_a_setting_with_the_documented_default() -> None:
    lanes = Settings.from_env({}).lanes()
    for lane in LANES:
        gate = lanes.gate(lane)
        assert gate.slots == DEFAULT_SLOTS[lane]
        assert gate.setting == f"TAOBREV_LANE_{lane.upper()}"
    # Teardown and long work never share a gate.
    assert lanes.gate(Lane.DELETE) is not lanes.gate(Lane.PULL)


def test_a_lane_setting_is_read_from_its_variable() -> None:
    lanes = Settings.from_env({"TAOBREV_LANE_PULL": "100", "TAOBREV_LANE_DELETE": "4"}).lanes()
    assert lanes.gate(Lane.PULL).slots == 100
    assert lanes.gate(Lane.DELETE).slots == 4


def test_a_bad_lane_size_fails_start_up_naming_the_variable() -> None:
    with pytest.raises(SystemExit, match="TAOBREV_LANE_PROBE"):
        Settings.from_env({"TAOBREV_LANE_PROBE": "0"})


def test_the_old_wait_bound_still_sets_the_wait_lane() -> None:
    lanes = Settings.from_env({"TAOBREV_MAX_CONCURRENT_WAITS": "64"}).lanes()
    assert lanes.gate(Lane.WAIT).slots == 64


def test_the_old_and_new_wait_bound_must_agree() -> None:
    env = {"TAOBREV_MAX_CONCURRENT_WAITS": "64", "TAOBREV_LANE_WAIT": "128"}
    with pytest.raises(SystemExit, match="TAOBREV_MAX_CONCURRENT_WAITS is the old name of TAOBREV_LANE_WAIT"):
        Settings.from_env(env)


def test_the_deprecated_single_pool_keeps_its_old_meaning() -> None:
    lanes = Settings.from_env({"TAOBREV_MAX_CONCURRENT_BREV_CALLS": "8"}).lanes()
    assert lanes.gate(Lane.DELETE) is lanes.gate(Lane.PROBE)
    assert lanes.gate(Lane.DELETE).slots == 8
    assert lanes.gate(Lane.DELETE).setting == "TAOBREV_MAX_CONCURRENT_BREV_CALLS"
    assert lanes.gate(Lane.WAIT).slots == DEFAULT_SLOTS[Lane.WAIT]


def test_the_config_map_shows_every_lane_with_its_default() -> None:
    text = (Path(__file__).resolve().parents[2] / "deploy" / "base" / "config.yaml").read_text()
    for lane in LANES:
        assert f'# TAOBREV_LANE_{lane.upper()}: "{DEFAULT_SLOTS[lane]}"' in text
