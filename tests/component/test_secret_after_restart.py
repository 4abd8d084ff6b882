"""Issue 25 scenario 6: a new operator process masks only the secrets it has loaded. Its first pass
on a job that is stopping (a cancel) or whose run ended during downtime waits for the exit and
brings back the log tail without needing a Secret for the step; the training printed a secret
value, and that tail must never reach status (or an Event) unmasked.

The fake Kubernetes stores status as given; the real `KubeAccess.patch_status` redacts every
string at the sink, so the test puts the same sink (`redact_status`) in front of the fake."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from controller.brev.workload import ExitInfo
from controller.kube.access import redact_status
from controller.lifecycle.phases import Phase
from controller.observability.logs import forget_registered_secrets
from tests.fakes.brev import Faults
from tests.fakes.harness import NAMESPACE, Harness
from tests.fakes.workload import FakeWorkload
from tests.status_paths import run as run_of

# Unique to this file: a value registered by another test in this process must not mask it.
PRINTED = "s6-printed-s3-secret-value-7f3a"


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    forget_registered_secrets()
    yield
    forget_registered_secrets()


@pytest.fixture(autouse=True)
def _training_prints_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """TAO (or the user's script) echoes its environment: the tail carries the S3 secret key."""
    original = FakeWorkload.wait_exit_with_tail

    async def wait(self: FakeWorkload, timeout_s: int, *args: Any, **kwargs: Any) -> ExitInfo:
        info = await original(self, timeout_s, *args, **kwargs)
        return ExitInfo(info.code, info.finished_at, (*info.tail, f"AWS_SECRET_ACCESS_KEY? {PRINTED}"))

    monkeypatch.setattr(FakeWorkload, "wait_exit_with_tail", wait)


def _redacting_sink(h: Harness) -> None:
    fake_patch = h.kube.patch_status

    async def patch_status(namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        return await fake_patch(namespace, name, redact_status(status))

    h.kube.patch_status = patch_status  # type: ignore[method-assign]


def _harness() -> Harness:
    h = Harness(faults=Faults(run_s=3000))
    # Another key than the harness's own, so only this job's Secret can mask it.
    h.kube.add_secret(
        NAMESPACE, "s3", {"AWS_ACCESS_KEY_ID": b"AKIAFAKE", "AWS_SECRET_ACCESS_KEY": PRINTED.encode()}
    )
    _redacting_sink(h)
    return h


def _leaks(h: Harness, since: int) -> list[str]:
    texts = [repr(w.status) for w in h.kube.writes[since:]] + [e.message for e in h.events.events]
    return [t for t in texts if PRINTED in t]


def _new_process(h: Harness) -> int:
    """The operator restarts: its registered secrets and caches are gone."""
    forget_registered_secrets()
    h.restart()
    return len(h.kube.writes)


def test_first_pass_of_a_new_process_on_a_stopping_job_masks_the_tail() -> None:
    h = _harness()
    assert asyncio.run(h.run_until(lambda h: h.phase == str(Phase.RUNNING)))
    since = _new_process(h)
    h.delete_job()  # the cancel: the delete handler's first pass stops and waits for the exit
    asyncio.run(h.run(seconds=30, max_passes=3))
    assert any(run_of(w.status).get("logTail") for w in h.kube.writes[since:]), "no tail was written"
    assert _leaks(h, since) == []


def test_first_pass_of_a_new_process_after_downtime_masks_the_tail() -> None:
    h = _harness()
    assert asyncio.run(h.run_until(lambda h: h.phase == str(Phase.RUNNING)))
    since = _new_process(h)
    h.clock.advance(3600)  # down past runningSeconds: the new process looks before judging
    asyncio.run(h.run(seconds=30, max_passes=3))
    assert any(run_of(w.status).get("logTail") for w in h.kube.writes[since:]), "no tail was written"
    assert _leaks(h, since) == []


def test_a_tail_the_new_process_cannot_mask_is_withheld() -> None:
    """The namespace is being deleted: its Secrets went first, so the value is unknown."""
    h = _harness()
    assert asyncio.run(h.run_until(lambda h: h.phase == str(Phase.RUNNING)))
    since = _new_process(h)
    del h.kube.secrets[(NAMESPACE, "s3")]
    h.delete_job()
    asyncio.run(h.run(seconds=30, max_passes=3))
    assert [w for w in h.kube.writes[since:] if "exitCode" in run_of(w.status)], "the exit was not seen"
    assert _leaks(h, since) == []
