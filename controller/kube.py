"""Kubernetes access the reconciler needs: read Secrets, patch status. Nothing else.

Connection settings are resolved once (`resolve_connection`) and shared with kopf's login handler,
so both clients authenticate the same way. In the cluster the pod's token is NOT at the default
service-account path (the brev CLI would take it as its own Brev token, brev-cli.md section 1):
`TAOBREV_KUBE_TOKEN_PATH` points at a projected token elsewhere, re-read on every refresh because
the kubelet rotates it.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from controller.settings import Settings

GROUP = "taobrev.io"
VERSION = "v1alpha1"
PLURAL = "taobrevjobs"


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


def resolve_connection(settings: Settings) -> Connection:
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


def api_client(conn: Connection) -> k8s.ApiClient:
    cfg = k8s.Configuration()
    cfg.host = conn.server
    cfg.ssl_ca_cert = conn.ca_path
    cfg.verify_ssl = not conn.insecure
    cfg.cert_file = conn.cert_path
    cfg.key_file = conn.key_path
    if conn.token_path is not None or conn.token is not None:
        cfg.api_key = {"authorization": f"Bearer {conn.current_token()}"}

        def _refresh(c: k8s.Configuration) -> None:
            # Projected tokens rotate; re-reading the file keeps us authenticated.
            c.api_key = {"authorization": f"Bearer {conn.current_token()}"}

        cfg.refresh_api_key_hook = _refresh
    return k8s.ApiClient(cfg)


class KubeAccess:
    """Async facade over the (blocking) kubernetes client; calls run in worker threads."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self._core = k8s.CoreV1Api(api)
        self._custom = k8s.CustomObjectsApi(api)

    async def read_secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        """The Secret's decoded data, or None if it does not exist."""

        def _read() -> Mapping[str, bytes] | None:
            try:
                secret = self._core.read_namespaced_secret(name, namespace)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise
            data = secret.data or {}
            return {k: base64.b64decode(v) for k, v in data.items()}

        return await asyncio.to_thread(_read)

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        """Merge-patch the status subresource. False if the object is already gone."""

        def _patch() -> bool:
            try:
                self._custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, namespace, PLURAL, name, {"status": dict(status)}
                )
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise
            return True

        return await asyncio.to_thread(_patch)
