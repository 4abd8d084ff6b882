"""Running containers' logs, one remote stream per job however many people watch it.

A `Follower` runs `docker logs -t --tail BACKLOG <container>` and then `docker logs -f -t --since T`
(T taken before the first, so no line is lost between them; a line the second repeats is skipped
by its timestamp) on the instance over its own ssh session, and keeps the last BACKLOG lines; each
viewer waits for the first part, gets those lines (cut by its tailLines and sinceSeconds) and then
every new line through its own bounded queue. A viewer whose queue fills
(a slow or vanished client) is dropped with a last line saying so: it never slows the stream,
the other viewers or the job's passes, which use other ssh sessions. The last viewer leaving
ends the remote stream after a short linger (a re-attaching `-f` finds it still warm).

Every line is redacted (the registered secret values and credential-looking text) before it is
kept, so no viewer and no backlog ever holds a secret the operator knows of.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shlex
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import structlog

from controller.brev.spawn import Child
from controller.brev.sshmux import SSH_CONNECTION_FAILED
from controller.logapi.protocol import MAX_LINE_BYTES, LogQuery, shape_line, split_timestamp
from controller.observability.logs import redact_text

log = structlog.get_logger("taobrev.logapi")

_TURNS = 20
# The longest a stream waits for its container to exist (its start was recorded before `docker run`).
CONTAINER_APPEAR_S = 60
SLOW_VIEWER = b"[taobrev] this viewer fell too far behind the log and was cut off: follow again\n"


@dataclass(frozen=True)
class LogTarget:
    """Where a running job's container is: (namespace, name, attempt) names the stream."""

    namespace: str
    name: str
    attempt: int
    instance: str
    container: str


# (instance, remote command) -> a started process whose stdout is the stream.
OpenStream = Callable[[str, str], Awaitable[Child]]
RefreshAlias = Callable[[float], Awaitable[None]]


def redact_line(line: bytes) -> bytes:
    text = line.decode("utf-8", errors="replace")
    return redact_text(text).encode()


def stamp_ns(stamp: bytes) -> int | None:
    """docker's RFC3339Nano time (trailing zeros of the fraction dropped) as Unix nanoseconds."""
    text = stamp.decode(errors="replace").rstrip("Z")
    whole, _, frac = text.partition(".")
    try:
        seconds = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
        nanos = int((frac + "000000000")[:9]) if frac else 0
    except ValueError:
        return None
    return int(seconds) * 1_000_000_000 + nanos


def line_time(line: bytes) -> float | None:
    stamp, _ = split_timestamp(line)
    ns = stamp_ns(stamp) if stamp else None
    return None if ns is None else ns / 1e9


def select_backlog(lines: list[bytes], query: LogQuery, now: float) -> list[bytes]:
    """The stamped lines a viewer starts with: newer than sinceSeconds, then the last tailLines."""
    if query.since_seconds is not None:
        cutoff = now - query.since_seconds
        lines = [line for line in lines if (line_time(line) or now) >= cutoff]
    if query.tail_lines is not None:
        lines = lines[-query.tail_lines :] if query.tail_lines else []
    return lines


@dataclass(eq=False)
class _Viewer:
    queue: asyncio.Queue[bytes | None]
    dropped: bool = False


@dataclass(eq=False)
class Follower:
    target: LogTarget
    backlog: deque[bytes]
    viewers: set[_Viewer] = field(default_factory=set)
    task: asyncio.Task[None] | None = None
    primed: asyncio.Event = field(default_factory=asyncio.Event)  # the backlog part has arrived
    joining: int = 0  # viewers waiting for the backlog part (not in `viewers` yet)
    ended: bool = False
    idle_since: float | None = None
    last_ns: int = 0  # the newest line's time: the follow part skips what the backlog had


