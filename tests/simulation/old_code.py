"""Issue 25's scenarios 1-9 (and two more) on the code before their fixes: each fix taken out
again, in process.

The simulation is only worth its CPU if it finds the seam bugs a review found by hand. Each entry
below puts one scenario's old behaviour back (the code the fix commit replaced, as a monkeypatch
of today's functions), names the faults that scenario needs (a directed search: the seed's other
draws stay put), and the words of the invariant that must fire. `python -m tests.simulation.old_code`
counts, for every scenario, how many seeds the search took; `test_old_code.py` keeps each as a test.

Old behaviour that needs another old bug to show (scenario 3: a live instance only a finished job
names arises from scenario 1's late create) takes both fixes out, as the code before them had.
Entry 0 is the simulation's own first find (seed 0: a healthy run deleted as lost), kept the same
way; entry 10 is issue 30's failover freeze, which only a stalled loop (Knobs.loop_stall_every)
shows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from controller import reconciler
from controller.api import naming, reasons
from controller.api.errors import BrevTransientError
from controller.api.vocabulary import Outcome
from controller.brev import output
from controller.effects.actions import ActionRunner
from controller.effects.lanes import Lane
from controller.fleet import orphans
from controller.fleet.leadership import LeaderElector
from controller.lifecycle import absence, decision_pass, recovery, release
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import (
    Action,
    CreateInstance,
    Observation,
    PrepareWorkload,
    RestoreCheckpoints,
    StartContainer,
    SyncCheckpoints,
    UploadResults,
    WaitForExit,
)
from controller.settings import Settings
from tests.simulation.run import HANG_S, run_seed
from tests.simulation.world import Knobs

Revert = Callable[[pytest.MonkeyPatch], None]


@dataclass(frozen=True)
class Scenario:
    number: int
    title: str
    revert: Revert
    knobs: Knobs
    finds: str  # a substring of the violation that must fire
    # The wall-clock bound of a seed on the old code (a freeze is found by the watchdog).
    hang_after_s: float = HANG_S


# -- the old code, scenario by scenario -----------------------------------------------------------


def _late_creates(mp: pytest.MonkeyPatch) -> None:
    """Scenario 1 (before d827c40): the reconciler shielded the whole pass when it held a create,
    so a create queued for its lane started after the pass was cancelled; teardown concluded
    "never created" `create_settle` after the create was SENT, whether or not it ever returned."""

    async def create(self: ActionRunner, action: Action, job: Any, obs: Observation) -> Observation:
        async with self._lanes.hold(Lane.CREATE, None):
            return await self._call(action, job, obs, None)

    background: set[asyncio.Future[Observation]] = set()

    async def act(
        self: reconciler.Reconciler, actions: Sequence[Action], job: Any, obs: Observation, deadline: Any
    ) -> Observation:
        run = self._runner.run(actions, job, obs, deadline=deadline)
        if any(isinstance(a, CreateInstance) for a in actions):
            task = asyncio.ensure_future(run)
            background.add(task)
            task.add_done_callback(background.discard)
            after = await asyncio.shield(task)
        else:
            after = await run
        names = [type(a).__name__ for a in actions]
        done = names if after.failure is None else names[: names.index(after.failure.action)]
        return after.with_(completed=tuple(done))

    mp.setattr(ActionRunner, "_create", create)
    mp.setattr(reconciler.Reconciler, "_act", act)
    mp.setattr(release, "_create_may_be_in_flight", lambda p: False)


def _cluster_mark_only(mp: pytest.MonkeyPatch) -> None:
    """Scenario 2 (before 0c55783): the mark named the cluster only, so a namespaced sweeper took
    every marked instance for its own, whichever deployment and namespace it was made for."""
    mp.setattr(orphans, "_provenance", lambda name, marks, namespaces: (name.startswith(naming.PREFIX), None))


def _finished_names_hide(mp: pytest.MonkeyPatch) -> None:
    """Scenario 3 (before 0c55783): an instance any listed job named was skipped ("its teardown
    owns it"), finished or not; with scenario 1's late create, which is how one outlives its job."""
    _late_creates(mp)

    def in_use(self: Any, inst: Any) -> bool:
        return inst.name in self.active_names or inst.id in self.active_ids or inst.name in self.finished

    mp.setattr(orphans._Index, "in_use", in_use)


def _absence_per_pass(mp: pytest.MonkeyPatch) -> None:
    """Scenario 4 (before d5ef0a3): absence counted per pass, so one cached listing counted 2-3x."""

    def per_pass(self: decision_pass.Pass) -> int:
        self.s.instance.absence.count(self.now)  # every pass, whether or not the listing is new
        return self.s.instance.absence.listings or 0

    mp.setattr(decision_pass.Pass, "process_absence", per_pass)


def _no_exit_answer_bound(mp: pytest.MonkeyPatch) -> None:
    """Scenario 5 (before 1c45938): after a non-zero exit a listed instance that stopped answering
    was probed until the Running timeout: no bound of its own."""
    tunables = Settings.tunables
    mp.setattr(Settings, "tunables", lambda self: replace(tunables(self), exit_answer_timeout=float("inf")))


def _secrets_only_for_steps_that_send_them(mp: pytest.MonkeyPatch) -> None:
    """Scenario 6 (before 78caaff): a pass read the job's Secrets only for steps that deliver
    them; a new process's exit wait (stopping, after downtime) brought a log tail it could not mask."""

    def needs_secrets(action: Action) -> bool:
        if isinstance(action, WaitForExit):
            return action.start_if_missing
        return isinstance(
            action, PrepareWorkload | StartContainer | UploadResults | SyncCheckpoints | RestoreCheckpoints
        )

    async def act(
        self: reconciler.Reconciler, actions: Sequence[Action], job: Any, obs: Observation, deadline: Any
    ) -> Observation:
        after = await self._runner.run(actions, job, obs, deadline=deadline)  # no tail withheld
        names = [type(a).__name__ for a in actions]
        done = names if after.failure is None else names[: names.index(after.failure.action)]
        return after.with_(completed=tuple(done))

    mp.setattr(reconciler, "_reaches_instance", needs_secrets)
    mp.setattr(reconciler.Reconciler, "_act", act)


def _capacity_from_progress_lines(mp: pytest.MonkeyPatch) -> None:
    """Scenario 7 (before 78c01ef): a `Skipping: ... no capacity` line anywhere in the output made
    any failed create InsufficientCapacity, a definite refusal, also after a request reached Brev."""
    create_outcome = output.create_outcome

    def old(name: str, result: Any) -> Any:
        out = result.output
        refused = any(m in out for m in ("no capacity", "please retry", "try again later"))
        exists = "already exists" in out or "duplicate workspace" in out
        if result.returncode != 0 and refused and not exists:
            raise BrevTransientError(
                f"no capacity for the requested instance types of {name}; will retry",
                reason="InsufficientCapacity",
                cli_message=output.cli_message(result),
            )
        return create_outcome(name, result)

    mp.setattr(output, "create_outcome", old)


def _budget_before_exit(mp: pytest.MonkeyPatch) -> None:
    """Scenario 8 (before 16c038b): Running's budget was judged before looking for the exit, on
    the billed time now, not at the exit."""

    def check_budget(p: decision_pass.Pass) -> None:
        running = (Phase.PROVISIONING, Phase.WAITING_EXEC, Phase.PULLING, Phase.RUNNING)
        if p.s.run_outcome or p.phase not in running:
            return
        message = recovery.over_budget(p)
        if message is not None:
            p.end_run(Outcome.FAILED, reasons.BUDGET_EXCEEDED, message)

    mp.setattr(recovery, "check_budget", check_budget)


def _retain_keeps_superseded(mp: pytest.MonkeyPatch) -> None:
    """Scenario 9 (before 16c038b): onCompletion Retain kept whatever instance the status named,
    also one recovery had ended and was deleting for the next attempt."""
    mp.setattr(decision_pass, "superseded", lambda status: False)


def _listings_believed(mp: pytest.MonkeyPatch) -> None:
    """Not one of the issue's scenarios but the simulation's own first find (before f11eae0):
    three omitted listings believed while the container ran, without asking the instance."""
    mp.setattr(absence, "_probe_first", lambda p: False)


async def _old_wait_leading(self: LeaderElector, timeout: float | None = None) -> bool:  # noqa: ASYNC109
    if self.is_leading():
        return True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(self._acquired.wait(), timeout)
    return self.is_leading()


def _term_past_deadline_returns_at_once(mp: pytest.MonkeyPatch) -> None:
    """Not one of the issue's scenarios but issue 30's failover freeze (before 9f7dbd7): with a
    term past its renew deadline that run() had not ended (a starved loop), wait_leading returned
    at once and the sweeper's loop (wait_leading -> NotLeading -> wait_leading) never yielded."""
    mp.setattr(LeaderElector, "wait_leading", _old_wait_leading)


SCENARIOS = (
    Scenario(
        0,
        "a healthy run deleted as lost (the simulation's seed 0)",
        _listings_believed,
        Knobs(list_omit=0.2, lease_partition=0.2),
        "ended InstanceNotListed while",
    ),
    Scenario(
        1,
        "a create outlives its job",
        _late_creates,
        Knobs(create_slow=0.5, cancel_soon=0.5),
        "landed after job",
    ),
    Scenario(
        2,
        "a namespaced sweeper deletes another deployment's running instances",
        _cluster_mark_only,
        Knobs(),
        "brev delete of",
    ),
    Scenario(
        3,
        "a finished job hides a live instance from the sweeper",
        _finished_names_hide,
        Knobs(create_slow=1.0, lease_partition=0.003, tight_timeouts=1.0),
        "bills owned by no one",
    ),
    Scenario(
        4,
        "one listing counts as several absences",
        _absence_per_pass,
        Knobs(list_omit=0.2),
        "distinct listings left it out",
    ),
    Scenario(
        5,
        "a silent instance after a non-zero exit bills until the Running timeout",
        _no_exit_answer_bound,
        Knobs(exit_nonzero=0.5, unreachable_after_exit=0.5),
        "has not answered",
    ),
    Scenario(
        6,
        "a secret reaches the status log tail (attempts[-1].run.logTail) after a restart",
        _secrets_only_for_steps_that_send_them,
        Knobs(print_secrets=0.5, crash=0.01),
        "a secret value in status",
    ),
    Scenario(
        7,
        "an ambiguous create failure after a capacity skip is taken for a refusal",
        _capacity_from_progress_lines,
        Knobs(create_timeout=0.8, cancel_soon=1.0),
        "live after the job is gone",
    ),
    Scenario(
        8,
        "the budget is judged before the exit",
        _budget_before_exit,
        Knobs(near_budget=1.0, crash=0.01, lease_partition=0.2),
        "exited 0 inside its budget",
    ),
    Scenario(
        9,
        "Retain + recovery keeps the superseded instance",
        _retain_keeps_superseded,
        Knobs(exit_nonzero=1.0, delete_fail=0.5, tight_timeouts=1.0),
        "superseded",
    ),
    Scenario(
        10,
        "a starved loop freezes a replica: a term past its deadline spins the sweeper",
        _term_past_deadline_returns_at_once,
        Knobs(loop_stall_every=120.0),
        "hang:",
        hang_after_s=10.0,  # a seed takes about one second; the freeze never ends
    ),
)

BY_NUMBER = {s.number: s for s in SCENARIOS}


@contextlib.contextmanager
def old_code(scenario: Scenario) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        scenario.revert(mp)
        yield


def finds(scenario: Scenario, seed: int) -> bool:
    """Whether this seed, on the scenario's old code and faults, fires the scenario's invariant."""
    with old_code(scenario), warnings.catch_warnings():
        # The watchdog interrupts a hang wherever it spins: a coroutine the old code had made and
        # not awaited yet is then collected unawaited (scenario 10's `_acquired.wait()`).
        warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
        sim = run_seed(seed, scenario.knobs, hang_after_s=scenario.hang_after_s)
        gc.collect()
        return any(scenario.finds in v for v in sim.violations)


def fires_today(scenario: Scenario, seed: int) -> bool:
    """Whether today's code, on the same seed and faults, fires the same invariant."""
    return any(scenario.finds in v for v in run_seed(seed, scenario.knobs).violations)


def first_finding(scenario: Scenario, seeds: int, start: int = 0) -> int | None:
    """The first seed of `start`..`start + seeds - 1` that finds the scenario on its old code."""
    return next((seed for seed in range(start, start + seeds) if finds(scenario, seed)), None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation.old_code", description=__doc__)
    parser.add_argument("scenarios", nargs="*", type=int, help="scenario numbers (default: all, 0-10)")
    parser.add_argument("--seeds", type=int, default=500, help="give up after this many seeds")
    args = parser.parse_args(argv)
    missed = 0
    for number in args.scenarios or sorted(BY_NUMBER):
        scenario = BY_NUMBER[number]
        began = time.monotonic()
        seed = first_finding(scenario, args.seeds)
        took = time.monotonic() - began
        if seed is None:
            missed += 1
            print(f"scenario {number} ({scenario.title}): NOT found in {args.seeds} seeds ({took:.1f} s)")
        else:
            today = "passes" if not fires_today(scenario, seed) else "FAILS TOO"
            print(
                f"scenario {number} ({scenario.title}): found by seed {seed}, {seed + 1} seeds "
                f"({took:.1f} s; knobs {scenario.knobs.describe()}); today's code on that seed: {today}"
            )
            missed += today != "passes"
        sys.stdout.flush()
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
