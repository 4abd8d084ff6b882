"""Finished jobs' logs: the `docker logs -t` copy the upload saved to `<resultsUri>/logs/container.log`,
read from S3 with the job's own S3 Secret (the viewer needs no S3 credentials) and served the way
a running job's log is: redacted, cut by tailLines/sinceSeconds, at most limitBytes."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from controller.logapi.hub import line_time, redact_line
from controller.logapi.protocol import MAX_LINE_BYTES, LogQuery, shape_line
from controller.preflight.checks import s3_location
from controller.preflight.s3 import S3Checks, S3Target

ARCHIVE_KEY = "logs/container.log"
_CHUNK = 256 * 1024


class ArchiveMissing(Exception):
    """No archived log at the job's resultsUri (answered 404 with the reason)."""


def archive_key(results_uri: str, step: str | None = None) -> tuple[str, str]:
    """Where the log is: logs/container.log, or a workflow step's logs/<step>/container.log."""
    bucket, prefix = s3_location(results_uri)
    prefix = prefix.rstrip("/")
    key = ARCHIVE_KEY if step is None else f"logs/{step}/container.log"
    return bucket, f"{prefix}/{key}" if prefix else key


class Archive:
    def __init__(self, s3: S3Checks | None = None) -> None:
        self._s3 = s3 or S3Checks(connect_timeout=5.0, read_timeout=30.0)

    async def read(
        self, target: S3Target, results_uri: str, query: LogQuery, step: str | None = None
    ) -> AsyncIterator[bytes]:
        """The archived lines a viewer asked for (a workflow step's with `step`). With tailLines
        the whole object streams through (S3 cannot count lines from the end) but memory holds
        only the kept tail."""
        bucket, key = archive_key(results_uri, step)
        body = await asyncio.to_thread(self._open, target, bucket, key)
        try:
            cutoff = None if query.since_seconds is None else time.time() - query.since_seconds
            tail: deque[bytes] | None = None
            if query.tail_lines is not None:
                tail = deque(maxlen=query.tail_lines)
            async for raw in _lines(body):
                if cutoff is not None and (line_time(raw) or cutoff) < cutoff:
                    continue
                if tail is not None:
                    tail.append(raw)  # shaped when served: most lines of a long log are dropped
                    continue
                yield shape_line(redact_line(raw), timestamps=query.timestamps)
            for raw in tail or ():
                yield shape_line(redact_line(raw), timestamps=query.timestamps)
        finally:
            await asyncio.to_thread(body.close)

    def _open(self, target: S3Target, bucket: str, key: str) -> Any:
        client = self._s3.client(target)
        try:
            return client.get_object(Bucket=bucket, Key=key)["Body"]
        except client.exceptions.NoSuchKey:
            raise ArchiveMissing(f"no archived log at s3://{bucket}/{key}") from None


async def _lines(body: Any) -> AsyncIterator[bytes]:
    pending = b""
    while True:
        chunk: bytes = await asyncio.to_thread(body.read, _CHUNK)
        if not chunk:
            break
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line[:MAX_LINE_BYTES] + b"\n"
        if len(pending) > MAX_LINE_BYTES:  # one giant line: cut it rather than hold it
            yield pending[:MAX_LINE_BYTES] + b"\n"
            pending = b""
    if pending:
        yield pending
