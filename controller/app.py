"""Composition root: builds the operator's collaborators once at start-up (no kopf import).

Everything the reconciler uses is constructed here and injected; nothing reaches for globals, so
tests build the same graph with their own pieces.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry

from controller.api.errors import KubeAccessDenied, PermanentError, TaoBrevError
from controller.api.models import TaoBrevJobSpec
from controller.brev.cli import BrevCLI, BrevCLISettings
from controller.brev.client import BrevCredentials
from controller.brev.envfile import S3Credentials
from controller.brev.pace import BrevPace, PacePolicy
from controller.effects.actions import ActionRunner
from controller.effects.directory import InstanceDirectory
from controller.effects.exit_waits import ExitWaits
from controller.effects.pricing import PriceBook
from controller.fleet import kueue
from controller.fleet.kueue_gate import KueueGate
from controller.fleet.leadership import KubeLeaseStore, LeaderElector, Leadership, SoleLeader, identity
from controller.fleet.ledger import Fleet, quotas_from
from controller.fleet.node_cost_feed import NodeCostFeed
from controller.fleet.orphans import Policy
from controller.fleet.retained import RetainedStore
from controller.fleet.sweeper import Sweeper
from controller.fleet.ttl import FinishedReaper
from controller.kube.access import KubeAccess, api_client, resolve_connection
from controller.kube.secret_arrivals import SecretArrivals
from controller.kube.workloads import WorkloadStore
from controller.lifecycle.machine import decide
from controller.logapi.archive import Archive
from controller.logapi.auth import Authorizer, RequestHeaderConfig, server_context, trust_front_proxy
from controller.logapi.certs import serving_cert
from controller.logapi.hub import LogHub
from controller.logapi.metrics import LogApiMetrics
from controller.logapi.server import LogApi, serve
from controller.notify.delivery import Notifier
from controller.notify.metrics import NotifyMetrics
from controller.notify.sinks import SinkDirectory
from controller.observability.health import Watchdog
from controller.observability.logs import register_secret
from controller.observability.metrics import Recorder, RedactingRegistry
from controller.preflight.checker import Preflight, SecretLoader
from controller.preflight.s3 import S3Checks, S3Target
from controller.reconciler import EventSink, Reconciler
from controller.settings import Settings
from controller.versions import load_versions

log = structlog.get_logger("taobrev.app")
_CLUSTER_ID_TRIES = 5


@dataclass
class App:
    settings: Settings
    registry: CollectorRegistry
    recorder: Recorder
    kube: KubeAccess
    brev: BrevCLI
    directory: InstanceDirectory
    reconciler: Reconciler
    watchdog: Watchdog
    # Leader election (None when disabled); `leadership` is what the handlers consult.
    elector: LeaderElector | None = None
    leadership: Leadership = field(default_factory=SoleLeader)
    # The orphan sweeper (controller/fleet/sweeper.py); its loop is started by the kopf startup handler.
    sweeper: Sweeper | None = None
    # Notifications of job transitions (controller/notify); its task is started by the kopf startup handler.
    notifier: Notifier | None = None
    # spec.ttlSecondsAfterFinished (controller/fleet/ttl.py): fed by the watch, its task started at startup.
    reaper: FinishedReaper | None = None
    # OpenCost's node gauges (controller/fleet/node_cost_feed.py); started by the kopf startup handler.
    node_costs: NodeCostFeed | None = None
    # Paces the first pass of each job's daemon when this replica begins to lead (TAOBREV_TAKEOVER_RATE).
    takeover_pace: BrevPace | None = None
    # Exit waits left running by cancelled passes (controller/effects/exit_waits.py); closed at cleanup.
    exit_waits: ExitWaits = field(default_factory=ExitWaits)


def build(settings: Settings, events: EventSink) -> App:
    registry: CollectorRegistry = RedactingRegistry()
    recorder = Recorder(registry)
    kube = KubeAccess(
        api_client(resolve_connection(settings)),
        request_timeout=settings.kube_request_timeout,
        require_secret_label=settings.require_secret_label,
    )

    async def credentials() -> BrevCredentials:
        # Read on every (re)login, so a rotated Secret is picked up without a restart.
        data = await kube.read_secret(
            settings.operator_namespace, settings.brev_credentials_secret, operator_own=True
        )
        where = f"Secret {settings.operator_namespace}/{settings.brev_credentials_secret}"
        if data is None:
            raise PermanentError(f"{where} (TAOBREV_BREV_CREDENTIALS_SECRET) does not exist")
        text = {k: v.decode().strip() for k, v in data.items()}
        # The credentials are masked everywhere; the org id is an identifier, not a secret, and it
        # is part of the identity recorded in status (masking it would corrupt that fact).
        for key in ("api-key", "token"):
            register_secret(text.get(key))
        if text.get("api-key"):
            if not text.get("org-id"):
                raise PermanentError(f"{where} has api-key but no org-id")
            return BrevCredentials(api_key=text["api-key"], org_id=text["org-id"])
        if text.get("token"):
            return BrevCredentials(token=text["token"])
        raise PermanentError(f"{where} needs keys api-key + org-id, or token")

    home = settings.brev_home or Path.home()
    cli_settings = BrevCLISettings(
        home=home,
        binary=settings.brev_binary,
        expected_version=load_versions().brev.cli_version,
        pace=PacePolicy(
            rate=settings.brev_rate,
            burst=settings.brev_burst,
            backoff_base=settings.brev_backoff_base,
            backoff_max=settings.brev_backoff_max,
        ),
    )
    pace = BrevPace(cli_settings.pace, on_wait=recorder.brev_paced, on_throttle=recorder.brev_throttled)
    brev = BrevCLI(cli_settings, credentials, recorder=recorder, pace=pace)
    directory = InstanceDirectory(brev)
    if settings.max_concurrent_brev_calls is not None:
        log.warning(
            "TAOBREV_MAX_CONCURRENT_BREV_CALLS is deprecated: every brev call but waits shares one "
            "pool, so teardown waits behind probes and pulls; unset it to use the lanes (TAOBREV_LANE_*)",
            slots=settings.max_concurrent_brev_calls,
        )
    prices = PriceBook(brev)
    s3_checks = S3Checks()

    def new_preflight(load_secrets: SecretLoader, read_secret: Callable[[str, str], Any]) -> Preflight:
        return Preflight(
            load_secrets=load_secrets,
            read_secret=read_secret,
            s3=s3_checks,
            prices=prices,
            arrivals=SecretArrivals(read_secret, settings.secret_poll_interval),
            max_age=settings.preflight_max_age,
            helper_images=(load_versions().images.aws_cli,),
            clock=lambda: datetime.now(UTC),
        )

    runner = ActionRunner(
        brev,
        directory,
        lanes=settings.lanes(recorder),
        exec_timeout=settings.exec_timeout,
        pull_timeout=settings.pull_timeout,
    )

    retained = RetainedStore(kube, settings.operator_namespace)
    notifier = (
        Notifier(
            sinks=SinkDirectory(kube.list_notifiers, kube.read_secret, settings.secret_max_age),
            writer=kube,
            metrics=NotifyMetrics(registry),
            leadership=SoleLeader(),  # the elector, once built (below)
            tuning=settings.notify_tuning(),
            user_agent=f"taobrev-operator/{_package_version()}",
        )
        if settings.notify
        else None
    )

    # Admission by a real Kueue for the jobs labelled with a queue (docs/kueue.md).
    kueue_gate = (
        KueueGate(
            WorkloadStore(
                api_client(resolve_connection(settings)), request_timeout=settings.kube_request_timeout
            ),
            clock=lambda: datetime.now(UTC),
        )
        if settings.kueue
        else None
    )

    def new_reconciler() -> Reconciler:
        # A fresh fleet per leadership term: the new leader starts from a listing (the API's
        # status.queue.admittedAt is the truth after a failover), never from an earlier term's memory.
        fleet = Fleet(
            kube,
            quotas_from(
                settings.max_instances, settings.namespace_max_instances, settings.namespace_max_gpus
            ),
            namespaces=settings.namespaces,
            excluded=kueue.managed_body if kueue_gate is not None else None,
        )
        return Reconciler(
            kube=kube,
            directory=directory,
            runner=runner,
            recorder=recorder,
            events=events,
            tunables=settings.tunables(),
            decide=decide,
            listing_max_age=settings.listing_max_age,
            secret_max_age=settings.secret_max_age,
            default_image=load_versions().images.tao_toolkit.pyt,
            step_images=load_versions().images.tao_toolkit.by_kind(),
            retained=retained,
            prices=prices,
            fleet=fleet,
            kueue=kueue_gate,
            wake_queued=True,
            preflight=new_preflight if settings.preflight else None,
            notifier=notifier,
        )

    watchdog = Watchdog(grace=settings.liveness_grace, pass_ceiling=settings.pass_ceiling())
    app = App(settings, registry, recorder, kube, brev, directory, new_reconciler(), watchdog)
    app.exit_waits = runner.exit_waits
    if settings.takeover_rate > 0:
        # A token bucket (the Brev pace's, without its cool-down ever set): a new term's first
        # passes start at most this many a second, in the order their daemons asked.
        rate = settings.takeover_rate
        app.takeover_pace = BrevPace(PacePolicy(rate=rate, burst=max(1, int(rate))))
    if settings.leader_election:
        add_leader_election(app, new_reconciler)
    else:
        recorder.leader(True)
    # Every change sent to Brev is fenced by the term when it is sent, after any queue: a pass
    # learns that its term ended only when the election loop runs, late on a starved loop.
    runner.fence = app.leadership.is_leading
    brev.fence = app.leadership.is_leading
    if notifier is not None:
        notifier.follow(app.leadership)  # only the leader sends
        app.notifier = notifier
    app.reaper = FinishedReaper(kube.delete_job, app.leadership.is_leading)
    app.sweeper = Sweeper(
        brev=brev,
        directory=directory,
        kube=kube,
        retained=retained,
        recorder=recorder,
        leadership=app.leadership,
        cluster_id=settings.resolved_cluster_id(),
        deployment=settings.resolved_deployment_id(),
        policy=Policy(settings.orphan_policy),
        interval=settings.orphan_sweep_interval,
        grace=settings.orphan_grace,
        listing_max_age=settings.listing_max_age,
        namespaces=settings.namespaces,
    )
    app.node_costs = NodeCostFeed(
        directory=directory,
        prices=prices,
        recorder=recorder,
        leadership=app.leadership,
        cluster_id=settings.resolved_cluster_id(),
        deployment=settings.resolved_deployment_id(),
        interval=settings.node_cost_interval,
    )
    return app


async def resolve_cluster_id(settings: Settings) -> Settings:
    """Settings with the cluster id set: TAOBREV_CLUSTER_ID, else the kube-system namespace uid
    (stable for the cluster's lifetime, unique per cluster). Read once at start-up; a failure
    stops start-up with the fix, since no instance may be named without it."""
    if settings.cluster_id:
        return settings
    api = api_client(resolve_connection(settings))
    try:
        uid, failure = await _kube_system_uid(KubeAccess(api, request_timeout=settings.kube_request_timeout))
    finally:
        api.close()
    if not uid:
        raise PermanentError(
            f"cannot derive the cluster id: {failure}. Set TAOBREV_CLUSTER_ID, or grant the operator "
            "`get` on namespace kube-system (deploy/base/rbac.yaml)"
        )
    log.info("cluster id derived from the kube-system namespace uid", cluster_id=uid)
    return settings.model_copy(update={"cluster_id": uid})


async def _kube_system_uid(kube: KubeAccess) -> tuple[str, TaoBrevError | None]:
    """(uid, None), or ("", why): a denial at once, an API server not answering after a few tries."""
    failure: TaoBrevError | None = None
    for attempt in range(_CLUSTER_ID_TRIES):
        try:
            return await kube.namespace_uid("kube-system"), None
        except KubeAccessDenied as exc:
            return "", exc
        except TaoBrevError as exc:
            failure = exc
            await asyncio.sleep(min(2.0 * 2**attempt, 10.0))
    return "", failure


def add_leader_election(app: App, new_reconciler: Callable[[], Reconciler]) -> None:
    settings = app.settings
    timing = settings.leader_timing()

    def changed(leading: bool) -> None:
        app.recorder.leader(leading)
        resumed = app.elector is not None and app.elector.resumed
        if leading and not resumed:
            # A new term starts from what the API server says, not from the status this replica
            # remembered writing in an earlier term: the other leader has moved the jobs on since.
            # A term that re-took our own Lease (nobody led in between) keeps what it knows: the
            # watch may not have delivered our last writes yet, and a status from before them
            # would redo a finished step (found by the simulation, seeds 740 and 1513).
            app.reconciler = new_reconciler()

    store = KubeLeaseStore(
        api_client(resolve_connection(settings)),  # its own connection pool: renewals never queue
        settings.operator_namespace,
        settings.leader_lease_name,
        timing.request_timeout,
    )
    # POD_ID is the pod name (downward API in deploy/base); the suffix tells restarts apart.
    who = identity(os.environ.get("POD_ID") or socket.gethostname())
    app.elector = LeaderElector(store, who, timing, on_change=changed)
    app.leadership = app.elector
    app.recorder.leader(False)


async def start(app: App, *, login: bool = True) -> None:
    """Fail fast on a broken brev setup: environment, version, login (a standby skips the login:
    it must not call Brev; `login_when_leading` does it once the replica leads)."""
    app.brev.check_environment()
    warning = await app.brev.check_version()
    if warning:
        log.warning("brev CLI version differs from the pinned one", detail=warning)
    if login:
        await app.brev.ensure_login()
    app.recorder.build_info(version=_package_version(), brev_cli_version=await app.brev.version())


async def login_when_leading(app: App) -> None:
    """The deferred start-up login of a replica that started as a standby (errors are logged; the
    first reconcile pass logs in again anyway)."""
    await app.leadership.wait_leading()
    try:
        await app.brev.ensure_login()
    except TaoBrevError as exc:
        log.warning("brev login after becoming leader failed; jobs will retry", error=str(exc))


def _package_version() -> str:
    try:
        return version("taobrev-operator")
    except PackageNotFoundError:
        return "0.0.0+local"


async def start_log_api(app: App) -> LogApiRunner | None:
    """The log API's HTTPS server (TAOBREV_LOG_API_PORT), on every replica: see controller/logapi."""
    settings = app.settings
    if not settings.log_api_port:
        return None
    api = api_client(resolve_connection(settings))
    authorizer = Authorizer(api, request_timeout=settings.kube_request_timeout)
    headers = await _request_headers(authorizer) or RequestHeaderConfig()
    service = settings.log_api_service
    names = [f"{service}.{settings.operator_namespace}.svc", service, "localhost"]
    home = settings.brev_home or Path.home()
    cert = serving_cert(settings.log_api_cert_dir, home / ".taobrev-log-api", names)
    context = server_context(str(cert.cert_file), str(cert.key_file), headers.client_ca)

    async def s3_target(namespace: str, spec: TaoBrevJobSpec) -> S3Target:
        ref = spec.credentials.s3
        data = await app.kube.read_secret(namespace, ref.name)
        if data is None or not data.get(ref.access_key_id_key) or not data.get(ref.secret_access_key_key):
            raise PermanentError(
                f"Secret {namespace}/{ref.name} (spec.credentials.s3) is missing or incomplete"
            )
        register_secret(data[ref.secret_access_key_key].decode(errors="replace"))
        creds = S3Credentials(data[ref.access_key_id_key], data[ref.secret_access_key_key])
        return S3Target(spec.data.s3_endpoint_url, spec.data.s3_region, creds, f"{namespace}/{ref.name}")

    hub = LogHub(
        app.brev.open_stream,
        app.brev.refresh_alias,
        backlog_lines=settings.log_api_backlog_lines,
        max_followers=settings.log_api_max_streams,
    )
    log_api = LogApi(
        authorizer=authorizer,
        request_headers=headers,
        read_job=app.kube.read_job,
        s3_target=s3_target,
        hub=hub,
        archive=Archive(),
        max_bytes=settings.log_api_max_bytes,
        metrics=LogApiMetrics(app.registry, hub),
    )
    runner = await serve(log_api, settings.log_api_host, settings.log_api_port, context)
    waiting = None
    if not headers.client_ca:
        waiting = asyncio.create_task(_learn_front_proxy(authorizer, log_api, context), name="log API auth")
    return LogApiRunner(runner, hub, api, waiting)


async def _request_headers(authorizer: Authorizer) -> RequestHeaderConfig | None:
    try:
        return await authorizer.request_header_config()
    except Exception as exc:  # without it only bearer tokens are accepted: say so
        log.warning(
            "log API: cannot read kube-system/extension-apiserver-authentication (grant `get` on "
            "it: ClusterRole taobrev-operator-auth-reader, deploy/base/log-api.yaml); requests "
            "through kube-apiserver are refused until it can",
            error=str(exc)[:300],
        )
        return None


async def _learn_front_proxy(authorizer: Authorizer, log_api: LogApi, context: ssl.SSLContext) -> None:
    """Read the front proxy's CA until it can (RBAC granted after start-up, an API outage), then
    trust it: the TLS context is shared, so the next connection asks for the proxy's certificate."""
    while True:
        await asyncio.sleep(30.0)
        headers = await _request_headers(authorizer)
        if headers is not None and headers.client_ca:
            trust_front_proxy(context, headers.client_ca)
            log_api.request_headers = headers
            log.info("log API: front proxy CA loaded")
            return


@dataclass
class LogApiRunner:
    runner: web.AppRunner
    hub: LogHub
    api: Any
    waiting: asyncio.Task[None] | None = None

    async def stop(self) -> None:
        if self.waiting is not None:
            self.waiting.cancel()
        await self.hub.close()
        await self.runner.cleanup()
        self.api.close()
