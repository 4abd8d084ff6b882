"""The simulation's measure of when a deployment could act (the billing bounds count over it)."""

from __future__ import annotations

import pytest

from tests.simulation.availability import Availability


def test_leader_time_less_cut_offs_merged_across_replicas() -> None:
    a = Availability()
    a.leads("a-0#1", "a", 0.0)
    a.cut_off("a-0#1", 10.0, 20.0)
    a.stops_leading("a-0#1", 30.0)
    a.leads("a-1#1", "a", 25.0)  # overlaps the first term: counted once
    a.leads("b-0#1", "b", 0.0)  # another deployment's leader counts nothing for "a"
    assert a.able("a", 0.0, 40.0) == pytest.approx(10.0 + 20.0)  # [0, 10] and [20, 40]
    assert a.able("a", 12.0, 18.0) == 0.0
    assert a.able("b", 0.0, 40.0) == pytest.approx(40.0)


def test_a_crashed_leader_stops_counting_and_a_second_lead_call_is_one_term() -> None:
    a = Availability()
    a.leads("a-0#1", "a", 0.0)
    a.leads("a-0#1", "a", 5.0)
    a.stops_leading("a-0#1", 8.0)
    a.stops_leading("a-0#1", 9.0)
    assert a.able("a", 0.0, 100.0) == pytest.approx(8.0)
