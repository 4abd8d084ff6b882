"""Model-based test of the lifecycle (issue 9): the real Reconciler, ActionRunner, directory and
machine against the in-memory Brev world, with Hypothesis choosing reconcile passes, time jumps,
faults, operator restarts, object deletion and spec edits. The invariants in `invariants.py` hold
after every step; at the end the world heals and the job must reach `brev delete` within a
stated bound of simulated time.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from controller import machine, naming
from tests.fakes.harness import NAME, NAMESPACE, UID, Harness, job_spec
from tests.fakes.quiet import quiet_logs
from tests.model import invariants

TIMEOUTS = {
    "provisioningSeconds": 120,
    "waitingExecSeconds": 120,
    "pullingSeconds": 120,
    "runningSeconds": 300,
    "uploadingSeconds": 60,
    "deletingSeconds": 60,
}
TUNABLES = machine.Tunables(
    poll_interval=10, wait_timeout=60, create_settle=30, backoff_base=2, backoff_max=60
)
SHARED = "shared-box"  # a reused instance that exists before the job (not the job's to delete)
EPHEMERAL = {"ephemeral": {"gpuName": "L40S"}}
# After the faults stop, every state must reach `brev delete` and finish within this much
# simulated time: every phase's deadline once, plus a create settle, a backoff cap per phase and
# one stop grace with its command timeout (WorkloadSettings) -- generously doubled.
DRAIN_BOUND = 2 * (sum(TIMEOUTS.values()) + TUNABLES.create_settle + 6 * TUNABLES.backoff_max + 150)
BROKEN = 10**6  # "broken until healed" for the counting faults

INSTANCE_NAME = naming.instance_name(NAMESPACE, NAME, UID)


def spec(instance: dict[str, Any] = EPHEMERAL) -> dict[str, Any]:
    return job_spec(instance=instance, timeouts=TIMEOUTS)


class Lifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.h = Harness(spec(), tunables=TUNABLES, metrics=False)
        self.h.brev.add_instance(SHARED)
        self.writes = invariants.WriteChecker()
        self.delays = invariants.DelayChecker()

    # -- driving ---------------------------------------------------------------------------------

    def _pass(self) -> float | None:
        before = self.h.clock.monotonic()
        delay = self.loop.run_until_complete(self.h.reconcile_once())
        self.delays.feed(delay, self.h.clock.monotonic() - before)
        self._check()
        return delay

    def _passes(self, count: int) -> None:
        """Like the daemon: a pass, then the delay it asked for; stop when the handler would."""
        for _ in range(count):
            delay = self._pass()
            if delay is None:
                return
            self.h.clock.advance(delay)

    # -- rules -----------------------------------------------------------------------------------

    @initialize(
        run_s=st.sampled_from([20.0, 150.0, 10_000.0]),
        exit_code=st.sampled_from([0, 0, 1]),
        deploy_s=st.sampled_from([5.0, 40.0]),
        reuse=st.booleans(),
    )
    def world(self, run_s: float, exit_code: int, deploy_s: float, reuse: bool) -> None:
        self.h.brev.set_faults(
            run_s=run_s, exit_code=exit_code, deploy_s=deploy_s, sshd_lag_s=5.0, pull_s=5.0
        )
        if reuse:
            self.h.kube.edit_spec(NAMESPACE, NAME, spec({"reuse": {"name": SHARED}}))

    @rule(count=st.integers(1, 4))
    def reconcile(self, count: int) -> None:
        self._passes(count)

    @rule(seconds=st.sampled_from([1.0, 15.0, 90.0, 400.0, 3600.0]))
    def clock_jump(self, seconds: float) -> None:
        self.h.clock.advance(seconds)

    @rule(listings=st.integers(1, 6))
    def omit_from_listings(self, listings: int) -> None:
        self.h.brev.omit(INSTANCE_NAME, listings)

    @rule(seconds=st.sampled_from([20.0, 120.0]))
    def listing_lag(self, seconds: float) -> None:
        self.h.brev.set_faults(listing_lag_s=seconds)

    @rule(count=st.integers(1, 3))
    def listing_failures(self, count: int) -> None:
        self.h.brev.set_faults(list_failures=count)

    @rule(lag=st.sampled_from([30.0, 300.0]), deleting=st.sampled_from([10.0, 200.0]))
    def slow_deletes(self, lag: float, deleting: float) -> None:
        self.h.brev.set_faults(delete_lag_s=lag, deleting_s=deleting)

    @rule(count=st.sampled_from([1, 3, BROKEN]))
    def exec_failures(self, count: int) -> None:
        self.h.brev.set_faults(exec_failures=count)

    @rule(count=st.sampled_from([1, 2, BROKEN]))
    def exec_hangs(self, count: int) -> None:
        self.h.brev.set_faults(exec_hangs=count)

    @rule(count=st.sampled_from([1, 2, BROKEN]))
    def upload_failures(self, count: int) -> None:
        self.h.brev.set_faults(upload_failures=count)

    @rule(count=st.integers(1, 2))
    def capacity_errors(self, count: int) -> None:
        self.h.brev.set_faults(capacity_errors=count)

    @rule()
    def create_times_out_after_accept(self) -> None:
        self.h.brev.set_faults(create_timeouts=1, create_s=60.0)

    @rule(count=st.integers(1, 2))
    def delete_failures(self, count: int) -> None:
        self.h.brev.set_faults(delete_failures=count)

    @rule()
    def operator_restart(self) -> None:
        self.h.restart()

    @rule()
    def delete_object(self) -> None:
        self.h.delete_job()

    @precondition(
        lambda self: (
            self.h.obj is not None and not self.h.obj.deletion_requested and self.h.phase in (None, "Pending")
        )
    )
    @rule(
        instance=st.sampled_from([EPHEMERAL, {"ephemeral": {"gpuName": "A100"}}, {"reuse": {"name": SHARED}}])
    )
    def edit_spec_while_pending(self, instance: dict[str, Any]) -> None:
        self.h.kube.edit_spec(NAMESPACE, NAME, spec(instance))

    # -- invariants ------------------------------------------------------------------------------

    def _check(self) -> None:
        invariants.no_live_instance_after_finish(self.h, INSTANCE_NAME)
        invariants.at_most_one_create(self.h, INSTANCE_NAME)
        invariants.foreign_instances_untouched(self.h, INSTANCE_NAME)
        invariants.upload_before_delete(self.h)
        self.writes.check(self.h)

    @invariant()
    def holds(self) -> None:
        self._check()

    def teardown(self) -> None:
        """Heal and drain: faults off; within DRAIN_BOUND the job finishes with its instance gone,
        and a deletion is released by teardown."""
        try:
            self.h.brev.heal()
            self.h.brev.switch_identity("alice", login="api-key")
            self._drain()
            assert self.h.finished, (
                f"not finished {DRAIN_BOUND}s after the faults stopped: phase {self.h.phase}, "
                f"{self.h.status.get('reason')}: {self.h.status.get('message')}"
            )
            gone = [i for i in self.h.brev.created_ids(INSTANCE_NAME) if self.h.brev.exists(i)]
            assert not gone, f"finished, yet instance(s) {gone} still exist {DRAIN_BOUND}s after healing"
            self.h.delete_job()
            self._drain()
            assert self.h.obj is None, "the finalizer was never released"
        finally:
            self.loop.close()

    def _drain(self) -> None:
        deadline = self.h.clock.monotonic() + DRAIN_BOUND
        while self.h.clock.monotonic() < deadline and self.h.obj is not None:
            if self.h.finished and not self.h.obj.deletion_requested:
                return
            delay = self._pass()
            self.h.clock.advance(TUNABLES.poll_interval if delay is None else delay)


Lifecycle.TestCase.settings = settings(
    max_examples=2000,
    stateful_step_count=12,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_lifecycle_model() -> None:
    with quiet_logs():
        Lifecycle.TestCase("runTest").runTest()
