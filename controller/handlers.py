"""Kopf wiring — the ONLY module that imports kopf. Thin: no business decisions here.

Level-based driving (kopf's own recommendation for state machines): one daemon per TaoBrevJob
loops `reconcile()` with the delay it asks for; the delete handler calls the same reconciler until
teardown is confirmed, and only then lets kopf release the finalizer.

Leader election (controller/fleet/leadership.py): both replicas run kopf and see every object, but only
the Lease holder acts. kopf's `standalone` mode stays (its peering pauses whole operators, with no
Lease semantics); our gate sits in the two handlers that act:
- the daemon waits for leadership before each pass and runs the pass inside the term, so losing
  the Lease cancels it mid-way (names are in status before `brev create`: the next leader adopts);
- the delete handler raises kopf.TemporaryError on a standby, so the finalizer stays on the
  object until the leader has confirmed the teardown (returning would let kopf drop it).

Both report each pass to the liveness watchdog (controller.observability.health). Text that leaves through
kopf (Events, the TemporaryError message kopf stores in its progress annotation) is redacted
here, because kopf's own posting never passes our logging filter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from http.server import ThreadingHTTPServer
from typing import Any

import aiohttp
import kopf
import structlog

from controller import app as app_module
from controller.api.errors import NotLeading, PermanentError, TransientError
from controller.api.naming import CANCEL_ANNOTATION
from controller.brev.childwatch import raise_open_files_limit
from controller.fleet import kueue
from controller.fleet.leadership import lead_or_stop
from controller.kube.access import GROUP, PLURAL, VERSION, resolve_connection
from controller.kube.bodies import shed_finished, shed_unused, ttl_fields
from controller.observability.health import serve_health
from controller.observability.logs import redact_text
from controller.observability.metrics import serve_metrics
from controller.reconciler import FINALIZER, JobRef
from controller.settings import Settings

log = structlog.get_logger("taobrev.handlers")
RESOURCE = (GROUP, VERSION, PLURAL)


def event_text(reason: str, message: str) -> tuple[str, str]:
    """An Event's reason and message as posted: redacted, then cut to the API's limits (redact
    before cutting, so a cut cannot split a secret into an unrecognisable prefix)."""
    return redact_text(reason)[:128], redact_text(message)[:1024]


def _post_event(ref: JobRef, type_: str, reason: str, message: str) -> None:
    if ref.body is not None:
        reason, message = event_text(reason, message)
        kopf.event(ref.body, type=type_, reason=reason, message=message)


class NoDiffBase(kopf.DiffBaseStorage):
    """No diff base: no handler here reads a diff (a daemon and a delete handler only, and
    deletion is seen from deletionTimestamp). kopf's annotation storage cost one patch per new
    object and a copy of the spec (~1.2 KiB plus its managedFields entry) on every later write
    and watch event of it. Built and fetched bases are both empty, so every event is "nothing
    changed" (kopf's NOOP): kopf runs nothing, formats nothing and stores nothing. (None from
    fetch would make every event a creation, whose handling formats the whole body for a
    debug line each time.)"""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()  # kopf's own deep-copies the body on every watch event

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return kopf.BodyEssence()

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def _job_key(body: kopf.Body) -> str:
    return f"{body.metadata.get('namespace')}/{body.metadata.get('name')}"


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    raise_open_files_limit()  # ~3 fds per running job's call in flight
    ours = Settings.from_env()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = NoDiffBase()
    # Silently stalled watches are the most common kopf complaint: bound every watch request and
    # reconnect, so a half-dead connection costs at most a few minutes of blindness.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    # The initial listing in pages: 10,000 objects listed at once were one ~150 MiB response,
    # decoded whole, which the process's heap kept as resident memory long after (issue 30).
    settings.watching.chunk_size = 500
    settings.networking.request_timeout = ours.kube_request_timeout
    settings.networking.connect_timeout = 30
    # Only our explicit Events are posted (their text is ours and redacted), not every log line.
    settings.posting.loggers = False
    settings.posting.level = logging.INFO
    # kopf logs every event handler's success at INFO: one line per watch event of every job for
    # the shedding handler below (18,000 lines in a restart with 10,000 objects), saying nothing.
    objects = logging.getLogger("kopf.objects")
    if not any(isinstance(f, _QuietShedding) for f in objects.filters):
        objects.addFilter(_QuietShedding())
    # The daemon's blocking `docker wait` is cut short when the object is deleted.
    settings.execution.max_workers = 32
    # kopf keeps one worker task per object for `idle_timeout` after its last event (5 s by
    # default): at start-up that is every listed object at once, and the long-lived per-object
    # memory allocated between those transients pins their heap pages after they end. 0.5 s:
    # 9,000 finished objects 303 -> 263 MiB RSS (scenario_finished). A later event of an object
    # whose worker ended starts a new one (a task), which is all it costs.
    settings.queueing.idle_timeout = 0.5

    try:
        ours = await app_module.resolve_cluster_id(ours)
    except PermanentError as exc:
        raise kopf.PermanentError(redact_text(str(exc))) from exc
    app = app_module.build(ours, _post_event)
    memo["app"] = app
    if ours.kueue:
        _watch_workloads()
    if ours.metrics_port:
        serve_metrics(app.registry, ours.metrics_host, ours.metrics_port)
    if ours.liveness_endpoint:
        memo["health"] = serve_health(app.watchdog, ours.liveness_endpoint)
    try:
        await app_module.start(app, login=app.elector is None)
    except PermanentError as exc:
        # A misconfigured operator must not look healthy: stop with the reason.
        raise kopf.PermanentError(redact_text(str(exc))) from exc
    except TransientError as exc:
        log.warning("brev not ready at start-up; jobs will retry", error=str(exc))
    app.watchdog.started = True
    try:
        memo["log_api"] = await app_module.start_log_api(app)
    except (OSError, ValueError) as exc:
        # A port in use or an unreadable certificate: the operator itself still works; say why.
        raise kopf.PermanentError(f"the log API cannot start (TAOBREV_LOG_API_*): {exc}") from exc
    if app.elector is not None:
        # Only a replica that passed the start-up checks campaigns. Kept in memo so cleanup can
        # stop the loop before releasing the Lease.
        memo["election"] = asyncio.create_task(app.elector.run(), name="leader election")
        memo["login"] = asyncio.create_task(app_module.login_when_leading(app), name="brev login")
    _start_loops(app, memo)


def _start_loops(app: app_module.App, memo: kopf.Memo) -> None:
    """The operator-wide loops (one task each, none per job); `cleanup` cancels them by name."""
    loops = {
        "sweeper": app.sweeper.run() if app.sweeper is not None else None,
        "node_costs": app.node_costs.run() if app.node_costs is not None else None,
        "notifier": app.notifier.run() if app.notifier is not None else None,
        "reaper": app.reaper.run() if app.reaper is not None else None,
    }
    for name, loop in loops.items():
        if loop is not None:
            memo[name] = asyncio.create_task(loop, name=name)


@kopf.on.login()
async def login(**_: Any) -> kopf.AiohttpSession:
    ours = Settings.from_env()
    conn = resolve_connection(ours)
    info = kopf.ConnectionInfo(
        server=conn.server,
        ca_path=conn.ca_path,
        insecure=conn.insecure,
        scheme="Bearer" if conn.current_token() else None,
        token=conn.current_token(),
        certificate_path=conn.cert_path,
        private_key_path=conn.key_path,
    )
    # kopf's own session pools connections without a limit: every concurrent patch of a burst
    # left one idle TLS connection (~150 KiB of buffers) behind, for good. Bound the pool; the
    # long watches (one per watched namespace, or one cluster-wide) get their own headroom so
    # they can never starve patches and Events. kopf closes this session on re-login.
    watches = max(1, len(ours.namespaces))
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=ours.kube_connections + watches, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
    )
    return kopf.AiohttpSession(server=conn.server, aiohttp_session=session)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    app = memo.get("app")
    for name in ("reaper", "notifier", "node_costs", "sweeper", "login", "election"):
        task = memo.get(name)
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
    if app is not None:
        await app.exit_waits.close()
    if app is not None and app.elector is not None:
        # Hand the Lease over now: the standby takes over at its next retry, not after expiry.
        await app.elector.release()
    log_api = memo.get("log_api")
    if log_api is not None:
        await log_api.stop()
    if app is not None:
        app.brev.close()
    health: ThreadingHTTPServer | None = memo.get("health")
    if health is not None:
        health.shutdown()
        health.server_close()


@kopf.on.probe(id="leader")
async def leader_probe(memo: kopf.Memo, **_: Any) -> bool:
    # Shown in /healthz; a standby stays Ready on purpose (it is healthy, and Prometheus scrapes
    # only Ready endpoints, so taobrev_leader=0 of the standby stays visible).
    app = memo.get("app")
    return bool(app is not None and app.leadership.is_leading())


class _QuietShedding(logging.Filter):
    """Drops kopf's "Handler 'shed-unused-metadata' succeeded." (its failures still show)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "Handler 'shed-unused-metadata' succeeded."


