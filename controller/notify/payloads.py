"""What a notifier is sent (PURE): a CloudEvents 1.0 structured-mode JSON event, or a Slack
incoming-webhook message. Bytes are built once per delivery; the signature covers them exactly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from controller.api.status import TaoBrevJobStatus
from controller.api.timestamps import format_time
from controller.api.vocabulary import NotifyFormat, Transition
from controller.notify.events import JobEvent

CLOUDEVENTS_CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
JSON_CONTENT_TYPE = "application/json; charset=utf-8"
SPEC_VERSION = "1.0"
_MESSAGE_CHARS = 1024
_SLACK_EMOJI = {
    Transition.ADMITTED: ":inbox_tray:",
    Transition.RUNNING: ":arrow_forward:",
    Transition.SUCCEEDED: ":white_check_mark:",
    Transition.FAILED: ":x:",
    Transition.CANCELED: ":no_entry_sign:",
    Transition.RECOVERING: ":repeat:",
    Transition.BUDGET_EXCEEDED: ":money_with_wings:",
    Transition.STALLED: ":warning:",
    Transition.STEP_SUCCEEDED: ":heavy_check_mark:",
    Transition.STEP_FAILED: ":heavy_multiplication_x:",
}


def source(namespace: str, name: str) -> str:
    """The CloudEvents source: the job's API path (a URI-reference)."""
    return f"/apis/taobrev.io/v1alpha1/namespaces/{namespace}/taobrevjobs/{name}"


def event_data(
    status: TaoBrevJobStatus, event: JobEvent, *, namespace: str, name: str, uid: str, results_uri: str | None
) -> dict[str, Any]:
    """The job facts a receiver needs, as of the status the event was derived from."""
    data: dict[str, Any] = {
        "namespace": namespace,
        "name": name,
        "uid": uid,
        "transition": event.transition.value,
        "attempt": event.attempt,
        "phase": str(status.phase) if status.phase else None,
        "outcome": str(status.outcome) if status.outcome else None,
        "reason": status.reason,
        "message": (status.message or "")[:_MESSAGE_CHARS] or None,
        "failureClass": str(status.failure_class) if status.failure_class else None,
        "stalledReason": status.stalled_reason if event.transition == Transition.STALLED else None,
        "jobId": status.job_id,
        "resultsUri": results_uri,
        "billedSeconds": status.billed_seconds,
        "estimatedCostDollars": status.estimated_cost_dollars,
    }
    if event.step is not None:  # a workflow step's transition: which step, how it exited, where
        record = next((s for s in status.steps if s.name == event.step), None)
        data["step"] = event.step
        data["stepExitCode"] = record.exit_code if record is not None else None
        results = record.results if record is not None else None
        data["stepResultsUri"] = results.uri if results is not None else None
    return {k: v for k, v in data.items() if v is not None}


def _dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def cloudevent(event_id: str, event: JobEvent, data: Mapping[str, Any]) -> bytes:
    """A structured-mode CloudEvent (application/cloudevents+json)."""
    return _dumps(
        {
            "specversion": SPEC_VERSION,
            "id": event_id,
            "source": source(str(data["namespace"]), str(data["name"])),
            "type": event.ce_type,
            "subject": str(data["name"]),
            "time": format_time(event.time),
            "datacontenttype": "application/json",
            "data": dict(data),
        }
    )


def _slack_escape(text: str) -> str:
    # Slack's mrkdwn control characters (api.slack.com "Escaping text").
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_message(event_id: str, event: JobEvent, data: Mapping[str, Any]) -> bytes:
    """A Slack incoming-webhook message: a one-line `text` (notifications, fallbacks) and one
    section block with the details."""
    attempt = f" (attempt {event.attempt})" if event.attempt else ""
    title = (
        f"{_SLACK_EMOJI[event.transition]} TaoBrevJob {data['namespace']}/{data['name']}: "
        f"{event.transition.value}{attempt}"
    )
    lines = [f"*{_slack_escape(title)}*"]
    if data.get("reason"):
        lines.append(f"reason: `{_slack_escape(str(data['reason']))}`")
    if data.get("failureClass"):
        lines.append(f"failure class: {_slack_escape(str(data['failureClass']))}")
    if data.get("message"):
        lines.append(_slack_escape(str(data["message"])))
    if data.get("resultsUri") and event.transition == Transition.SUCCEEDED:
        lines.append(f"results: {_slack_escape(str(data['resultsUri']))}")
    lines.append(f"event {event_id} at {format_time(event.time)}")
    text = "\n".join(lines)
    return _dumps(
        {
            "text": _slack_escape(title),
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
        }
    )


def render(fmt: NotifyFormat, event_id: str, event: JobEvent, data: Mapping[str, Any]) -> tuple[bytes, str]:
    """(body, content type) for a notifier of format `fmt`."""
    if fmt == NotifyFormat.SLACK:
        return slack_message(event_id, event, data), JSON_CONTENT_TYPE
    return cloudevent(event_id, event, data), CLOUDEVENTS_CONTENT_TYPE
