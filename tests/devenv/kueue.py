"""The real kueue-controller-manager against the local control plane (docs/kueue.md, e2e tier).

The binary comes from the Go module proxy (tests/devenv/kueuebuild.py); its CRDs and webhook
configuration from the same module's config/ (config/components/crd/bases,
config/components/webhook/manifests.yaml), so they always match the binary.

Wiring, as a cluster would have it but on loopback:
- webhooks: served by Kueue on 127.0.0.1 with a certificate for `localhost` signed by the devenv CA
  (tests/devenv/pki.py); the webhook configurations point at https://localhost:<port><path> with
  that CA as caBundle. Kueue's internal cert management is off. Only the entries for Kueue's own
  API group are installed: the others guard Pods, Jobs, Deployments ... of integrations this
  Configuration does not enable, and in a shared control plane they would only add a failure point
  for other tests (they are removed again in `stop`).
- Kueue v0.17.0 reads its metrics serving certificate from the fixed path
  /etc/kueue/metrics/certs whenever internal cert management is off (cmd/kueue/main.go), and exits
  if it is missing. Rather than write into the host's /etc, Kueue runs in a private mount namespace
  (`unshare --user --map-root-user --mount`, no privilege needed) where a read-only overlay puts
  that directory over /etc; the metrics endpoint itself is off (bindAddress "0").
- For the same reason the on-demand visibility API server (certificates from /visibility) is
  off (feature gate VisibilityOnDemand=false): the tests read positions from Workloads instead.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.devenv import kueuebuild
from tests.devenv.controlplane import ControlPlane, _log_tail, _spawn, _terminate_child
from tests.devenv.pki import Pki, issue_log_api_cert
from tests.devenv.ports import free_port

GROUP = "kueue.x-k8s.io"
NAMESPACE = "kueue-system"
READY_TIMEOUT_S = 90.0
# The Configuration's integrations: the default framework, plus the operator's kind registered as
# externally managed (docs/kueue.md shows the same snippet; Kueue validates its format).
EXTERNAL_FRAMEWORK = "TaoBrevJob.v1alpha1.taobrev.io"


def _log(msg: str) -> None:
    print(f"[kueue] {msg}", file=sys.stderr, flush=True)


def webhook_configurations(module: Path, port: int, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's webhook configurations from config/, its own API group only, pointed at loopback."""
    docs = list(yaml.safe_load_all((module / "config/components/webhook/manifests.yaml").read_text()))
    out: list[dict[str, Any]] = []
    for doc in docs:
        hooks = [w for w in doc["webhooks"] if any(GROUP in r["apiGroups"] for r in w["rules"])]
        for hook in hooks:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://localhost:{port}{path}", "caBundle": ca_bundle}
        # kustomize's namePrefix in config/default gives the installed names.
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        doc["webhooks"] = hooks
        out.append(doc)
    return out


class KueueProcess:
    """kueue-controller-manager for one control plane: `start`, then `stop`."""

    def __init__(self, cp: ControlPlane, workdir: Path) -> None:
        self.cp = cp
        self.workdir = workdir
        self.log = workdir / "kueue.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.webhook_port = free_port()
        self.health_port = free_port()
        self._configs: list[str] = []

    def start(self) -> KueueProcess:
        binary = kueuebuild.build()
        module = kueuebuild.module_dir()
        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        certs = self._certs()
        self.cp.apply_crds(module / "config/components/crd/bases")
        if self.cp.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0:
            self.cp.create_namespace(NAMESPACE)
        config = self.workdir / "config.yaml"
        config.write_text(yaml.safe_dump(self._configuration(certs)))
        # /etc/kueue/metrics/certs inside Kueue's own mount namespace (module docstring).
        etc = self.workdir / "etc-overlay"
        metrics = etc / "kueue/metrics/certs"
        metrics.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(certs / name, metrics / name)
        if shutil.which("unshare") is None:
            raise RuntimeError("`unshare` (util-linux) is required to run Kueue in the dev environment")
        argv = [
            "unshare", "--user", "--map-root-user", "--mount", "--propagation", "private",
            "sh", "-c", f'mount -t overlay overlay -o lowerdir={etc}:/etc /etc && exec "$0" "$@"',
            str(binary), f"--config={config}", "--feature-gates=VisibilityOnDemand=false",
            f"--kubeconfig={self.cp.kubeconfig}", "--zap-log-level=info",
        ]  # fmt: skip
        self.proc = _spawn(argv, self.log, detach=False)
        self._wait_ready(began)
        for doc in webhook_configurations(module, self.webhook_port, self._ca_bundle()):
            self.cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(doc))
            self._configs.append(f"{doc['kind'].lower()}/{doc['metadata']['name']}")
        self._wait_webhooks(began)
        took = time.monotonic() - began
        _log(f"kueue-controller-manager ready in {took:.1f}s (webhooks on :{self.webhook_port})")
        return self

    def stop(self) -> None:
        for name in self._configs:  # no webhook left pointing at a stopped server
            self.cp.kubectl("delete", name, "--ignore-not-found", check=False)
        self._configs.clear()
        if self.proc is not None:
            _terminate_child(self.proc)

    def log_tail(self, lines: int = 40) -> str:
        return _log_tail(self.log, lines)

    # -- internals --------------------------------------------------------------------------------

    def _certs(self) -> Path:
        pki_dir = self.cp.workdir / "pki"
        pki = Pki(
            ca_cert=pki_dir / "ca.crt",
            ca_key=pki_dir / "ca.key",
            serving_cert=pki_dir / "apiserver.crt",
            serving_key=pki_dir / "apiserver.key",
            service_account_key=pki_dir / "service-account.key",
            front_proxy_ca=pki_dir / "front-proxy-ca.crt",
            front_proxy_client_cert=pki_dir / "front-proxy-client.crt",
            front_proxy_client_key=pki_dir / "front-proxy-client.key",
        )
        return issue_log_api_cert(pki, self.workdir / "certs", ["localhost"])

    def _ca_bundle(self) -> str:
        return base64.b64encode(self.cp.ca_file.read_bytes()).decode()

    def _configuration(self, certs: Path) -> dict[str, Any]:
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": self.webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "integrations": {"frameworks": ["batch/job"], "externalFrameworks": [EXTERNAL_FRAMEWORK]},
        }

    def _alive(self, what: str) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"kueue-controller-manager exited with {self.proc.returncode} {what}:\n{self.log_tail()}"
            )

    def _wait_ready(self, began: float) -> None:
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        while True:
            self._alive("while starting")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() - began > READY_TIMEOUT_S:
                raise RuntimeError(
                    f"kueue-controller-manager not ready after {READY_TIMEOUT_S}s:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def _wait_webhooks(self, began: float) -> None:
        """Until kube-apiserver reaches Kueue's webhooks (a server-side dry run goes through them)."""
        probe = {
            "apiVersion": f"{GROUP}/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "webhook-probe"},
        }
        while True:
            self._alive("while its webhooks were being wired")
            done = self.cp.kubectl(
                "create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False
            )
            if done.returncode == 0:
                return
            if time.monotonic() - began > READY_TIMEOUT_S:
                raise RuntimeError(
                    f"kube-apiserver cannot reach Kueue's webhooks: {done.stderr.strip()}\n{self.log_tail()}"
                )
            time.sleep(0.3)
