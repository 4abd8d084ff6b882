"""Run the operator as a separate process against the local stack, the way it runs in a cluster.

It authenticates with a ServiceAccount token from the TokenRequest API, bound only to the RBAC in
deploy/base, read from a non-default path (TAOBREV_KUBE_TOKEN_PATH), exactly like the Deployment's
projected token. Its only link to the Brev simulator is PATH (and HOME, the brev CLI's state).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.brevsim.harness import BrevSim
from tests.devenv.controlplane import ControlPlane
from tests.devenv.ports import free_port

REPO = Path(__file__).resolve().parents[2]
OPERATOR_NAMESPACE = "taobrev-system"
SERVICE_ACCOUNT = "taobrev-operator"
LOG_API_LOCAL_SERVICE = "taobrev-log-api-local"
BREV_SECRET = "taobrev-brev-credentials"

# Fast but realistic timing for a simulator running at a high speed factor.
FAST_SETTINGS: Mapping[str, str] = {
    "TAOBREV_POLL_INTERVAL": "0.5",
    "TAOBREV_LISTING_MAX_AGE": "0.3",
    "TAOBREV_CREATE_SETTLE": "5",
    "TAOBREV_BACKOFF_MAX": "5",
    "TAOBREV_WAIT_TIMEOUT": "30",
    # Leader election on, with a shorter lease than the 15 s default: a SIGKILLed operator's
    # successor waits for the dead holder's lease to expire (tests/e2e/test_leader_failover.py
    # runs with the defaults). Generous against a loaded CI machine: 3 s renew budget per try.
    "TAOBREV_LEADER_LEASE_DURATION": "8",
    "TAOBREV_LEADER_RENEW_DEADLINE": "6",
    "TAOBREV_LEADER_RETRY_PERIOD": "1",
}


def deployment_settings() -> dict[str, str]:
    """The env the Deployment gets from its ConfigMap (envFrom), so local runs match the cluster."""
    doc = yaml.safe_load((REPO / "deploy" / "base" / "config.yaml").read_text())
    return {str(k): str(v) for k, v in (doc.get("data") or {}).items()}


def install_operator_identity(cp: ControlPlane, sim: BrevSim, job_namespaces: Sequence[str] = ()) -> None:
    """deploy/base (namespace, ServiceAccount, RBAC, Deployment, Service) + the Brev Secret; for the
    (existing) job namespaces, their Secret-read RoleBindings (deploy/tools/job_namespaces.py) and
    deploy/components/namespaced-mode's grant (the local operator runs with TAOBREV_NAMESPACES)."""
    cp.kubectl("apply", "-k", str(REPO / "deploy" / "base"))
    if job_namespaces:
        cp.kubectl("apply", "-f", str(REPO / "deploy" / "components" / "namespaced-mode" / "rbac.yaml"))
        tool = REPO / "deploy" / "tools" / "job_namespaces.py"
        bindings = subprocess.run(
            [sys.executable, str(tool), *job_namespaces], capture_output=True, text=True, check=True
        ).stdout
        cp.kubectl("apply", "-f", "-", input=bindings)
    # Through stdin: the key never appears in an argv.
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": BREV_SECRET, "namespace": OPERATOR_NAMESPACE},
        "stringData": {"api-key": sim.API_KEY, "org-id": sim.ORG_ID},
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(secret))


