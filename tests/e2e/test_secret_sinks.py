"""Secrets never surface (issue 10.1), against the real control plane.

Each Secret value the operator reads is pushed through every path that can carry text - brev CLI
error output, docker error output, aws error output, the training log tail, exception text - and
must appear in none of the sinks a user without Secret access can read: Events, status, kopf's
annotations, the operator's log, /metrics. Each path is also checked to have carried its text to
a sink (masked), so the test cannot pass by never exercising it.

The simulator echoes text through existing knobs: `create_fails`, `pull_fails` and `upload_fails`
put a chosen string into brev's, docker's and aws's error output; for the training log, one
Secret's value is a string the TAO stand-in prints (its final loss line), so the log tail carries
a registered Secret value exactly as a training script printing its env would.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from tests.brevsim.harness import BrevSim
from tests.fixtures.operator import HF_TOKEN, NGC_KEY, S3_KEY_ID, S3_SECRET, SECRET_VALUES, Stack
from tests.status_paths import run, teardown

# What the TAO stand-in prints for the last of 3 epochs: "Epoch 3/3: loss=0.5774 lr=0.0001".
LOG_SECRET = "loss=0.5774"
ALL_SECRETS = (*SECRET_VALUES, LOG_SECRET)
MASK = "***"


class Sinks:
    """Everything a user without Secret access can read about the job, collected as it runs."""

    def __init__(self, stack: Stack, name: str) -> None:
        self.stack = stack
        self.name = name
        self.objects: list[dict[str, Any]] = []

    def snapshot(self) -> dict[str, Any] | None:
        obj = self.stack.get(self.name)
        if obj is not None:
            self.objects.append(obj)
        return obj

    def wait(self, what: str, predicate: Any, timeout: float = 120) -> dict[str, Any]:
        """Poll (snapshotting status and annotations each time) until predicate(status) holds."""
        found = self.stack.wait_for(
            self.name,
            lambda o: self._seen(o) and predicate(dict((o or {}).get("status") or {})),
            what,
            timeout,
        )
        return dict((found or {}).get("status") or {})

    def _seen(self, obj: dict[str, Any] | None) -> bool:
        if obj is not None:
            self.objects.append(obj)
        return True

    def texts(self) -> dict[str, str]:
        events = self.stack.kubectl("get", "events", "-n", self.stack.namespace, "-o", "json").stdout
        with urllib.request.urlopen(self.stack.operator.metrics_url, timeout=10) as resp:  # noqa: S310
            metrics = resp.read().decode()
        return {
            "events": events,
            "status and annotations": "\n".join(json.dumps(o) for o in self.objects),
            "operator log": self.stack.operator.log_text(),
            "/metrics": metrics,
        }


def statuses_with(sinks: Sinks, needle: str) -> list[str]:
    return [
        json.dumps(o.get("status") or {})
        for o in sinks.objects
        if needle in json.dumps(o.get("status") or {})
    ]


def test_every_secret_through_every_text_path_reaches_no_sink_unmasked(stack: Stack) -> None:
    name = "sinks"
    stack.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "logmark"},
            "stringData": {"V": LOG_SECRET},
        }
    )
    job = stack.job_manifest(name)
    job["spec"]["credentials"]["extraEnv"].append(
        {"name": "LOG_MARK", "secretKeyRef": {"name": "logmark", "key": "V"}}
    )
    sinks = Sinks(stack, name)

    # brev CLI error output (and the exception text built from it) carrying the NGC key and the
    # operator's own Brev API key.
    stack.sim.set_faults(create_fails=f"quota exceeded for {NGC_KEY} key={BrevSim.API_KEY}")
    stack.apply(job)
    sinks.wait("the create failure in status", lambda s: "Internal Server Error" in (s.get("message") or ""))
    # docker error output carrying the S3 secret key and an extra-env token.
    stack.sim.clear_faults()
    stack.sim.set_faults(pull_fails=f"toomanyrequests: {S3_SECRET} {HF_TOKEN}")
    sinks.wait("the pull failure in status", lambda s: "toomanyrequests" in (s.get("message") or ""))
    # aws error output carrying the S3 key id and secret key.
    stack.sim.clear_faults()
    stack.sim.set_faults(upload_fails=f"AccessDenied for {S3_KEY_ID} {S3_SECRET}")
    # After the run ended, transient trouble goes to teardown.message (message keeps why it ended).
    sinks.wait("the upload failure in status", lambda s: "PutObject" in (teardown(s).get("message") or ""))
    stack.sim.clear_faults()
    status = sinks.wait("the job to finish", lambda s: bool(s.get("finishedAt")), timeout=180)

    # Deleting runs the teardown handler (kopf progress annotations); snapshot until it is gone.
    stack.kubectl("delete", "tbj", name, "-n", stack.namespace, "--wait=false")
    stack.wait_for(name, lambda o: sinks._seen(o) and o is None, "the object to be deleted")

    # Each path carried its text to status, masked (so the assertions below are not vacuous).
    assert any(MASK in s for s in statuses_with(sinks, "Internal Server Error")), "brev output reached status"
    assert any(MASK in s for s in statuses_with(sinks, "toomanyrequests")), "docker output reached status"
    assert any(MASK in s for s in statuses_with(sinks, "PutObject")), "aws output reached status"
    assert any("Epoch 3/3: *** lr=0.0001" in line for line in run(status).get("logTail", [])), status
    texts = sinks.texts()
    assert "toomanyrequests" in texts["events"], "a Warning Event carried the docker error"
    assert stack.live_instances() == []

    leaks = [(where, secret) for where, text in texts.items() for secret in ALL_SECRETS if secret in text]
    assert leaks == []
