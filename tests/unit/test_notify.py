"""Notifications, the pure parts: which events a status shows, their ids, the CloudEvent and the
Slack message, the signature a receiver checks, the retry schedule and the delivery record."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from controller.api import reasons
from controller.api.notifier import TaoBrevNotifierSpec, TaoBrevNotifierStatus
from controller.api.status import (
    MAX_DELIVERED_KEYS,
    Condition,
    NotificationsRecord,
    ResultsSummary,
    StepPhase,
    TaoBrevJobStatus,
)
from controller.api.vocabulary import ConditionStatus, NotifyFormat, Outcome, Transition
from controller.notify import payloads
from controller.notify.events import JobEvent, event_id, job_events, wanted
from controller.notify.schedule import expired, retry_delay
from controller.notify.signing import signature, verify

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
UID = "0b6f4c1e-5d0a-4c39-9a43-1b0c2b6a7e11"


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def lifecycle(*, recovered: bool = False) -> TaoBrevJobStatus:
    """A job admitted, run (twice, when recovered) and succeeded, built through the records' methods."""
    s = TaoBrevJobStatus()
    s.queue.admit(at(1))
    s.start_attempt("tbj-x-a", created=True).run.started(at(10))
    if recovered:
        s.current.end(at(20), reasons.INSTANCE_LOST, "lost")
        s.current.retire_run()
        s.start_attempt("tbj-x-a-a2", created=True).run.started(at(30))
    s.run_outcome = Outcome.SUCCEEDED
    s.current.end(at(40), reasons.SUCCEEDED, "done")
    s.upload.uploaded(at(50), ResultsSummary(uri="s3://b/x", objects=1, bytes=1))
    s.outcome = Outcome.SUCCEEDED
    s.finished_at = at(60)
    return s


def test_a_whole_lifecycle_shows_admitted_running_succeeded_in_order_with_their_times() -> None:
    events = job_events(lifecycle())
    assert [(e.transition, e.key, e.time) for e in events] == [
        (Transition.ADMITTED, "admitted", at(1)),
        (Transition.RUNNING, "running/1", at(10)),
        (Transition.SUCCEEDED, "succeeded/1", at(50)),
    ]


def test_a_recovery_shows_recovering_and_a_running_per_attempt() -> None:
    keys = [e.key for e in job_events(lifecycle(recovered=True))]
    # attempt 1's run record was retired by the recovery: its Running is no longer shown.
    assert keys == ["admitted", "recovering/2", "running/2", "succeeded/2"]


def test_recovering_is_shown_as_soon_as_the_attempt_ends_before_the_next_one_exists() -> None:
    s = TaoBrevJobStatus()
    s.queue.admit(at(1))
    s.start_attempt("i", created=True).run.started(at(10))
    s.current.end(at(20), reasons.INSTANCE_LOST, "lost")
    s.reason = reasons.RECOVERING
    assert [e.key for e in job_events(s)][-1] == "recovering/2"


def test_budget_exceeded_comes_with_failed_and_canceled_and_stalled_are_shown() -> None:
    s = TaoBrevJobStatus()
    s.queue.admit(at(1))
    s.start_attempt("i", created=True).run.started(at(10))
    s.run_outcome = Outcome.FAILED
    s.reason = reasons.BUDGET_EXCEEDED
    s.current.end(at(20), reasons.BUDGET_EXCEEDED, "spent")
    s.outcome = Outcome.FAILED
    assert [e.transition for e in job_events(s)][-2:] == [Transition.FAILED, Transition.BUDGET_EXCEEDED]

    c = TaoBrevJobStatus(outcome=Outcome.CANCELED, finished_at=at(5))
    assert [e.key for e in job_events(c)] == ["canceled"]

    st = TaoBrevJobStatus(stalled_reason=reasons.INSTANCE_AMBIGUOUS, phase_times={"Provisioning": at(3)})
    st.conditions = [
        Condition(type="Stalled", status=ConditionStatus.TRUE, last_transition_time=at(4), reason="x")
    ]
    (stalled,) = job_events(st)
    assert (stalled.key, stalled.time) == ("stalled/InstanceAmbiguous", at(4))


