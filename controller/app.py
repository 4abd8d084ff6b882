"""Composition root: builds the operator's collaborators once at start-up (no kopf import).

Everything the reconciler uses is constructed here and injected; nothing reaches for globals, so
tests build the same graph with their own pieces.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import structlog
from prometheus_client import CollectorRegistry

from controller.actions import ActionRunner
from controller.brev.cli import BrevCLI, BrevCLISettings
from controller.brev.client import BrevCredentials
from controller.directory import InstanceDirectory
from controller.errors import PermanentError
from controller.kube import KubeAccess, api_client, resolve_connection
from controller.logs import register_secret
from controller.metrics import Recorder
from controller.reconciler import EventSink, Reconciler
from controller.settings import Settings
from controller.versions import load_versions

log = structlog.get_logger("taobrev.app")


@dataclass
class App:
    settings: Settings
    registry: CollectorRegistry
    recorder: Recorder
    kube: KubeAccess
    brev: BrevCLI
    directory: InstanceDirectory
    reconciler: Reconciler


def build(settings: Settings, events: EventSink) -> App:
    registry = CollectorRegistry()
    recorder = Recorder(registry)
    kube = KubeAccess(api_client(resolve_connection(settings)))

    async def credentials() -> BrevCredentials:
        # Read on every (re)login, so a rotated Secret is picked up without a restart.
        data = await kube.read_secret(settings.operator_namespace, settings.brev_credentials_secret)
        where = f"Secret {settings.operator_namespace}/{settings.brev_credentials_secret}"
        if data is None:
            raise PermanentError(f"{where} (TAOBREV_BREV_CREDENTIALS_SECRET) does not exist")
        text = {k: v.decode().strip() for k, v in data.items()}
        for value in text.values():
            register_secret(value)
        if text.get("api-key"):
            if not text.get("org-id"):
                raise PermanentError(f"{where} has api-key but no org-id")
            return BrevCredentials(api_key=text["api-key"], org_id=text["org-id"])
        if text.get("token"):
            return BrevCredentials(token=text["token"])
        raise PermanentError(f"{where} needs keys api-key + org-id, or token")

    home = settings.brev_home or Path.home()
    brev = BrevCLI(
        BrevCLISettings(
            home=home,
            binary=settings.brev_binary,
            expected_version=load_versions().brev.cli_version,
        ),
        credentials,
        recorder=recorder,
    )
    directory = InstanceDirectory(brev)
    runner = ActionRunner(
        brev,
        directory,
        max_concurrent_calls=settings.max_concurrent_brev_calls,
        max_concurrent_waits=settings.max_concurrent_waits,
        exec_timeout=settings.exec_timeout,
        pull_timeout=settings.pull_timeout,
    )
    reconciler = Reconciler(
        kube=kube,
        directory=directory,
        runner=runner,
        recorder=recorder,
        events=events,
        tunables=settings.tunables(),
        listing_max_age=settings.listing_max_age,
        default_image=load_versions().images.tao_toolkit.pyt,
    )
    return App(settings, registry, recorder, kube, brev, directory, reconciler)


async def start(app: App) -> None:
    """Fail fast on a broken brev setup: environment, version, login."""
    app.brev.check_environment()
    warning = await app.brev.check_version()
    if warning:
        log.warning("brev CLI version differs from the pinned one", detail=warning)
    await app.brev.ensure_login()
    app.recorder.build_info(version=_package_version(), brev_cli_version=await app.brev.version())


def _package_version() -> str:
    try:
        return version("taobrev-operator")
    except PackageNotFoundError:
        return "0.0.0+local"
