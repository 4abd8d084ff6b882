"""Model-based test of the lifecycle (issue 9): the real Reconciler, ActionRunner, directory and
machine against the in-memory Brev world, with Hypothesis choosing reconcile passes, time jumps,
faults, operator restarts, object deletion and spec edits. The invariants in `invariants.py` hold
after every step; at the end the world heals and the job must reach `brev delete` within a
stated bound of simulated time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from controller.api import naming
from controller.api.naming import CANCEL_ANNOTATION
from controller.lifecycle import machine
from tests.fakes.harness import NAME, NAMESPACE, UID, Harness, job_spec
from tests.fakes.quiet import quiet_logs
from tests.model import invariants
from tests.status_paths import teardown

TIMEOUTS = {
    "provisioningSeconds": 120,
    "waitingExecSeconds": 120,
    "pullingSeconds": 120,
    "runningSeconds": 600,
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
# spec.debug.keepInstanceOnFailure of the jobs drawn to keep a failed run's instance.
KEEP_S = 90
DRAIN_BOUND = 2 * (sum(TIMEOUTS.values()) + TUNABLES.create_settle + 6 * TUNABLES.backoff_max + 150 + KEEP_S)
BROKEN = 10**6
# Every disturbance is followed by a few passes, so faults land in the middle of the work.
PASSES = st.integers(0, 2)
AFTER = st.sampled_from([0.0, 30.0, 90.0, 200.0, 500.0])  # "broken until healed" for the counting faults

INSTANCE_NAME = naming.instance_name(NAMESPACE, NAME, UID, cluster_id=TUNABLES.cluster_id)


def spec(
    instance: dict[str, Any] = EPHEMERAL, recovery: dict[str, Any] | None = None, *, keep: bool = False
) -> dict[str, Any]:
    out = job_spec(instance=instance, timeouts=TIMEOUTS, recovery=recovery or {"maxAttempts": 1})
    if keep and "ephemeral" in instance:  # only for an instance the job deletes
        out["debug"] = {"keepInstanceOnFailure": str(KEEP_S)}
    return out


class Lifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.h = Harness(spec(), tunables=TUNABLES, metrics=False)
        self.h.brev.add_instance(SHARED)
        self.writes = invariants.WriteChecker()
        self.delays = invariants.DelayChecker()
        self.finished_creates = invariants.FinishedNeverCreates()
        self.canceled_creates = invariants.CanceledNeverCreates()
        self.recovery: dict[str, Any] = {"maxAttempts": 1}
        self.keep = False

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
        run_s=st.sampled_from([30.0, 240.0, 100_000.0]),
        exit_code=st.sampled_from([0, 0, 1]),
        deploy_s=st.sampled_from([5.0, 40.0]),
        reuse=st.booleans(),
        max_attempts=st.sampled_from([1, 2, 3]),
        retry_codes=st.sampled_from([[], [1]]),
        keep=st.booleans(),
    )
    def world(
        self,
        run_s: float,
        exit_code: int,
        deploy_s: float,
        reuse: bool,
        max_attempts: int,
        retry_codes: list[int],
        keep: bool,
    ) -> None:
        self.h.brev.set_faults(
            run_s=run_s, exit_code=exit_code, deploy_s=deploy_s, sshd_lag_s=5.0, pull_s=5.0
        )
        # Recovery (issue 12): attempts, checkpoint sync every 60 s, and maybe retried exit codes.
        self.recovery = {
            "maxAttempts": max_attempts,
            "checkpointIntervalSeconds": 60,
            "retryOnExitCodes": retry_codes,
        }
        self.keep = keep
        self.h.kube.edit_spec(
            NAMESPACE,
            NAME,
            spec({"reuse": {"name": SHARED}} if reuse else EPHEMERAL, self.recovery, keep=keep),
        )

    @rule(count=st.integers(1, 3))
    def reconcile(self, count: int) -> None:
        self._passes(count)

    @rule(seconds=st.sampled_from([1.0, 15.0, 90.0, 400.0, 3600.0]), then=PASSES)
    def clock_jump(self, seconds: float, then: int) -> None:
        self.h.clock.advance(seconds)
        self._passes(then)

    # Disturbances are scheduled `after` simulated seconds, so they land inside a pass too (one
    # pass can chain a whole run: probe, pull, start, bounded waits, upload, delete).

    @rule(after=AFTER, listings=st.integers(1, 6), then=PASSES)
    def omit_from_listings(self, after: float, listings: int, then: int) -> None:
        self._at(after, lambda: self.h.brev.omit(INSTANCE_NAME, listings), then)

    @rule(after=AFTER, seconds=st.sampled_from([20.0, 120.0]), then=PASSES)
    def listing_lag(self, after: float, seconds: float, then: int) -> None:
        self._fault(after, then, listing_lag_s=seconds)

    @rule(after=AFTER, count=st.integers(1, 3), then=PASSES)
    def listing_failures(self, after: float, count: int, then: int) -> None:
        self._fault(after, then, list_failures=count)

    @rule(
        after=AFTER, lag=st.sampled_from([30.0, 300.0]), deleting=st.sampled_from([10.0, 200.0]), then=PASSES
    )
    def slow_deletes(self, after: float, lag: float, deleting: float, then: int) -> None:
        self._fault(after, then, delete_lag_s=lag, deleting_s=deleting)

    @rule(after=AFTER, count=st.sampled_from([1, 3, BROKEN]), then=PASSES)
    def exec_failures(self, after: float, count: int, then: int) -> None:
        self._fault(after, then, exec_failures=count)

    @rule(after=AFTER, count=st.sampled_from([1, 2, BROKEN]), then=PASSES)
    def exec_hangs(self, after: float, count: int, then: int) -> None:
        self._fault(after, then, exec_hangs=count)

    @rule(after=AFTER, count=st.sampled_from([1, 2, BROKEN]), then=PASSES)
    def upload_failures(self, after: float, count: int, then: int) -> None:
        self._fault(after, then, upload_failures=count)

    @rule(after=AFTER, count=st.integers(1, 2), then=PASSES)
    def capacity_errors(self, after: float, count: int, then: int) -> None:
        self._fault(after, then, capacity_errors=count)

    @rule(after=AFTER, then=PASSES)
    def create_times_out_after_accept(self, after: float, then: int) -> None:
        self._fault(after, then, create_timeouts=1, create_s=60.0)

    @rule(after=AFTER, count=st.integers(1, 2), then=PASSES)
    def delete_failures(self, after: float, count: int, then: int) -> None:
        self._fault(after, then, delete_failures=count)

    @rule(after=AFTER, then=PASSES)
    def credential_switched_to_another_user(self, after: float, then: int) -> None:
        # A token login of someone else: lists with --all, but deletes/execs only its own.
        self._at(after, lambda: self.h.brev.switch_identity("bob", login="token"), then)

    @rule(after=AFTER, how=st.sampled_from(["vanish", "FAILURE", "STOPPED"]), then=PASSES)
    def lose_instance(self, after: float, how: str, then: int) -> None:
        """The job's current instance (whichever attempt) is lost, fails or is stopped."""

        def lose() -> None:
            name = self.h.instance_name
            if name is None or name == SHARED:
                return
            if how == "vanish":
                self.h.brev.vanish(name)
            else:
                self.h.brev.set_status(name, how)

        self._at(after, lose, then)

    @rule(after=AFTER, count=st.sampled_from([1, BROKEN]), then=PASSES)
    def checkpoint_sync_failures(self, after: float, count: int, then: int) -> None:
        self._fault(after, then, sync_failures=count)

    @rule(after=AFTER, then=PASSES)
    def operator_restart(self, after: float, then: int) -> None:
        self._at(after, lambda: self.h.brev.interrupt("crash"), then)

    @rule(after=AFTER, then=PASSES)
    def delete_object(self, after: float, then: int) -> None:
        self._at(after, lambda: self.h.brev.interrupt("delete"), then)

    @rule(after=AFTER, then=PASSES)
    def cancel_annotation(self, after: float, then: int) -> None:
        """`kubectl taobrev cancel`: the run ends Canceled, the object stays."""

        def cancel() -> None:
            if self.h.obj is not None:
                self.h.kube.annotate(NAMESPACE, NAME, CANCEL_ANNOTATION, "2026-01-01T00:00:00Z")

        self._at(after, cancel, then)

    def _at(self, after: float, action: Callable[[], None], then: int) -> None:
        self.h.brev.schedule(after, action)
        self._passes(then)

    def _fault(self, after: float, then: int, **faults: Any) -> None:
        self._at(after, lambda: self.h.brev.set_faults(**faults), then)

    @precondition(
        lambda self: (
            self.h.obj is not None and not self.h.obj.deletion_requested and self.h.phase in (None, "Pending")
        )
    )
    @rule(
        instance=st.sampled_from([EPHEMERAL, {"ephemeral": {"gpuName": "A100"}}, {"reuse": {"name": SHARED}}])
    )
    def edit_spec_while_pending(self, instance: dict[str, Any]) -> None:
        self.h.kube.edit_spec(NAMESPACE, NAME, spec(instance, self.recovery, keep=self.keep))

    # -- invariants ------------------------------------------------------------------------------

    def _check(self) -> None:
        invariants.no_live_instance_of_any_attempt_after_finish(self.h, INSTANCE_NAME)
        invariants.one_create_per_attempt(self.h, INSTANCE_NAME)
        invariants.never_two_live_instances(self.h, INSTANCE_NAME)
        invariants.attempts_within_limit(self.h, INSTANCE_NAME, int(self.recovery["maxAttempts"]))
        invariants.foreign_instances_untouched(self.h, INSTANCE_NAME)
        invariants.upload_before_delete(self.h)
        self.finished_creates.check(self.h)
        self.canceled_creates.check(self.h)
        invariants.kept_instance_holds_no_secret(self.h)
        self.writes.check(self.h)

    @invariant()
    def holds(self) -> None:
        self._check()

    def teardown(self) -> None:
        """Heal and drain: faults off; by the end of DRAIN_BOUND of simulated time the job has
        finished, every instance it created is gone from the world (an accepted delete may still
        be completing when the job finishes), and a deletion is released by teardown."""
        try:
            self.h.brev.heal()
            self.h.brev.switch_identity("alice", login="api-key")
            deadline = self.h.clock.monotonic() + DRAIN_BOUND
            self._drain(deadline)
            assert self.h.finished, (
                f"not finished {DRAIN_BOUND}s after the faults stopped: phase {self.h.phase}, "
                f"{self.h.status.get('reason')}: {self.h.status.get('message')} "
                f"({teardown(self.h.status).get('message')})"
            )
            self.h.clock.advance(max(0.0, deadline - self.h.clock.monotonic()))
            left = [i for i in self.h.all_created_ids(INSTANCE_NAME) if self.h.brev.exists(i)]
            assert not left, f"finished, yet instance(s) {left} still exist {DRAIN_BOUND}s after healing"
            self.h.delete_job()
            self._drain(self.h.clock.monotonic() + DRAIN_BOUND)
            assert self.h.obj is None, "the finalizer was never released"
        finally:
            self.loop.close()

    def _drain(self, deadline: float) -> None:
        while self.h.clock.monotonic() < deadline and self.h.obj is not None:
            if self.h.finished and not self.h.obj.deletion_requested:
                return
            delay = self._pass()
            self.h.clock.advance(TUNABLES.poll_interval if delay is None else delay)


Lifecycle.TestCase.settings = settings(
    max_examples=2000,
    stateful_step_count=10,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_lifecycle_model() -> None:
    with quiet_logs():
        Lifecycle.TestCase("runTest").runTest()