# Every watch event, before the object's daemon is spawned, on the body kopf then keeps for it:
# the one place to drop what nobody reads from what kopf retains per running job
# (controller/kube/bodies.py). An event handler, not an index: kopf holds every handler of an
# operator with an index until every object's index ran, through one condition that wakes every
# waiting object at each one indexed (issue 30: with 10,000 objects a start-up spent minutes of
# CPU there before the first pass). Async, so it runs on the loop (a sync handler would hop to a
# thread per event).
@kopf.on.event(*RESOURCE, id="shed-unused-metadata")
async def shed_unused_metadata(
    body: kopf.Body, memo: kopf.Memo, event: Mapping[str, Any] | None = None, **_: Any
) -> None:
    shed_unused(body)
    app = memo.get("app")
    if app is None:
        return
    if (event or {}).get("type") == "DELETED":
        if app.reaper is not None:
            app.reaper.forget(str(body.metadata.uid))
        return
    if app.reaper is not None:
        # spec.ttlSecondsAfterFinished: every event reschedules or drops the job (no timer of its own).
        app.reaper.observe(*ttl_fields(body))
    if _finished(body):
        # A finished job has no daemon (`_drives`): its spend gauges come from its stored status
        # here, so the spend-per-namespace panel survives an operator restart.
        meta = body.metadata
        app.reconciler.finished_seen(str(meta.namespace), str(meta.name), body.status)
        # The last reader of this body until the next event replaces it (the cancel handler
        # below runs after this one: it keeps the body whole when it will act).
        quiet = not meta.get("deletionTimestamp") and CANCEL_ANNOTATION not in (meta.get("annotations") or {})
        if quiet and meta.uid not in _DRIVING:
            shed_finished(body)