@dataclass
class OperatorProcess:
    cp: ControlPlane
    sim: BrevSim
    workdir: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)
    # Where `python -m controller` runs from (its `controller` package is found first there):
    # another release's code for the upgrade test.
    code_dir: Path = REPO
    proc: subprocess.Popen[bytes] | None = None
    # Starts the command somewhere else (the bench's pod cgroup); it must exec it (same pid).
    wrap: Callable[[list[str]], list[str]] | None = None
    metrics_port: int = 0
    health_port: int = 0
    log_api_port: int = 0
    starts: int = 0

    @property
    def log_path(self) -> Path:
        return self.workdir / "operator.log"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def _write_token(self) -> Path:
        token = self.cp.service_account_token(OPERATOR_NAMESPACE, SERVICE_ACCOUNT, duration="2h")
        path = self.workdir / "kube" / "token"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(token)
        path.chmod(0o600)
        return path

    def env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("TAOBREV_", "KUBECONFIG"))}
        env = self.sim.env(base)
        # The Deployment's own settings first (deploy/base/config.yaml), then the local overrides.
        env.update(deployment_settings())
        env.update(FAST_SETTINGS)
        env.update(
            {
                "TAOBREV_KUBE_TOKEN_PATH": str(self._write_token()),
                "TAOBREV_KUBE_CA_PATH": str(self.cp.ca_file),
                "TAOBREV_KUBE_SERVER": self.cp.server,
                "TAOBREV_OPERATOR_NAMESPACE": OPERATOR_NAMESPACE,
                "TAOBREV_METRICS_HOST": "127.0.0.1",
                "TAOBREV_METRICS_PORT": str(self.metrics_port),
                "TAOBREV_LIVENESS_ENDPOINT": f"http://127.0.0.1:{self.health_port}/healthz",
                "TAOBREV_LOG_API_HOST": "127.0.0.1",
                "TAOBREV_LOG_API_PORT": str(self.log_api_port),
                "TAOBREV_LOG_API_CERT_DIR": str(self.cp.log_api_cert_dir),
                "TAOBREV_LOG_JSON": "true",
                "PYTHONUNBUFFERED": "1",
            }
        )
        # No KUBECONFIG and no default-path token: the explicit token path is the only way in.
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 60) -> OperatorProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.metrics_port = self.metrics_port or free_port()
        self.health_port = self.health_port or free_port()
        self.log_api_port = self.log_api_port or free_port()
        log = self.log_path.open("ab")
        cmd = [sys.executable, "-m", "controller"]
        self.proc = subprocess.Popen(
            self.wrap(cmd) if self.wrap is not None else cmd,
            cwd=self.code_dir,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.starts += 1
        self._wait_healthy(timeout)
        if self.code_dir == REPO:
            self.route_log_api()
        return self

    def route_log_api(self) -> None:
        """Point kube-apiserver's APIService for logs.taobrev.io at this process's log API.

        In a cluster the APIService names the Service in front of the operator Pods; here there are
        no Pods and no kube-proxy, so a Service of type ExternalName (`localhost`) stands in, which
        kube-apiserver resolves itself, and the APIService verifies the operator's certificate
        through caBundle. Client-side apply, like deploy/base's, so the next `kubectl apply -k
        deploy/base` turns it back into the base's form cleanly."""
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": LOG_API_LOCAL_SERVICE, "namespace": OPERATOR_NAMESPACE},
            "spec": {
                "type": "ExternalName",
                "externalName": "localhost",
                "ports": [{"name": "log-api", "port": self.log_api_port}],
            },
        }
        api_service = {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {
                "name": "v1alpha1.logs.taobrev.io",
                "labels": {"app.kubernetes.io/name": "taobrev-operator"},
            },
            "spec": {
                "group": "logs.taobrev.io",
                "version": "v1alpha1",
                "service": {
                    "name": LOG_API_LOCAL_SERVICE,
                    "namespace": OPERATOR_NAMESPACE,
                    "port": self.log_api_port,
                },
                "groupPriorityMinimum": 1000,
                "versionPriority": 15,
                "insecureSkipTLSVerify": False,
                "caBundle": base64.b64encode(self.cp.ca_file.read_bytes()).decode(),
            },
        }
        for obj in (service, api_service):
            self.cp.kubectl("apply", "-f", "-", input=json.dumps(obj))
        self.cp.kubectl(
            "wait", "apiservice/v1alpha1.logs.taobrev.io", "--for=condition=Available", "--timeout=60s"
        )

    def _wait_healthy(self, timeout: float) -> None:
        url = f"http://127.0.0.1:{self.health_port}/healthz"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"operator not healthy after {timeout}s:\n{self.log_tail()}")

    def wait_leading(self, timeout: float = 60) -> None:
        """Until this process holds the leader Lease and its deferred `brev login` has run (its
        first `brev ls` is counted): from then on it acts, as the single operator did at start-up.
        A previous test's SIGKILLed operator may hold the Lease until it expires."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.metrics_url, timeout=2) as resp:  # noqa: S310 - loopback
                    text = resp.read().decode()
            except OSError:
                text = ""
            lines = text.splitlines()
            if "taobrev_leader 1.0" in lines and any(
                ln.startswith("taobrev_brev_cli_calls_total{") and 'verb="ls"' in ln for ln in lines
            ):
                return
            time.sleep(0.1)
        raise RuntimeError(f"operator did not become the leader within {timeout}s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no cleanup handlers run, as in an OOM kill or a node loss."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 20) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
