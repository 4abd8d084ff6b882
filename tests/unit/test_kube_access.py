"""controller.kube.access.KubeAccess against injected fakes of the kubernetes API classes.

The fakes raise what the real client raises (ApiException with a status, urllib3 errors); the
real API server is exercised by tests/e2e/test_controlplane_faults.py and test_secret_sinks.py.
"""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.rest import ApiException
from urllib3.exceptions import NewConnectionError, ReadTimeoutError

from controller.api.errors import (
    KubeAccessDenied,
    KubeUnavailable,
    PermanentError,
    SecretAccessDenied,
    SecretNotAllowed,
    StatusRejected,
    TransientError,
)
from controller.kube.access import CALL_THREADS, USABLE_LABEL, KubeAccess, minimal_status
from controller.observability.logs import MASK, forget_registered_secrets, register_secret
from tests import status_paths

SECRET_VALUE = "s3cr3t-VALUE-registered-0123"


@pytest.fixture(autouse=True)
def _registry() -> Iterator[None]:
    forget_registered_secrets()
    yield
    forget_registered_secrets()


class FakeCore:
    """CoreV1Api.read_namespaced_secret: answers from `secrets` or raises `error`."""

    def __init__(self, secrets: dict[str, dict[str, Any]] | None = None, error: BaseException | None = None):
        self.secrets = secrets or {}
        self.error = error
        self.timeouts: list[Any] = []

    def read_namespaced_secret(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.timeouts.append(kwargs.get("_request_timeout"))
        if self.error is not None:
            raise self.error
        found = self.secrets.get(f"{namespace}/{name}")
        if found is None:
            raise ApiException(status=404, reason="Not Found")
        data = {k: base64.b64encode(v.encode()).decode() for k, v in found.get("data", {}).items()}
        return SimpleNamespace(data=data, metadata=SimpleNamespace(labels=found.get("labels")))


class FakeCustom:
    """CustomObjectsApi status patches: `answers` is consumed one per call (None = accepted)."""

    def __init__(self, answers: list[BaseException | None]):
        self.answers = list(answers)
        self.bodies: list[dict[str, Any]] = []
        self.timeouts: list[Any] = []

    def patch_namespaced_custom_object_status(self, *args: Any, **kwargs: Any) -> Unread:
        self.timeouts.append(kwargs.get("_request_timeout"))
        self.bodies.append(args[5])
        answer = self.answers.pop(0) if self.answers else None
        if answer is not None:
            raise answer
        assert kwargs.get("_preload_content") is False  # the answer is never parsed
        return Unread()


class Unread:
    """An answer left unread (urllib3's response): it must go back to the pool."""

    def __init__(self) -> None:
        self.released = False

    def drain_conn(self) -> None:
        pass

    def release_conn(self) -> None:
        self.released = True


def access(core: Any = None, custom: Any = None, **kwargs: Any) -> KubeAccess:
    return KubeAccess(core=core or FakeCore(), custom=custom or FakeCustom([]), request_timeout=7, **kwargs)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ------------------------------------------------------------------ read_secret


def test_read_secret_decodes_and_passes_a_request_timeout() -> None:
    core = FakeCore({"ns/s3": {"data": {"k": "v"}}})
    assert run(access(core).read_secret("ns", "s3")) == {"k": b"v"}
    assert core.timeouts == [(7, 7)]


def test_read_secret_missing_is_none() -> None:
    assert run(access(FakeCore()).read_secret("ns", "nope")) is None


def test_read_secret_403_is_transient_and_names_the_rbac_fix() -> None:
    core = FakeCore(error=ApiException(status=403, reason="Forbidden"))
    with pytest.raises(SecretAccessDenied) as info:
        run(access(core).read_secret("team-a", "ngc"))
    assert isinstance(info.value, TransientError)
    assert "team-a/ngc" in str(info.value)
    assert "grant `get` on secrets in namespace team-a" in str(info.value)
    assert info.value.reason == "SecretAccessDenied"


@pytest.mark.parametrize("status", [401, 429, 500, 503, 504, 400])
def test_read_secret_api_errors_are_transient(status: int) -> None:
    core = FakeCore(error=ApiException(status=status, reason="Whatever"))
    with pytest.raises(KubeUnavailable) as info:
        run(access(core).read_secret("ns", "s3"))
    assert str(status) in str(info.value)
    if status == 401:
        assert isinstance(info.value, KubeAccessDenied)


@pytest.mark.parametrize(
    "error",
    [
        ReadTimeoutError(None, "/api", "Read timed out. (read timeout=7)"),  # type: ignore[arg-type]
        NewConnectionError(None, "Failed to establish a new connection: [Errno 111] refused"),  # type: ignore[arg-type]
        ConnectionResetError(104, "Connection reset by peer"),
        ApiException(status=0, reason="timed out"),
    ],
)
def test_read_secret_timeouts_and_connection_errors_are_transient(error: BaseException) -> None:
    with pytest.raises(KubeUnavailable) as info:
        run(access(FakeCore(error=error)).read_secret("ns", "s3"))
    assert "no answer from the API server" in str(info.value)


def test_allow_list_off_by_default_reads_unlabelled_secrets() -> None:
    core = FakeCore({"ns/s3": {"data": {"k": "v"}}})
    assert run(access(core).read_secret("ns", "s3")) == {"k": b"v"}


def test_allow_list_refuses_an_unlabelled_secret_naming_it_and_the_label() -> None:
    core = FakeCore({"ns/s3": {"data": {"k": "v"}, "labels": {USABLE_LABEL: "false"}}})
    with pytest.raises(SecretNotAllowed) as info:
        run(access(core, require_secret_label=True).read_secret("ns", "s3"))
    assert isinstance(info.value, PermanentError)
    assert "Secret ns/s3" in str(info.value)
    assert "kubectl label secret -n ns s3 taobrev.io/usable=true" in str(info.value)


def test_allow_list_accepts_a_labelled_secret_and_the_operators_own() -> None:
    core = FakeCore(
        {
            "ns/s3": {"data": {"k": "v"}, "labels": {USABLE_LABEL: "true"}},
            "taobrev-system/brev": {"data": {"api-key": "x"}},
        }
    )
    kube = access(core, require_secret_label=True)
    assert run(kube.read_secret("ns", "s3")) == {"k": b"v"}
    assert run(kube.read_secret("taobrev-system", "brev", operator_own=True)) == {"api-key": b"x"}


def test_allow_list_still_reports_a_missing_secret_as_missing() -> None:
    assert run(access(FakeCore(), require_secret_label=True).read_secret("ns", "gone")) is None


# ------------------------------------------------------------------ patch_status


def test_patch_status_redacts_every_string_at_any_depth() -> None:
    register_secret(SECRET_VALUE)
    custom = FakeCustom([None])
    status = {
        "phase": "Running",
        "message": f"docker said: {SECRET_VALUE}",
        "attempts": [
            {
                "attempt": 1,
                "instance": {"name": "tbj-x"},
                "run": {"logTail": [f"token {SECRET_VALUE}", "AKIAIOSFODNN7EXAMPLE used"], "exitCode": 3},
            }
        ],
        "conditions": [{"type": "Ready", "message": f"x {SECRET_VALUE}"}],
        # KPI names are the training program's: keys are redacted too.
        "progress": {"epoch": 1, "metrics": {f"loss_{SECRET_VALUE}": 0.5, "val_acc": 0.9}},
    }
    assert run(access(custom=custom).patch_status("ns", "job", status)) is True
    sent = custom.bodies[0]["status"]
    assert SECRET_VALUE not in repr(sent)
    assert "AKIAIOSFODNN7EXAMPLE" not in repr(sent)
    assert sent["message"] == f"docker said: {MASK}"
    assert status_paths.run(sent)["exitCode"] == 3
    assert status_paths.run(sent)["logTail"][0] == f"token {MASK}"  # nested in the current attempt
    assert sent["progress"]["metrics"] == {f"loss_{MASK}": 0.5, "val_acc": 0.9}
    assert custom.timeouts == [(7, 7)]


def test_patch_status_404_is_false() -> None:
    custom = FakeCustom([ApiException(status=404, reason="Not Found")])
    assert run(access(custom=custom).patch_status("ns", "job", {"phase": "Running"})) is False


@pytest.mark.parametrize("status", [422, 409, 413])
def test_refused_patch_is_retried_trimmed(status: int) -> None:
    custom = FakeCustom([ApiException(status=status, reason="Invalid"), None])
    lines = [f"line {i} " + "x" * 5000 for i in range(40)]
    full = {
        "phase": "Running",
        "message": "m" * 5000,
        "attempts": [{"attempt": 1, "instance": {"name": "tbj-x"}, "run": {"logTail": lines}}],
        "jobId": "j1",
    }
    assert run(access(custom=custom).patch_status("ns", "job", full)) is True
    second = custom.bodies[1]["status"]
    tail = status_paths.run(second)["logTail"]
    assert 0 < len(tail) <= 5
    assert all(len(line) <= 240 for line in tail)
    assert status_paths.instance(second) == {"name": "tbj-x"}
    assert len(second["message"]) <= 512
    assert second["jobId"] == "j1"


def test_refused_twice_falls_back_to_a_minimal_status() -> None:
    refused = ApiException(status=422, reason="Unprocessable Entity")
    custom = FakeCustom([refused, refused, None])
    full = {
        "phase": "Uploading",
        "outcome": "Succeeded",
        "reason": "Completed",
        "message": "m" * 2000,
        "finishedAt": "2026-01-01T00:00:00Z",
        "jobId": "j1",
        "attempts": [
            {
                "attempt": 1,
                "instance": {"name": "tbj-x", "id": "i-1"},
                "run": {"exitCode": 0, "logTail": ["a"]},
                "upload": {"uploadedAt": "2026-01-01T00:00:00Z", "results": {"uri": "s3://b"}},
            }
        ],
        "teardown": {"message": "t"},
        "conditions": [{"type": "Ready"}],
    }
    assert run(access(custom=custom).patch_status("ns", "job", full)) is True
    third = custom.bodies[2]["status"]
    assert set(third) == {"phase", "outcome", "reason", "message", "finishedAt", "jobId", "attempts"}
    assert len(third["message"]) <= 200
    # The current attempt keeps its names, ids and times; its log tail and results summary go.
    assert third["attempts"] == [
        {
            "attempt": 1,
            "instance": {"name": "tbj-x", "id": "i-1"},
            "run": {"exitCode": 0},
            "upload": {"uploadedAt": "2026-01-01T00:00:00Z"},
        }
    ]


def test_refused_even_minimal_is_a_transient_status_rejected() -> None:
    refused = ApiException(status=422, reason="Unprocessable Entity")
    refused.body = b'{"message":"status.phase: Unsupported value"}'
    custom = FakeCustom([refused, refused, refused])
    with pytest.raises(StatusRejected) as info:
        run(access(custom=custom).patch_status("ns", "job", {"phase": "Bogus"}))
    assert isinstance(info.value, TransientError)
    assert "Unsupported value" in str(info.value)


@pytest.mark.parametrize("status", [403, 429, 500, 503])
def test_patch_status_api_errors_are_transient_without_retrying_trimmed(status: int) -> None:
    custom = FakeCustom([ApiException(status=status, reason="Nope")])
    with pytest.raises(KubeUnavailable):
        run(access(custom=custom).patch_status("ns", "job", {"phase": "Running"}))
    assert len(custom.bodies) == 1


def test_patch_status_timeout_is_transient() -> None:
    custom = FakeCustom([ReadTimeoutError(None, "/apis", "Read timed out.")])  # type: ignore[arg-type]
    with pytest.raises(KubeUnavailable):
        run(access(custom=custom).patch_status("ns", "job", {"phase": "Running"}))


def test_error_text_from_the_api_server_is_redacted() -> None:
    register_secret(SECRET_VALUE)
    error = ApiException(status=500, reason="Internal")
    error.body = f"etcd said {SECRET_VALUE}".encode()
    with pytest.raises(KubeUnavailable) as info:
        run(access(custom=FakeCustom([error])).patch_status("ns", "job", {"phase": "Running"}))
    assert SECRET_VALUE not in str(info.value)


def test_minimal_status_keeps_ids_and_drops_bulk() -> None:
    attempt = {
        "attempt": 1,
        "instance": {"name": "tbj-x", "gpu": "L40S"},
        "run": {"logTail": ["x"]},
        "upload": {"results": {"uri": "s3://b"}},
    }
    out = minimal_status({"phase": "Running", "attempts": [attempt]})
    assert out == {
        "phase": "Running",
        "attempts": [{"attempt": 1, "instance": {"name": "tbj-x", "gpu": "L40S"}, "run": {}, "upload": {}}],
    }
    assert attempt["run"] == {"logTail": ["x"]}, "the status given is not changed"


# ------------------------------------------------------------------ notifiers
class FakeNotifierList:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def list_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        assert args[3] == "taobrevnotifiers" and kwargs.get("_request_timeout") == (7, 7)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def test_notifiers_are_listed_and_none_when_their_crd_is_not_installed() -> None:
    items = {"items": [{"metadata": {"name": "ops"}, "spec": {}}]}
    assert run(access(custom=FakeNotifierList(items)).list_notifiers("ml")) == items["items"]
    gone = FakeNotifierList(ApiException(status=404, reason="Not Found"))
    assert run(access(custom=gone).list_notifiers("ml")) == []
    with pytest.raises(KubeAccessDenied, match="listing TaoBrevNotifiers in ml"):
        run(
            access(custom=FakeNotifierList(ApiException(status=403, reason="Forbidden"))).list_notifiers("ml")
        )


def test_notifier_status_is_redacted_and_a_deleted_notifier_is_false() -> None:
    register_secret(SECRET_VALUE)
    custom = FakeCustom([None, ApiException(status=404, reason="Not Found")])
    assert run(access(custom=custom).patch_notifier_status("ml", "ops", {"lastError": f"x {SECRET_VALUE}"}))
    assert custom.bodies[0] == {"status": {"lastError": f"x {MASK}"}}
    assert run(access(custom=custom).patch_notifier_status("ml", "ops", {"pending": 1})) is False


# ------------------------------------------------------------------ threads


class SlowCustom(FakeCustom):
    """Listings that block until released; status patches that meet at a barrier: they end only
    if `parties` of them run at the same time."""

    def __init__(self, parties: int) -> None:
        super().__init__([])
        self.release = threading.Event()
        self.barrier = threading.Barrier(parties, timeout=10)

    def list_cluster_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        assert self.release.wait(30)
        return {"items": [], "metadata": {}}

    def patch_namespaced_custom_object_status(self, *args: Any, **kwargs: Any) -> Unread:
        self.barrier.wait()
        return super().patch_namespaced_custom_object_status(*args, **kwargs)


def test_status_writes_run_side_by_side_and_never_wait_for_a_listing() -> None:
    """After a restart with 10,000 objects, status writes queued for seconds behind each other and
    behind listings of every job in the loop's default executor (os.cpu_count() + 4 threads): an
    exit reached the status that much later (issue 30). Here 40 listings hang, and CALL_THREADS
    writes still run at once (they only end together)."""
    custom = SlowCustom(CALL_THREADS)
    kube = access(custom=custom)

    async def scene() -> list[bool]:
        listings = [asyncio.ensure_future(kube.list_jobs()) for _ in range(40)]
        await asyncio.sleep(0.1)
        try:
            writes = [kube.patch_status("ns", f"j{i}", {"billedSeconds": i}) for i in range(CALL_THREADS)]
            return await asyncio.wait_for(asyncio.gather(*writes), 20)
        finally:
            custom.release.set()
            await asyncio.gather(*listings)

    assert run(scene()) == [True] * CALL_THREADS


class HangingCustom(FakeCustom):
    """Status patches without a phase hang until released."""

    def __init__(self) -> None:
        super().__init__([])
        self.release = threading.Event()

    def patch_namespaced_custom_object_status(self, *args: Any, **kwargs: Any) -> Unread:
        if "phase" not in args[5]["status"]:
            assert self.release.wait(30)
        return super().patch_namespaced_custom_object_status(*args, **kwargs)


def test_a_write_that_moves_a_job_never_queues_behind_routine_ones() -> None:
    """A takeover refreshes every running job's billing at once (1,000 writes); an exit seen
    then (its write changes the phase) goes in threads of its own (issue 30)."""
    custom = HangingCustom()
    kube = access(custom=custom)

    async def scene() -> bool:
        routine = [
            asyncio.ensure_future(kube.patch_status("ns", f"j{i}", {"billedSeconds": i}))
            for i in range(CALL_THREADS * 3)
        ]
        await asyncio.sleep(0.1)
        try:
            return await asyncio.wait_for(kube.patch_status("ns", "x", {"phase": "Uploading"}), 20)
        finally:
            custom.release.set()
            await asyncio.gather(*routine)

    assert run(scene()) is True
