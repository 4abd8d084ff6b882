"""A `brev create` that Brev definitely refused created nothing: it needs no confirmation of
absence, least of all from the identity that asked for it (found by the model test: a token
user's create refused for capacity, then the operator logged in with an org API key, and the
job stalled in Deleted with InstanceNotAccessible forever). A create that may have succeeded
(accepted, timed out, cut short) still needs the creating identity's confirmation.

`decide()` directly first (the rule), then the same story through the whole reconciler.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from controller.api import reasons
from controller.api.spec_parse import parse_spec
from controller.api.status import TaoBrevJobStatus
from controller.api.vocabulary import Outcome
from controller.lifecycle import machine
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import ActionFailure, CreateInstance, Decision, DeleteInstance, Observation
from tests.fakes.brev import Faults, identity_string
from tests.fakes.clock import T0
from tests.fakes.harness import NAME, NAMESPACE, TUNABLES, UID, Harness, job_spec

SPEC = parse_spec(job_spec())
BOB = identity_string("bob", "token")
ALICE = identity_string("alice", "api-key")
CAPACITY = ActionFailure("CreateInstance", "InsufficientCapacity", "no capacity available", permanent=False)
TIMEOUT = ActionFailure("CreateInstance", "BrevUnavailable", "context deadline exceeded", permanent=False)
NO_TYPE = ActionFailure("CreateInstance", "NoMatchingInstanceType", "no GPU instances match", permanent=True)
SETTLED = timedelta(seconds=TUNABLES.create_settle + 1)


def decide(status: TaoBrevJobStatus, *, now: Any = T0, deleting: bool = False, **obs: Any) -> Decision:
    obs.setdefault("instance_known", True)
    obs.setdefault("identity", BOB)
    return machine.decide(
        SPEC,
        status,
        Observation(now=now, deleting=deleting, **obs),
        namespace=NAMESPACE,
        name=NAME,
        uid=UID,
        generation=1,
        tunables=TUNABLES,
    )


def first_create_sent() -> TaoBrevJobStatus:
    """Provisioning, the first `brev create` just asked for under bob's token."""
    status = decide(TaoBrevJobStatus()).status  # the first, visible Pending
    status = decide(status).status  # -> Provisioning
    d = decide(status)
    assert [type(a) for a in d.actions] == [CreateInstance]
    assert d.status.instance.identity == BOB
    return d.status


def canceled_under_alice(status: TaoBrevJobStatus, now: Any) -> Decision:
    """The credential was replaced by an org API key and the job deleted; no instance listed."""
    return decide(status, now=now, deleting=True, identity=ALICE)


def test_a_refused_first_create_leaves_nothing_to_confirm() -> None:
    d = decide(first_create_sent(), failure=CAPACITY)
    assert d.status.instance.create_requested_at is None
    assert d.status.instance.identity is None
    assert d.actions == ()  # backs off, then asks again
    d = canceled_under_alice(d.status, T0 + timedelta(seconds=5))
    assert d.finished, (d.status.stalled_reason, d.status.teardown.message)
    assert d.status.phase is Phase.DELETED
    assert d.status.stalled_reason is None
    assert not any(isinstance(a, DeleteInstance) for a in d.actions)


def test_after_a_refusal_the_next_create_records_the_identity_that_sends_it() -> None:
    status = decide(first_create_sent(), failure=CAPACITY).status
    d = decide(status, now=T0 + timedelta(seconds=2), identity=ALICE)
    assert [type(a) for a in d.actions] == [CreateInstance]
    assert d.status.instance.identity == ALICE
    assert d.status.stalled_reason is None


def test_a_permanently_refused_first_create_finishes_in_the_same_pass() -> None:
    d = decide(first_create_sent(), failure=NO_TYPE)
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == "NoMatchingInstanceType"
    assert d.finished
    assert d.status.instance.create_requested_at is None


def test_a_create_that_timed_out_still_needs_the_creating_identity() -> None:
    d = decide(first_create_sent(), failure=TIMEOUT)
    assert d.status.instance.create_requested_at is not None
    assert d.status.instance.create_returned_at == T0
    assert d.status.instance.identity == BOB
    status = d.status
    for step in range(1, 8):  # well past the settle time: absence alone proves nothing here
        d = canceled_under_alice(status, T0 + SETTLED + step * timedelta(seconds=TUNABLES.poll_interval))
        status = d.status
    assert not d.finished
    assert status.stalled_reason == reasons.INSTANCE_NOT_ACCESSIBLE


def test_a_refused_re_send_after_an_ambiguous_create_keeps_it_pending() -> None:
    status = decide(first_create_sent(), failure=TIMEOUT).status
    d = decide(status, now=T0 + SETTLED)  # not listed after the settle time: the same name again
    assert [type(a) for a in d.actions] == [CreateInstance]
    assert d.status.instance.create_returned_at == T0, "the earlier call's return is kept while re-sending"
    d = decide(d.status, now=T0 + SETTLED, failure=CAPACITY)
    assert d.status.instance.create_requested_at == T0 + SETTLED
    assert d.status.instance.create_returned_at == T0 + SETTLED
    assert d.status.instance.identity == BOB
    d = canceled_under_alice(d.status, T0 + 3 * SETTLED)
    assert not d.finished  # the first create may still have made an instance under bob


def test_a_crash_during_the_first_create_keeps_it_pending() -> None:
    status = first_create_sent()  # written; then the process died during the call
    d = decide(status, now=T0 + SETTLED)
    assert [type(a) for a in d.actions] == [CreateInstance]  # re-sent under the same identity
    assert d.status.instance.create_returned_at == T0, "the lost call settled from its send"
    d = decide(d.status, now=T0 + SETTLED, failure=CAPACITY)
    assert d.status.instance.create_requested_at is not None
    assert d.status.instance.identity == BOB


def test_refused_for_capacity_then_another_credential_finishes_the_deleted_job() -> None:
    """The model test's finding, through the reconciler and the fake world."""
    h = Harness(faults=Faults(capacity_errors=1))
    h.brev.switch_identity("bob", login="token")
    assert asyncio.run(h.run_until(lambda h: len(h.brev.creates) == 1))
    assert not h.brev.creates[0].accepted
    h.brev.heal()
    h.brev.switch_identity("alice", login="api-key")
    h.delete_job()
    asyncio.run(h.run(seconds=3600))
    assert h.obj is None, f"never released: {h.status.get('stalledReason')}: {h.status.get('stalledMessage')}"
    assert h.status["outcome"] == str(Outcome.CANCELED)
    assert not h.brev.accepted_creates(str(h.instance_name))
    assert not [w for w in h.kube.writes if w.status.get("stalledReason")]


def test_a_timed_out_create_under_another_user_is_never_assumed_absent() -> None:
    """The other side: bob's create was accepted though the call timed out; alice's token cannot
    see it, so the job must not finish on her "not found" while bob's instance bills."""
    h = Harness(faults=Faults(create_timeouts=1, listing_lag_s=10**6))
    h.brev.switch_identity("bob", login="token")
    assert asyncio.run(h.run_until(lambda h: len(h.brev.creates) == 1))
    h.brev.switch_identity("alice", login="token")
    h.delete_job()
    asyncio.run(h.run(seconds=3600))
    assert h.obj is not None and not h.finished
    assert h.status.get("stalledReason") == reasons.INSTANCE_NOT_ACCESSIBLE
    assert [c.id for c in h.brev.accepted_creates(str(h.instance_name)) if h.brev.live(str(c.id))]
