"""The order the suite runs in (tests/durations.py): the long tests spread over xdist's shares."""

from __future__ import annotations

from tests.durations import from_report, share_sizes, spread


def test_share_sizes_are_the_ones_worksteal_cuts() -> None:
    assert share_sizes(10, 4) == [2, 2, 3, 3]
    assert sum(share_sizes(2064, 4)) == 2064


def test_each_share_starts_with_its_long_tests_and_the_work_is_balanced() -> None:
    ids = [f"t{i}" for i in range(40)]
    known = {"t3": 100.0, "t30": 90.0, "t7": 80.0, "t20": 70.0, "t21": 30.0, "t22": 30.0}
    order = spread(ids, ids, known, 4)
    assert sorted(order) == sorted(ids), "a permutation: nothing lost, nothing twice"
    shares, at = [], 0
    for size in share_sizes(len(ids), 4):
        shares.append(order[at : at + size])
        at += size
    assert [share[0] for share in shares] == ["t3", "t30", "t7", "t20"]
    work = [sum(known.get(t, 0.0) for t in share) for share in shares]
    assert max(work) - min(work) <= 30.0
    short = [t for t in order if t not in known]
    assert short == sorted(short, key=lambda t: int(t[1:])), "the short ones keep collection order"


def test_one_worker_runs_the_longest_first() -> None:
    assert spread(["a", "b", "c"], ["a", "b", "c"], {"c": 9.0, "b": 1.0}, 1) == ["c", "b", "a"]


def test_the_report_gives_calls_of_at_least_five_seconds() -> None:
    report = [
        "255.68s call     tests/e2e/test_kueue.py::test_a[x y]",
        "39.44s setup    tests/e2e/test_b.py::test_b",
        "4.99s call     tests/unit/test_c.py::test_c",
    ]
    assert from_report(report) == {"tests/e2e/test_kueue.py::test_a[x y]": 255.68}
