"""Seeds the whole-operator simulation failed on, kept as tests (tests/simulation/README.md).

Each seed is a pure function of its number: the same seed is the same interleaving, the same
faults and the same trace, so a seed that once found a defect replays it exactly. The wide slice
(hundreds of seeds) runs as `make simulate-ci` before pytest; these are the ones worth naming.
"""

from __future__ import annotations

import pytest

from controller import absence, decision_pass
from tests.simulation.run import run_seed
from tests.simulation.world import Knobs

# seed -> what it found (fixed in the operator, or in the simulation's own model of the world).
FOUND = {
    0: "a healthy run deleted as lost: three omitted listings believed without asking the instance",
    1: "the simulated API server skipped the operator's status redaction (a secret in lastLogLines)",
    2: "the same, for another job and replica",
    12: "recovery's delete of an attempt it had ended taken for a delete of a running job's instance",
    25: "a Retain job's instance kept by its retained record (by name: the create never returned)",
    26: "an exit 0 whose upload failed: Succeeded turns Failed UploadFailed until issue 32",
    63: "a Provisioning instance confirmed lost by delete after three distinct omitted listings",
    194: "one slow `brev ls` counted twice; then a teardown that read its body before the Lease wait",
    225: "a delete handler retried with the body of its first event (kopf gives the latest)",
    365: "a daemon's pass cancelled with its patch on the way: the next pass began before it",
}


@pytest.mark.parametrize("seed", sorted(FOUND), ids=lambda s: f"seed{s}")
def test_a_seed_that_once_failed_passes(seed: int) -> None:
    sim = run_seed(seed)
    assert sim.violations == [], f"{FOUND[seed]}\n" + "\n".join(sim.lines[-60:])


def test_a_seed_replays_exactly() -> None:
    first, again = run_seed(0), run_seed(0)
    assert first.lines == again.lines
    assert len(first.lines) > 100  # a real run, not an empty world


def _first_finding(knobs: Knobs, what: str, seeds: int = 60) -> int | None:
    """The first seed (under these faults) whose violations mention `what`. Seeds follow the
    simulation's code, so the tests below search instead of naming one."""
    for seed in range(seeds):
        if any(what in v for v in run_seed(seed, knobs).violations):
            return seed
    return None


def test_the_simulation_finds_the_lost_healthy_run_without_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """The invariant that caught seed 0 is live: with the operator's fix taken out, it fires
    under listing omissions and leader churn (seed 15 of 60 when written)."""
    monkeypatch.setattr(absence, "_probe_first", lambda p: False)
    hostile = Knobs(list_omit=0.2, lease_partition=0.2)
    assert _first_finding(hostile, "ended InstanceNotListed while") is not None


def test_the_simulation_finds_one_listing_counted_as_many_absences(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25 scenario 4 on the code before its fix: absence counted per pass, not per
    distinct listing (seed 0 when written)."""

    def per_pass(self: decision_pass.Pass) -> int:
        self.s.absent_listings = (self.s.absent_listings or 0) + 1
        self.s.absent_since = self.s.absent_since or self.now
        return self.s.absent_listings

    monkeypatch.setattr(decision_pass.Pass, "note_absence", per_pass)
    assert _first_finding(Knobs(list_omit=0.2), "distinct listings left it out") is not None
