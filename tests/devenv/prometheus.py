"""A real Prometheus server on loopback, scraping the operator: for e2e tests, the demo and developers.

    prom = PrometheusServer.start(workdir, {"taobrev-operator": "http://127.0.0.1:8000/metrics"})
    prom.wait_targets_up()
    prom.query('sum by (verb) (taobrev_brev_cli_calls_total)')
    prom.stop()

or from a shell (runs until Ctrl-C):

    python -m tests.devenv.prometheus --target http://127.0.0.1:8000/metrics \
        --rules deploy/monitoring/prometheusrule.yaml

It runs the `prometheus` binary from PATH (Debian's `prometheus` package; `make system-deps`)
with a generated config and a throw-away TSDB under ``workdir``. Scrape jobs set
``honor_labels: true`` like deploy/monitoring's ServiceMonitor, so the operator's own
``namespace``/``instance`` labels reach the queries unchanged. Every wait polls an observable
signal (/-/ready, /api/v1/targets, query results) until a deadline.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.devenv.controlplane import _die_with_parent
from tests.devenv.ports import free_port

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
INSTALL_HINT = "install Debian's `prometheus` package (`make system-deps`, or apt-get install prometheus)"


class PrometheusError(RuntimeError):
    """Prometheus (or promtool) is missing, did not start, or an API call failed."""


def find_binary(name: str) -> str:
    """`prometheus` or `promtool` from PATH (Debian installs both in /usr/bin)."""
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").is_file() else None)
    if found is None:
        raise PrometheusError(f"`{name}` not found on PATH: {INSTALL_HINT}")
    return found


def rule_groups(prometheus_rule: Path) -> dict[str, Any]:
    """The Prometheus rule file (``{groups: [...]}``) inside a PrometheusRule manifest's ``spec``.

    The Prometheus operator hands exactly ``spec`` to Prometheus, so this is what promtool and a
    plain Prometheus server must load to evaluate the same alerts.
    """
    docs = [d for d in yaml.safe_load_all(prometheus_rule.read_text()) if d]
    rules = [d for d in docs if d.get("kind") == "PrometheusRule"]
    if len(rules) != 1:
        raise PrometheusError(f"{prometheus_rule}: expected one PrometheusRule, found {len(rules)}")
    spec: dict[str, Any] = rules[0]["spec"]
    return {"groups": spec["groups"]}


def write_rule_file(prometheus_rule: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(rule_groups(prometheus_rule), sort_keys=False))
    return dest


@dataclass(frozen=True)
class Sample:
    """One element of an instant-vector result."""

    labels: dict[str, str]
    value: float


def _scrape_config(job: str, url: str, interval: str) -> dict[str, Any]:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise PrometheusError(
            f"scrape target {url!r} for job {job!r} must be an http(s)://host:port/path URL"
        )
    return {
        "job_name": job,
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "scheme": parsed.scheme,
        "metrics_path": parsed.path or "/metrics",
        # As the ServiceMonitor's honorLabels: keep the operator's namespace/instance labels.
        "honor_labels": True,
        "static_configs": [{"targets": [parsed.netloc]}],
    }


class PrometheusServer:
    """A running Prometheus; ``start`` it, ``stop`` it (or use it as a context manager)."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, workdir: Path) -> None:
        self.proc = proc
        self.port = port
        self.workdir = workdir

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "prometheus.log"

    @classmethod
    def start(
        cls,
        workdir: Path,
        targets: Mapping[str, str],
        *,
        scrape_interval: str = "1s",
        rule_files: Sequence[Path] = (),
        timeout: float = READY_TIMEOUT_S,
        detach: bool = False,
    ) -> PrometheusServer:
        """Start Prometheus scraping ``targets`` ({job name: metrics URL}); return once /-/ready.

        ``rule_files`` are Prometheus rule files (see ``write_rule_file``), evaluated every
        ``scrape_interval``. ``detach=True`` lets the server outlive this process.
        """
        binary = find_binary("prometheus")
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "rule_files": [str(Path(r).resolve()) for r in rule_files],
            "scrape_configs": [_scrape_config(job, url, scrape_interval) for job, url in targets.items()],
        }
        config_path = workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        port = free_port()
        argv = [
            binary,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=info",
        ]
        log_path = workdir / "prometheus.log"
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=detach,
                preexec_fn=None if detach else _die_with_parent,  # noqa: PLW1509 - only calls prctl
            )
        server = cls(proc, port, workdir)
        try:
            server.wait_ready(timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log written)"
        return "\n".join(text.splitlines()[-lines:])

    def _fail(self, why: str) -> PrometheusError:
        return PrometheusError(
            f"Prometheus at {self.url} {why}; last lines of {self.log_path}:\n{self.log_tail()}"
        )

    def _check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise self._fail(f"exited with code {self.proc.returncode}")

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Until /-/ready answers 200 (TSDB open, config loaded)."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            with (
                contextlib.suppress(urllib.error.URLError, OSError),
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp,  # noqa: S310 - loopback
            ):
                if resp.status == 200:
                    return
            if time.monotonic() > deadline:
                raise self._fail(f"not ready after {timeout:.0f}s")
            time.sleep(0.1)

    # ---------------------------------------------------------------- HTTP API

    def api(self, path: str, params: Mapping[str, str] | Sequence[tuple[str, str]] = ()) -> Any:
        """GET /api/v1/<path>; returns `data`, raises with Prometheus's error otherwise."""
        query = urllib.parse.urlencode(params)
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback
                body = json.loads(resp.read())
        except urllib.error.HTTPError as e:
            # 400/422/503 carry {"status": "error", "errorType", "error"}.
            detail = e.read().decode(errors="replace")
            raise PrometheusError(f"GET {url}: HTTP {e.code}: {detail}") from e
        except (urllib.error.URLError, OSError) as e:
            self._check_alive()
            raise PrometheusError(f"GET {url}: {e}") from e
        if body.get("status") != "success":
            raise PrometheusError(f"GET {url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str) -> list[Sample]:
        """An instant query; the result as samples (scalars become one label-less sample)."""
        data = self.api("query", {"query": promql})
        if data["resultType"] == "vector":
            return [Sample(dict(r["metric"]), float(r["value"][1])) for r in data["result"]]
        if data["resultType"] == "scalar":
            return [Sample({}, float(data["result"][1]))]
        raise PrometheusError(f"query {promql!r} returned a {data['resultType']}, not an instant vector")

    def series(self, match: str, start: float, end: float | None = None) -> list[dict[str, str]]:
        """Every series matching ``match`` that had samples between ``start`` and ``end`` (Unix s)."""
        params = [("match[]", match), ("start", f"{start:.3f}"), ("end", f"{end or time.time():.3f}")]
        result: list[dict[str, str]] = self.api("series", params)
        return result

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self.api("targets", {"state": "active"})["activeTargets"]
        return active

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule (alerting and recording) with its health, lastError and state."""
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]

    # ---------------------------------------------------------------- waits

    def wait_until(self, probe: Callable[[], Any], what: str, timeout: float = 60) -> Any:
        """Poll ``probe()`` until it returns something truthy; return that."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            last = probe()
            if last:
                return last
            self._check_alive()
            if time.monotonic() > deadline:
                raise self._fail(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.2)

    def wait_targets_up(self, timeout: float = 60) -> list[dict[str, Any]]:
        """Until every configured target has been scraped successfully (health "up")."""

        def all_up() -> list[dict[str, Any]] | None:
            targets = self.targets()
            return targets if targets and all(t["health"] == "up" for t in targets) else None

        try:
            result: list[dict[str, Any]] = self.wait_until(all_up, "every scrape target to be up", timeout)
        except PrometheusError as e:
            states = [(t["scrapeUrl"], t["health"], t["lastError"]) for t in self.targets()]
            raise PrometheusError(f"{e}\ntargets (url, health, lastError): {states}") from e
        return result

    def wait_query(
        self, promql: str, predicate: Callable[[list[Sample]], bool], what: str, timeout: float = 60
    ) -> list[Sample]:
        """Re-run an instant query until ``predicate(samples)`` holds; return those samples."""
        seen: list[list[Sample]] = []

        def probe() -> list[Sample] | None:
            samples = self.query(promql)
            seen[:] = [samples]
            return samples if predicate(samples) else None

        try:
            result: list[Sample] = self.wait_until(probe, what, timeout)
        except PrometheusError as e:
            raise PrometheusError(f"{e}\nlast result of {promql!r}: {seen[0] if seen else None}") from e
        return result


@contextlib.contextmanager
def running(workdir: Path, targets: Mapping[str, str], **kwargs: Any) -> Iterator[PrometheusServer]:
    server = PrometheusServer.start(workdir, targets, **kwargs)
    try:
        yield server
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.devenv.prometheus", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--target", action="append", required=True, help="metrics URL to scrape (repeatable)")
    parser.add_argument(
        "--rules", type=Path, action="append", default=[], help="PrometheusRule manifest to load"
    )
    parser.add_argument(
        "--workdir", type=Path, default=Path.home() / ".cache" / "taobrev-operator" / "prometheus"
    )
    parser.add_argument("--scrape-interval", default="5s")
    args = parser.parse_args(argv)
    rule_files = [write_rule_file(r, args.workdir / "rules" / f"{r.stem}.rules.yaml") for r in args.rules]
    targets = {f"target-{i}": url for i, url in enumerate(args.target)}
    with running(args.workdir, targets, scrape_interval=args.scrape_interval, rule_files=rule_files) as prom:
        print(f"Prometheus at {prom.url} (log: {prom.log_path}); Ctrl-C stops it", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            prom.proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
