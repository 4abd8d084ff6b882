"""The log API's HTTPS server (aiohttp, on the operator's event loop).

Every replica serves it, leader or not: a running job's log comes over the replica's own ssh
session to the instance (hub.py) and an archived one from S3 (archive.py), so no request depends
on the leader's ssh masters or forwards to it. Each request is authenticated (auth.py) and
authorized with a SubjectAccessReview before the job is even read, so a refused user cannot
learn whether a job exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from controller.api.models import TaoBrevJobSpec
from controller.api.status import TaoBrevJobStatus
from controller.logapi import protocol
from controller.logapi.archive import Archive, ArchiveMissing
from controller.logapi.auth import (
    Authorizer,
    RequestHeaderConfig,
    Unauthenticated,
    User,
    peer_common_name,
    user_from_headers,
)
from controller.logapi.hub import LogHub, LogTarget, StreamUnavailable, TooManyStreams
from controller.logapi.metrics import LogApiMetrics
from controller.logapi.source import Archived, Live, log_source
from controller.preflight.s3 import S3Target

log = structlog.get_logger("taobrev.logapi")

ReadJob = Callable[[str, str], Awaitable[dict[str, Any] | None]]
S3TargetOf = Callable[[str, TaoBrevJobSpec], Awaitable[S3Target]]
Handler = Callable[[web.Request], Awaitable[web.Response]]
_SOURCE = "taobrev_log_source"  # request key: where the answered log came from (metrics)


@dataclass
class LogApi:
    authorizer: Authorizer
    request_headers: RequestHeaderConfig
    read_job: ReadJob
    s3_target: S3TargetOf
    hub: LogHub
    archive: Archive
    max_bytes: int
    metrics: LogApiMetrics | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/apis", self._discovery(protocol.group_list_document))
        app.router.add_get(f"/apis/{protocol.GROUP}", self._discovery(protocol.group_document))
        resources = self._discovery(protocol.resource_list_document)
        app.router.add_get(f"/apis/{protocol.GROUP_VERSION}", resources)
        app.router.add_get("/openapi/v2", self._discovery(_openapi_v2))
        app.router.add_get("/openapi/v3", self._discovery(lambda: {"paths": {}}))
        app.router.add_get("/healthz", _ok)
        app.router.add_get("/readyz", _ok)
        app.router.add_get("/livez", _ok)
        app.router.add_get("/{tail:.*}", self._log)
        return app

    # -- authentication ------------------------------------------------------------------------

    def _front_proxy(self, request: web.Request) -> bool:
        """The request came through kube-apiserver: a client certificate the TLS layer verified
        against the front-proxy CA, with an allowed CN."""
        cn = peer_common_name(request.transport.get_extra_info("peercert") if request.transport else None)
        if cn is None:
            return False
        allowed = self.request_headers.allowed_names
        if allowed and cn not in allowed:
            raise Unauthenticated(f"client certificate CN {cn!r} is not an allowed front proxy")
        return True

    async def _user(self, request: web.Request) -> User:
        if self._front_proxy(request):
            return user_from_headers(self.request_headers, request.headers, request.headers.getall)
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer ") and auth[7:].strip():
            return await self.authorizer.authenticate_token(auth[7:].strip())
        raise Unauthenticated("no front-proxy client certificate and no bearer token")

    def _discovery(self, document: Callable[[], dict[str, Any]]) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            try:
                # Any authenticated caller may discover (system:discovery), and kube-apiserver's
                # availability check, which names no user.
                if not self._front_proxy(request):
                    await self._user(request)
            except Unauthenticated as exc:
                return _status(401, "Unauthorized", str(exc))
            return web.json_response(document())

        return handler

    # -- the log -------------------------------------------------------------------------------

    async def _log(self, request: web.Request) -> web.StreamResponse:
        response = await self._answer(request)
        if self.metrics is not None:
            self.metrics.answered(request.get(_SOURCE, "none"), response.status)
        return response

    async def _answer(self, request: web.Request) -> web.StreamResponse:  # noqa: PLR0911 - one per outcome
        match = protocol.LOG_PATH.match(request.path)
        if match is None:
            return _status(404, "NotFound", f"the server could not find the resource {request.path}")
        namespace, name = match["namespace"], match["name"]
        try:
            user = await self._user(request)
        except Unauthenticated as exc:
            return _status(401, "Unauthorized", str(exc))
        allowed, why = await self.authorizer.may_read_log(user, namespace, name)
        if not allowed:
            return _status(
                403,
                "Forbidden",
                f'{protocol.RESOURCE}.{protocol.GROUP} "{name}" is forbidden: User "{user.name}" cannot '
                f'get resource "{protocol.RESOURCE}/{protocol.SUBRESOURCE}" in API group '
                f'"{protocol.GROUP}" in the namespace "{namespace}"' + (f": {why}" if why else ""),
            )
        try:
            query = protocol.parse_query(request.query, self.max_bytes)
        except protocol.QueryError as exc:
            return _status(400, "BadRequest", str(exc))
        job = await self.read_job(namespace, name)
        if job is None:
            return _status(404, "NotFound", f'taobrevjobs.taobrev.io "{name}" not found')
        status = TaoBrevJobStatus.from_k8s(job.get("status"))
        source = log_source(status, query.attempt, query.step)
        lines: AsyncIterator[bytes]
        kind = "live" if isinstance(source, Live) else "archive" if isinstance(source, Archived) else "none"
        request[_SOURCE] = kind
        if isinstance(source, Live):
            target = LogTarget(namespace, name, source.attempt, source.instance, source.container)
            lines = self.hub.follow(target, query)
        elif isinstance(source, Archived):
            spec = TaoBrevJobSpec.model_validate(job.get("spec") or {})
            try:
                s3 = await self.s3_target(namespace, spec)
            except Exception as exc:  # a missing Secret, a refused read: say so, do not crash
                return _status(503, "ServiceUnavailable", f"cannot read the job's S3 credentials: {exc}")
            lines = self.archive.read(s3, spec.data.results_uri, query, source.step)
        else:
            return _status(404, "NotFound", source.message)
        log.info(
            "log_request",
            job=f"{namespace}/{name}",
            user=user.name,
            source=type(source).__name__,
            follow=query.follow,
        )
        return await self._stream(request, lines, query.limit_bytes, kind)

    async def _stream(
        self, request: web.Request, lines: AsyncIterator[bytes], limit: int, source: str
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
        sent = 0
        try:
            first = await anext(lines, None)
        except ArchiveMissing as exc:
            return _status(404, "NotFound", str(exc))
        except StreamUnavailable as exc:
            return _status(503, "ServiceUnavailable", str(exc))
        except TooManyStreams as exc:
            return _status(429, "TooManyRequests", str(exc))
        await response.prepare(request)
        try:
            line = first
            while line is not None:
                if sent + len(line) > limit:
                    await response.write(line[: limit - sent])
                    sent = limit
                    break
                await response.write(line)
                sent += len(line)
                line = await anext(lines, None)
        except (ConnectionResetError, asyncio.CancelledError):
            raise  # the viewer left: the generator's finally detaches it
        except Exception as exc:
            log.warning("log_stream_broken", error=str(exc)[:300])
        finally:
            if self.metrics is not None:
                self.metrics.served(source, sent)
            with contextlib.suppress(Exception):
                await lines.aclose()  # type: ignore[attr-defined]
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def _openapi_v2() -> dict[str, Any]:
    return {"swagger": "2.0", "info": {"title": "taobrev log API", "version": protocol.VERSION}, "paths": {}}


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.Response(
        status=code, text=json.dumps(protocol.status(code, reason, message)), content_type="application/json"
    )


async def serve(api: LogApi, host: str, port: int, context: ssl.SSLContext) -> web.AppRunner:
    runner = web.AppRunner(api.app(), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=context, shutdown_timeout=5.0)
    await site.start()
    log.info("log_api_serving", host=host, port=port)
    return runner