# Only objects carrying the cancel annotation reach this handler (kopf filters before calling):
# the reconciler cuts short the job's pass or wait in flight, so a cancel acts at once. Passes are
# driven by the daemon alone; this only wakes it (the diff base is empty: on.field would never fire).
@kopf.on.event(*RESOURCE, annotations={CANCEL_ANNOTATION: kopf.PRESENT}, id="cancel-annotation")
async def cancel_requested(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    app = memo.get("app")
    if app is not None:
        app.reconciler.notice(JobRef.from_body(body))


# Kueue's Workloads of our jobs (TAOBREV_KUEUE, docs/kueue.md): an eviction, or an admission of a
# waiting job, wakes the owning job's pass as a cancel does; the pass reads the Workload itself.
# Registered by `startup` only with the integration on (kopf's resource observer starts after
# the startup handlers): otherwise nothing watches Workloads. Without Kueue's CRDs kopf finds no
# such resource and watches nothing either.
async def workload_event(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    app = memo.get("app")
    woken = kueue.wakes(body)
    if app is not None and woken is not None:
        uid, state = woken
        app.reconciler.wake(uid, evicted=state == kueue.State.EVICTED)


_WORKLOAD_WATCH: set[str] = set()  # registered once per process (tests run the operator again)


def _watch_workloads() -> None:
    if _WORKLOAD_WATCH:
        return
    _WORKLOAD_WATCH.add("kueue-workload")
    labels = {kueue.MANAGED_BY_LABEL: kueue.MANAGED_BY}
    kopf.on.event(kueue.GROUP, kueue.VERSION, kueue.WORKLOADS, labels=labels, id="kueue-workload")(
        workload_event
    )


FINALIZER_WAIT = 5.0  # s: how long a new object's first pass waits for kopf's finalizer patch
FINALIZER_POLL = 0.05  # s


async def _finalizer_added(body: kopf.Body, stopped: kopf.DaemonStopped) -> None:
    """kopf spawns a new object's daemon while its finalizer patch is still on the way. A pass
    without it may create nothing (run_phases.pending): it would write "waiting for the
    finalizer" and come back a second later, one status write and a second more per job. The
    body is kopf's live view of the object, so this only reads memory; if the finalizer never
    comes (no patch permission), the passes go on and say so in status."""
    deadline = asyncio.get_running_loop().time() + FINALIZER_WAIT
    while (
        not stopped
        and FINALIZER not in (body.metadata.get("finalizers") or ())
        and not body.metadata.get("deletionTimestamp")
        and asyncio.get_running_loop().time() < deadline
    ):
        await stopped.wait(FINALIZER_POLL)


def _finished(body: kopf.Body) -> bool:
    return bool(body.status.get("finishedAt"))


_DRIVING: set[str] = set()  # uids whose daemon runs in this process


def _drives(body: kopf.Body, **_: Any) -> bool:
    """kopf's `when` filter of `drive`. A finished job never runs again (a new run is a new
    object), so it gets no daemon: no task and no pass for it (issue 30: 9,000 finished objects
    cost 26.7 KiB each when their daemons were spawned only to end). A
    daemon that runs stays matched while its own pass writes finishedAt: kopf would otherwise
    cancel that pass before it counted the outcome. Deletion is the delete handler's."""
    return not _finished(body) or body.metadata.uid in _DRIVING


# backoff: an unexpected exception restarts the loop after 5 s (kopf default: 60 s).
@kopf.daemon(*RESOURCE, cancellation_timeout=2.0, initial_delay=0, backoff=5.0, when=_drives)
async def drive(stopped: kopf.DaemonStopped, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if _finished(body):
        return  # spawned before kopf saw it finished: nothing to do
    uid = str(body.metadata.uid)
    _DRIVING.add(uid)
    try:
        await _drive(stopped, body, memo)
    finally:
        _DRIVING.discard(uid)


async def _drive(stopped: kopf.DaemonStopped, body: kopf.Body, memo: kopf.Memo) -> None:
    app = memo["app"]
    key = _job_key(body)
    crashed = False
    try:
        await _finalizer_added(body, stopped)
        while not stopped:
            if body.metadata.get("deletionTimestamp"):
                return  # the delete handler takes over
            # A standby idles here (no I/O, no timer, nothing the watchdog waits for) until it
            # leads or kopf stops the daemon (deletion stops it too); then the loop re-checks.
            waited = not app.leadership.is_leading()
            if not await lead_or_stop(app.leadership, stopped.wait):
                app.watchdog.forget(key)
                continue
            if waited and app.takeover_pace is not None:
                # Every job's daemon wakes at once when a term begins: their first passes are
                # paced so the event loop keeps renewing the Lease (TAOBREV_TAKEOVER_RATE).
                await app.takeover_pace.slot()
                if stopped:
                    continue
            app.watchdog.pass_started(key)
            try:
                # Transient failures are the reconciler's to retry: it returns the backoff.
                delay = await app.leadership.while_leading(
                    app.reconciler.reconcile(JobRef.from_body(body, deleting=False))
                )
            except NotLeading:
                app.watchdog.forget(key)
                continue  # cancelled mid-pass: wait for the next term
            if delay is None:
                return  # finished: nothing more to watch until the object is deleted
            app.watchdog.pass_finished(key, delay)
            if delay > 0:
                await app.reconciler.rest(JobRef.from_body(body, deleting=False), delay, stopped.wait)
    except Exception:
        # A bug: kopf logs it and restarts the daemon after `backoff`; the watchdog expects that.
        crashed = True
        app.watchdog.pass_finished(key, 5.0)
        raise
    finally:
        if not crashed:
            app.watchdog.forget(key)


@kopf.on.delete(*RESOURCE, retries=None, backoff=1.0)
async def teardown(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    app = memo["app"]
    key = _job_key(body)
    while True:
        # Waiting up to one lease duration lets a takeover continue here at once, while a
        # long-idle standby still hands the object back to kopf (finalizer kept) now and then.
        if not await app.leadership.wait_leading(timeout=float(app.settings.leader_lease_duration)):
            raise kopf.TemporaryError("not the leader: the leader replica tears this job down", delay=1)
        # Read after the wait: kopf's body is live, and a new term's reconciler knows only what
        # it says (one read before a wait for the Lease redid a finished teardown; seed 194).
        ref = JobRef.from_body(body, deleting=True)
        app.watchdog.pass_started(key)
        try:
            delay = await app.leadership.while_leading(app.reconciler.reconcile(ref))
        except NotLeading as exc:
            app.watchdog.forget(key)
            raise kopf.TemporaryError(str(exc), delay=1) from exc
        except asyncio.CancelledError:
            app.watchdog.forget(key)
            raise
        except Exception as exc:
            # A bug (transient failures are retried inside reconcile()). kopf stores this text in
            # the object's progress annotation: redacted, no traceback.
            app.watchdog.pass_finished(key, app.settings.poll_interval)
            log.exception(
                "teardown pass failed unexpectedly; retrying", name=ref.name, namespace=ref.namespace
            )
            raise kopf.TemporaryError(
                redact_text(f"{type(exc).__name__}: {exc}")[:1024], delay=app.settings.poll_interval
            ) from None
        if delay is None:
            app.watchdog.forget(key)
            app.reconciler.forget(ref)
            return  # finalizer released by kopf
        app.watchdog.pass_finished(key, delay)
        await asyncio.sleep(delay)