def test_a_succeeded_run_is_not_announced_before_its_results_are_verified() -> None:
    s = TaoBrevJobStatus()
    s.start_attempt("i", created=True).run.started(at(10))
    s.run_outcome = Outcome.SUCCEEDED  # exited 0, upload still to come: outcome stays unset
    assert [e.transition for e in job_events(s)] == [Transition.RUNNING]


def test_event_ids_are_stable_per_job_and_transition_and_differ_otherwise() -> None:
    a = event_id(UID, "running/1")
    assert a == event_id(UID, "running/1"), "a re-send (after a crash) carries the same id"
    assert uuid.UUID(a).version == 5
    assert (
        len({a, event_id(UID, "running/2"), event_id(UID, "admitted"), event_id("other", "running/1")}) == 4
    )


def test_filters_let_an_event_through_only_when_every_non_empty_one_names_it() -> None:
    e = JobEvent(Transition.FAILED, "failed/1", 1, T0)
    assert wanted(e, [], [])
    assert wanted(e, [Transition.FAILED], [])
    assert not wanted(e, [Transition.SUCCEEDED], [])
    assert not wanted(e, [], [Transition.SUCCEEDED])


def test_each_workflow_step_that_ended_is_a_notification_naming_the_step() -> None:
    """spec.steps: StepSucceeded / StepFailed per step (key stepSucceeded/<step>/<attempt>), with
    the step, its exit code and where its results are in the payload."""
    s = lifecycle()
    s.plan_steps([("train", "train"), ("evaluate", "evaluate"), ("export", "export")])
    train = s.step_record("train")
    train.start(at(10), 1)
    train.exited(0, at(20))
    train.verified(ResultsSummary(uri="s3://b/x/train/", objects=2, bytes=9))
    train.end(at(21), StepPhase.SUCCEEDED, "exited 0")
    evaluate = s.step_record("evaluate")
    evaluate.start(at(22), 1)
    evaluate.exited(3, at(30))
    evaluate.end(at(31), StepPhase.FAILED, "exited 3")
    steps = [e for e in job_events(s) if e.step is not None]
    assert [(e.transition, e.key, e.time) for e in steps] == [
        (Transition.STEP_SUCCEEDED, "stepSucceeded/train/1", at(20)),
        (Transition.STEP_FAILED, "stepFailed/evaluate/1", at(30)),
    ]
    data = _data(s, steps[0])
    assert (data["step"], data["stepExitCode"], data["stepResultsUri"]) == ("train", 0, "s3://b/x/train/")
    assert _data(s, steps[1])["stepExitCode"] == 3
    assert wanted(steps[1], [Transition.STEP_FAILED]) and not wanted(steps[0], [Transition.STEP_FAILED])


def _data(status: TaoBrevJobStatus, event: JobEvent) -> dict[str, object]:
    return payloads.event_data(status, event, namespace="ml", name="train-1", uid=UID, results_uri="s3://b/x")


def test_the_cloudevent_is_structured_cloudevents_1_0_json() -> None:
    s = lifecycle()
    event = job_events(s)[-1]
    body, content_type = payloads.render(NotifyFormat.CLOUD_EVENTS, event.id_for(UID), event, _data(s, event))
    assert content_type.startswith("application/cloudevents+json")
    ce = json.loads(body)
    assert ce["specversion"] == "1.0"
    assert ce["id"] == event_id(UID, "succeeded/1")
    assert ce["type"] == "io.taobrev.job.succeeded"
    assert ce["source"] == "/apis/taobrev.io/v1alpha1/namespaces/ml/taobrevjobs/train-1"
    assert ce["time"] == "2026-12-01T12:00:50Z"
    assert ce["datacontenttype"] == "application/json"
    assert ce["data"]["outcome"] == "Succeeded"
    assert ce["data"]["resultsUri"] == "s3://b/x"
    assert ce["data"]["attempt"] == 1
    assert ce["data"]["uid"] == UID


