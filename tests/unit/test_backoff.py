"""The one backoff formula (controller.lifecycle.backoff) and the one retry layer for a pass that failed
transiently (Reconciler.reconcile): growing delays, reset by a good pass, and one Warning Event
per streak of the same reason (it used to live in handlers.drive)."""

from __future__ import annotations

import asyncio

import pytest

from controller.api.errors import KubeUnavailable, SecretAccessDenied
from controller.api.status import TaoBrevJobStatus
from controller.lifecycle import machine
from controller.lifecycle.backoff import exponential
from controller.lifecycle.decision_pass import Pass
from controller.lifecycle.steps import ActionFailure, Observation
from tests.unit.test_reconciler import NOW, PROVISIONING, Brev, Events, Kube, reconciler, ref


def test_doubles_from_the_base_up_to_the_cap() -> None:
    assert [exponential(n, base=2.0, cap=60.0) for n in range(1, 8)] == [2, 4, 8, 16, 32, 60, 60]


def test_an_attempt_below_one_counts_as_the_first() -> None:
    assert exponential(0, base=5.0, cap=60.0) == 5.0
    assert exponential(-3, base=5.0, cap=60.0) == 5.0


def test_a_retry_count_that_grows_for_days_never_overflows() -> None:
    # A reused instance's cleanup is retried without end; 2.0 * 2**1100 is an OverflowError.
    assert exponential(10_000, base=2.0, cap=60.0) == 60.0


def test_the_cap_wins_over_the_base() -> None:
    assert exponential(1, base=2.0, cap=1.0) == 1.0


def test_a_base_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="base"):
        exponential(1, base=0.0, cap=60.0)


def test_decide_uses_the_same_formula_for_failed_actions() -> None:
    tun = machine.Tunables(backoff_base=3.0, backoff_max=40.0)
    p = Pass(None, TaoBrevJobStatus(), Observation(now=NOW), tun)
    delays = []
    for _ in range(5):
        p.transient(ActionFailure("ProbeExec", "BrevTimeout", "timed out", permanent=False))
        delays.append(p.requeue)
    assert delays == [3.0, 6.0, 12.0, 24.0, 40.0]


def test_a_transiently_failing_pass_backs_off_and_warns_once_per_streak() -> None:
    kube = Kube(patch_error=KubeUnavailable("apiserver down"))
    events = Events()
    rec = reconciler(Brev(), kube, events)

    def once() -> float | None:
        return asyncio.run(rec.reconcile(ref(PROVISIONING)))

    delays = [once() for _ in range(4)]
    kube.patch_error = SecretAccessDenied("may not read it")
    delays.append(once())
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0]
    # One Warning Event per streak of the same reason (the pass's own Events are Normal ones).
    warnings = [(r, m) for t, r, m in events.notes if t == "Warning"]
    assert warnings == [
        ("KubernetesUnavailable", "apiserver down"),
        ("SecretAccessDenied", "may not read it"),
    ]


def test_a_good_pass_ends_the_streak() -> None:
    kube = Kube(patch_error=KubeUnavailable("apiserver down"))
    events = Events()
    rec = reconciler(Brev(), kube, events)
    assert asyncio.run(rec.reconcile(ref(PROVISIONING))) == 2.0
    kube.patch_error = None
    assert asyncio.run(rec.reconcile(ref(PROVISIONING))) is not None
    kube.patch_error = KubeUnavailable("apiserver down again")
    # Back to the base delay, and the new streak is announced again (a delete: a status to write).
    assert asyncio.run(rec.reconcile(ref(PROVISIONING, deleting=True))) == 2.0
    warnings = [r for t, r, _ in events.notes if t == "Warning" and r == "KubernetesUnavailable"]
    assert len(warnings) == 2


def test_an_action_retried_for_days_still_backs_off_at_the_cap() -> None:
    # A reused instance's cleanup is retried without end, once per backoff_max: after ~17 hours
    # the old inline formula raised OverflowError inside decide().
    tun = machine.Tunables(backoff_base=2.0, backoff_max=60.0)
    p = Pass(None, TaoBrevJobStatus(retries=2000), Observation(now=NOW), tun)
    p.transient(ActionFailure("CleanupWorkload", "BrevTimeout", "timed out", permanent=False))
    assert p.requeue == 60.0
