"""controller.handlers: what leaves through kopf (Events, TemporaryError text stored in the progress
annotation) is redacted, the daemon waits what each pass asks for, and passes feed the watchdog.

kopf's Event poster is fed through its own queue (context variables it reads), so the test reads
exactly what kopf would post; the handlers are called directly with a hand-built app.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import kopf
import pytest
from kopf._core.engines import posting

from controller import handlers
from controller.api.naming import CANCEL_ANNOTATION
from controller.fleet.leadership import SoleLeader
from controller.handlers import FINALIZER_POLL
from controller.observability.health import Watchdog
from controller.observability.logs import forget_registered_secrets, register_secret
from controller.reconciler import FINALIZER, JobRef
from tests.unit.kopf_handlers import drive, teardown

SECRET = "registered-Secret-value-42"
BODY: kopf.RawBody = {
    "apiVersion": "taobrev.io/v1alpha1",
    "kind": "TaoBrevJob",
    # as kopf hands it over once its finalizer patch is in
    "metadata": {"namespace": "ns", "name": "job", "uid": "u-1", "finalizers": [FINALIZER]},
    "spec": {},
}


@pytest.fixture(autouse=True)
def _secret() -> Any:
    forget_registered_secrets()
    register_secret(SECRET)
    yield
    forget_registered_secrets()


def test_events_are_redacted_before_kopf_queues_them() -> None:
    async def scenario() -> posting.K8sEvent:
        queue: asyncio.Queue[posting.K8sEvent] = asyncio.Queue()
        posting.settings_var.set(kopf.OperatorSettings())
        posting.event_queue_loop_var.set(asyncio.get_running_loop())
        posting.event_queue_var.set(queue)
        ref = JobRef.from_body(BODY)
        handlers._post_event(
            ref, "Warning", "PullFailed", f"docker said {SECRET} and nvapi-ABCDEFGHIJKLMNOPQRST"
        )
        return queue.get_nowait()

    event = asyncio.run(scenario())
    assert SECRET not in event.message
    assert "nvapi-ABCDEFGHIJKLMNOPQRST" not in event.message
    assert event.message.startswith("docker said ***")
    assert event.reason == "PullFailed"


@dataclass
class FakeReconciler:
    """Answers each reconcile with the next item: an exception to raise or a delay to return."""

    answers: list[BaseException | float | None]
    forgotten: list[str] = field(default_factory=list)
    refs: list[JobRef] = field(default_factory=list)

    async def reconcile(self, ref: JobRef) -> float | None:
        self.refs.append(ref)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def forget(self, ref: JobRef) -> None:
        self.forgotten.append(ref.name)

    async def rest(self, ref: JobRef, delay: float, wait: Callable[[float], Awaitable[object]]) -> None:
        await wait(delay)


@dataclass
class FakeRecorder:
    errors: list[str] = field(default_factory=list)

    def reconcile_error(self, reason: str) -> None:
        self.errors.append(reason)


def fake_app(reconciler: FakeReconciler) -> Any:
    watchdog = Watchdog(grace=60, pass_ceiling=600)
    watchdog.started = True
    settings = SimpleNamespace(poll_interval=0.01, backoff_max=0.05, leader_lease_duration=15)
    return SimpleNamespace(
        reconciler=reconciler,
        watchdog=watchdog,
        settings=settings,
        recorder=FakeRecorder(),
        leadership=SoleLeader(),  # the lone-replica gate: always leading
    )


def test_teardown_unexpected_error_is_redacted() -> None:
    # reconcile() retries transient failures itself: what escapes it is a bug, and leaves through
    # kopf's progress annotation redacted, with the retry the watchdog expects.
    app = fake_app(FakeReconciler([RuntimeError(f"bug with {SECRET}")]))
    with pytest.raises(kopf.TemporaryError) as info:
        asyncio.run(teardown(body=kopf.Body(BODY), memo=kopf.Memo(app=app)))
    assert str(info.value) == "RuntimeError: bug with ***"
    assert app.watchdog.report() == (True, {"ok": True, "jobs": 1})


def test_teardown_done_releases_and_forgets() -> None:
    app = fake_app(FakeReconciler([0.0, None]))
    asyncio.run(teardown(body=kopf.Body(BODY), memo=kopf.Memo(app=app)))
    assert app.reconciler.forgotten == ["job"]
    assert app.watchdog.report() == (True, {"ok": True, "jobs": 0})


class Stopped:
    """Stands in for kopf.DaemonStopped: falsy until set; wait() returns at once."""

    def __init__(self) -> None:
        self.waits: list[float | None] = []

    def __bool__(self) -> bool:
        return False

    async def wait(self, delay: float | None = None) -> None:
        self.waits.append(delay)


def test_daemon_waits_the_delay_each_pass_asks_for() -> None:
    # The backoff of a transiently failed pass is the reconciler's (tests/unit/test_backoff.py):
    # the daemon only waits what reconcile() returns, and ends when it returns None.
    app = fake_app(FakeReconciler([0.01, 0.02, 0.04, 0.5, None]))
    stopped = Stopped()
    asyncio.run(drive(stopped=stopped, body=kopf.Body(BODY), memo=kopf.Memo(app=app)))
    assert stopped.waits == [0.01, 0.02, 0.04, 0.5]
    assert app.watchdog.report() == (True, {"ok": True, "jobs": 0})


class Patching(Stopped):
    """A daemon's wait while kopf's finalizer patch is on the way: it lands after `after` waits."""

    def __init__(self, raw: dict[str, Any], after: int) -> None:
        super().__init__()
        self.raw, self.after = raw, after

    async def wait(self, delay: float | None = None) -> None:
        await super().wait(delay)
        if len(self.waits) == self.after:
            self.raw["metadata"]["finalizers"] = [FINALIZER]


def _new_object() -> dict[str, Any]:
    return {**BODY, "metadata": {k: v for k, v in BODY["metadata"].items() if k != "finalizers"}}


def test_the_first_pass_waits_for_kopfs_finalizer_on_the_live_body() -> None:
    # Without it the pass could create nothing: it would write "waiting for the finalizer" and
    # come back a second later (one more status write and a second more per new job).
    raw = _new_object()
    app = fake_app(FakeReconciler([None]))
    stopped = Patching(raw, after=3)
    asyncio.run(drive(stopped=stopped, body=kopf.Body(raw), memo=kopf.Memo(app=app)))  # type: ignore[arg-type]
    assert stopped.waits == [FINALIZER_POLL] * 3
    assert len(app.reconciler.refs) == 1 and app.reconciler.refs[0].has_finalizer


def test_without_a_finalizer_the_passes_go_on_after_the_bounded_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    # No patch permission: kopf never adds it. The passes then say so in status themselves.
    monkeypatch.setattr(handlers, "FINALIZER_WAIT", 0.05)
    raw = _new_object()
    app = fake_app(FakeReconciler([None]))
    stopped = Stopped()
    asyncio.run(drive(stopped=stopped, body=kopf.Body(raw), memo=kopf.Memo(app=app)))  # type: ignore[arg-type]
    assert stopped.waits and set(stopped.waits) == {FINALIZER_POLL}
    assert len(app.reconciler.refs) == 1 and not app.reconciler.refs[0].has_finalizer


def test_a_finished_job_gets_no_daemon_and_keeps_its_spend_gauges() -> None:
    """A finished job (a new run is a new object) gets no daemon (kopf's `when` filter), unless
    its daemon is the one running the pass that finished it; its spend gauges come from its
    stored status at every watch event (issue 30: 10,000 objects; the spend panel survives a
    restart)."""
    from controller.handlers import _DRIVING, _drives, shed_unused_metadata

    seen: list[tuple[str, str, float | None]] = []

    class Reconciler:
        def finished_seen(self, namespace: str, name: str, status: Any) -> None:
            seen.append((namespace, name, status.get("billedSeconds")))

    status = {"finishedAt": "2026-12-05T12:00:00Z", "billedSeconds": 42}
    raw: Any = {"metadata": {"name": "a", "namespace": "ml", "uid": "u"}, "status": status}
    body = kopf.Body(raw)
    assert _drives(body=body) is False
    _DRIVING.add("u")  # its own daemon wrote finishedAt: not cancelled under it
    try:
        assert _drives(body=body) is True
    finally:
        _DRIVING.discard("u")
    running: Any = {"metadata": {"name": "b", "namespace": "ml", "uid": "v"}, "status": {"phase": "Running"}}
    assert _drives(body=kopf.Body(running)) is True
    memo = kopf.Memo()
    memo["app"] = SimpleNamespace(reconciler=Reconciler(), reaper=None)
    asyncio.run(cast(Any, shed_unused_metadata)(body=body, memo=memo, event={"type": None}))
    assert seen == [("ml", "a", 42)]
    # Its deletion drops it (a gauge for a job gone would come back from its last body).
    asyncio.run(cast(Any, shed_unused_metadata)(body=body, memo=memo, event={"type": "DELETED"}))
    assert seen == [("ml", "a", 42)]


def test_a_finished_jobs_kept_body_is_emptied_unless_something_still_reads_it() -> None:
    """kopf keeps every object's last body until the next event replaces it, daemon or not: a
    finished job's is emptied to what kopf's filters read (issue 30: 9,000 finished objects),
    but not while its own daemon runs, it is being deleted, or a cancel handler will read it."""
    from controller.handlers import _DRIVING, _drives, shed_unused_metadata

    class Reconciler:
        def finished_seen(self, namespace: str, name: str, status: Any) -> None:
            pass

        def notice(self, ref: Any) -> None:
            pass

    memo = kopf.Memo()
    memo["app"] = SimpleNamespace(reconciler=Reconciler(), reaper=None)

    def job(**meta: Any) -> Any:
        return {
            "metadata": {"name": "a", "namespace": "ml", "uid": "u", "finalizers": [FINALIZER], **meta},
            "spec": {"task": {"action": "train"}, "ttlSecondsAfterFinished": 60},
            "status": {"finishedAt": "2026-12-05T12:00:00Z", "phase": "Deleted", "lastLogLines": ["x"] * 20},
        }

    def shed(raw: Any) -> Any:
        body = kopf.Body(raw)
        asyncio.run(cast(Any, shed_unused_metadata)(body=body, memo=memo, event={"type": "MODIFIED"}))
        return body

    body = shed(job())
    assert dict(body.spec) == {} and dict(body.status) == {"finishedAt": "2026-12-05T12:00:00Z"}
    assert body.metadata["finalizers"] == [FINALIZER] and _drives(body=body) is False
    for kept in (
        job(deletionTimestamp="2026-12-05T13:00:00Z"),
        job(annotations={CANCEL_ANNOTATION: "now"}),
    ):
        assert shed(kept).spec["task"] == {"action": "train"}
    _DRIVING.add("u")
    try:
        assert shed(job()).status["phase"] == "Deleted"
    finally:
        _DRIVING.discard("u")
    running = job()
    del running["status"]["finishedAt"]
    assert shed(running).spec["task"] == {"action": "train"}


def test_no_handler_is_an_index() -> None:
    """kopf holds every handler of an operator with an index until every object's index ran,
    through one condition that wakes every waiting object at each one indexed: quadratic in the
    objects (issue 30: minutes of CPU at 10,000 before the first pass). The operator has none."""
    import controller.handlers  # noqa: F401 - registers the handlers

    registry = kopf.get_default_registry()
    assert not any(registry._indexing.get_all_handlers())


def test_the_shedding_handlers_success_is_not_logged_but_its_failure_is() -> None:
    """kopf logs an event handler's success at INFO on every watch event of every job."""
    import logging

    from controller.handlers import _QuietShedding

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, msg, None, None)

    quiet = _QuietShedding()
    assert not quiet.filter(record("Handler 'shed-unused-metadata' succeeded."))
    assert quiet.filter(record("Handler 'shed-unused-metadata' failed with an exception. Will retry."))
    assert quiet.filter(record("Handler 'cancel-annotation' succeeded."))
