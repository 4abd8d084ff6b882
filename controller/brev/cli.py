"""`BrevCLI`: the `BrevClient` over the real `brev` program. The ONLY module that knows brev's argv
and output formats (every rule below cites brev-cli.md, the contract read from the CLI source).

- JSON is read from the first line starting with `{` or `[` (stray lines such as
  `no oauth found for token` come first); `{"workspaces": null}` means no instances.
- `brev exec <inst> <command>`: the remote command is ONE argv element, never `--`-split. brev
  does not propagate the remote exit status (and re-runs a failing command), so each command is
  wrapped to always exit 0 and print a random per-call sentinel with its real status; a missing
  sentinel is a transport failure. brev appends the instance name to captured stdout: stripped.
- `put_file` feeds content to `ssh <inst> 'cat > tmp && mv tmp path'` on stdin (brev exec forwards
  no stdin), so a secret never appears in any argv.
- login is headless and never puts the key on argv: the client writes `~/.brev/credentials.json`
  in the shape `brev login` leaves, verifies it with `brev ls --json`, and on an auth EOF logs in
  again once and retries the call once.
- errors are matched on substrings (messages carry trace fragments) and mapped onto
  `controller.errors`, keeping the CLI's text.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import inspect
import json
import os
import re
import secrets
import shlex
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from controller.brev.client import (
    BrevCallRecorder,
    BrevCredentials,
    CreateRequest,
    CreateResult,
    ExecResult,
    Instance,
    SearchResult,
)
from controller.brev.runner import CommandTimeout, Runner, RunResult, SshAgent
from controller.errors import (
    BrevAuthError,
    BrevPermanentError,
    BrevTransientError,
    InstanceNotFound,
    PermanentError,
    SpecError,
)
from controller.versions import load_versions

log = structlog.get_logger(__name__)

DEFAULT_SA_TOKEN_PATH = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
# brev's name rule (pkg/names/validate.go).
NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$")
API_KEY_PREFIX = "bak-"

CredentialsSource = BrevCredentials | Callable[[], Awaitable[BrevCredentials]]


class BrevConfigError(PermanentError):
    """The operator's own environment or configuration keeps brev from working (not a job's fault)."""

    reason = "BrevMisconfigured"


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
    first_exec: float = 600
    exec: float = 120


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


# ---- pure parsing and formatting ---------------------------------------------------------------

LOGGED_OUT_PROMPT = "You are currently logged out"
# Lines the CLI prints on stdout before any real output (brev-cli.md section 1).
_STRAY_PREFIXES = ("no oauth found for token", "WARN: malformed refresh token", LOGGED_OUT_PROMPT)


def first_json(text: str) -> Any:
    """The JSON document starting at the first line that begins with `{` or `[`."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("{", "[")):
            rest = "".join(lines[i:]).lstrip()
            value, _end = json.JSONDecoder().raw_decode(rest)
            return value
    raise ValueError("no JSON document in the output")


def parse_instances(stdout: str) -> list[Instance]:
    """`brev ls --json` -> instances; `{"workspaces": null}` is the empty list."""
    doc = first_json(stdout)
    if not isinstance(doc, dict) or "workspaces" not in doc:
        raise ValueError("expected an object with a 'workspaces' key")
    items = doc["workspaces"] or []
    out: list[Instance] = []
    for item in items:
        out.append(
            Instance(
                name=str(item["name"]),
                id=str(item.get("id", "")),
                status=str(item.get("status", "")),
                build_status=str(item.get("build_status", "")),
                shell_status=str(item.get("shell_status", "")),
                health_status=str(item.get("health_status", "")),
                instance_type=str(item.get("instance_type", "")),
                instance_kind=str(item.get("instance_kind", "")),
                gpu=str(item.get("gpu", "-")),
            )
        )
    return out


def parse_search(stdout: str) -> list[SearchResult]:
    """`brev search --json` -> entries; no results is `[]` (or nothing at all)."""
    if not stdout.strip():
        return []
    doc = first_json(stdout)
    if not isinstance(doc, list):
        raise ValueError("expected a JSON array")
    return [
        SearchResult(
            type=str(item["type"]),
            provider=str(item.get("provider", "")),
            gpu_name=str(item.get("gpu_name", "")),
            gpu_count=int(item.get("gpu_count", 0)),
            vram_per_gpu_gb=float(item.get("vram_per_gpu_gb", 0)),
            price_per_hour=float(item.get("price_per_hour", 0)),
            raw=dict(item),
        )
        for item in doc
    ]


_VERSION_RE = re.compile(r"Current Version:\s*(v?\d+\.\d+\.\d+[^\s]*)", re.IGNORECASE)


def parse_version(stdout: str) -> str:
    """`brev --version --no-check-latest` -> the tag, e.g. ``v0.6.327``."""
    match = _VERSION_RE.search(stdout)
    if not match:
        raise ValueError("no 'Current Version: X.Y.Z' line")
    tag = match.group(1)
    return tag if tag.startswith("v") else f"v{tag}"


def version_warning(installed: str, expected: str | None) -> str | None:
    if expected is None or installed == expected:
        return None
    return (
        f"installed brev CLI is {installed} but this operator was written against {expected} "
        "(versions.yaml brev.cli_version); its argv/output contract may differ"
    )


_FLAG_RE = re.compile(r"(?<![\w-])--([a-z0-9][a-z0-9-]*)")


def help_flags(help_text: str) -> frozenset[str]:
    """Long flag names a `--help` text mentions (`--gpu-name` gives `gpu-name`, never `gpu`)."""
    return frozenset(_FLAG_RE.findall(help_text))


def _num(value: float) -> str:
    """Go's ParseFloat/Atoi-friendly text: `24` for 24.0, `8.6` for 8.6, never exponent form."""
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


# Seed-only CreateRequest fields: (attribute, CLI flag, spec field name shown to the user).
SEED_ONLY_FIELDS = (
    ("cloud_cred_id", "cloud-cred-id", "cloudCredId"),
    ("workspace_group_id", "workspace-group-id", "workspaceGroupId"),
    ("gpu", "gpu", "gpu"),
)


def create_argv(binary: str, request: CreateRequest, flags: frozenset[str]) -> list[str]:
    """`brev create NAME --detached` + long-form flags only (short forms differ from search's).
    Raises SpecError for a seed-only field the installed CLI (`flags`) lacks."""
    check_name(request.name)
    argv = [binary, "create", request.name, "--detached"]
    if request.types:
        argv += ["--type", ",".join(request.types)]
    for flag, text in (("--gpu-name", request.gpu_name), ("--provider", request.provider)):
        if text:
            argv += [flag, text]
    for flag, value in (
        ("--min-vram", request.min_vram),
        ("--min-total-vram", request.min_total_vram),
        ("--min-capability", request.min_capability),
        ("--min-disk", request.min_disk),
        ("--max-boot-time", request.max_boot_time),
        ("--timeout", request.timeout_seconds),
    ):
        if value is not None:
            argv += [flag, _num(value)]
    if request.mode:
        argv += ["--mode", request.mode]
    if request.startup_script is not None:
        if request.startup_script.startswith("@"):
            raise SpecError(
                "spec field startupScript must be the script text: a leading '@' makes brev read "
                "a file on the operator's machine"
            )
        argv += ["--startup-script", request.startup_script]
    return argv + _seed_only_args(request, flags)


def _seed_only_args(request: CreateRequest, flags: frozenset[str]) -> list[str]:
    args: list[str] = []
    for attr, flag, spec_field in SEED_ONLY_FIELDS:
        value = getattr(request, attr)
        if value is None:
            continue
        if flag not in flags:
            raise SpecError(
                f"spec field {spec_field} needs `brev create --{flag}`, which the installed brev "
                f"CLI does not have (it chooses placement itself); remove {spec_field}"
                + (" and use gpuName / minVram / types instead" if attr == "gpu" else "")
            )
        args += [f"--{flag}", str(value)]
    return args


def check_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise SpecError(
            f"instance name {name!r} is not a valid brev name: 1-63 characters, letters, digits, "
            "'.', '_' or '-', starting with a letter or digit"
        )


# -- exec sentinel ----------------------------------------------------------------------------


def new_marker() -> str:
    return f"__taobrev_rc_{secrets.token_hex(8)}__"


def wrap_command(command: str, marker: str) -> str:
    """One single-line remote shell string that runs `command` in its own bash, always exits 0,
    and ends stdout with ``\\n<marker> <status>\\n``. Multi-line commands travel base64-encoded
    (brev exec hangs on multi-line payloads, brev-cli.md #429)."""
    if not command.strip():
        raise ValueError("remote command is empty")
    if command.startswith("@"):
        raise ValueError("a remote command starting with '@' would make brev read a local file")
    if "\0" in command:
        raise ValueError("a remote command cannot contain NUL")
    if "\n" in command or "\r" in command:
        encoded = base64.b64encode(command.encode()).decode()
        inner = f'bash -c "$(printf %s {encoded} | base64 -d)"'
    else:
        inner = f"bash -c {shlex.quote(command)}"
    return f"{inner}; printf '\\n%s %s\\n' {marker} \"$?\""


def unwrap_exec(stdout: str, marker: str, instance: str) -> tuple[int, str] | None:
    """(status, the command's own stdout) from a wrapped command's captured stdout, or None when
    the sentinel is missing (the command did not run to completion through brev)."""
    key = f"\n{marker} "
    idx = stdout.rfind(key)
    if idx < 0:
        return None
    tail = stdout[idx + len(key) :]
    status_text = tail.split("\n", 1)[0].strip()
    try:
        status = int(status_text)
    except ValueError:
        return None
    return status, strip_preamble(stdout[:idx], instance)


def strip_preamble(text: str, instance: str) -> str:
    """Drop the lines brev itself prints on stdout before the remote output: token warnings and,
    for a STOPPED instance it auto-starts, `Instance <name> is starting. ` plus a blank line."""
    starting = f"Instance {instance} is starting"
    while True:
        first, sep, rest = text.partition("\n")
        if not sep:
            return text
        if first.startswith(_STRAY_PREFIXES):
            text = rest
        elif first.startswith(starting):
            text = rest[1:] if rest.startswith("\n") else rest
        else:
            return text


def remote_path_expr(path: str) -> str:
    """A remote path as a shell word: ``~/a b`` -> ``"$HOME"/'a b'``; absolute paths are quoted."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    if path.startswith("/"):
        return shlex.quote(path)
    raise ValueError(f"remote path must be absolute or start with '~/': {path!r}")


def put_file_command(remote_path: str, mode: int, token: str) -> str:
    """Atomic remote write of stdin to `remote_path` (created 0700 dirs, file `mode`)."""
    if remote_path.endswith("/") or not remote_path.strip("~/"):
        raise ValueError(f"remote path must name a file: {remote_path!r}")
    parent, _, _ = remote_path.rstrip("/").rpartition("/")
    target = remote_path_expr(remote_path)
    tmp = remote_path_expr(f"{remote_path}.tmp-{token}")
    directory = remote_path_expr(parent or "/")
    return f"umask 077 && mkdir -p {directory} && cat > {tmp} && chmod {mode:o} {tmp} && mv -f {tmp} {target}"


# -- error mapping -------------------------------------------------------------------------------

_AUTH_MARKERS = ("malformed refresh token", "unauthorized", "token is expired", "invalid token")


def is_auth_failure(result: RunResult) -> bool:
    """The CLI found no usable login: the logged-out prompt (then `EOF` from /dev/null), a
    malformed/expired token, or the server's unauthorized answer."""
    if LOGGED_OUT_PROMPT in result.stdout:
        return True
    if result.stderr.rstrip().endswith("EOF"):
        return True
    lowered = result.output.lower()
    return any(marker in lowered for marker in _AUTH_MARKERS)


# Messages that can never succeed on retry (brev-cli.md sections 1, 2).
_PERMANENT_MARKERS = (
    "unknown flag",
    "unknown shorthand flag",
    "unknown command",
    "name must",
    "name is required",
    "invalid mode",
    "is required for container mode",
    "is required for compose mode",
    "--count must be at least",
    "invalid sort option",
    "does not support stop",
)


def cli_message(result: RunResult) -> str:
    """The CLI's own words (stderr, else stdout), trimmed to a size fit for a condition."""
    return (result.stderr.strip() or result.stdout.strip())[-2000:]


def generic_error(verb: str, target: str, result: RunResult) -> BrevTransientError | BrevPermanentError:
    message = f"brev {verb} {target} failed (exit {result.returncode})".replace("  ", " ")
    if any(marker in result.output for marker in _PERMANENT_MARKERS):
        return BrevPermanentError(message, cli_message=cli_message(result))
    return BrevTransientError(message, cli_message=cli_message(result))


def create_outcome(name: str, result: RunResult) -> CreateResult:
    """Map `brev create --detached` onto adopt / success / the error hierarchy."""
    out = result.output
    if "already exists" in out or "duplicate workspace" in out:
        return CreateResult(name=name, adopted=True)
    if result.returncode == 0:
        return CreateResult(name=name, adopted=False)
    msg = cli_message(result)
    if "no GPU instances match" in out:
        raise BrevPermanentError(
            f"no instance type matches the requested GPU filters for {name}; relax gpuName / "
            "minVram / types (see `brev search`)",
            reason="NoMatchingInstanceType",
            cli_message=msg,
        )
    if "no capacity" in out or "please retry" in out or "try again later" in out:
        raise BrevTransientError(
            f"no capacity for the requested instance types of {name}; will retry",
            reason="InsufficientCapacity",
            cli_message=msg,
        )
    if "is not a recognized type" in out:
        raise BrevPermanentError(
            f"instance type requested for {name} is not a recognized brev type (see `brev search`)",
            reason="UnknownInstanceType",
            cli_message=msg,
        )
    raise generic_error("create", name, result)


def start_outcome(name: str, result: RunResult) -> None:
    out = result.output
    # A missing name exits 0 after trying to start a "local path" (brev-cli.md section 4).
    if "path not found" in out or ("not found" in out and result.returncode != 0):
        raise InstanceNotFound(f"instance {name} does not exist", cli_message=cli_message(result))
    if result.returncode == 0:
        return
    match = re.search(r"not stopped status=(\w+)", out)
    if match:
        status = match.group(1)
        if status in ("RUNNING", "STARTING", "DEPLOYING"):
            return  # already on its way up: starting is idempotent for the caller
        if status == "STOPPING":
            raise BrevTransientError(
                f"instance {name} is still stopping; start it again later", cli_message=cli_message(result)
            )
        raise BrevPermanentError(
            f"instance {name} cannot be started from status {status}", cli_message=cli_message(result)
        )
    raise generic_error("start", name, result)


def delete_outcome(name: str, result: RunResult) -> None:
    if "not found" in result.output:
        raise InstanceNotFound(f"instance {name} does not exist", cli_message=cli_message(result))
    if result.returncode != 0:
        raise generic_error("delete", name, result)


def exec_transport_error(instance: str, result: RunResult) -> BrevTransientError:
    """brev exec returned without the sentinel: the command did not (visibly) run to completion."""
    msg = cli_message(result)
    match = re.search(r'is in state "([A-Z_]+)"', result.output)
    if match:
        return BrevTransientError(
            f"instance {instance} is {match.group(1)}, not reachable over ssh", cli_message=msg
        )
    return BrevTransientError(
        f"brev exec on {instance} failed before the command reported its status", cli_message=msg
    )


# -- credentials ------------------------------------------------------------------------------


def _b64url_json(part: str) -> Any:
    padded = part + "=" * (-len(part) % 4)
    return json.loads(base64.urlsafe_b64decode(padded))


def jwt_claims(token: str) -> dict[str, Any] | None:
    """Unverified claims of a JWT, or None if `token` is not one (like jwt.ParseUnverified)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        header = _b64url_json(parts[0])
        claims = _b64url_json(parts[1])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return None
    return claims


def jwt_valid(token: str, now: float) -> bool:
    """What `LoginWithToken` decides: a JWT whose exp/nbf claims hold now (iat is not enforced)."""
    claims = jwt_claims(token)
    if claims is None:
        return False
    exp = claims.get("exp")
    if isinstance(exp, int | float) and now >= exp:
        return False
    nbf = claims.get("nbf")
    return not (isinstance(nbf, int | float) and now < nbf)


def validate_credentials(creds: BrevCredentials) -> None:
    if creds.api_key:
        if creds.token:
            raise BrevConfigError(
                "the Brev credentials Secret sets both an API key and a token; keep only one "
                "(the API key, which never expires client-side)"
            )
        if not creds.api_key.strip().startswith(API_KEY_PREFIX):
            raise BrevConfigError(f"the Brev API key in the Secret must start with {API_KEY_PREFIX!r}")
        if not (creds.org_id and creds.org_id.strip()):
            raise BrevConfigError(
                "the Brev credentials Secret has an API key but no org id; add the org id key "
                "(api key auth requires an org id)"
            )
    elif not (creds.token and creds.token.strip()):
        raise BrevConfigError(
            "the Brev credentials Secret holds neither an API key (with org id) nor a token"
        )


def credentials_documents(creds: BrevCredentials, now: float) -> tuple[dict[str, str], dict[str, str] | None]:
    """(credentials.json, active_org.json or None) exactly as `brev login` leaves them:
    `--api-key K --org-id O` stores the key fields and sets the active org {id: O, name: O};
    `--token T` stores an unexpired JWT as access_token (refresh "auto-login"), anything else as
    refresh_token (access "auto-login")."""
    validate_credentials(creds)
    if creds.api_key:
        org = (creds.org_id or "").strip()
        doc = {
            "access_token": "",
            "refresh_token": "",
            "api_key": creds.api_key.strip(),
            "api_key_org_id": org,
        }
        return doc, {"id": org, "name": org, "userNetworkId": ""}
    token = (creds.token or "").strip()
    if jwt_valid(token, now):
        doc = {"access_token": token, "refresh_token": "auto-login"}
    else:
        doc = {"access_token": "auto-login", "refresh_token": token}
    org_doc = None
    if creds.org_id and creds.org_id.strip():
        org = creds.org_id.strip()
        org_doc = {"id": org, "name": org, "userNetworkId": ""}
    return doc, org_doc


def write_private_json(path: Path, doc: object) -> None:
    """Atomically write `doc` as Go's MarshalIndent(v, "", " ") would, mode 0600."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            Path(tmp).unlink()
        raise


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
    ) -> None:
        self._settings = settings
        self._credentials = credentials
        self._clock = clock
        base = dict(os.environ if env is None else env)
        base["HOME"] = str(settings.home)
        self._agent = SshAgent(
            settings.home, socket_path=settings.agent_socket, binary=settings.ssh_agent_binary
        )
        self._runner = Runner(base, recorder=recorder, agent=self._agent)
        self._login_lock = asyncio.Lock()
        self._ensure_lock = asyncio.Lock()
        self._login_generation = 0
        self._logged_in = False
        self._create_flags: frozenset[str] | None = None
        self._last_credentials: BrevCredentials | None = None
        self.relogins = 0  # how many times an auth failure made us log in again

    @property
    def settings(self) -> BrevCLISettings:
        return self._settings

    def close(self) -> None:
        """Stop the ssh-agent this client started."""
        self._agent.close()

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
            argv = [self._settings.binary, "ls", "--json"]
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
        result = await self._runner.run(argv, verb=verb, timeout=timeout, stdin=stdin)
        if not failed(result):
            return result
        log.warning("brev_auth_failed_relogin", verb=verb)
        async with self._login_lock:
            if self._login_generation == generation:  # nobody logged in again meanwhile
                await self._write_credentials()
                self.relogins += 1
        result = await self._runner.run(argv, verb=verb, timeout=timeout, stdin=stdin)
        if failed(result):
            raise self._auth_error(verb, result)
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

    async def list_instances(self) -> Sequence[Instance]:
        await self.ensure_login()
        result = await self._call([self._settings.binary, "ls", "--json"], "ls", self._settings.timeouts.ls)
        if result.returncode != 0:
            raise generic_error("ls", "", result)
        try:
            return parse_instances(result.stdout)
        except (ValueError, KeyError, TypeError) as exc:
            raise BrevTransientError(
                "brev ls --json printed no instance list", cli_message=cli_message(result)
            ) from exc

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
            argv += ["--min-vram", _num(min_vram)]
        result = await self._runner.run(argv, verb="search", timeout=self._settings.timeouts.search)
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
        if self._create_flags is None:
            result = await self._runner.run(
                [self._settings.binary, "create", "--help"], verb="help", timeout=self._settings.timeouts.help
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

    async def delete_instance(self, name: str) -> None:
        check_name(name)
        await self.ensure_login()
        argv = [self._settings.binary, "delete", name]
        result = await self._call(argv, "delete", self._settings.timeouts.delete)
        delete_outcome(name, result)
        log.info("brev_delete_requested", instance=name)

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

    # -- remote commands ----------------------------------------------------------------------

    async def exec(self, instance: str, command: str, *, timeout: float) -> ExecResult:  # noqa: ASYNC109
        check_name(instance)
        marker = new_marker()
        try:
            wrapped = wrap_command(command, marker)
        except ValueError as exc:
            raise SpecError(f"cannot send remote command: {exc}") from exc
        await self.ensure_login()

        def auth_failed(r: RunResult) -> bool:
            return unwrap_exec(r.stdout, marker, instance) is None and is_auth_failure(r)

        result = await self._call(
            [self._settings.binary, "exec", instance, wrapped], "exec", timeout, auth_failed=auth_failed
        )
        unwrapped = unwrap_exec(result.stdout, marker, instance)
        if unwrapped is None:
            raise exec_transport_error(instance, result)
        status, stdout = unwrapped
        return ExecResult(exit_code=status, stdout=stdout, stderr=result.stderr)

    @property
    def _ssh_config(self) -> Path:
        return self._settings.home / ".ssh" / "config"

    def _ssh_argv(self, instance: str, command: str) -> list[str]:
        return [
            self._settings.ssh_binary,
            "-T",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            # brev refresh writes (and includes) the alias here; name it so ssh does not depend
            # on the passwd home matching $HOME.
            "-F",
            str(self._ssh_config),
            instance,
            command,
        ]

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
        await self.ensure_login()
        if not self._ssh_config.is_file():
            await self.refresh()  # writes ~/.ssh/config (Include) and ~/.brev/ssh_config
        argv = self._ssh_argv(instance, command)
        result = await self._runner.run(argv, verb="ssh_put", timeout=timeout, stdin=content)
        if result.returncode == 255 and "Could not resolve hostname" in result.stderr:
            # The alias is not in ~/.brev/ssh_config yet: brev refresh writes RUNNING instances.
            await self.refresh()
            result = await self._runner.run(argv, verb="ssh_put", timeout=timeout, stdin=content)
        if result.returncode != 0:
            raise BrevTransientError(
                f"writing {remote_path} on {instance} over ssh failed (exit {result.returncode})",
                cli_message=cli_message(result),
            )


__all__ = [
    "BrevCLI",
    "BrevCLISettings",
    "BrevConfigError",
    "BrevTimeouts",
    "CommandTimeout",
]
