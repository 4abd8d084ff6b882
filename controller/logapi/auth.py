"""Who is asking, and may they: Kubernetes' delegated authentication and authorization.

Authentication, as every aggregated API server does it:
- a request proxied by kube-apiserver carries a client certificate signed by the front-proxy CA
  (`requestheader-client-ca-file` of kube-system/extension-apiserver-authentication) whose CN is
  one of `requestheader-allowed-names`; the user is then in the headers it names
  (X-Remote-User, X-Remote-Group, X-Remote-Extra-*). Only such a certificate makes those headers
  count: the TLS context trusts the front-proxy CA alone, so no user certificate can pass as the
  proxy.
- a direct request with a bearer token is authenticated by a TokenReview.
Authorization: a SubjectAccessReview for `get` on `taobrevjobs/log` in group logs.taobrev.io for
that user and object, as the kubelet authorizes `pods/log`. Answers are cached for a few seconds
(metrics-server's default), so a `-f` reconnect loop costs no API call per request.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kubernetes.client as k8s
import structlog

from controller.logapi.protocol import GROUP, RESOURCE, SUBRESOURCE

log = structlog.get_logger("taobrev.logapi")

AUTH_CONFIG_MAP = ("kube-system", "extension-apiserver-authentication")
CACHE_TTL_S = 10.0
CACHE_SIZE = 4096


class Unauthenticated(Exception):
    """401: nobody we can name."""


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    uid: str = ""


@dataclass
class RequestHeaderConfig:
    """What kube-apiserver publishes for aggregated servers about its front proxy."""

    client_ca: str = ""  # PEM bundle
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)

    @classmethod
    def from_config_map(cls, data: Mapping[str, str]) -> RequestHeaderConfig:
        def names(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
            raw = data.get(key)
            return tuple(json.loads(raw)) if raw else default

        return cls(
            client_ca=data.get("requestheader-client-ca-file", ""),
            allowed_names=names("requestheader-allowed-names", ()),
            username_headers=names("requestheader-username-headers", cls.username_headers),
            group_headers=names("requestheader-group-headers", cls.group_headers),
            extra_prefixes=names("requestheader-extra-headers-prefix", cls.extra_prefixes),
        )


def peer_common_name(peercert: Mapping[str, Any] | None) -> str | None:
    """The verified client certificate's CN (None without one: the TLS layer verified it)."""
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def user_from_headers(config: RequestHeaderConfig, headers: Mapping[str, str], multi: Any) -> User:
    """The user the front proxy names. `multi(name)` gives every value of a repeated header."""
    name = next((headers[h] for h in config.username_headers if headers.get(h)), "")
    if not name:
        raise Unauthenticated("the front proxy named no user")
    groups = tuple(g for h in config.group_headers for g in multi(h))
    extra: dict[str, list[str]] = {}
    for header in headers:
        for prefix in config.extra_prefixes:
            if header.lower().startswith(prefix.lower()):
                key = header[len(prefix) :].lower()
                extra.setdefault(key, []).extend(multi(header))
    return User(name, groups, tuple(sorted((k, tuple(v)) for k, v in extra.items())))


@dataclass
class Authorizer:
    """TokenReview and SubjectAccessReview through the operator's own API client."""

    api: k8s.ApiClient
    request_timeout: float = 10.0
    _cache: OrderedDict[tuple[Any, ...], tuple[float, bool, str]] = field(default_factory=OrderedDict)

    async def authenticate_token(self, token: str) -> User:
        body = k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token))

        def _review() -> Any:
            return k8s.AuthenticationV1Api(self.api).create_token_review(
                body, _request_timeout=self.request_timeout
            )

        answer = (await asyncio.to_thread(_review)).status
        if answer is None or not answer.authenticated or answer.user is None:
            raise Unauthenticated("the bearer token was not accepted (TokenReview)")
        u = answer.user
        extra = tuple(sorted((k, tuple(v)) for k, v in (u.extra or {}).items()))
        return User(u.username or "", tuple(u.groups or ()), extra, u.uid or "")

    async def may_read_log(self, user: User, namespace: str, name: str) -> tuple[bool, str]:
        key = (user, namespace, name)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1], hit[2]
        attrs = k8s.V1ResourceAttributes(
            group=GROUP,
            resource=RESOURCE,
            subresource=SUBRESOURCE,
            verb="get",
            namespace=namespace,
            name=name,
        )
        body = k8s.V1SubjectAccessReview(
            spec=k8s.V1SubjectAccessReviewSpec(
                user=user.name,
                groups=list(user.groups),
                extra={k: list(v) for k, v in user.extra} or None,
                uid=user.uid or None,
                resource_attributes=attrs,
            )
        )

        def _review() -> Any:
            return k8s.AuthorizationV1Api(self.api).create_subject_access_review(
                body, _request_timeout=self.request_timeout
            )

        answer = (await asyncio.to_thread(_review)).status
        allowed = bool(answer is not None and answer.allowed and not answer.denied)
        reason = (answer.reason or "") if answer is not None else ""
        self._cache[key] = (now + CACHE_TTL_S, allowed, reason)
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return allowed, reason

    async def request_header_config(self) -> RequestHeaderConfig:
        namespace, name = AUTH_CONFIG_MAP

        def _read() -> Any:
            return k8s.CoreV1Api(self.api).read_namespaced_config_map(
                name, namespace, _request_timeout=self.request_timeout
            )

        cm = await asyncio.to_thread(_read)
        return RequestHeaderConfig.from_config_map(cm.data or {})


def server_context(cert_file: str, key_file: str, front_proxy_ca: str) -> ssl.SSLContext:
    """TLS for the log API: our serving certificate; client certificates are asked for and
    verified against the front-proxy CA only (optional: token requests present none)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    if front_proxy_ca:
        trust_front_proxy(ctx, front_proxy_ca)
    return ctx


def trust_front_proxy(ctx: ssl.SSLContext, front_proxy_ca: str) -> None:
    ctx.load_verify_locations(cadata=front_proxy_ca)
    ctx.verify_mode = ssl.CERT_OPTIONAL