def test_the_slack_message_is_an_incoming_webhook_payload_with_escaped_text() -> None:
    s = TaoBrevJobStatus(outcome=Outcome.FAILED, reason="TrainingFailed", message="exit 1 <oops> & more")
    s.start_attempt("i", created=True).end(at(9), "TrainingFailed", "x")
    event = job_events(s)[-1]
    body, content_type = payloads.render(NotifyFormat.SLACK, event.id_for(UID), event, _data(s, event))
    assert content_type.startswith("application/json")
    msg = json.loads(body)
    assert set(msg) == {"text", "blocks"}
    assert msg["text"].startswith(":x: TaoBrevJob ml/train-1: Failed")
    (block,) = msg["blocks"]
    assert block["type"] == "section" and block["text"]["type"] == "mrkdwn"
    assert "exit 1 &lt;oops&gt; &amp; more" in block["text"]["text"]
    assert event.id_for(UID) in block["text"]["text"]


def test_a_receiver_verifies_the_signature_over_the_exact_body_and_refuses_tampering_and_replay() -> None:
    key, body, now = b"k3y-0123456789", b'{"id":"x","data":{"a":1}}', 1_767_225_600
    header = signature(key, body, now)
    assert header.startswith(f"t={now},v1=")
    assert verify(key, body, header, now + 10)
    assert not verify(key, body + b" ", header, now), "one byte more: refused"
    assert not verify(b"other-key", body, header, now)
    assert not verify(key, body, header, now + 301), "an old request (a replay) is refused"
    assert not verify(key, body, header.replace(f"t={now}", f"t={now + 1}"), now), "t is signed too"
    assert verify(key, body, f"{header},v1=deadbeef", now), "any matching v1 (key rotation)"
    assert not verify(key, body, "garbage", now)


def test_backoff_doubles_to_its_cap_with_jitter_in_the_upper_half() -> None:
    lows = [retry_delay(n, base=2.0, cap=300.0, rand=0.0) for n in range(1, 11)]
    highs = [retry_delay(n, base=2.0, cap=300.0, rand=0.999999) for n in range(1, 11)]
    assert lows[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert [round(h) for h in highs[:5]] == [2, 4, 8, 16, 32]
    assert max(highs) <= 300.0 and lows[-1] == 150.0
    assert retry_delay(10_000, base=2.0, cap=300.0, rand=0.5) == 225.0


def test_an_event_is_given_up_counted_from_its_transition() -> None:
    assert not expired(T0, T0 + timedelta(seconds=86400), 86400)
    assert expired(T0, T0 + timedelta(seconds=86401), 86400)


def test_the_delivery_record_is_a_bounded_union_per_notifier() -> None:
    r = NotificationsRecord()
    r.confirm("slack", {"admitted"})
    r.confirm("slack", {"running/1", "admitted"})
    r.confirm("ce", {"admitted"})
    assert r.delivered_to("slack") == {"admitted", "running/1"}
    assert r.delivered_to("ce") == {"admitted"}
    assert r.delivered_to("none") == frozenset()
    r.confirm("slack", {f"k{i:03}" for i in range(100)})
    assert len(r.delivered_to("slack")) == MAX_DELIVERED_KEYS


def test_notifier_spec_defaults_and_status_never_grows_past_its_error_text() -> None:
    spec = TaoBrevNotifierSpec.model_validate({"secretRef": {"name": "hook"}})
    assert (spec.format, spec.jobs.value, spec.events, spec.timeout_seconds) == (
        NotifyFormat.CLOUD_EVENTS,
        "All",
        [],
        10,
    )
    with pytest.raises(ValueError, match="secretRef"):
        TaoBrevNotifierSpec.model_validate({})
    st = TaoBrevNotifierStatus()
    st.failed(T0, "x" * 1000)
    st.failed(T0, "HTTP 500")
    assert st.consecutive_failures == 2
    st.delivered(T0, "id type")
    assert st.consecutive_failures == 0


def test_every_notification_metric_is_documented_with_bounded_labels() -> None:
    from pathlib import Path

    from prometheus_client import CollectorRegistry

    from controller.notify.metrics import NotifyMetrics

    doc = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text()
    registry = CollectorRegistry()
    NotifyMetrics(registry)
    names = {m.name for m in registry.collect()}
    assert len(names) == 8
    for name in names:
        assert f"`{name}`" in doc or f"`{name}_total`" in doc, name
    labels = {k for m in registry.collect() for s in m.samples for k in s.labels if k != "le"}
    assert labels <= {"transition", "format", "reason", "result"}, "never a job, notifier or URL label"
