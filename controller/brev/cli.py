"""`BrevCLI`: the `BrevClient` over the real `brev` program. The ONLY module that knows brev's argv
and output formats (rules read from the CLI source, brevdev/brev-cli v0.6.327; the simulator's
tests/brevsim/SIM-CONTRACT.md restates the ones the tests pin).

- JSON is read from the first line starting with `{` or `[` (stray lines such as
  `no oauth found for token` come first); `{"workspaces": null}` means no instances.
- listings use `ls --json --all`: a token login lists only its own instances without `--all`,
  so a plain `ls` cannot tell "gone" from "not mine".
- every remote command runs over plain `ssh <alias>` (`ssh_exec`) through the instance's
  ControlMaster (see `controller.brev.sshmux`), never `brev exec`: brev exec does not propagate
  the remote exit status, re-runs a failing command, forwards no stdin and costs a brev process
  per call. Each command is wrapped to print a random per-call sentinel with its real status, so
  a finished command (any status, even 255) is told from a connection failure (ssh's 255).
- `put_file` feeds content to `ssh <inst> 'cat > tmp && mv tmp path'` on stdin, so a secret
  never appears in any argv. `delete_instance` first sends `ssh -O exit` so a deleted
  instance's master does not linger.
- login is headless and never puts the key on argv: the client writes `~/.brev/credentials.json`
  in the shape `brev login` leaves, verifies it with `brev ls --json`, and on an auth EOF logs in
  again once and retries the call once.
- errors are matched on substrings (messages carry trace fragments) and mapped onto
  `controller.api.errors`, keeping the CLI's text.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from controller.api import reasons
from controller.api.errors import (
    BrevAuthError,
    BrevConfigError,
    BrevTransientError,
    SpecError,
)
from controller.brev.client import (
    BrevCallRecorder,
    BrevCredentials,
    CreateRequest,
    CreateResult,
    ExecResult,
    Instance,
    SearchResult,
)
from controller.brev.commands import (
    check_name,
    create_argv,
    format_number,
    new_marker,
    put_file_command,
    wrap_command,
)
from controller.brev.credentials import (
    credentials_documents,
    identity_of,
    jwt_claims,
    read_access_token,
    write_private_json,
)
from controller.brev.output import (
    cli_message,
    create_outcome,
    delete_outcome,
    generic_error,
    help_flags,
    is_auth_failure,
    parse_instances,
    parse_search,
    parse_version,
    start_outcome,
    version_warning,
)
from controller.brev.pace import BrevPace, PacePolicy, throttle_of
from controller.brev.runner import CommandTimeout, Runner, RunResult, SshAgent
from controller.brev.spawn import Child, spawn
from controller.brev.sshmux import (
    SSH_CONNECTION_FAILED,
    control_dir,
    exit_master_argv,
    ssh_argv,
    unwrap_ssh,
)
from controller.versions import load_versions

log = structlog.get_logger(__name__)

DEFAULT_SA_TOKEN_PATH = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")

CredentialsSource = BrevCredentials | Callable[[], Awaitable[BrevCredentials]]


# Reads asked again when Brev answers 429/5xx (after the shared cool-down); changes never are.
_READS = frozenset({"ls", "search", "refresh"})
_READ_RETRIES = 2

# ---- settings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrevTimeouts:
    """Per-verb wall-clock limits in seconds. exec's limit is passed per call by the caller (the
    first exec on a new instance needs >= 600 s: ssh bring-up, brev's own recovery path)."""

    ls: float = 60
    version: float = 30
    help: float = 30
    search: float = 60
    # `create --detached` only does API calls; its own `--timeout` covers the (skipped) wait phase,
    # so allow that plus a margin in case a CLI ignores --detached.
    create_margin: float = 120
    create_default_wait: float = 300
    delete: float = 120
    start: float = 120
    refresh: float = 180  # may download cloudflared on first use
    put_file: float = 120
    ssh_close: float = 15  # `ssh -O exit` only talks to the local master socket


