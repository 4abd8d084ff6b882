"""Log followers for the footprint scenario: one `kubectl taobrev logs -f` equivalent per chosen
job (a streaming GET of the log API through kube-apiserver, as the admin), held open while the
operator's memory and CPU are measured, so the figures include one remote stream (an ssh client
in the operator's pod) per followed job. Threads, not kubectl processes: the viewers are not part
of the pod being measured, and 100 kubectl processes would only load the bench machine."""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
import urllib.request
from urllib.parse import urlparse

from tests.bench.stack import Scenario

LOG_API = "/apis/logs.taobrev.io/v1alpha1"


class LogViewers:
    def __init__(self, sc: Scenario, jobs: list[str]) -> None:
        self._sc = sc
        self._jobs = jobs
        self._stop = threading.Event()
        self._conns: list[http.client.HTTPSConnection] = []
        self._lock = threading.Lock()
        self.errors: list[str] = []
        self._threads = [threading.Thread(target=self._follow, args=(j,), daemon=True) for j in jobs]

    def start(self) -> LogViewers:
        for t in self._threads:
            t.start()
        return self

    def _follow(self, job: str) -> None:
        cp = self._sc.stack.cp
        url = urlparse(cp.server)
        ctx = ssl.create_default_context(cafile=str(cp.ca_file))
        conn = http.client.HTTPSConnection(url.hostname or "127.0.0.1", url.port, context=ctx, timeout=None)
        with self._lock:
            self._conns.append(conn)
        path = (
            f"{LOG_API}/namespaces/{self._sc.stack.namespace}/taobrevjobs/{job}/log?follow=true&tailLines=10"
        )
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {cp.admin_token}"})
            resp = conn.getresponse()
            if resp.status != 200:
                self.errors.append(f"{job}: HTTP {resp.status} {resp.read(300)!r}")
                return
            while not self._stop.is_set() and resp.read1(65536):
                pass
        except (OSError, http.client.HTTPException) as exc:
            if not self._stop.is_set():
                self.errors.append(f"{job}: {exc}")
        finally:
            conn.close()

    def wait_streams(self, metrics_url: str, timeout: float) -> int:
        """Until the operator holds one remote stream per followed job (its own gauge); the count."""
        deadline, seen = time.monotonic() + timeout, 0
        while time.monotonic() < deadline:
            seen = _gauge(metrics_url, "taobrev_log_api_streams")
            if seen >= len(self._jobs) or self.errors:
                return seen
            self._stop.wait(1.0)
        return seen

    def close(self) -> None:
        """Shut the sockets down (a blocked read returns at once; `close()` from here would wait
        for the reading thread's buffer lock), then let each thread close its own."""
        self._stop.set()
        with self._lock:
            for conn in self._conns:
                if conn.sock is not None:
                    with contextlib.suppress(OSError):
                        conn.sock.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(5)


def _gauge(url: str, name: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - the operator on loopback
            text = resp.read().decode()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    return 0
