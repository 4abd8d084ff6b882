"""Kubernetes access the operator needs: read Secrets, patch status; list TaoBrevJobs (the orphan
sweeper and admission, controller/fleet/ledger.py); the cluster identity, Namespace quota annotations
and the retained-instance ConfigMap. Nothing else.

The API server is a fault source like Brev: every call carries `_request_timeout` (a paused or
half-open server must not hold a pass forever), and every failure leaves this module as a
`controller.api.errors` type, never a raw `ApiException` (see `_translate`). Text written to status is
redacted here, at the sink, so no caller can forget it.

Connection settings are resolved once (`resolve_connection`) and shared with kopf's login handler,
so both clients authenticate the same way. In the cluster the pod's token is NOT at the default
service-account path (the brev CLI would take it as its own Brev token; tests/brevsim/SIM-CONTRACT.md
section 2):
`TAOBREV_KUBE_TOKEN_PATH` points at a projected token elsewhere, re-read on every refresh because
the kubelet rotates it.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import functools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

import structlog
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from controller.api.errors import (
    KubeAccessDenied,
    KubeUnavailable,
    SecretAccessDenied,
    SecretNotAllowed,
    StatusRejected,
    TaoBrevError,
)
from controller.observability.logs import redact_text

T = TypeVar("T")
GROUP = "taobrev.io"
VERSION = "v1alpha1"
PLURAL = "taobrevjobs"
NOTIFIER_PLURAL = "taobrevnotifiers"
# The allow-list label (TAOBREV_REQUIRE_SECRET_LABEL): a Secret must carry it to be used by a job.
USABLE_LABEL = "taobrev.io/usable"
USABLE_VALUE = "true"
RBAC_HINT = "deploy/base/rbac.yaml (or the per-namespace RoleBinding of deploy/)"

# Page size of the TaoBrevJob listing (admission's view of the fleet).
_LIST_PAGE = 500
# The CRD's selectable field (crds/, `selectableFields`) that splits the fleet into unfinished and
# finished jobs: the periodic listings ask the API server for the unfinished ones only (issue 30).
FINISHED_FIELD = "status.finishedAt"
# How the API server refuses a field it cannot select on (before 1.31, or a CRD applied without
# `selectableFields`): a 400 whose message names the field.
_FIELD_REFUSED = "field label not supported"

log = structlog.get_logger("taobrev.kube")

# Status fields that carry free text (logs, CLI output): trimmed first when a patch is refused.
_LOG_LINES_KEPT = 5
_LINE_CHARS = 240
_MESSAGE_CHARS = 512
_MINIMAL_MESSAGE_CHARS = 200
# Left out of the minimal status: bulky, free text, or rebuilt on the next pass (and, in each
# attempt, the run's log tail and the upload's results summary).
_NOT_MINIMAL = frozenset({"teardown", "conditions"})


@dataclass(frozen=True)
class Connection:
    server: str
    ca_path: str | None
    token_path: Path | None
    token: str | None
    cert_path: str | None = None
    key_path: str | None = None
    insecure: bool = False

    def current_token(self) -> str | None:
        if self.token_path is not None:
            return self.token_path.read_text().strip()
        return self.token


class ConnectionSettings(Protocol):
    """What `resolve_connection` reads of `controller.settings.Settings` (kube stays below
    settings in the import graph: settings is built from the environment, kube only talks)."""

    @property
    def kube_token_path(self) -> Path | None: ...
    @property
    def kube_server(self) -> str | None: ...
    @property
    def kube_ca_path(self) -> Path | None: ...


def resolve_connection(settings: ConnectionSettings) -> Connection:
    """Explicit token path (in-cluster, non-default path) first, else the kubeconfig."""
    if settings.kube_token_path is not None:
        server = settings.kube_server
        if not server:
            host = os.environ.get("KUBERNETES_SERVICE_HOST")
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise SystemExit(
                    "TAOBREV_KUBE_TOKEN_PATH is set but neither TAOBREV_KUBE_SERVER nor "
                    "KUBERNETES_SERVICE_HOST names the API server"
                )
            server = f"https://{host}:{port}"
        if not settings.kube_token_path.exists():
            raise SystemExit(f"TAOBREV_KUBE_TOKEN_PATH={settings.kube_token_path} does not exist")
        ca = str(settings.kube_ca_path) if settings.kube_ca_path else None
        return Connection(server=server, ca_path=ca, token_path=settings.kube_token_path, token=None)
    cfg = k8s.Configuration()
    k8s_config.load_kube_config(client_configuration=cfg)
    auth = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
    token = auth.split(" ", 1)[1] if auth and " " in auth else auth
    return Connection(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        token_path=None,
        token=token,
        cert_path=cfg.cert_file,
        key_path=cfg.key_file,
        insecure=not cfg.verify_ssl,
    )


# The blocking client runs in threads of our own, not the loop's default executor (os.cpu_count()
# + 4 threads: 6 on a 2-core node). There, after a restart with 10,000 objects, status writes
# queued up to 7 s behind each other and behind listings of every job (3-12 s each), and an exit
# seen by its wait reached the status that much later (issue 30, measured with the failover
# bench). Listings get threads apart, so a write never waits for one.
CALL_THREADS: Final = 16
LIST_THREADS: Final = 2
# Status writes that move a job (a phase, an outcome) have threads of their own too: a takeover
# refreshes every running job's billing at once (1,000 writes), and an exit seen then must not
# queue behind them.
MOVE_THREADS: Final = 8
MOVES: Final = frozenset({"phase", "outcome", "runOutcome", "finishedAt"})


def _lean(job: dict[str, Any]) -> dict[str, Any]:
    """A listed job without metadata.managedFields (more than half of its decoded body; no
    caller reads it)."""
    meta = job.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return job


def api_client(conn: Connection) -> k8s.ApiClient:
    cfg = k8s.Configuration()
    # A connection per thread (the client's default, 5 x CPUs, would open and drop extra ones).
    cfg.connection_pool_maxsize = CALL_THREADS + LIST_THREADS + MOVE_THREADS
    cfg.host = conn.server
    cfg.ssl_ca_cert = conn.ca_path
    cfg.verify_ssl = not conn.insecure
    cfg.cert_file = conn.cert_path
    cfg.key_file = conn.key_path
    # One attempt per call: urllib3's default 3 retries would turn a hung server into 4 request
    # timeouts per call; our callers back off and retry a TransientError themselves.
    cfg.retries = 0
    if conn.token_path is not None or conn.token is not None:
        cfg.api_key = {"authorization": f"Bearer {conn.current_token()}"}

        def _refresh(c: k8s.Configuration) -> None:
            # Projected tokens rotate; re-reading the file keeps us authenticated.
            c.api_key = {"authorization": f"Bearer {conn.current_token()}"}

        cfg.refresh_api_key_hook = _refresh
    return k8s.ApiClient(cfg)


class KubeAccess:
    """Async facade over the (blocking) kubernetes client; calls run in worker threads.

    Raises only `controller.api.errors` types: `KubeUnavailable` (timeouts, connection errors, 429,
    5xx, unexpected answers), `KubeAccessDenied` (401/403), `SecretAccessDenied` (403 on a Secret),
    `StatusRejected` (a status refused even when minimal), all `TransientError`; and
    `SecretNotAllowed` (`PermanentError`) when the allow-list label is required and missing.
    """

    def __init__(
        self,
        api: k8s.ApiClient | None = None,
        *,
        request_timeout: float = 30.0,
        require_secret_label: bool = False,
        core: Any = None,
        custom: Any = None,
    ) -> None:
        # `core`/`custom` let tests inject fakes of CoreV1Api / CustomObjectsApi.
        self._core = core if core is not None else k8s.CoreV1Api(api)
        self._custom = custom if custom is not None else k8s.CustomObjectsApi(api)
        # (connect, read): connecting to a dead server fails fast; a paused one times out the read.
        self._timeout = (min(request_timeout, 10.0), request_timeout)
        self._require_label = require_secret_label
        self._calls = ThreadPoolExecutor(CALL_THREADS, thread_name_prefix="kube-call")
        self._lists = ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="kube-list")
        self._moves = ThreadPoolExecutor(MOVE_THREADS, thread_name_prefix="kube-move")
        # Set once the API server refused to select on FINISHED_FIELD: list all, filter here.
        self._no_field_selector = False
        self._refusal_lock = threading.Lock()  # the listings run in two threads; warn once

    async def _thread(
        self, fn: Callable[..., T], *args: Any, listing: bool = False, moving: bool = False
    ) -> T:
        """`fn(*args)` in one of our threads (with the caller's context, as asyncio.to_thread)."""
        run = functools.partial(contextvars.copy_context().run, fn, *args)
        pool = self._lists if listing else self._moves if moving else self._calls
        return await asyncio.get_running_loop().run_in_executor(pool, run)

    async def read_secret(
        self, namespace: str, name: str, *, operator_own: bool = False
    ) -> Mapping[str, bytes] | None:
        """The Secret's decoded data, or None if it does not exist.

        `operator_own` marks the operator's own Secret (Brev credentials), which the allow-list
        label does not apply to: it is installed by the admin, not referenced by a job's author.
        """
        where = f"Secret {namespace}/{name}"

        def _read() -> Mapping[str, bytes] | None:
            try:
                secret = self._core.read_namespaced_secret(name, namespace, _request_timeout=self._timeout)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                if exc.status == 403:
                    raise SecretAccessDenied(
                        f"the operator may not read {where} (403 Forbidden). Right after an API "
                        f"server restart this passes by itself; otherwise grant `get` on secrets in "
                        f"namespace {namespace} to the operator's ServiceAccount ({RBAC_HINT})"
                    ) from None
                raise _translate(exc, f"reading {where}") from None
            except (Urllib3Error, OSError) as exc:
                raise _translate(exc, f"reading {where}") from None
            labels = (secret.metadata.labels if secret.metadata is not None else None) or {}
            if self._require_label and not operator_own and labels.get(USABLE_LABEL) != USABLE_VALUE:
                raise SecretNotAllowed(
                    f"{where} is not labelled {USABLE_LABEL}={USABLE_VALUE}, which this operator "
                    f"requires (TAOBREV_REQUIRE_SECRET_LABEL=true); if jobs may use it, run "
                    f"`kubectl label secret -n {namespace} {name} {USABLE_LABEL}={USABLE_VALUE}`"
                )
            data = secret.data or {}
            return {k: base64.b64decode(v) for k, v in data.items()}

        return await self._thread(_read)

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        """Merge-patch the status subresource, every string redacted. False if the object is gone.

        A refused patch (422 invalid, 409 conflict, 413 too large) is retried trimmed (log tail,
        messages), then as a minimal status (phase, outcome, reason, short message, timestamps,
        names and ids) so the job's progress is recorded; only if that is refused too does it
        raise `StatusRejected` (transient: the pass backs off instead of crash-looping).
        """
        where = f"status of TaoBrevJob {namespace}/{name}"

        def _patch() -> bool:
            # In the worker thread: a long log tail must not block the event loop while masked.
            redacted = redact_status(status)
            attempts = (redacted, trimmed_status(redacted), minimal_status(redacted))
            last: ApiException | None = None
            for body in attempts:
                try:
                    # The answer (the whole object) is not read: parsing it was a tenth of the
                    # operator's CPU at 1,000 running jobs. Errors still raise, with their body.
                    answer = self._custom.patch_namespaced_custom_object_status(
                        GROUP,
                        VERSION,
                        namespace,
                        PLURAL,
                        name,
                        {"status": body},
                        _request_timeout=self._timeout,
                        _preload_content=False,
                    )
                    answer.drain_conn()  # read to the end, so the connection goes back to the pool
                    answer.release_conn()
                except ApiException as exc:
                    if exc.status == 404:
                        return False
                    if exc.status not in (409, 413, 422):
                        raise _translate(exc, f"patching the {where}") from None
                    last = exc
                    continue
                except (Urllib3Error, OSError) as exc:
                    raise _translate(exc, f"patching the {where}") from None
                return True
            assert last is not None
            raise StatusRejected(
                f"the API server refused the {where} even trimmed to a minimum: {_answer(last)}"
            )

        return await self._thread(_patch, moving=not MOVES.isdisjoint(status))

    # -- cluster identity, the job list and the retained-instance record (controller/fleet/sweeper.py)

    async def namespace_uid(self, name: str) -> str:
        """The uid of a namespace (kube-system's names this cluster: TAOBREV_CLUSTER_ID's default)."""
        where = f"namespace {name}"

        def _get() -> str:
            try:
                ns = self._core.read_namespace(name, _request_timeout=self._timeout)
            except ApiException as exc:
                raise _translate(exc, f"reading the uid of {where} (or set TAOBREV_CLUSTER_ID)") from None
            except (Urllib3Error, OSError) as exc:
                raise _translate(exc, f"reading the uid of {where}") from None
            uid = ns.metadata.uid if ns.metadata is not None else None
            if not uid:
                raise KubeUnavailable(f"{where} has no uid in the API server's answer")
            return str(uid)

        return await self._thread(_get)

    async def read_config_map(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        """(data, resourceVersion) of a ConfigMap, or None if it does not exist."""
        where = f"ConfigMap {namespace}/{name}"

        def _read() -> tuple[dict[str, str], str] | None:
            try:
                cm = self._core.read_namespaced_config_map(name, namespace, _request_timeout=self._timeout)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise _translate(exc, f"reading {where}") from None
            except (Urllib3Error, OSError) as exc:
                raise _translate(exc, f"reading {where}") from None
            version = cm.metadata.resource_version if cm.metadata is not None else None
            return dict(cm.data or {}), str(version or "")

        return await self._thread(_read)

    async def write_config_map(
        self, namespace: str, name: str, data: Mapping[str, str], resource_version: str | None
    ) -> None:
        """Create (resource_version None) or replace the ConfigMap only if it is still at
        `resource_version` (optimistic concurrency: a 409 is a KubeUnavailable, read again)."""
        where = f"ConfigMap {namespace}/{name}"

        def _write() -> None:
            meta = k8s.V1ObjectMeta(
                name=name,
                namespace=namespace,
                resource_version=resource_version,
                labels={"app.kubernetes.io/name": "taobrev-operator"},
            )
            body = k8s.V1ConfigMap(metadata=meta, data=dict(data))
            try:
                if resource_version is None:
                    self._core.create_namespaced_config_map(namespace, body, _request_timeout=self._timeout)
                else:
                    self._core.replace_namespaced_config_map(
                        name, namespace, body, _request_timeout=self._timeout
                    )
            except ApiException as exc:
                raise _translate(exc, f"writing {where}") from None
            except (Urllib3Error, OSError) as exc:
                raise _translate(exc, f"writing {where}") from None

        await self._thread(_write)

    async def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One TaoBrevJob as a plain dict, or None if it does not exist."""
        where = f"reading TaoBrevJob {namespace}/{name}"

        def _read() -> dict[str, Any] | None:
            got = self._custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=self._timeout
            )
            return dict(got)

        return await self._thread(_missing_as, None, _read, where)

    async def delete_job(self, namespace: str, name: str, uid: str) -> bool:
        """Delete the TaoBrevJob `uid` (a precondition: a new object of the same name is never
        deleted for it); False when it is already gone or replaced (404, 409)."""
        where = f"deleting TaoBrevJob {namespace}/{name}"

        def _delete() -> bool:
            try:
                self._custom.delete_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    name,
                    body={"preconditions": {"uid": uid}},
                    _request_timeout=self._timeout,
                )
            except ApiException as exc:
                if exc.status == 409:  # the precondition failed: another object by now
                    return False
                raise
            return True

        return await self._thread(_missing_as, False, _delete, where)

    async def list_jobs(
        self,
        namespaces: Sequence[str] = (),
        *,
        page_size: int = _LIST_PAGE,
        finished: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Every TaoBrevJob in `namespaces` (all namespaces when empty), every page, as plain dicts
        (without metadata.managedFields); with `finished`, only the finished (True) or unfinished
        (False) ones. Raises rather than return a partial list: a caller deciding what is
        unreferenced (the orphan sweeper) or what holds a quota slot (admission) needs all of them."""
        return await self.map_jobs(_lean, namespaces, page_size=page_size, finished=finished)

    async def map_jobs(
        self,
        each: Callable[[dict[str, Any]], T | None],
        namespaces: Sequence[str] = (),
        *,
        page_size: int = _LIST_PAGE,
        finished: bool | None = None,
    ) -> list[T]:
        """`each(job)` of every TaoBrevJob (None: left out), as `list_jobs` lists them, applied page
        by page in the worker thread: a caller keeps what it reads of each job, never every body
        at once (10,000 decoded bodies, finished ones included, were ~60 MiB at every relist of
        the admission ledger and sweep, and the heap kept that high-water mark: issue 30).

        `finished` selects on status.finishedAt at the API server (the CRD's selectable field), so
        a namespace's thousands of finished jobs cost the periodic listings nothing. An API server
        that refuses the selector gets the whole list, filtered here, with one warning."""

        def _page(namespace: str | None, token: str | None, selector: str | None) -> Mapping[str, Any]:
            kwargs: dict[str, Any] = {"limit": page_size, "_request_timeout": self._timeout}
            if token:
                kwargs["_continue"] = token
            if selector:
                kwargs["field_selector"] = selector
            if namespace is None:
                result = self._custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)
            else:
                result = self._custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, **kwargs
                )
            if not isinstance(result, Mapping) or not isinstance(result.get("items"), list):
                raise KubeUnavailable("listing TaoBrevJobs: the API server's answer has no items list")
            return result

        def _wanted(job: dict[str, Any]) -> T | None:
            # Also when the server selected: one lookup per job, and a server ignoring the
            # selector cannot slip a finished job into "unfinished".
            if finished is not None and bool((job.get("status") or {}).get("finishedAt")) != finished:
                return None
            return each(job)

        def _one_namespace(namespace: str | None, selector: str | None) -> list[T]:
            kept: list[T] = []
            token: str | None = None
            while True:
                page = _page(namespace, token, selector)
                kept += [v for v in map(_wanted, page["items"]) if v is not None]
                token = (page.get("metadata") or {}).get("continue") or None
                del page
                if not token:
                    return kept

        def _list() -> list[T]:
            kept: list[T] = []
            for namespace in namespaces or (None,):
                where = f"listing TaoBrevJobs in {namespace or 'all namespaces'}"
                selector = None if self._no_field_selector else _field_selector(finished)
                try:
                    try:
                        kept += _one_namespace(namespace, selector)
                    except ApiException as exc:
                        if selector is None or not _refused_selector(exc):
                            raise
                        self._selector_refused(exc)
                        kept += _one_namespace(namespace, None)  # from the first page again
                except ApiException as exc:
                    raise _translate(exc, where) from None
                except (Urllib3Error, OSError) as exc:
                    raise _translate(exc, where) from None
            return kept

        return await self._thread(_list, listing=True)

    def _selector_refused(self, exc: ApiException) -> None:
        with self._refusal_lock:
            if self._no_field_selector:
                return
            self._no_field_selector = True
        log.warning(
            "job_list_field_selector_refused",
            field=FINISHED_FIELD,
            answer=_answer(exc),
            fix="apply this release's CRD (crds/, with its selectableFields) on Kubernetes 1.31 or "
            "later; until then every listing reads the finished jobs too",
        )

    async def namespace_annotations(self, name: str) -> Mapping[str, str] | None:
        """The Namespace's annotations, or None if it does not exist. 401/403 raise
        `KubeAccessDenied` naming the grant (`get` on namespaces, deploy/base/rbac.yaml)."""

        def _read() -> Mapping[str, str] | None:
            try:
                ns = self._core.read_namespace(name, _request_timeout=self._timeout)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise _translate(exc, f"reading Namespace {name} (quota annotations)") from None
            except (Urllib3Error, OSError) as exc:
                raise _translate(exc, f"reading Namespace {name} (quota annotations)") from None
            meta = ns.metadata
            return dict((meta.annotations if meta is not None else None) or {})

        return await self._thread(_read)

    # -- notifiers (controller/notify): list per namespace, and their status

    async def list_notifiers(self, namespace: str) -> list[dict[str, Any]]:
        """Every TaoBrevNotifier of `namespace` (one page: a namespace has a handful); none when
        the TaoBrevNotifier CRD is not installed (404)."""
        where = f"listing TaoBrevNotifiers in {namespace}"

        def _list() -> list[dict[str, Any]]:
            result = self._custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, NOTIFIER_PLURAL, _request_timeout=self._timeout
            )
            items = result.get("items") if isinstance(result, Mapping) else None
            if not isinstance(items, list):
                raise KubeUnavailable(f"{where}: the API server's answer has no items list")
            return [dict(i) for i in items]

        return await self._thread(_missing_as, [], _list, where)

    async def patch_notifier_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        """Merge-patch a TaoBrevNotifier's status (redacted). False if it is gone."""
        where = f"status of TaoBrevNotifier {namespace}/{name}"

        def _patch() -> bool:
            answer = self._custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                NOTIFIER_PLURAL,
                name,
                {"status": redact_status(status)},
                _request_timeout=self._timeout,
                _preload_content=False,
            )
            answer.drain_conn()
            answer.release_conn()
            return True

        return await self._thread(_missing_as, False, _patch, f"patching the {where}")


