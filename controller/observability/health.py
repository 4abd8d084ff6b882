"""Liveness that means progress: a watchdog over reconcile passes, served as `/healthz`.

kopf's own endpoint answers 200 while the event loop runs, even when every pass is stuck on a
hung call. Here each job's driver tells the `Watchdog` when a pass starts and when it ends (with
the delay until the next one); `/healthz` answers 500 once any job is overdue:

- a pass has run longer than `pass_ceiling` (the longest legitimate pass: a pull plus an exec), or
- a job's next pass is `grace` seconds later than it was due (its driver stopped coming back).

With no jobs there is nothing to be late, so an idle operator stays healthy. The server runs in a
thread of its own, so a blocked event loop turns it red instead of silencing it.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Overdue jobs named in a red answer (enough to debug, bounded for a large fleet).
_REPORTED = 10


@dataclass
class _Job:
    running_since: float | None = None
    due_at: float | None = None


@dataclass(frozen=True)
class Overdue:
    key: str
    what: str  # "pass running" or "pass late"
    seconds: float  # beyond the allowed bound


class Watchdog:
    """Per-job pass bookkeeping; thread-safe (fed from the event loop, read by the HTTP thread)."""

    def __init__(
        self, *, grace: float, pass_ceiling: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if grace <= 0 or pass_ceiling <= 0:
            raise ValueError("watchdog bounds must be positive (grace, pass_ceiling)")
        self._grace = grace
        self._ceiling = pass_ceiling
        self._clock = clock
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self.started = False  # set once the operator finished start-up

    def pass_started(self, key: str) -> None:
        with self._lock:
            self._jobs.setdefault(key, _Job()).running_since = self._clock()

    def pass_finished(self, key: str, next_in: float | None) -> None:
        """The pass ended (well or with an error); `next_in` None: the job needs no more passes."""
        with self._lock:
            if next_in is None:
                self._jobs.pop(key, None)
                return
            job = self._jobs.setdefault(key, _Job())
            job.running_since = None
            job.due_at = self._clock() + max(next_in, 0.0)

    def forget(self, key: str) -> None:
        with self._lock:
            self._jobs.pop(key, None)

    def overdue(self) -> list[Overdue]:
        now = self._clock()
        out: list[Overdue] = []
        with self._lock:
            for key, job in self._jobs.items():
                if job.running_since is not None:
                    late = now - job.running_since - self._ceiling
                    if late > 0:
                        out.append(Overdue(key, "pass running", late))
                elif job.due_at is not None:
                    late = now - job.due_at - self._grace
                    if late > 0:
                        out.append(Overdue(key, "pass late", late))
        return sorted(out, key=lambda o: -o.seconds)

    def report(self) -> tuple[bool, dict[str, Any]]:
        """(healthy, JSON-able detail) for the probe."""
        if not self.started:
            return False, {"ok": False, "reason": "starting"}
        late = self.overdue()
        with self._lock:
            jobs = len(self._jobs)
        detail: dict[str, Any] = {"ok": not late, "jobs": jobs}
        if late:
            detail["overdue"] = [
                {"job": o.key, "what": o.what, "overdueSeconds": round(o.seconds, 1)}
                for o in late[:_REPORTED]
            ]
        return not late, detail


def serve_health(watchdog: Watchdog, endpoint: str) -> ThreadingHTTPServer:
    """Serve `endpoint` (http://host:port/path) from `watchdog` in a daemon thread."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme != "http" or parts.port is None:
        raise ValueError(f"TAOBREV_LIVENESS_ENDPOINT={endpoint!r} must look like http://0.0.0.0:8080/healthz")
    path = parts.path or "/"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != path:
                self.send_error(404)
                return
            ok, detail = watchdog.report()
            body = json.dumps(detail).encode()
            self.send_response(200 if ok else 500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # silence per-probe access lines
            return

    server = ThreadingHTTPServer((parts.hostname or "0.0.0.0", parts.port), Handler)  # noqa: S104
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="healthz", daemon=True).start()
    return server