@dataclass(frozen=True)
class BrevCLISettings:
    home: Path
    binary: str = "brev"
    ssh_binary: str = "ssh"
    ssh_agent_binary: str = "ssh-agent"
    # The release this client was written against (versions.yaml brev.cli_version).
    expected_version: str | None = None
    timeouts: BrevTimeouts = field(default_factory=BrevTimeouts)
    sa_token_path: Path = DEFAULT_SA_TOKEN_PATH
    # Socket of a long-lived ssh-agent; default: one per home (see runner.default_agent_socket).
    agent_socket: Path | None = None
    # An instance's ssh master lives this long after its last session (brev's template: 10m).
    # Short: only short calls use it (probes, pulls, starts, syncs every 600 s), so a running
    # job holds no master between them; its exit wait has a connection of its own (sshmux).
    control_persist_s: int = 60
    ssh_connect_timeout_s: int = 10
    # One pace for every call to Brev's API (controller/brev/pace.py); ssh is not paced.
    pace: PacePolicy = field(default_factory=PacePolicy)


# ---- the client ---------------------------------------------------------------------------------


class BrevCLI:
    """`BrevClient` over the installed `brev` (and `ssh` for stdin transfers)."""

    def __init__(
        self,
        settings: BrevCLISettings,
        credentials: CredentialsSource,
        *,
        recorder: BrevCallRecorder | None = None,
        env: dict[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        pace: BrevPace | None = None,
    ) -> None:
        self._settings = settings
        self.pace = pace if pace is not None else BrevPace(settings.pace)
        # Asked at the fork of a change to Brev (spawn.py), after its pace and spawn queues: a
        # create or delete that waited out a cool-down must not go out once this replica's term
        # has ended (the app sets it to the elector's is_leading; None: no election).
        self.fence: Callable[[], bool] | None = None
        self._credentials = credentials
        self._clock = clock
        base = dict(os.environ if env is None else env)
        base["HOME"] = str(settings.home)
        self._base_env = base
        self._agent = SshAgent(
            settings.home, socket_path=settings.agent_socket, binary=settings.ssh_agent_binary
        )
        self._runner = Runner(base, recorder=recorder, agent=self._agent)
        self._login_lock = asyncio.Lock()
        self._ensure_lock = asyncio.Lock()
        self._login_generation = 0
        self._logged_in = False
        self._create_flags: frozenset[str] | None = None
        self._flags_lock = asyncio.Lock()  # a burst's first creates read --help once, not once each
        self._last_credentials: BrevCredentials | None = None
        # token digest -> identity learnt from the CLI's refreshed access JWT (stays stable while
        # a re-login briefly puts the opaque token back into credentials.json)
        self._identities: dict[str, str] = {}
        self.relogins = 0  # how many times an auth failure made us log in again
        self._refresh_lock = asyncio.Lock()
        self._refreshed_at = 0.0  # monotonic end of the last successful `brev refresh`
        self._control_dir_ready = False
        # Aliases this process opened an ssh master to: closed at delete.
        self._ssh_aliases: set[str] = set()
        self._names_by_id: dict[str, str] = {}

    @property
    def settings(self) -> BrevCLISettings:
        return self._settings

    def close(self) -> None:
        """Ask the ssh masters this client opened to exit, and stop the ssh-agent it started.
        In a pod they would die with the container; anywhere else they would linger for
        ControlPersist."""
        self._close_masters()
        self._agent.close()

    def _close_masters(self) -> None:
        if not self._ssh_aliases or not self._ssh_config.is_file():
            return
        s = self._settings
        procs = [
            subprocess.Popen(  # noqa: S603 - fixed argv of checked instance names, no shell
                exit_master_argv(s.ssh_binary, self._ssh_config, s.home, alias),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=self._base_env,
                start_new_session=True,
            )
            for alias in sorted(self._ssh_aliases)
        ]
        deadline = time.monotonic() + s.timeouts.ssh_close
        for proc in procs:  # all at once, one deadline: shutdown must not wait per master
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self._ssh_aliases.clear()

    # -- login --------------------------------------------------------------------------------

    def check_environment(self) -> None:
        """Refuse to run where the CLI would silently use the pod's service-account token as its
        Brev token (pkg/store/authtoken.go) instead of our credentials."""
        path = self._settings.sa_token_path
        try:
            present = path.is_file() and path.stat().st_size > 0
        except OSError:
            present = False
        if present:
            raise BrevConfigError(
                f"{path} exists: the brev CLI would use this Kubernetes service-account token as "
                "its Brev access token and ignore the configured credentials. Disable "
                "automountServiceAccountToken on the operator pod and mount the Kubernetes token "
                "at another path (the deployment manifests do this)"
            )

    async def _read_credentials(self) -> BrevCredentials:
        source = self._credentials
        if isinstance(source, BrevCredentials):
            return source
        value = source()
        if inspect.isawaitable(value):
            return await value
        return value

    async def _write_credentials(self) -> None:
        creds = await self._read_credentials()
        doc, org_doc = credentials_documents(creds, self._clock())
        brev_dir = self._settings.home / ".brev"
        write_private_json(brev_dir / "credentials.json", doc)
        if org_doc is not None:
            write_private_json(brev_dir / "active_org.json", org_doc)
        self._last_credentials = creds
        self._login_generation += 1
        log.info("brev_credentials_written", kind="api_key" if creds.api_key else "token")

    async def ensure_login(self) -> None:
        """Write the credentials file, then verify it with `brev ls --json` (once per client)."""
        if self._logged_in:
            return
        self.check_environment()
        async with self._ensure_lock:  # concurrent first calls log in once
            if self._logged_in:
                return
            async with self._login_lock:
                await self._write_credentials()
            argv = [self._settings.binary, "ls", "--json", "--all"]
            result = await self._call(argv, "ls", self._settings.timeouts.ls)
            if result.returncode != 0:
                raise generic_error("ls", "", result)
            parse_instances(result.stdout)
            self._logged_in = True

    def _auth_error(self, verb: str, result: RunResult) -> BrevAuthError:
        hint = "check the API key and org id in the Brev credentials Secret"
        creds = self._last_credentials
        if creds is not None and creds.token:
            claims = jwt_claims(creds.token.strip())
            exp = claims.get("exp") if claims else None
            if isinstance(exp, int | float) and self._clock() >= exp:
                expired = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(exp))
                hint = (
                    f"the Brev token in the Secret expired at {expired}; store a fresh token, "
                    "or better an API key (bak-...) with its org id, which does not expire"
                )
            else:
                hint = (
                    "the Brev token was refused after a fresh login; token sessions die when the JWT "
                    "expires, so store an API key (bak-...) with its org id in the Secret"
                )
        return BrevAuthError(
            f"brev {verb}: not authenticated after logging in again; {hint}",
            cli_message=cli_message(result),
        )

    async def _call(
        self,
        argv: list[str],
        verb: str,
        timeout: float,  # noqa: ASYNC109 - a per-call budget handed to the runner, not a cancel scope
        *,
        auth_failed: Callable[[RunResult], bool] | None = None,
        stdin: bytes | None = None,
    ) -> RunResult:
        """Run a CLI call that needs a login; on an auth failure log in again once and retry once."""
        failed = auth_failed or (lambda r: r.returncode != 0 and is_auth_failure(r))
        if not self._logged_in and self._login_generation == 0:
            self.check_environment()
            async with self._login_lock:
                if self._login_generation == 0:
                    await self._write_credentials()
        generation = self._login_generation
        result = await self._api(argv, verb, timeout, stdin=stdin)
        if not failed(result):
            return result
        log.warning("brev_auth_failed_relogin", verb=verb)
        async with self._login_lock:
            if self._login_generation == generation:  # nobody logged in again meanwhile
                await self._write_credentials()
                self.relogins += 1
        result = await self._api(argv, verb, timeout, stdin=stdin)
        if failed(result):
            raise self._auth_error(verb, result)
        return result

    async def _api(
        self,
        argv: list[str],
        verb: str,
        timeout: float,  # noqa: ASYNC109 - a per-call budget handed to the runner
        *,
        stdin: bytes | None = None,
    ) -> RunResult:
        """A call to Brev's API at the operator's pace. A read refused under load (429, 5xx) is
        asked again after the shared cool-down, twice at most; a create, delete or start is not
        (the caller owns what a failed change may have done)."""
        tries = 1 + (_READ_RETRIES if verb in _READS else 0)
        for attempt in range(tries):
            granted = await self.pace.slot()
            fence = None if verb in _READS else self.fence
            result = await self._runner.run(argv, verb=verb, timeout=timeout, stdin=stdin, fence=fence)
            throttle = throttle_of(result.output) if result.returncode != 0 else None
            if throttle is None:
                self.pace.answered()
                return result
            delay = self.pace.throttled(verb, throttle, granted)
            log.warning(
                "brev_throttled",
                verb=verb,
                kind=throttle.kind,
                cool_down_s=round(delay, 2),
                attempt=attempt + 1,
            )
        return result

    # -- read-only ----------------------------------------------------------------------------

    async def version(self) -> str:
        result = await self._runner.run(
            [self._settings.binary, "--version", "--no-check-latest"],
            verb="version",
            timeout=self._settings.timeouts.version,
        )
        try:
            return parse_version(result.stdout)
        except ValueError as exc:
            raise BrevConfigError(
                f"`{self._settings.binary} --version --no-check-latest` printed no "
                "'Current Version: vX.Y.Z' line; is the configured brev binary the Brev CLI?",
                cli_message=cli_message(result),
            ) from exc

    async def check_version(self) -> str | None:
        """A warning if the installed CLI is not the pinned release; raises if unparseable."""
        expected = self._settings.expected_version
        if expected is None:
            expected = load_versions().brev.cli_version
        return version_warning(await self.version(), expected)

    async def identity(self) -> str:
        """`org-key:<org>:<key digest>` or `user:<sub of the access JWT>`; `token:<digest>` when
        the CLI holds no JWT to name the user. Never the raw secret."""
        await self.ensure_login()
        creds = await self._read_credentials()
        access = read_access_token(self._settings.home / ".brev" / "credentials.json")
        ident, learnt_from = identity_of(creds, access, self._identities)
        if learnt_from is not None:
            self._identities[learnt_from] = ident
        return ident

    async def list_instances(self) -> Sequence[Instance]:
        await self.ensure_login()
        argv = [self._settings.binary, "ls", "--json", "--all"]
        result = await self._call(argv, "ls", self._settings.timeouts.ls)
        if result.returncode != 0:
            raise generic_error("ls", "", result)
        try:
            instances = parse_instances(result.stdout)
        except (ValueError, KeyError, TypeError) as exc:
            raise BrevTransientError(
                "brev ls --json printed no instance list", cli_message=cli_message(result)
            ) from exc
        self._names_by_id.update((i.id, i.name) for i in instances)
        return instances

    async def get_instance(self, name: str) -> Instance | None:
        matches = [i for i in await self.list_instances() if i.name == name]
        if not matches:
            return None
        # A FAILURE/DELETING leftover may share the name with a live one: prefer the live one.
        live = [i for i in matches if i.status not in ("FAILURE", "DELETING")]
        return (live or matches)[0]

    async def search(
        self, *, gpu_name: str | None = None, min_vram: float | None = None
    ) -> Sequence[SearchResult]:
        argv = [self._settings.binary, "search", "--json"]
        if gpu_name:
            argv += ["--gpu-name", gpu_name]
        if min_vram is not None:
            argv += ["--min-vram", format_number(min_vram)]
        result = await self._api(argv, "search", self._settings.timeouts.search)
        if result.returncode != 0:
            raise generic_error("search", "", result)
        try:
            return parse_search(result.stdout)
        except (ValueError, KeyError, TypeError) as exc:
            raise BrevTransientError(
                "brev search --json printed no result list", cli_message=cli_message(result)
            ) from exc

    # -- lifecycle ------------------------------------------------------------------------------

    async def create_flags(self) -> frozenset[str]:
        """Long flags of the installed `brev create` (from its --help; cached)."""
        async with self._flags_lock:
            if self._create_flags is None:
                result = await self._runner.run(
                    [self._settings.binary, "create", "--help"],
                    verb="help",
                    timeout=self._settings.timeouts.help,
                )
                flags = help_flags(result.stdout + "\n" + result.stderr)
                if result.returncode != 0 or "detached" not in flags:
                    raise BrevConfigError(
                        "`brev create --help` does not list --detached: unsupported brev CLI",
                        cli_message=cli_message(result),
                    )
                self._create_flags = flags
            return self._create_flags

    async def create_instance(self, request: CreateRequest) -> CreateResult:
        argv = create_argv(self._settings.binary, request, await self.create_flags())
        await self.ensure_login()
        t = self._settings.timeouts
        timeout = (request.timeout_seconds or t.create_default_wait) + t.create_margin
        result = await self._call(argv, "create", timeout)
        outcome = create_outcome(request.name, result)
        log.info("brev_create", instance=request.name, adopted=outcome.adopted)
        return outcome

    async def delete_instance(self, name_or_id: str) -> None:
        check_name(name_or_id)  # ids share the name alphabet
        await self.ensure_login()
        alias = self._names_by_id.get(name_or_id, name_or_id)
        argv = [self._settings.binary, "delete", name_or_id]
        delete = self._call(argv, "delete", self._settings.timeouts.delete)
        if alias in self._ssh_aliases:
            # Beside the delete, not before it: the instance bills until the delete is sent. ssh
            # reads brev's config (the alias's host) as it starts, long before brev's delete
            # could change it; close_connection never raises.
            _, result = await asyncio.gather(self.close_connection(alias), delete)
        else:
            result = await delete
        delete_outcome(name_or_id, result)
        log.info("brev_delete_requested", instance=name_or_id)

    async def start_instance(self, name: str) -> None:
        check_name(name)
        await self.ensure_login()
        result = await self._call(
            [self._settings.binary, "start", name, "--detached"], "start", self._settings.timeouts.start
        )
        start_outcome(name, result)

    async def refresh(self) -> None:
        await self.ensure_login()
        argv = [self._settings.binary, "refresh"]
        result = await self._call(argv, "refresh", self._settings.timeouts.refresh)
        if result.returncode != 0:
            raise generic_error("refresh", "", result)
        self._refreshed_at = time.monotonic()

    # -- remote commands ----------------------------------------------------------------------

    @property
    def _ssh_config(self) -> Path:
        return self._settings.home / ".ssh" / "config"

    def _ssh_argv(self, instance: str, command: str, *, shared: bool = True) -> list[str]:
        s = self._settings
        return ssh_argv(
            s.ssh_binary,
            self._ssh_config,
            s.home,
            instance,
            command,
            persist_s=s.control_persist_s,
            connect_timeout_s=s.ssh_connect_timeout_s,
            shared=shared,
        )

    async def _refresh_after(self, failed_at: float) -> None:
        """`brev refresh` unless one finished after `failed_at`: a burst of jobs whose instances
        just became RUNNING shares one refresh instead of each running its own."""
        async with self._refresh_lock:
            if self._refreshed_at > failed_at:
                return
            await self.refresh()

    async def _ssh_ready(self, instance: str, command: str, *, shared: bool = True) -> list[str]:
        """The ssh argv for `instance`, with brev's ssh config and the master's control directory
        in place first."""
        if not self._ssh_config.is_file():
            await self.ensure_login()
            await self._refresh_after(0.0)  # writes ~/.ssh/config (Include) and ~/.brev/ssh_config
        if not self._control_dir_ready:
            control_dir(self._settings.home).mkdir(mode=0o700, parents=True, exist_ok=True)
            self._control_dir_ready = True
        self._ssh_aliases.add(instance)
        return self._ssh_argv(instance, command, shared=shared)

    async def _ssh(
        self,
        instance: str,
        command: str,
        *,
        verb: str,
        timeout: float,  # noqa: ASYNC109 - the budget of both attempts together; the runner kills on expiry
        stdin: bytes | None = None,
        shared: bool = True,
    ) -> RunResult:
        """One ssh call to `instance`'s alias, refreshing the ssh config once when ssh does not
        know the alias yet (brev refresh writes only instances RUNNING at the time)."""
        deadline = time.monotonic() + timeout
        argv = await self._ssh_ready(instance, command, shared=shared)
        started = time.monotonic()
        result = await self._runner.run(argv, verb=verb, timeout=timeout, stdin=stdin)
        if result.returncode == SSH_CONNECTION_FAILED and "Could not resolve hostname" in result.stderr:
            await self.ensure_login()
            await self._refresh_after(started)
            remaining = deadline - time.monotonic()
            if remaining < 1.0:
                raise CommandTimeout(f"{verb} to {instance}: no time left after brev refresh")
            result = await self._runner.run(argv, verb=verb, timeout=remaining, stdin=stdin)
        return result

    async def open_stream(self, instance: str, command: str) -> Child:
        """A long-running remote command whose stdout the caller reads as it arrives (the log
        API's one stream per followed job); the caller kills its process group. Its own ssh
        connection (a long session: see sshmux), so it never holds a lane, a pass or a master. A
        stream that ended at once with ssh's 255 is retried by the caller after `refresh_alias`."""
        check_name(instance)
        return await spawn(
            await self._ssh_ready(instance, command, shared=False),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=await self._runner.environment(),
        )

    async def refresh_alias(self, failed_at: float) -> None:
        """ssh did not know an instance's alias (a replica that never reached it): `brev refresh`
        once, shared with any other caller that failed since `failed_at`."""
        await self.ensure_login()
        await self._refresh_after(failed_at)

    async def ssh_exec(
        self,
        instance: str,
        command: str,
        *,
        timeout: float,  # noqa: ASYNC109
        own_connection: bool = False,
    ) -> ExecResult:
        check_name(instance)
        marker = new_marker()
        try:
            wrapped = wrap_command(command, marker)
        except ValueError as exc:
            raise SpecError(f"cannot send remote command: {exc}") from exc
        result = await self._ssh(
            instance, wrapped, verb="ssh_exec", timeout=timeout, shared=not own_connection
        )
        unwrapped = unwrap_ssh(result.stdout, marker)
        if unwrapped is None:
            raise ssh_transport_error(instance, result)
        status, stdout = unwrapped
        return ExecResult(exit_code=status, stdout=stdout, stderr=result.stderr)

    async def close_connection(self, instance: str) -> None:
        """Ask `instance`'s ssh master to exit (best effort, never raises for a missing master):
        the instance is going away, so its master would only hold memory until ControlPersist or
        ServerAlive ended it. Sessions still running on it end with it."""
        if not self._ssh_config.is_file():
            return
        argv = exit_master_argv(self._settings.ssh_binary, self._ssh_config, self._settings.home, instance)
        try:
            result = await self._runner.run(argv, verb="ssh_close", timeout=self._settings.timeouts.ssh_close)
        except BrevTransientError as exc:
            log.warning("ssh_master_exit_failed", instance=instance, error=str(exc))
            return
        self._ssh_aliases.discard(instance)
        if result.returncode == 0:
            log.info("ssh_master_exited", instance=instance)

    async def put_file(
        self,
        instance: str,
        remote_path: str,
        content: bytes,
        *,
        mode: int = 0o600,
        timeout: float,  # noqa: ASYNC109 - BrevClient's signature; the runner kills on expiry
    ) -> None:
        check_name(instance)
        try:
            command = put_file_command(remote_path, mode, secrets.token_hex(4))
        except ValueError as exc:
            raise SpecError(f"cannot write remote file: {exc}") from exc
        result = await self._ssh(instance, command, verb="ssh_put", timeout=timeout, stdin=content)
        if result.returncode != 0:
            raise BrevTransientError(
                f"writing {remote_path} on {instance} over ssh failed (exit {result.returncode})",
                cli_message=cli_message(result),
            )


def ssh_transport_error(instance: str, result: RunResult) -> BrevTransientError:
    """ssh returned without the sentinel: exit 255 is ssh's own connection failure; any other
    status means the remote shell was cut off (killed, hung up) before it reported."""
    if result.returncode == SSH_CONNECTION_FAILED:
        return BrevTransientError(
            f"ssh to {instance} failed to connect (exit 255)",
            reason=reasons.SSH_CONNECTION_FAILED,
            cli_message=cli_message(result),
        )
    return BrevTransientError(
        f"the remote command on {instance} ended without reporting its status (ssh exit {result.returncode})",
        reason=reasons.SSH_SESSION_LOST,
        cli_message=cli_message(result),
    )


__all__ = [
    "BrevCLI",
    "BrevCLISettings",
    "BrevConfigError",
    "BrevTimeouts",
    "CommandTimeout",
]