def _missing_as(missing: T, call: Callable[[], T], doing: str) -> T:
    """`call()` (blocking), `missing` when the object is not there (404); any other failure as
    this module's errors (`_translate`)."""
    try:
        return call()
    except ApiException as exc:
        if exc.status == 404:
            return missing
        raise _translate(exc, doing) from None
    except (Urllib3Error, OSError) as exc:
        raise _translate(exc, doing) from None


def redact_status(value: Any) -> Any:
    """`value` with every string (at any depth) passed through the one redaction step, map keys
    too (status.progress.metrics is keyed by names the training program chose)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {(redact_text(k) if isinstance(k, str) else k): redact_status(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_status(v) for v in value]
    return value


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def trimmed_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """The status with its free-text fields cut to sizes any sane schema accepts."""
    out = dict(status)

    def trim_run(run: dict[str, Any]) -> None:
        if isinstance(run.get("logTail"), list):
            run["logTail"] = [_cut(str(line), _LINE_CHARS) for line in run["logTail"][-_LOG_LINES_KEPT:]]

    _each_attempt(out, "run", trim_run)
    if isinstance(out.get("message"), str):
        out["message"] = _cut(out["message"], _MESSAGE_CHARS)
    if isinstance(out.get("teardown"), Mapping) and isinstance(out["teardown"].get("message"), str):
        out["teardown"] = {**out["teardown"], "message": _cut(out["teardown"]["message"], _MESSAGE_CHARS)}
    if isinstance(out.get("conditions"), list):
        out["conditions"] = [
            {**c, "message": _cut(str(c["message"]), _MESSAGE_CHARS)}
            if isinstance(c, Mapping) and isinstance(c.get("message"), str)
            else c
            for c in out["conditions"]
        ]
    return out


def minimal_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """Phase, outcome, reason, a short message, timestamps, names and ids: what the job's
    progress and teardown need, without the bulky or free-text fields."""
    out = {k: v for k, v in status.items() if k not in _NOT_MINIMAL}
    if isinstance(out.get("message"), str):
        out["message"] = _cut(out["message"], _MINIMAL_MESSAGE_CHARS)
    _each_attempt(out, "run", lambda run: run.pop("logTail", None))
    _each_attempt(out, "upload", lambda upload: upload.pop("results", None))
    return out


def _each_attempt(status: dict[str, Any], record: str, change: Callable[[dict[str, Any]], object]) -> None:
    """Apply `change` to a copy of `record` (run, upload) in every attempt of `status`."""
    attempts = status.get("attempts")
    if not isinstance(attempts, list):
        return
    copies: list[Any] = []
    for attempt in attempts:
        if isinstance(attempt, Mapping) and isinstance(attempt.get(record), Mapping):
            part = dict(attempt[record])
            change(part)
            copies.append({**attempt, record: part})
        else:
            copies.append(attempt)
    status["attempts"] = copies


def _field_selector(finished: bool | None) -> str | None:
    """The field selector of the finished (True) or unfinished (False) jobs; None: all of them.
    A job without status.finishedAt selects as the empty value."""
    if finished is None:
        return None
    return f"{FINISHED_FIELD}!=" if finished else f"{FINISHED_FIELD}="


def _refused_selector(exc: ApiException) -> bool:
    return exc.status == 400 and _FIELD_REFUSED in _body(exc)


def _body(exc: ApiException) -> str:
    return exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else str(exc.body or "")


def _answer(exc: ApiException) -> str:
    body = _body(exc)
    return redact_text(_cut(f"{exc.status} {exc.reason}: {body}".strip(), 400))


def _translate(exc: BaseException, doing: str) -> TaoBrevError:
    """Every failure of an API call as a transient `controller.api.errors` type with a clear message."""
    if isinstance(exc, ApiException):
        if exc.status in (401, 403):
            return KubeAccessDenied(
                f"{doing}: {_answer(exc)}. Right after an API server restart this passes by itself; "
                f"if it persists, check the operator's token and RBAC ({RBAC_HINT})"
            )
        if exc.status == 0:  # the client's own failure (e.g. a timeout wrapped by the client)
            return KubeUnavailable(f"{doing}: no answer from the API server: {redact_text(str(exc.reason))}")
        return KubeUnavailable(f"{doing}: the API server answered {_answer(exc)}")
    kind = type(exc).__name__
    return KubeUnavailable(
        f"{doing}: no answer from the API server ({kind}: {redact_text(_cut(str(exc), 300))})"
    )
