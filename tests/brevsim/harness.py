"""`BrevSim`: the harness tests and demos use to run the simulator (SIM-CONTRACT.md).

    sim = BrevSim(tmp_path, speed=0.01, s3_endpoint=url)
    sim.login_api_key()                      # or sim.login_as_user("user-bob"): a token login
    sim.set_faults(ls_omit={"job-1": 2})     # declared knobs only (faults.py); a typo raises
    subprocess.run(["brev", "ls", "--json"], env=sim.env(), stdin=subprocess.DEVNULL)

`root/bin` holds `brev` with the state directory baked in, and recording wrappers that exec the
real OpenSSH `ssh`/`ssh-agent`, so a process needs nothing but PATH; `root/home` is a HOME for the
CLI's ~/.brev. The harness starts ONE daemon process (daemon.py: every instance's sshd on
loopback, every detached TAO container); `close()` (also at interpreter exit, and by the daemon
itself when the harness process dies) stops it and kills every process the simulator started.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pwd
import secrets
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.brevsim import container, control, launch, reaper
from tests.brevsim import faults as knobs
from tests.brevsim.auth import jwt_valid_client_side, mint_jwt
from tests.brevsim.backend import new_record
from tests.brevsim.model import NOMINAL, observe
from tests.brevsim.store import Store, flocked, read_json, write_json


@dataclass(frozen=True)
class SimCall:
    program: str
    argv: list[str]
    where: str  # "local" | "remote"
    instance: str | None
    ts: float
    stdin_bytes: int


class BrevSim:
    API_KEY = "bak-sim-0123456789abcdef"
    ORG_ID = "org-sim"
    USER_ID = "user-sim"  # the user behind the API key and the default token login
    CLI_VERSION = "v0.6.327"

    def __init__(
        self, root: Path, *, speed: float = 0.01, s3_endpoint: str | None = None, detach: bool = False
    ) -> None:
        """`detach=True`: the daemon outlives this process (a demo kept running); stop it with
        `BrevSim(root).close()` later. Otherwise it dies with this process, however it ends."""
        self.root = Path(root)
        self.bin_dir = self.root / "bin"
        self.home = self.root / "home"
        self.state_dir = self.root / "state"
        for d in (self.bin_dir, self.home, self.state_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.store = Store(self.state_dir)
        config = read_json(self.store.config_path, {})
        config.update(
            {
                "speed": speed,
                "python": sys.executable,
                "api_key": self.API_KEY,
                "org_id": self.ORG_ID,
                "org_name": self.ORG_ID,
                "user_id": self.USER_ID,
                "email": "sim@example.com",
                "secret": config.get("secret") or secrets.token_hex(16),
                "version": self.CLI_VERSION,
                "s3_endpoint": s3_endpoint,
            }
        )
        write_json(self.store.config_path, config)
        self.store._config = None
        launch.write_local_bin(self.store, self.bin_dir)
        self.s3_endpoint = s3_endpoint
        self._daemon: subprocess.Popen[bytes] | None = None
        self._detached: subprocess.Popen[bytes] | None = None
        self._start_daemon(detach)

    # -- the daemon (sshd + containers) and reaping -------------------------------------------
    def _start_daemon(self, detach: bool) -> None:
        # OpenSSH puts ControlPath `~/.ssh/...` under the passwd home, whatever $HOME says; a
        # missing directory there is fatal to every multiplexed ssh (as on a fresh machine).
        (Path(pwd.getpwuid(os.getuid()).pw_dir) / ".ssh").mkdir(mode=0o700, exist_ok=True)
        if control.ping(self.state_dir):
            return  # another harness object of this root runs it (demo cleanup)
        argv = container.bootstrap(sys.executable, "tests.brevsim.daemon", str(self.state_dir), site=True)
        argv += ["--detach"] if detach else []
        with (self.state_dir / "daemon.log").open("ab") as log:
            self._daemon = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=control.marked_env(self.state_dir),
                start_new_session=True,
                cwd="/",
            )
        assert self._daemon.stdout is not None
        line = self._daemon.stdout.readline()
        self._daemon.stdout.close()
        if not line.startswith(b"ready"):
            code = self._daemon.wait()
            log_text = (self.state_dir / "daemon.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the simulator daemon failed to start (exit {code}):\n{log_text}")
        if detach:
            self._detached, self._daemon = self._daemon, None  # close() still reaps it by its marker
            return
        atexit.register(self.close)

    @property
    def daemon_pid(self) -> int | None:
        return self._daemon.pid if self._daemon is not None else None

    def _poke(self) -> None:
        """Listeners follow a clock/fault change now rather than at the daemon's next tick."""
        with contextlib.suppress(control.DaemonDown, OSError):
            control.request(self.state_dir, "reconcile")

    def processes(self) -> list[int]:
        """Pids of every live process this simulator started (daemon included)."""
        return reaper.marked(self.state_dir)

    def close(self) -> None:
        """Stop the daemon and kill every process the simulator started. Idempotent."""
        daemon, self._daemon = self._daemon, None
        if daemon is not None:
            with contextlib.suppress(control.DaemonDown, OSError, RuntimeError):
                control.request(self.state_dir, "stop", timeout=5)
            try:
                daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
            with contextlib.suppress(ValueError):
                atexit.unregister(self.close)
        else:
            # a detached daemon (or another harness object's): ask it to wind down first
            with contextlib.suppress(control.DaemonDown, OSError, RuntimeError):
                control.request(self.state_dir, "stop", timeout=5)
        reaper.reap(self.state_dir)

    # -- environment ---------------------------------------------------------------------------
    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env["PATH"] = f"{self.bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
        env["HOME"] = str(self.home)
        return env

    @property
    def speed(self) -> float:
        return float(read_json(self.store.config_path, {}).get("speed", 1.0))

    def set_speed(self, speed: float) -> None:
        config = read_json(self.store.config_path, {})
        config["speed"] = speed
        write_json(self.store.config_path, config)
        self._poke()

    def advance(self, nominal_seconds: float) -> None:
        """Move the simulated clock (instance lifecycles only) forward by nominal seconds."""
        path = self.state_dir / "clock.json"
        with flocked(self.state_dir / "db.lock"):
            clock = read_json(path, {"offset": 0.0})
            clock["offset"] = float(clock.get("offset", 0.0)) + nominal_seconds * self.speed
            write_json(path, clock)
        self._poke()

    # -- faults ----------------------------------------------------------------------------------
    def set_faults(self, **faults: object) -> None:
        """Set knobs declared in faults.py (durations in nominal seconds, and faults); an
        undeclared name raises UnknownFault naming the closest declared one."""
        knobs.check(faults)
        with flocked(self.state_dir / "faults.lock"):
            current = read_json(self.store.faults_path, {})
            current.update(faults)
            write_json(self.store.faults_path, current)
        self._poke()

    def clear_faults(self) -> None:
        with flocked(self.state_dir / "faults.lock"):
            write_json(self.store.faults_path, {})
        self._poke()

    # -- credentials (what `brev login` leaves behind) ---------------------------------------------
    def login_api_key(self) -> None:
        brev = self.home / ".brev"
        brev.mkdir(parents=True, exist_ok=True)
        creds = {
            "access_token": "",
            "refresh_token": "",
            "api_key": self.API_KEY,
            "api_key_org_id": self.ORG_ID,
        }
        write_json(brev / "credentials.json", creds)
        Path(brev / "credentials.json").chmod(0o600)
        write_json(brev / "active_org.json", {"id": self.ORG_ID, "name": self.ORG_ID})

    def login_token(self, token: str) -> None:
        """What `brev login --token T` leaves: an unexpired JWT as access token (refresh
        `auto-login`), anything else as refresh token (access `auto-login`)."""
        brev = self.home / ".brev"
        brev.mkdir(parents=True, exist_ok=True)
        if jwt_valid_client_side(token, Store(self.state_dir).now()):
            creds = {"access_token": token, "refresh_token": "auto-login"}
        else:
            creds = {"access_token": "auto-login", "refresh_token": token}
        write_json(brev / "credentials.json", creds)
        Path(brev / "credentials.json").chmod(0o600)
        write_json(brev / "active_org.json", {"id": self.ORG_ID, "name": self.ORG_ID})

    def login_as_user(self, user_id: str, ttl_s: float = 86400.0) -> str:
        """Switch the active identity to a token login of `user_id` (e.g. a teammate): it sees only
        its own instances unless `ls --all`, and resolves names only among them. Returns the JWT."""
        token = self.mint_access_token(ttl_s, user_id=user_id)
        self.login_token(token)
        return token

    def mint_access_token(self, ttl_s: float | None = None, *, user_id: str | None = None) -> str:
        """An access JWT the backend accepts for `user_id` (default USER_ID); ttl in nominal
        seconds (default: token_ttl_s or 3600)."""
        faults = read_json(self.store.faults_path, {})
        ttl = float(ttl_s if ttl_s is not None else faults.get("token_ttl_s") or 3600.0)
        config = read_json(self.store.config_path, {})
        return mint_jwt(
            str(config["secret"]),
            ttl_s=ttl * self.speed,
            email=str(config["email"]),
            now=Store(self.state_dir).now(),
            user_id=user_id or self.USER_ID,
        )

    def use_service_account_token(self, path: Path) -> None:
        """Where the CLI looks for a k8s SA token (default /var/run/secrets/...; tests point it elsewhere)."""
        config = read_json(self.store.config_path, {})
        config["sa_token_path"] = str(path)
        write_json(self.store.config_path, config)

    def mint_refresh_token(self, *, user_id: str | None = None) -> str:
        """A `sessionKey:deviceId` refresh token (what the device login stores); KAS refreshes it."""
        token = f"{secrets.token_hex(16)}:{secrets.token_hex(8)}"
        with self.store.tx() as db:
            db.setdefault("sessions", {})[token] = {
                "created": self.store.now(),
                "user_id": user_id or self.USER_ID,
            }
        return token

    # -- observation -----------------------------------------------------------------------------
    def calls(self) -> list[SimCall]:
        entries: dict[str, dict[str, Any]] = {}
        order: list[str] = []
        try:
            lines = self.store.calls_path.read_text().splitlines()
        except FileNotFoundError:
            return []
        for line in lines:
            entry = json.loads(line)
            if "program" in entry:
                entries[entry["id"]] = entry
                order.append(entry["id"])
            elif entry["id"] in entries:
                entries[entry["id"]]["stdin_bytes"] = entry["stdin_bytes"]
        calls = [
            SimCall(
                e["program"],
                list(e["argv"]),
                e["where"],
                e["instance"],
                float(e["ts"]),
                int(e.get("stdin_bytes", 0)),
            )
            for e in (entries[i] for i in order)
        ]
        return sorted(calls, key=lambda c: c.ts)

    def _delays(self) -> dict[str, float]:
        store = Store(self.state_dir)
        return {k: store.delay(k, v) for k, v in NOMINAL.items()}

    def instances(self, include_deleted: bool = False) -> list[dict[str, Any]]:
        store = Store(self.state_dir)
        delays = self._delays()
        out = []
        for inst in sorted(store.read()["instances"].values(), key=lambda i: float(i["created_at"])):
            obs = observe(inst, store.now(), delays)
            if obs.gone and not include_deleted:
                continue
            out.append(
                {
                    **inst,
                    "status": obs.display_status if not obs.gone else "DELETED",
                    "build_status": obs.build_status,
                    "shell_status": obs.shell_status,
                    "health_status": obs.health_status,
                    "ssh_ready": obs.ssh_ready,
                    "gone": obs.gone,
                }
            )
        return out

    def add_instance(
        self,
        name: str,
        *,
        status: str = "RUNNING",
        ssh_ready: bool = True,
        gpu: str = "L40S",
        instance_type: str = "g6e.xlarge",
        owner: str | None = None,
    ) -> str:
        """A pre-existing instance of the org, owned by `owner` (default USER_ID; another user id
        makes a teammate's instance). Names may repeat (the backend allows duplicates this way).
        Returns its id."""
        store = Store(self.state_dir)
        delays = self._delays()
        now = store.now()
        long_ago = now - sum(delays.values()) - 3600
        lifecycle, phase_at = {
            "RUNNING": ("create", long_ago if ssh_ready else now - delays["deploy_s"] - delays["build_s"]),
            "DEPLOYING": ("create", now),
            "FAILURE": ("create_failed", long_ago),
            "STOPPED": ("stop", long_ago),
            "STOPPING": ("stop", now),
            "STARTING": ("start", now),
            "DELETING": ("delete", now),
        }[status]
        with store.tx() as db:
            inst = new_record(
                db,
                name=name,
                org_id=self.ORG_ID,
                user_id=owner or self.USER_ID,
                instance_type=instance_type,
                now=now,
                lifecycle=lifecycle,
                phase_at=phase_at,
                disk_gb=500,
            )
            inst["gpu"] = gpu
            inst["stoppable"] = True
            if status == "RUNNING" and not ssh_ready:
                inst["never_ready"] = True
        launch.make_sandbox(store, inst)
        self._poke()
        return str(inst["id"])

    def _current(self, name: str) -> dict[str, Any]:
        for inst in reversed(self.instances()):
            if inst["name"] == name:
                return dict(inst)
        raise KeyError(f"no simulated instance named {name!r}")

    def instance_files(self, name: str) -> Path:
        """The instance's sandbox home directory (its /home/ubuntu)."""
        return self.store.instance_dir(str(self._current(name)["id"])) / "home"

    def api_refusals(self) -> int:
        """Calls the `api_rate_limit` knob refused (429) so far."""
        return int(read_json(self.state_dir / "ratelimit-refused.json", 0))

    def created_count(self, name: str | None = None) -> int:
        counts = Store(self.state_dir).read().get("created_count", {})
        if name is None:
            return sum(int(v) for v in counts.values())
        return int(counts.get(name, 0))

    def containers(self, name: str) -> list[dict[str, Any]]:
        """`docker inspect` objects of every container on the instance."""
        docker = container.Docker(self.store, str(self._current(name)["id"]))
        return [obj for cid in docker.ids() if (obj := container.inspect_object(docker, cid)) is not None]

    def kill_containers(self) -> int:
        """Fixture teardown: stop the daemon (its in-process containers die with it) and kill every
        process this simulator started. Returns how many containers were running."""
        running = 0
        if self.store.instances_dir.is_dir():
            for inst_dir in self.store.instances_dir.iterdir():
                docker = container.Docker(self.store, inst_dir.name)
                running += sum(1 for cid in docker.ids() if (docker.state(cid) or {}).get("Running"))
        self.close()
        return running
