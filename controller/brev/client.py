"""The narrow Brev interface the operator depends on, and its value types.

Only `controller.brev.cli` knows brev's argv and output formats; everything else (the reconciler,
the remote-job helpers) talks to this protocol. Tests inject the CLI implementation pointed at the
simulator: the only switch between production and tests is which `brev` is on PATH.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# Statuses the CLI knows (pkg/entity/entity.go); others are passed through unchanged.
RUNNING = "RUNNING"
DEPLOYING = "DEPLOYING"
STARTING = "STARTING"
STOPPING = "STOPPING"
STOPPED = "STOPPED"
DELETING = "DELETING"
FAILURE = "FAILURE"
UNHEALTHY = "UNHEALTHY"


@dataclass(frozen=True)
class Instance:
    """One entry of `brev ls --json` (.workspaces[]). The real listing carries no owner, org or
    timestamp (pkg/entity WorkspaceInfo), so neither does this."""

    name: str
    id: str
    status: str
    build_status: str = ""
    shell_status: str = ""
    health_status: str = ""
    instance_type: str = ""
    instance_kind: str = ""
    gpu: str = "-"


@dataclass(frozen=True)
class CreateRequest:
    """What `brev create NAME --detached ...` is asked for. Maps 1:1 onto real CLI flags, except
    the seed-only placement fields, which the CLI implementation refuses when the installed CLI
    lacks the flag (never passed blindly)."""

    name: str
    types: tuple[str, ...] = ()
    gpu_name: str | None = None
    provider: str | None = None
    min_vram: float | None = None
    min_total_vram: float | None = None
    min_capability: float | None = None
    min_disk: int | None = None
    max_boot_time: int | None = None
    mode: str | None = None
    startup_script: str | None = None
    timeout_seconds: int | None = None
    # Seed-only (not in brev v0.6.327): detected from `brev create --help`, refused when absent.
    cloud_cred_id: str | None = None
    workspace_group_id: str | None = None
    # The seed's `--gpu L40S:1` form; same treatment (v0.6.327 answers `unknown flag: --gpu`).
    gpu: str | None = None


@dataclass(frozen=True)
class BrevCredentials:
    """Headless login material from the operator's Secret: an API key (``bak-...``) with its org id
    (preferred: it never expires client-side), or a token. Secret values are kept out of repr."""

    api_key: str | None = field(default=None, repr=False)
    org_id: str | None = None
    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class CreateResult:
    name: str
    # True when the name already existed (a previous, possibly crashed, create): adopt it.
    adopted: bool


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one remote command. `exit_code` is the remote command's real status, parsed
    from the client's sentinel (brev itself only ever exits 0 or 1)."""

    exit_code: int
    stdout: str
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class SearchResult:
    """One entry of `brev search --json`."""

    type: str
    provider: str
    gpu_name: str
    gpu_count: int
    vram_per_gpu_gb: float
    price_per_hour: float
    raw: Mapping[str, object] = field(default_factory=dict)


class BrevCallRecorder(Protocol):
    """Counts and times every CLI call; wired to Prometheus by `controller.observability.metrics`."""

    def brev_call(self, verb: str, result: str, seconds: float) -> None: ...


class NullRecorder:
    def brev_call(self, verb: str, result: str, seconds: float) -> None:
        return None


class BrevClient(Protocol):
    """Async operations on Brev. Errors are raised as `controller.api.errors.BrevError` subclasses."""

    async def ensure_login(self) -> None:
        """Log in headless (API key + org, or token) before any other call; idempotent."""

    async def version(self) -> str:
        """The installed CLI's version tag, e.g. ``v0.6.327`` (no network call)."""

    async def identity(self) -> str:
        """A stable, secret-free string naming the logged-in identity: which instances it can
        see and touch. Record it with what you create; only that identity's `delete` answering
        not-found proves an instance gone."""

    async def list_instances(self) -> Sequence[Instance]:
        """`ls --json --all`: every instance of the org, whoever owns it (a token login lists only
        its own without `--all`). Several may share a name; match by id."""

    async def get_instance(self, name: str) -> Instance | None: ...

    async def create_instance(self, request: CreateRequest) -> CreateResult:
        """`create --detached`; an existing instance of that name is adopted, not an error."""

    async def delete_instance(self, name_or_id: str) -> None:
        """Request deletion by name or (better) id. Raises `InstanceNotFound` when this identity
        has no such instance (brev is not idempotent), `InstanceAmbiguous` when a name matches
        several live instances, `InstanceFailedWorkspace` when it matches only FAILURE ones."""

    async def start_instance(self, name: str) -> None: ...

    async def refresh(self) -> None:
        """`brev refresh`: (re)write the ssh config so newly RUNNING instances can be reached."""

    async def ssh_exec(
        self,
        instance: str,
        command: str,
        *,
        timeout: float,  # noqa: ASYNC109
        own_connection: bool = False,
    ) -> ExecResult:
        """Run ONE shell command string on the instance over plain ssh through its shared
        ControlMaster (not `brev exec`: no brev process per call, no re-run of a failing
        command) and return its real exit status; a connection failure raises
        `BrevTransientError`. Needs the instance RUNNING (brev's ssh config lists only those).
        `own_connection`: a long session (a running job's exit wait) on a connection of its own,
        not through the master (controller/brev/sshmux.py says why)."""

    async def put_file(
        self,
        instance: str,
        remote_path: str,
        content: bytes,
        *,
        mode: int = 0o600,
        timeout: float,  # noqa: ASYNC109 - a budget for the transfer; implementations kill on expiry
    ) -> None:
        """Write a file on the instance through ssh's stdin, so the content (a secret) never
        appears in any argv, local or remote."""

    async def search(
        self, *, gpu_name: str | None = None, min_vram: float | None = None
    ) -> Sequence[SearchResult]: ...
