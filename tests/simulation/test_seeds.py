"""Seeds the whole-operator simulation failed on, kept as tests (tests/simulation/README.md).

Each seed is a pure function of its number: the same seed is the same interleaving, the same
faults and the same trace, so a seed that once found a defect replays it exactly. The wide slice
(hundreds of seeds) runs as `make simulate-ci` before pytest; these are the ones worth naming.
"""

from __future__ import annotations

import pytest

from controller import absence, decision_pass
from tests.simulation.run import run_seed

# seed -> what it found (fixed in the operator, or in the simulation's own model of the world).
FOUND = {
    0: "a healthy run deleted as lost: three omitted listings believed without asking the instance",
    1: "the simulated API server skipped the operator's status redaction (a secret in lastLogLines)",
    2: "the same, for another job and replica",
    12: "recovery's delete of an attempt it had ended taken for a delete of a running job's instance",
    25: "a Retain job's instance kept by its retained record (by name: the create never returned)",
    26: "an exit 0 whose upload failed: Succeeded turns Failed UploadFailed until issue 32",
    63: "a Provisioning instance confirmed lost by delete after three distinct omitted listings",
    194: "one slow `brev ls` counted as two absences (listing age taken from the pass's start)",
    225: "a delete handler retried with the body of its first event (kopf gives the latest)",
    291: "the lost healthy run of seed 0, as the simulation interleaves it now",
}


@pytest.mark.parametrize("seed", sorted(FOUND), ids=lambda s: f"seed{s}")
def test_a_seed_that_once_failed_passes(seed: int) -> None:
    sim = run_seed(seed)
    assert sim.violations == [], f"{FOUND[seed]}\n" + "\n".join(sim.lines[-60:])


def test_a_seed_replays_exactly() -> None:
    first, again = run_seed(0), run_seed(0)
    assert first.lines == again.lines
    assert len(first.lines) > 100  # a real run, not an empty world


def test_the_simulation_finds_the_lost_healthy_run_without_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """The invariant that caught seed 0 is live: with the operator's fix taken out, it fires
    (at seed 291 of the simulation as it is now: seeds follow the simulation's code, and seed 0
    no longer meets the same interleaving since the daemons read kopf's live body)."""
    monkeypatch.setattr(absence, "_probe_first", lambda p: False)
    sim = run_seed(291)
    assert any("ended InstanceNotListed while" in v for v in sim.violations), sim.violations


def test_the_simulation_finds_one_listing_counted_as_many_absences(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25 scenario 4 on the code before its fix: absence counted per pass, not per
    distinct listing. Seed 0 finds it."""

    def per_pass(self: decision_pass.Pass) -> int:
        self.s.absent_listings = (self.s.absent_listings or 0) + 1
        self.s.absent_since = self.s.absent_since or self.now
        return self.s.absent_listings

    monkeypatch.setattr(decision_pass.Pass, "note_absence", per_pass)
    sim = run_seed(0)
    assert any("distinct listings left it out" in v for v in sim.violations), sim.violations