class LogHub:
    """The followers of one operator process, keyed by (namespace, name, attempt)."""

    def __init__(
        self,
        open_stream: OpenStream,
        refresh_alias: RefreshAlias,
        *,
        backlog_lines: int = 5000,
        viewer_queue_lines: int = 4096,
        linger_s: float = 30.0,
        max_followers: int = 200,
        prime_timeout_s: float = 60.0,
    ) -> None:
        self._open = open_stream
        self._refresh = refresh_alias
        self._backlog_lines = backlog_lines
        self._queue_lines = viewer_queue_lines
        self._linger_s = linger_s
        self._max_followers = max_followers
        self._prime_timeout_s = prime_timeout_s
        self._followers: dict[tuple[str, str, int, str], Follower] = {}
        self.streams_opened = 0  # remote streams started since start-up (tests and metrics read it)

    @property
    def followers(self) -> int:
        return len(self._followers)

    @property
    def viewers(self) -> int:
        return sum(len(f.viewers) for f in self._followers.values())

    async def follow(self, target: LogTarget, query: LogQuery) -> AsyncIterator[bytes]:
        """The container's log for one viewer: its backlog, then (with query.follow) live lines
        until the container exits (the remote stream ends), each shaped by the query."""
        follower = self._follower(target)
        follower.joining += 1
        follower.idle_since = None
        viewer = _Viewer(asyncio.Queue(self._queue_lines))
        try:
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(follower.primed.wait(), self._prime_timeout_s)
            finally:
                follower.joining -= 1
            if not follower.primed.is_set():
                raise StreamUnavailable(f"the log of {target.container} on {target.instance} did not arrive")
            # The snapshot and the joining happen with no await between them: every line after the
            # snapshot reaches the queue, none twice (a viewer that joined earlier and read the
            # backlog later saw lines in both).
            start = list(follower.backlog)
            live = query.follow and not follower.ended  # an ended stream sends no end mark again
            if live:
                follower.viewers.add(viewer)
            for line in select_backlog(start, query, time.time()):
                yield shape_line(line, timestamps=query.timestamps)
            if not live:
                return
            while (got := await viewer.queue.get()) is not None:
                yield shape_line(got, timestamps=query.timestamps)
            if viewer.dropped:
                yield SLOW_VIEWER
        finally:
            follower.viewers.discard(viewer)
            if not follower.viewers and not follower.joining:
                follower.idle_since = time.monotonic()
                asyncio.get_running_loop().call_later(self._linger_s, self._reap, target)

    def _key(self, target: LogTarget) -> tuple[str, str, int, str]:
        # The container too: a workflow's steps are containers of one attempt.
        return (target.namespace, target.name, target.attempt, target.container)

    def _follower(self, target: LogTarget) -> Follower:
        key = self._key(target)
        follower = self._followers.get(key)
        if follower is not None and not follower.ended:
            return follower
        if len(self._followers) >= self._max_followers:
            self._reap_idle()
        if len(self._followers) >= self._max_followers:
            raise TooManyStreams(
                f"this replica follows {len(self._followers)} jobs' logs already (the limit); "
                "try again when a viewer leaves"
            )
        follower = Follower(target, deque(maxlen=self._backlog_lines))
        follower.task = asyncio.create_task(self._pump(follower), name=f"log {key}")
        self._followers[key] = follower
        self.streams_opened += 1
        return follower

    def _reap(self, target: LogTarget) -> None:
        follower = self._followers.get(self._key(target))
        if follower is None or follower.viewers or follower.joining or follower.idle_since is None:
            return
        if time.monotonic() - follower.idle_since + 0.01 >= self._linger_s:
            self._stop(follower)

    def _reap_idle(self) -> None:
        for follower in [f for f in self._followers.values() if not f.viewers and not f.joining]:
            self._stop(follower)

    def _stop(self, follower: Follower) -> None:
        self._followers.pop(self._key(follower.target), None)
        if follower.task is not None:
            follower.task.cancel()

    async def close(self) -> None:
        followers = list(self._followers.values())
        for follower in followers:
            self._stop(follower)
        for follower in followers:
            if follower.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await follower.task

    async def _pump(self, follower: Follower) -> None:
        target = follower.target
        # A random marker: a training that prints a marker-looking line cannot end its stream.
        marker = f"__taobrev_log_{secrets.token_hex(6)}__"
        name = shlex.quote(target.container)
        # status.attempts[].run.startedAt is written before `docker run`: a viewer arriving in
        # between got "No such container" and an ended stream. Wait for it, up to a bound.
        command = (
            f"n=0; until docker inspect --type container {name} >/dev/null 2>&1 "
            f'|| [ "$n" -ge {CONTAINER_APPEAR_S} ]; do sleep 1; n=$((n + 1)); done; '
            "since=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ); "
            f"docker logs -t --tail {self._backlog_lines} {name} 2>&1; printf '\\n%s\\n' {marker}; "
            f"docker logs -f -t --since \"$since\" {name} 2>&1; printf '\\n%s\\n' {marker}"
        )
        try:
            for attempt in (1, 2):
                opened = time.monotonic()
                proc = await self._open(target.instance, command)
                try:
                    got_any = await self._read(follower, proc, marker.encode())
                finally:
                    await _end(proc)
                if got_any or proc.returncode != SSH_CONNECTION_FAILED or attempt == 2:
                    break
                await self._refresh(opened)  # the alias may be unknown to this replica's ssh config
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken stream ends the viewers' responses, not the operator
            log.warning("log_stream_failed", job=f"{target.namespace}/{target.name}", error=str(exc)[:300])
        finally:
            follower.ended = True
            follower.primed.set()  # waiting viewers get what arrived, then the end
            if self._followers.get(self._key(target)) is follower:
                self._followers.pop(self._key(target), None)
            for viewer in follower.viewers:
                _offer(viewer, None)

    async def _read(self, follower: Follower, proc: Child, marker: bytes) -> bool:
        assert proc.stdout is not None
        got_any = False
        while True:
            try:
                raw = await proc.stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                raw = exc.partial
                if not raw:
                    return got_any
            except asyncio.LimitOverrunError as exc:
                raw = await proc.stdout.readexactly(exc.consumed)  # a giant line: cut, then resync
                raw = raw[:MAX_LINE_BYTES] + b"\n"
            got_any = True
            if raw.rstrip(b"\n") == marker:
                if follower.primed.is_set():
                    return got_any
                follower.primed.set()
                continue
            if raw == b"\n":
                continue  # the newline before a marker (the log may not end with one)
            stamp, _ = split_timestamp(raw)
            ns = stamp_ns(stamp) if stamp else None
            if ns is not None:
                if follower.primed.is_set() and ns <= follower.last_ns:
                    continue  # the backlog part had it
                follower.last_ns = max(follower.last_ns, ns)
            line = redact_line(raw)
            follower.backlog.append(line)
            if follower.primed.is_set():
                await _fan_out(follower, line)


async def _fan_out(follower: Follower, line: bytes) -> None:
    # A burst arrives faster than any viewer is scheduled: give full queues a few turns of the
    # loop before calling their viewers slow (one that does not read stays full).
    for _ in range(_TURNS):
        if not any(v.queue.full() for v in follower.viewers):
            break
        await asyncio.sleep(0)
    for viewer in list(follower.viewers):
        if not _offer(viewer, line):
            viewer.dropped = True
            follower.viewers.discard(viewer)
            _force(viewer.queue)


class TooManyStreams(Exception):
    """The replica's follower limit is reached (answered 429)."""


class StreamUnavailable(Exception):
    """The instance did not send the log in time (answered 503)."""


def _offer(viewer: _Viewer, line: bytes | None) -> bool:
    try:
        viewer.queue.put_nowait(line)
    except asyncio.QueueFull:
        if line is None:
            _force(viewer.queue)
        return False
    return True


def _force(queue: asyncio.Queue[bytes | None]) -> None:
    """Make room for the end-of-stream mark (the viewer is being cut off anyway)."""
    with contextlib.suppress(asyncio.QueueEmpty):
        queue.get_nowait()
    queue.put_nowait(None)


async def _end(proc: Child) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(proc.wait(), 5.0)
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
