"""Notifications end to end: the real control plane, the operator process and the Brev simulator,
and a real receiver on loopback (tests/fixtures/webhook.py) that checks each request's
Taobrev-Signature and drops ids it has seen. A whole lifecycle arrives (admitted, running,
succeeded; a failed job's failed), none lost across a receiver outage spanning an operator
SIGKILL, and nothing secret reaches the operator's log or the objects' status."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller.notify.events import event_id
from tests.fixtures.operator import Stack
from tests.fixtures.webhook import Receiver


@pytest.fixture
def operator_env() -> dict[str, str]:
    # Retries every second or so instead of every few minutes; the notifier's status soon after.
    return {
        "TAOBREV_NOTIFY_BACKOFF_BASE": "0.3",
        "TAOBREV_NOTIFY_BACKOFF_MAX": "1",
        "TAOBREV_NOTIFY_STATUS_INTERVAL": "0.5",
    }


def add_notifier(stack: Stack, receiver: Receiver, name: str = "ops") -> None:
    stack.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-hook"},
            "stringData": {"url": receiver.url, "hmacKey": receiver.key.decode()},
        }
    )
    stack.apply(
        {
            "apiVersion": "taobrev.io/v1alpha1",
            "kind": "TaoBrevNotifier",
            "metadata": {"name": name},
            "spec": {"secretRef": {"name": f"{name}-hook"}},
        }
    )


def types_of(receiver: Receiver, job: str) -> list[str]:
    return [str(e["type"]).rsplit(".", 1)[-1] for e in receiver.events.values() if e["data"]["name"] == job]


def notifier(stack: Stack, name: str) -> dict[str, Any]:
    out = stack.kubectl("get", "taobrevnotifier", name, "-n", stack.namespace, "-o", "json").stdout
    return dict(json.loads(out))


def test_a_lifecycle_arrives_signed_and_whole_across_a_receiver_outage_and_an_operator_sigkill(
    stack: Stack, receiver: Receiver
) -> None:
    add_notifier(stack, receiver)
    receiver.mode = "fail"  # the outage: every request answered 500
    name = "notified"
    stack.apply(stack.job_manifest(name, simulation={"epochs": 3, "epoch_seconds": 400}))
    running = stack.wait_for(
        name, lambda o: ((o or {}).get("status") or {}).get("phase") == "Running", "Running"
    )
    uid = (running or {})["metadata"]["uid"]
    # In order per job and notifier: the running event waits behind the admitted one, which the
    # receiver keeps refusing; both exist (the job runs) when the operator dies.
    admitted_id = event_id(uid, "admitted")
    receiver.wait_for(
        lambda r: sum(q.json().get("id") == admitted_id for q in r.requests) >= 2,
        "failed tries of the admitted event",
    )
    assert not receiver.events, "nothing was accepted during the outage"
    stack.operator.kill()  # SIGKILL: what the old process had in memory is gone
    receiver.mode = "ok"
    stack.operator.start()
    stack.wait_finished(name)
    receiver.wait_for(lambda r: "succeeded" in types_of(r, name), "the succeeded event", timeout=120)
    assert types_of(receiver, name) == ["admitted", "running", "succeeded"]
    ids = [e["id"] for e in receiver.events.values()]
    assert ids == [event_id(uid, k) for k in ("admitted", "running/1", "succeeded/1")]
    tries = [q for q in receiver.requests if q.json().get("id") == admitted_id]
    assert len(tries) >= 2 and all(q.signed for q in receiver.requests), "retried, every try signed"

    # Delivered is recorded in the job's status, so a later restart does not send them again.
    recorded = stack.wait_for(
        name,
        lambda o: (
            len(
                ((o or {}).get("status") or {})
                .get("notifications", {})
                .get("sinks", [{}])[0]
                .get("delivered", [])
            )
            == 3
        ),
        "the delivery record",
    )
    assert (recorded or {})["status"]["notifications"]["sinks"][0]["notifier"] == "ops"
    st = notifier(stack, "ops").get("status") or {}
    assert st.get("lastDeliveredAt")

    # A failed job: its Failed arrives too (exit 1 is not retried).
    stack.apply(stack.job_manifest("broken", simulation={"exit_code": 1}))
    assert stack.wait_finished("broken")["outcome"] == "Failed"
    receiver.wait_for(lambda r: "failed" in types_of(r, "broken"), "the failed event", timeout=120)
    failed = next(
        e for e in receiver.events.values() if e["data"]["name"] == "broken" and "failed" in e["type"]
    )
    assert failed["data"]["failureClass"] == "Program"
    assert types_of(receiver, "broken") == ["admitted", "running", "failed"]

    # Nothing secret left the operator: not in its log, not in any status.
    log = stack.operator.log_text()
    for secret in (receiver.url, receiver.key.decode()):
        assert secret not in log
        assert secret not in json.dumps(notifier(stack, "ops"))
        assert secret not in json.dumps(stack.get(name))
