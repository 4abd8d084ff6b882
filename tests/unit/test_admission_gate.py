"""The Pending gate (run_phases.pending) and the Admitted / Queued / Suspended conditions: a job
the fleet does not admit creates nothing, shows why and where it stands; an admitted one writes
queue.admittedAt in the same status that leaves Pending, before the create is asked for; deleting a
queued job finishes in that very pass with no action at all."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from controller.api.spec_parse import parse_spec
from controller.api.status import TaoBrevJobStatus
from controller.api.vocabulary import ConditionStatus, Outcome
from controller.fleet import admission
from controller.fleet.admission import Admission
from controller.lifecycle import machine
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import CreateInstance, Decision, Observation
from tests.fakes.harness import job_spec

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TUN = machine.Tunables(poll_interval=5, wait_timeout=30, create_settle=60, backoff_base=2, backoff_max=60)
SPEC = parse_spec(job_spec())
QUEUED = Admission(
    False,
    admission.NAMESPACE_INSTANCE_LIMIT,
    "waiting: namespace ns may have 3 instance(s) at once (TAOBREV_NAMESPACE_MAX_INSTANCES) and 3 are "
    "in use; 2nd in namespace ns's queue",
    2,
)
SUSPENDED = Admission(False, admission.SUSPENDED, admission.SUSPENDED_MESSAGE)
ADMITTED = Admission(True, admission.ADMITTED, "admitted (namespace ns: 1/3 instances)")


def decide(status: TaoBrevJobStatus, obs: Observation) -> Decision:
    return machine.decide(
        SPEC, status, obs, namespace="ns", name="job", uid="0f0e0d0c-0001", generation=1, tunables=TUN
    )


def pending() -> TaoBrevJobStatus:
    """After the first pass: Pending, names assigned, nothing asked of anyone."""
    first = decide(TaoBrevJobStatus(), Observation(now=T0))
    assert first.status.phase == Phase.PENDING
    return first.status


def cond(status: TaoBrevJobStatus, ctype: str) -> tuple[ConditionStatus, str | None, str | None]:
    c = next(c for c in status.conditions if c.type == ctype)
    return c.status, c.reason, c.message


def test_a_queued_job_stays_pending_creates_nothing_and_says_why_and_where() -> None:
    d = decide(pending(), Observation(now=T0 + timedelta(seconds=1), admission=QUEUED))
    assert d.status.phase == Phase.PENDING
    assert d.actions == ()
    assert d.status.queue.admitted_at is None
    assert d.status.queue.reason == admission.NAMESPACE_INSTANCE_LIMIT
    assert d.status.queue.position == 2
    assert d.status.message == QUEUED.message
    assert d.requeue_after == TUN.poll_interval
    assert cond(d.status, "Queued") == (
        ConditionStatus.TRUE,
        admission.NAMESPACE_INSTANCE_LIMIT,
        QUEUED.message,
    )
    assert cond(d.status, "Admitted")[:2] == (ConditionStatus.FALSE, admission.NAMESPACE_INSTANCE_LIMIT)
    assert cond(d.status, "Suspended")[0] == ConditionStatus.FALSE
    assert [e.reason for e in d.events] == [admission.NAMESPACE_INSTANCE_LIMIT]
    # The next pass with the same verdict posts no second Event.
    again = decide(d.status, Observation(now=T0 + timedelta(seconds=6), admission=QUEUED))
    assert again.events == ()


def test_admission_writes_admitted_at_in_the_status_that_leaves_pending_before_any_create() -> None:
    queued = decide(pending(), Observation(now=T0 + timedelta(seconds=1), admission=QUEUED)).status
    now = T0 + timedelta(seconds=10)
    d = decide(queued, Observation(now=now, admission=ADMITTED))
    assert d.status.phase == Phase.PROVISIONING
    assert d.status.queue.admitted_at == now
    assert d.actions == ()  # the create comes in the next step, after this status is written
    assert d.status.queue.reason is None
    assert d.status.queue.position is None
    assert cond(d.status, "Admitted")[:2] == (ConditionStatus.TRUE, admission.ADMITTED)
    assert cond(d.status, "Queued")[:2] == (ConditionStatus.FALSE, admission.ADMITTED)
    assert admission.ADMITTED in [e.reason for e in d.events]
    nxt = decide(d.status, Observation(now=now, instance_known=True))
    assert any(isinstance(a, CreateInstance) for a in nxt.actions)


def test_a_suspended_job_shows_suspended_not_queued() -> None:
    d = decide(pending(), Observation(now=T0 + timedelta(seconds=1), admission=SUSPENDED))
    assert d.status.phase == Phase.PENDING
    assert d.actions == ()
    assert cond(d.status, "Suspended")[:2] == (ConditionStatus.TRUE, admission.SUSPENDED)
    assert cond(d.status, "Queued")[:2] == (ConditionStatus.FALSE, admission.SUSPENDED)
    assert cond(d.status, "Admitted")[:2] == (ConditionStatus.FALSE, admission.SUSPENDED)


def test_deleting_a_queued_job_finishes_in_the_same_pass_with_no_action() -> None:
    queued = decide(pending(), Observation(now=T0 + timedelta(seconds=1), admission=QUEUED)).status
    d = decide(queued, Observation(now=T0 + timedelta(seconds=2), deleting=True))
    assert d.finished
    assert d.actions == ()
    assert d.status.finished_at is not None
    assert d.status.outcome == Outcome.CANCELED
    assert d.status.queue.reason is None
    assert cond(d.status, "Queued")[0] == ConditionStatus.FALSE
    assert cond(d.status, "Admitted")[:2] == (ConditionStatus.FALSE, admission.NOT_ADMITTED)


def test_without_a_verdict_the_machine_admits_at_once() -> None:
    """No fleet wired (the machine on its own): admitted, and queue.admittedAt still written first."""
    d = decide(pending(), Observation(now=T0 + timedelta(seconds=1)))
    assert d.status.phase == Phase.PROVISIONING
    assert d.status.queue.admitted_at == T0 + timedelta(seconds=1)


def test_a_job_past_pending_without_admitted_at_counts_as_admitted() -> None:
    """Jobs started before quotas existed: Admitted, and they keep their slot."""
    status = TaoBrevJobStatus(phase=Phase.RUNNING, phase_times={"Running": T0})
    d = decide(status, Observation(now=T0, instance_known=True))
    assert cond(d.status, "Admitted")[0] == ConditionStatus.TRUE
