"""Kopf wiring — the ONLY module that imports kopf. Thin: no business decisions here.

Level-based driving (kopf's own recommendation for state machines): one daemon per TaoBrevJob
loops `reconcile()` with the delay it asks for; the delete handler calls the same reconciler until
teardown is confirmed, and only then lets kopf release the finalizer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
import structlog

from controller import app as app_module
from controller.errors import PermanentError, TransientError
from controller.kube import GROUP, PLURAL, VERSION, resolve_connection
from controller.metrics import serve_metrics
from controller.reconciler import JobRef
from controller.settings import Settings

log = structlog.get_logger("taobrev.handlers")
FINALIZER = "taobrev.io/teardown"
RESOURCE = (GROUP, VERSION, PLURAL)


def _post_event(ref: JobRef, type_: str, reason: str, message: str) -> None:
    if ref.body is not None:
        kopf.event(ref.body, type=type_, reason=reason, message=message[:1024])


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    ours = Settings.from_env()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    # Silently stalled watches are the most common kopf complaint: bound every watch request and
    # reconnect, so a half-dead connection costs at most a few minutes of blindness.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 30
    # Only our explicit Events are posted (their text is ours and redacted), not every log line.
    settings.posting.loggers = False
    settings.posting.level = logging.INFO
    # The daemon's blocking `docker wait` is cut short when the object is deleted.
    settings.execution.max_workers = 32

    app = app_module.build(ours, _post_event)
    memo["app"] = app
    if ours.metrics_port:
        serve_metrics(app.registry, ours.metrics_host, ours.metrics_port)
    try:
        await app_module.start(app)
    except PermanentError as exc:
        # A misconfigured operator must not look healthy: stop with the reason.
        raise kopf.PermanentError(str(exc)) from exc
    except TransientError as exc:
        log.warning("brev not ready at start-up; jobs will retry", error=str(exc))


@kopf.on.login()
async def login(**_: Any) -> kopf.ConnectionInfo:
    conn = resolve_connection(Settings.from_env())
    return kopf.ConnectionInfo(
        server=conn.server,
        ca_path=conn.ca_path,
        insecure=conn.insecure,
        scheme="Bearer" if conn.current_token() else None,
        token=conn.current_token(),
        certificate_path=conn.cert_path,
        private_key_path=conn.key_path,
    )


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    app = memo.get("app")
    if app is not None:
        app.brev.close()


# backoff: an unexpected exception restarts the loop after 5 s (kopf default: 60 s).
@kopf.daemon(*RESOURCE, cancellation_timeout=2.0, initial_delay=0, backoff=5.0)
async def drive(stopped: kopf.DaemonStopped, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    app = memo["app"]
    while not stopped:
        if body.metadata.get("deletionTimestamp"):
            return  # the delete handler takes over
        try:
            delay = await app.reconciler.reconcile(JobRef.from_body(body, deleting=False))
        except TransientError as exc:
            log.warning("reconcile failed; retrying", error=str(exc), name=body.metadata.get("name"))
            delay = app.settings.poll_interval
        if delay is None:
            return  # finished: nothing more to watch until the object is deleted
        if delay > 0:
            await stopped.wait(delay)


@kopf.on.delete(*RESOURCE, retries=None, backoff=1.0)
async def teardown(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    app = memo["app"]
    ref = JobRef.from_body(body, deleting=True)
    while True:
        try:
            delay = await app.reconciler.reconcile(ref)
        except TransientError as exc:
            raise kopf.TemporaryError(str(exc), delay=app.settings.poll_interval) from exc
        if delay is None:
            app.reconciler.forget(ref)
            return  # finalizer released by kopf
        await asyncio.sleep(delay)
