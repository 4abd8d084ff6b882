"""Seeds the whole-operator simulation failed on, kept as tests (tests/simulation/README.md).

Each seed is a pure function of its number: the same seed is the same interleaving, the same
faults and the same trace, so a seed that once found a defect replays it exactly. The wide slice
(hundreds of seeds) runs as `make simulate-ci` before pytest; these are the ones worth naming.
"""

from __future__ import annotations

import pytest

from tests.simulation.run import run_seed

# seed -> what it found (fixed in the operator, or in the simulation's own model of the world).
FOUND = {
    0: "a healthy run deleted as lost: three omitted listings believed without asking the instance",
    1: "the simulated API server skipped the operator's status redaction (a secret in the log tail, "
    "lastLogLines then, attempts[-1].run.logTail now)",
    2: "the same, for another job and replica",
    12: "recovery's delete of an attempt it had ended taken for a delete of a running job's instance",
    25: "a Retain job's instance kept by its retained record (by name: the create never returned)",
    26: "an exit 0 whose upload failed: Succeeded turns Failed UploadFailed until issue 32",
    63: "a Provisioning instance confirmed lost by delete after three distinct omitted listings",
    194: "one slow `brev ls` counted twice; then a teardown that read its body before the Lease wait",
    225: "a delete handler retried with the body of its first event (kopf gives the latest)",
    365: "a daemon's pass cancelled with its patch on the way: the next pass began before it",
    735: "a listed instance silent since its container exited, the exit never seen (the wait was "
    "cancelled with the Lease): Running's waits failed until the Running timeout",
    319: "the silent bound counted from a workflow's first step's exit 0 (the instance answered after "
    "it), not from the non-zero exit that silenced it (339 too)",
    8122: "a container that exited 0 just inside its budget on an instance that then went silent: "
    "the attempt ended unresponsive, and the next pass reported BudgetExceeded",
    24128: "the progress check flagged a reading carried by a write that happened anyway (an attempt "
    "ended in a workflow's step): it costs no write of its own",
    14331: "a probe after a non-zero exit (keepInstanceOnFailure) hung for the first-exec timeout "
    "(900 s) on a silent instance: the answer bound (300 s past the settle listings) overrun",
    15347: "the simulation logged a listing when it returned, the operator when it was asked for: "
    "two distinct listings a poll interval apart looked like one counted twice",
    15595: "the same hung probe, after several probes in one pass",
    16327: "the same hung probe, with a cancel and a capacity retry around it",
    19978: "the silent bound counted while no replica could act (the Lease changing hands every few "
    "seconds): bounds are counted over the time a leader reaches the API server",
    7: "a stalled event loop (Knobs.loop_stall_every): a pass sent `brev delete` 20 s after its "
    "term's Lease expired, before the election loop ran to cancel it (fenced since)",
    95: "the same for a create, its shielded call sent after the stall",
    825: "a stalled loop: a pass wrote finishedAt after its term ended, the next leader read the "
    "status before that write and finished the job again with another finishedAt (fenced since)",
}


@pytest.mark.parametrize("seed", sorted(FOUND), ids=lambda s: f"seed{s}")
def test_a_seed_that_once_failed_passes(seed: int) -> None:
    sim = run_seed(seed)
    assert sim.violations == [], f"{FOUND[seed]}\n" + "\n".join(sim.lines[-60:])


def test_a_seed_replays_exactly() -> None:
    first, again = run_seed(0), run_seed(0)
    assert first.lines == again.lines
    assert len(first.lines) > 100  # a real run, not an empty world
