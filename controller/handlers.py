"""Kopf wiring — the ONLY module that imports kopf. Thin: no business decisions here.

Level-based driving (kopf's own recommendation for state machines): one daemon per TaoBrevJob
loops `reconcile()` with the delay it asks for; the delete handler calls the same reconciler until
teardown is confirmed, and only then lets kopf release the finalizer.

Leader election (controller/leadership.py): both replicas run kopf and see every object, but only
the Lease holder acts. kopf's `standalone` mode stays (its peering pauses whole operators, with no
Lease semantics); our gate sits in the two handlers that act:
- the daemon waits for leadership before each pass and runs the pass inside the term, so losing
  the Lease cancels it mid-way (names are in status before `brev create`: the next leader adopts);
- the delete handler raises kopf.TemporaryError on a standby, so the finalizer stays on the
  object until the leader has confirmed the teardown (returning would let kopf drop it).
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
from controller.leadership import NotLeading
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
        await app_module.start(app, login=app.elector is None)
    except PermanentError as exc:
        # A misconfigured operator must not look healthy: stop with the reason.
        raise kopf.PermanentError(str(exc)) from exc
    except TransientError as exc:
        log.warning("brev not ready at start-up; jobs will retry", error=str(exc))
    if app.elector is not None:
        # Only a replica that passed the start-up checks campaigns. Kept in memo so cleanup can
        # stop the loop before releasing the Lease.
        memo["election"] = asyncio.create_task(app.elector.run(), name="leader election")
        memo["login"] = asyncio.create_task(app_module.login_when_leading(app), name="brev login")


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
    for name in ("login", "election"):
        task = memo.get(name)
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
    if app is not None and app.elector is not None:
        # Hand the Lease over now: the standby takes over at its next retry, not after expiry.
        await app.elector.release()
    if app is not None:
        app.brev.close()


@kopf.on.probe(id="leader")
async def leader_probe(memo: kopf.Memo, **_: Any) -> bool:
    # Shown in /healthz; a standby stays Ready on purpose (it is healthy, and Prometheus scrapes
    # only Ready endpoints, so taobrev_leader=0 of the standby stays visible).
    app = memo.get("app")
    return bool(app is not None and app.leadership.is_leading())


# backoff: an unexpected exception restarts the loop after 5 s (kopf default: 60 s).
@kopf.daemon(*RESOURCE, cancellation_timeout=2.0, initial_delay=0, backoff=5.0)
async def drive(stopped: kopf.DaemonStopped, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    app = memo["app"]
    while not stopped:
        if body.metadata.get("deletionTimestamp"):
            return  # the delete handler takes over
        # A standby idles here (no I/O); the bounded wait re-checks `stopped` and deletion.
        if not await app.leadership.wait_leading(timeout=1.0):
            continue
        try:
            delay = await app.leadership.while_leading(
                app.reconciler.reconcile(JobRef.from_body(body, deleting=False))
            )
        except NotLeading:
            continue  # cancelled mid-pass: wait for the next term
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
        # Waiting up to one lease duration lets a takeover continue here at once, while a
        # long-idle standby still hands the object back to kopf (finalizer kept) now and then.
        if not await app.leadership.wait_leading(timeout=float(app.settings.leader_lease_duration)):
            raise kopf.TemporaryError("not the leader: the leader replica tears this job down", delay=1)
        try:
            delay = await app.leadership.while_leading(app.reconciler.reconcile(ref))
        except NotLeading as exc:
            raise kopf.TemporaryError(str(exc), delay=1) from exc
        except TransientError as exc:
            raise kopf.TemporaryError(str(exc), delay=app.settings.poll_interval) from exc
        if delay is None:
            app.reconciler.forget(ref)
            return  # finalizer released by kopf
        await asyncio.sleep(delay)
