"""Remote operations for ONE TAO job on ONE Brev instance, over a `BrevClient`.

Every method renders one shell program, exactly what would run on a real Brev VM, from the
template files of `controller.brev.remote` (docker is the only tool an instance is sure to have;
S3 transfers run the aws-cli image): this module supplies the values, quoted (`shlex.quote`), and
reads the answers. Programs are idempotent, because the transport may run them twice. Layout
under the instance's home:

    ~/taobrev/<job>/secrets/    0700; a secret file exists only DURING the step that reads it:
                                ngc_api_key + docker/ (the registry login)   pull_image
                                s3.env                   stage_inputs, upload_results
                                container.env            start_container, until `docker run` read it
    ~/taobrev/<job>/spec/spec.yaml
    ~/taobrev/<job>/data/<path>/...     staged inputs, mounted at /workspace/data
    ~/taobrev/<job>/results/...         TAO's results_dir, mounted at /workspace/results
    ~/taobrev/<job>/logs/container.log  `docker logs` copy uploaded with the results
    ~/taobrev/<job>/ckpt/pending        what the running checkpoint sync copies ("<files> <epoch>")

Secrets never appear in a command string: they reach the instance through `put_file` (ssh stdin)
and are read there by `--password-stdin` and `--env-file`. The remote command of the step that
reads them removes them in an EXIT trap (so a failing or interrupted step removes them too) and
prints a marker only when it verified they are gone; without that marker the step raises a
`TransientError`, so it runs again (delivering and removing again) instead of leaving them behind.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from controller.api import reasons
from controller.api.container_paths import (
    DATA_ROOT,
    INPUTS_ROOT,
    RESULTS_DIR,
    SPEC_DIR,
    SPEC_MOUNT_PATH,
    step_container,
)
from controller.api.errors import (
    BrevTransientError,
    EntitlementError,
    PermanentError,
    SpecError,
    TaoBrevError,
    TransientError,
)
from controller.brev.client import BrevClient, ExecResult
from controller.brev.envfile import ENV_NAME_RE, S3Credentials, env_file, s3_env_file
from controller.brev.logtail import TAIL_LINES, TAIL_MAX_BYTES, clean_log_tail
from controller.brev.progress_parse import STATUS_TAIL_BYTES, TaoProgress, parse_status_tail
from controller.brev.remote import render
from controller.versions import load_versions

JOB_ID_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")
# A workflow step's name (models.STEP_NAME_PATTERN): it names a container, a directory, a prefix.
STEP_RE = re.compile(r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
# Workflow steps' work directories (spec/, results/, logs/, ckpt/) under the job directory.
STEPS_DIR = "steps"
STAGE_PATH_RE = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")

NGC_KEY_FILE = "ngc_api_key"
DOCKER_CONFIG_DIR = "docker"
S3_ENV_FILE = "s3.env"
CONTAINER_ENV_FILE = "container.env"

# Markers the remote programs print (the templates spell them out) and the parsers below read.
_STAGED = "TAOBREV_STAGED"
_LISTING = "TAOBREV_LISTING"
_EXISTS = "TAOBREV_CONTAINER_EXISTS"
_IMAGE_MISSING = "TAOBREV_IMAGE_MISSING"
_STEP = "TAOBREV_STEP"
_SECRETS_GONE = "TAOBREV_SECRETS_GONE"
_SECRETS_LEFT = "TAOBREV_SECRETS_LEFT"
_TIMEOUT_RC = 124  # coreutils `timeout` when the time limit was hit
# Separate `docker wait`'s answer, the container's State, TAO's status.json tail and the log tail
# in one remote command.
_STATE_MARK = "__taobrev_state__"
_PROGRESS_MARK = "__taobrev_progress__"
_TAIL_MARK = "__taobrev_log_tail__"
# Below this much phase budget a remote call is not worth starting.
_MIN_CALL_S = 1.0
# Docker's zero time: FinishedAt of a container that has not exited.
_ZERO_TIME_PREFIX = "0001-01-01"
# Checkpoint sync (a detached aws-cli container named <job>-ckpt) and restore markers.
CKPT_SUFFIX = "-ckpt"
# Uploaded as <resultsUri>/logs/taobrev-job, holding the job id: whose results/ a restore may resume.
OWNER_MARK = "taobrev-job"
_SYNC_RUNNING = "TAOBREV_SYNC_RUNNING"
_SYNC_NONE = "TAOBREV_SYNC_NONE"
_SYNC_PREV = "TAOBREV_SYNC_PREV"
_SYNC_PENDING = "TAOBREV_SYNC_PENDING"
_SYNC_LOG = "TAOBREV_SYNC_LOG"
_SYNC_STARTED = "TAOBREV_SYNC_STARTED"
_RESTORED = "TAOBREV_RESTORED"
_CLEARED = "TAOBREV_CLEARED"  # followed by: container left (0/1), files left (0/1)
_LATEST = "TAOBREV_LATEST"
_OUTPUT = "TAOBREV_OUTPUT"  # an earlier workflow step's results restored: <step> <files>
_UNREADABLE = "TAOBREV_UNREADABLE"

_AUTH_MARKERS = ("unauthorized", "denied", "forbidden", "incorrect username or password", "401", "403")
_NETWORK_MARKERS = ("timeout", "timed out", "connection refused", "no such host", "tls handshake", "eof")
_MISSING_IMAGE_MARKERS = ("manifest unknown", "no such manifest", "not found")


class ContainerNotFound(PermanentError):
    """The job's container is not on the instance (removed, or the instance was replaced)."""

    reason = reasons.CONTAINER_NOT_FOUND


class ImageNotPresent(TransientError):
    """`docker run` was not attempted: the image is not on the instance (pull it, with the
    registry credentials, then start again). `docker run` never pulls on its own."""

    reason = reasons.IMAGE_NOT_PRESENT


@dataclass(frozen=True)
class StageInput:
    """An S3 prefix copied (recursively) to ~/taobrev/<job>/data/<path>."""

    uri: str
    path: str


@dataclass(frozen=True)
class ContainerState:
    """`docker inspect --format '{{json .State}}'` of the job's container."""

    status: str
    running: bool
    exit_code: int | None
    started_at: str = ""
    finished_at: str = ""
    oom_killed: bool = False
    error: str = ""


@dataclass(frozen=True)
class ExitInfo:
    """One bounded wait for the container: `code` None while it still runs; `finished_at` is the
    container's own State.FinishedAt once it exited (so time the operator was down is not counted
    as run time); `tail` its last log lines, cleaned for status (see `clean_log_tail`);
    `progress` what TAO's status.json says (None: not read, or no whole epoch line yet)."""

    code: int | None
    finished_at: datetime | None
    tail: tuple[str, ...]
    progress: TaoProgress | None = None


@dataclass(frozen=True)
class SyncReport:
    """The previous checkpoint sync as the next interval found it: `state` is running, ok, failed
    or none; `started` whether this call started the next one; epoch/objects what it copied."""

    state: str
    started: bool
    epoch: int | None = None
    objects: int | None = None
    message: str = ""


@dataclass(frozen=True)
class RestoreReport:
    """Files in the results directory after the restore and the latest `*_epoch_NNN.pth` among
    them (path relative to the job directory, e.g. ``results/train/model_epoch_003.pth``)."""

    objects: int
    latest: str | None
    epoch: int | None
    # Newer checkpoints passed over because they are no whole zip archive (TAO still writing it
    # when a sync copied it, or a killed copy): the resume falls back to `latest`.
    unreadable: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkloadSettings:
    aws_cli_image: str = field(default_factory=lambda: load_versions().images.aws_cli)
    registry: str = "nvcr.io"
    # The first exec on a new instance waits out ssh bring-up and brev's own recovery (>= 600 s).
    probe_timeout: float = 600
    command_timeout: float = 120
    put_timeout: float = 120
    pull_timeout: float = 3600
    transfer_timeout: float = 3600
    # Added to a bounded remote wait (`timeout T docker wait`) for the transport itself.
    wait_margin: float = 60
    stop_grace_s: int = 30
    # Added to the stop grace for docker's SIGKILL step and the transport: a stop on an
    # unreachable instance fails after grace + stop_margin, never later.
    stop_margin: float = 30
    # PyTorch data loaders need more than docker's 64 MB default /dev/shm.
    shm_size: str | None = "16g"


# ---- pure helpers ---------------------------------------------------------------------------------


def split_s3_uri(uri: str, field_name: str = "uri") -> tuple[str, str]:
    """``s3://bucket/a/b/`` -> (``bucket``, ``a/b``)."""
    if not uri.startswith("s3://"):
        raise SpecError(f"{field_name} must be an s3:// URI, got {uri!r}")
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket or any(c.isspace() for c in uri):
        raise SpecError(f"{field_name} {uri!r} has no bucket or contains whitespace")
    return bucket, key.strip("/")


def parse_state(text: str) -> ContainerState:
    doc = json.loads(text.strip().splitlines()[-1])
    if not isinstance(doc, dict):
        raise ValueError("docker inspect State is not an object")
    code = doc.get("ExitCode")
    return ContainerState(
        status=str(doc.get("Status", "")),
        running=bool(doc.get("Running", False)),
        exit_code=int(code) if isinstance(code, int) else None,
        started_at=str(doc.get("StartedAt", "")),
        finished_at=str(doc.get("FinishedAt", "")),
        oom_killed=bool(doc.get("OOMKilled", False)),
        error=str(doc.get("Error", "")),
    )


def parse_docker_time(text: str) -> datetime | None:
    """Docker's RFC 3339 time (nanoseconds, `Z`) as an aware datetime; None for docker's zero
    time (not happened yet), an empty or an unreadable value."""
    text = text.strip()
    if not text or text.startswith(_ZERO_TIME_PREFIX):
        return None
    # fromisoformat takes at most microseconds: drop digits beyond six.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def parse_listing(stdout: str) -> tuple[dict[str, int], dict[str, int]]:
    """(local relative path -> size, remote key -> size) from the verification command's output."""
    local_part, sep, remote_part = stdout.partition(f"{_LISTING}\n")
    if not sep:
        raise ValueError("verification output has no listing separator")
    local: dict[str, int] = {}
    for line in local_part.splitlines():
        if line.startswith("F\t"):
            _f, size, path = line.split("\t", 2)
            local[path] = int(size)
    remote: dict[str, int] = {}
    text = remote_part.strip()
    if text:
        doc: Any = json.loads(text)
        for item in doc or []:
            remote[str(item[0])] = int(item[1])
    return local, remote


def last_step(stdout: str) -> tuple[str, str]:
    """(name of the last step a multi-step command began, that step's own output)."""
    _head, sep, rest = stdout.rpartition(f"{_STEP} ")
    if not sep:
        return "", stdout
    name, _, text = rest.partition("\n")
    return name.strip(), text


def _s3_options(endpoint: str | None, region: str | None) -> list[str]:
    """aws-cli's `--endpoint-url` and `--region` words, each when given."""
    options: list[str] = []
    if endpoint:
        options += ["--endpoint-url", shlex.quote(endpoint)]
    if region:
        options += ["--region", shlex.quote(region)]
    return options


def _lower(result: ExecResult) -> str:
    return f"{result.stdout}\n{result.stderr}".lower()


def _message(result: ExecResult) -> str:
    return (result.stdout.strip() or result.stderr.strip())[-2000:]


def _utcnow() -> datetime:
    return datetime.now(UTC)


# ---- the remote job ------------------------------------------------------------------------------


class Workload:
    """Every step takes an optional `deadline` (aware datetime): the end of the caller's phase
    budget. Each remote call then gets at most the remaining budget as its timeout, and a step
    is not started once less than a second of it is left (TransientError `PhaseBudgetSpent`)."""

    def __init__(
        self,
        client: BrevClient,
        instance: str,
        job_id: str,
        *,
        settings: WorkloadSettings | None = None,
        clock: Callable[[], datetime] = _utcnow,
        step: str | None = None,
    ) -> None:
        if not JOB_ID_RE.match(job_id):
            raise SpecError(f"job id {job_id!r} is not a valid container name ([a-zA-Z0-9][a-zA-Z0-9_.-]*)")
        if step is not None and not STEP_RE.match(step):
            raise SpecError(f"step name {step!r} is not a valid step name ([a-z][a-z0-9-]*)")
        self.client = client
        self.instance = instance
        self.job_id = job_id
        # A workflow step (spec.steps[].name) has its own container and its own work directory
        # (spec/, results/, logs/, ckpt/ under steps/<step>/); data/ and secrets/ are the job's.
        self.step = step
        self.container = job_id if step is None else step_container(job_id, step)
        self.work = "" if step is None else f"{STEPS_DIR}/{step}"
        self.settings = settings or WorkloadSettings()
        self.remote_dir = f"~/taobrev/{job_id}"
        self._clock = clock

    # -- values and fragments of the remote programs -------------------------------------------

    def _path(self, sub: str = "") -> str:
        """A job path as one shell word that expands $HOME on the instance."""
        rel = f"taobrev/{self.job_id}" + (f"/{sub}" if sub else "")
        return '"$HOME"/' + shlex.quote(rel)

    def _work(self, sub: str = "") -> str:
        """A path of this container's work directory (the job directory, or steps/<step>/)."""
        return self._path("/".join(part for part in (self.work, sub) if part))

    def _secret(self, name: str) -> str:
        return self._path(f"secrets/{name}")

    @staticmethod
    def _secret_scope(program: str, *paths: str) -> str:
        """`program` in secret_scope.sh: whenever it ends (success, failure, hang-up, kill by
        `timeout`), `paths` are removed and `_SECRETS_GONE` printed only if none of them is left.
        `put_file`'s temporary files (`<path>.tmp-<token>`, left by a delivery cut short) go too."""
        cleanup = render("secret_cleanup", files=[w for p in paths for w in (p, f"{p}.tmp-*")])
        return render("secret_scope", cleanup=shlex.quote(cleanup), program=program)

    def _aws(self, mounts: Sequence[str], endpoint: str | None, region: str | None) -> str:
        """aws.sh: an aws-cli command up to its subcommand, with `mounts` (`host:container`)."""
        return render(
            "aws",
            s3_env=self._secret(S3_ENV_FILE),
            mounts=[word for mount in mounts for word in ("-v", mount)],
            image=shlex.quote(self.settings.aws_cli_image),
            s3_options=_s3_options(endpoint, region),
        )

    def _log_tail(self, tail: int) -> str:
        return render("log_tail", lines=int(tail), name=shlex.quote(self.container), max_bytes=TAIL_MAX_BYTES)

    def _limit(self, default: float, deadline: datetime | None, what: str) -> float:
        """The timeout of one remote call: `default`, or less when the phase budget ends sooner."""
        if deadline is None:
            return default
        remaining = (deadline - self._clock()).total_seconds()
        if remaining < _MIN_CALL_S:
            raise TransientError(
                f"{what} on {self.instance} not attempted: the phase's time budget is spent",
                reason=reasons.PHASE_BUDGET_SPENT,
            )
        return min(default, remaining)

    async def _run(
        self,
        command: str,
        limit: float,
        deadline: datetime | None = None,
        what: str = "remote command",
        *,
        own_connection: bool = False,
    ) -> ExecResult:
        """Every step, the probe included: plain ssh over the instance's shared master connection
        (no `brev exec` + bash + ssh process chain per call, and no re-run of a failing command).
        brev exec's extras are not needed: the client refreshes brev's ssh config when an alias
        is missing; ssh bring-up is waited out by probing again each poll interval (a refused
        connection fails in seconds, not after brev's 41 s retry loop); and its auto-start of a
        STOPPED instance must not happen behind the operator's back. `own_connection` for the
        exit waits: a long session on a connection of its own (sshmux says why)."""
        return await self.client.ssh_exec(
            self.instance, command, timeout=self._limit(limit, deadline, what), own_connection=own_connection
        )

    async def _put_secret(self, name: str, content: bytes, deadline: datetime | None) -> None:
        await self.client.put_file(
            self.instance,
            f"{self.remote_dir}/secrets/{name}",
            content,
            mode=0o600,
            timeout=self._limit(self.settings.put_timeout, deadline, f"delivering {name}"),
        )

    def _secrets_removed(self, result: ExecResult, what: str) -> ExecResult:
        """`result` without the removal marker line; raises when the step's secret files may
        still be on the instance (the step is then retried, which removes them again)."""
        lines = result.stdout.split("\n")
        kept = [line for line in lines if line.strip() not in (_SECRETS_GONE, _SECRETS_LEFT)]
        if _SECRETS_GONE not in (line.strip() for line in lines):
            raise TransientError(
                f"{what} on {self.instance}: could not verify that its secret files were removed",
                reason=reasons.SECRET_CLEANUP_FAILED,
                cli_message=_message(result),
            )
        return ExecResult(result.exit_code, "\n".join(kept), result.stderr)

    # -- steps ----------------------------------------------------------------------------------

    async def _with_s3_keys(
        self,
        body: str,
        *,
        credentials: S3Credentials,
        region: str | None,
        limit: float,
        deadline: datetime | None,
        what: str,
    ) -> ExecResult:
        """Run `body` with the S3 keys file on the instance for exactly as long as the command
        runs: delivered just before, removed by the command's own EXIT trap (and checked)."""
        await self._put_secret(S3_ENV_FILE, s3_env_file(credentials, region=region), deadline)
        command = self._secret_scope(body, self._secret(S3_ENV_FILE))
        return self._secrets_removed(await self._run(command, limit, deadline, what), what)

    async def probe(self, limit: float | None = None, *, deadline: datetime | None = None) -> bool:
        """A two-word command; True once exec works end to end (RUNNING is not ssh-ready)."""
        try:
            # Over the same ssh as every later step, so a True proves the transport they use.
            result = await self._run(
                render("probe"),
                limit if limit is not None else self.settings.probe_timeout,
                deadline,
                "probe",
            )
        except BrevTransientError as exc:
            if exc.reason == reasons.BREV_AUTH_FAILED:
                raise
            return False
        return result.ok and result.stdout.strip() == "ok"

    async def write_spec(self, content: str | bytes, *, deadline: datetime | None = None) -> None:
        data = content.encode() if isinstance(content, str) else content
        await self.client.put_file(
            self.instance,
            f"{self.remote_dir}/{self.work + '/' if self.work else ''}spec/spec.yaml",
            data,
            mode=0o644,
            timeout=self._limit(self.settings.put_timeout, deadline, "writing the spec"),
        )

    async def pull_image(self, image: str, *, ngc_api_key: bytes, deadline: datetime | None = None) -> None:
        """`pull_images` of one image."""
        await self.pull_images([image], ngc_api_key=ngc_api_key, deadline=deadline)

    async def pull_images(
        self, images: Sequence[str], *, ngc_api_key: bytes, deadline: datetime | None = None
    ) -> None:
        """ONE registry login (`--password-stdin` from the key file), `docker manifest inspect`
        of every image (an image we may not pull fails before any multi-GB pull, and before GPU
        time is spent), then each image pulled unless present: one remote command, with the key
        file and the job's DOCKER_CONFIG (the stored login) removed when it ends, whatever the
        outcome. A workflow's distinct images are each pulled once, here."""
        key, config = self._secret(NGC_KEY_FILE), self._secret(DOCKER_CONFIG_DIR)
        await self._put_secret(NGC_KEY_FILE, ngc_api_key, deadline)
        program = render(
            "pull_image",
            docker_config=config,
            registry=shlex.quote(self.settings.registry),
            key_file=key,
            images=[shlex.quote(image) for image in images],
        )
        command = self._secret_scope(program, key, config)
        what = f"pulling {', '.join(images)}"
        result = self._secrets_removed(
            await self._run(command, self.settings.pull_timeout * len(images), deadline, what), what
        )
        if result.ok:
            return
        step, text = last_step(result.stdout)
        output = ExecResult(result.exit_code, text, result.stderr)
        name, _, image = step.partition(" ")
        if name == "login":
            self._raise_login_error(output)
        image = image or images[-1]
        self._raise_registry_error(image, output, "manifest inspect" if name == "manifest" else "pull")

    def _raise_login_error(self, result: ExecResult) -> NoReturn:
        text = _lower(result)
        if any(m in text for m in _AUTH_MARKERS) or "password" in text:
            raise EntitlementError(
                f"docker login to {self.settings.registry} was refused: check the NGC API key in the "
                "job's NGC Secret",
                cli_message=_message(result),
            )
        raise TransientError(
            f"docker login to {self.settings.registry} failed",
            reason=reasons.REGISTRY_LOGIN_FAILED,
            cli_message=_message(result),
        )

    def _raise_registry_error(self, image: str, result: ExecResult, what: str) -> NoReturn:
        text = _lower(result)
        if any(m in text for m in _AUTH_MARKERS):
            raise EntitlementError(
                f"the registry refused {image}: the NGC key's org is not entitled to it, or the key is "
                "wrong (check the NGC Secret and the org's TAO entitlement)",
                cli_message=_message(result),
            )
        if any(m in text for m in _MISSING_IMAGE_MARKERS) and not any(m in text for m in _NETWORK_MARKERS):
            raise SpecError(
                f"image {image} does not exist in its registry: check spec.image",
                cli_message=_message(result),
            )
        raise TransientError(
            f"docker {what} of {image} failed",
            reason=reasons.REGISTRY_UNAVAILABLE,
            cli_message=_message(result),
        )

    async def stage_inputs(
        self,
        inputs: Sequence[StageInput | tuple[str, str]],
        s3_endpoint: str | None = None,
        region: str | None = None,
        *,
        credentials: S3Credentials,
        deadline: datetime | None = None,
    ) -> int:
        """Copy each S3 prefix (uri, path) to data/<path>; returns the number of files staged. A
        prefix that holds no objects is a spec error (TAO would fail later, less clearly). The S3
        keys are on the instance only while this one remote command runs."""
        items = [raw if isinstance(raw, StageInput) else StageInput(*raw) for raw in inputs]
        for i, item in enumerate(items):
            split_s3_uri(item.uri, f"inputs[{i}].uri")
            if not STAGE_PATH_RE.match(item.path) or ".." in item.path.split("/"):
                raise SpecError(f"inputs[{i}].path {item.path!r} must be a relative path without '..'")
        if not items:
            return 0
        aws = self._aws([f"{self._path('data')}:/job/data"], s3_endpoint, region)
        steps = [
            render(
                "stage_input",
                step=i,
                target=self._path(f"data/{item.path}"),
                aws=aws,
                uri=shlex.quote(item.uri),
                dest=shlex.quote(f"/job/data/{item.path}"),
            )
            for i, item in enumerate(items)
        ]
        # One command copies every input: each keeps the transfer budget it had on its own.
        result = await self._with_s3_keys(
            "; ".join(steps),
            credentials=credentials,
            region=region,
            limit=self.settings.transfer_timeout * len(items),
            deadline=deadline,
            what="staging inputs",
        )
        if not result.ok:
            step, text = last_step(result.stdout)
            i = int(step) if step.isdigit() else 0
            self._raise_staging_error(
                i, items[min(i, len(items) - 1)].uri, ExecResult(result.exit_code, text)
            )
        counts = {
            int(m.group(1)): int(m.group(2)) for m in re.finditer(rf"{_STAGED} (\d+) (\d+)", result.stdout)
        }
        for i, item in enumerate(items):
            if counts.get(i, 0) == 0:
                raise SpecError(f"inputs[{i}].uri {item.uri} holds no objects")
        return sum(counts.values())

    @staticmethod
    def _raise_staging_error(i: int, uri: str, result: ExecResult) -> NoReturn:
        text = _lower(result)
        if "nosuchbucket" in text or "does not exist" in text:
            raise SpecError(f"inputs[{i}].uri {uri}: bucket does not exist", cli_message=_message(result))
        if any(m in text for m in ("accessdenied", "invalidaccesskeyid", "signaturedoesnotmatch", "403")):
            raise PermanentError(
                f"S3 refused reading inputs[{i}].uri {uri}: check the S3 credentials Secret",
                reason=reasons.S3_ACCESS_DENIED,
                cli_message=_message(result),
            )
        raise TransientError(
            f"staging inputs[{i}] from {uri} failed",
            reason=reasons.STAGING_FAILED,
            cli_message=_message(result),
        )

    async def start_container(
        self,
        image: str,
        network_arch: str,
        action: str,
        *,
        spec_path: str = SPEC_MOUNT_PATH,
        gpus: int | None = None,
        env: Mapping[str, str] | None = None,
        secret_env: Mapping[str, bytes | str] | None = None,
        args: Sequence[str] = (),
        shm_size: str | None = None,
        inputs: Sequence[tuple[str, str | None]] = (),
        deadline: datetime | None = None,
    ) -> bool:
        """`docker run -d` the TAO container unless one of that name exists. Returns True if this
        call started it. Non-secret env goes as `-e K=V`; `secret_env` only through an env file
        that exists until `docker run` has read it. Raises `ImageNotPresent` instead of letting
        `docker run` pull (the registry login is gone by now). `inputs` (a workflow step):
        (earlier step, path in its results directory or None for all of it), each mounted
        read-only at /workspace/inputs/<step>/<path>."""
        for key in env or {}:
            if not ENV_NAME_RE.match(key):
                raise SpecError(f"env name {key!r} is invalid: use letters, digits and '_'")
        secret_file = env_file(secret_env, source="secret environment variable") if secret_env else None
        env_path = self._secret(CONTAINER_ENV_FILE)
        shm = shm_size or self.settings.shm_size
        program = render(
            "start_container",
            spec=self._work("spec"),
            data=self._path("data"),
            results=self._work("results"),
            logs=self._work("logs"),
            name=shlex.quote(self.container),
            label=shlex.quote(f"tao-job={self.job_id}"),
            gpus="all" if gpus is None else str(int(gpus)),
            shm=["--shm-size", shlex.quote(shm)] if shm else [],
            spec_dir=SPEC_DIR,
            data_dir=DATA_ROOT,
            results_dir=RESULTS_DIR,
            env_file=["--env-file", env_path] if secret_file is not None else [],
            env=[word for k, v in (env or {}).items() for word in ("-e", shlex.quote(f"{k}={v}"))],
            image=shlex.quote(image),
            network_arch=shlex.quote(network_arch),
            action=shlex.quote(action),
            spec_path=shlex.quote(spec_path),
            args=[shlex.quote(a) for a in args],
            inputs=self._input_mounts(inputs),
        )
        command = self._secret_scope(program, env_path)
        if secret_file is not None:
            await self._put_secret(CONTAINER_ENV_FILE, secret_file, deadline)
        result = self._secrets_removed(
            await self._run(command, self.settings.command_timeout, deadline, "docker run"), "docker run"
        )
        if result.ok:
            return _EXISTS not in result.stdout
        if _IMAGE_MISSING in result.stdout:
            raise ImageNotPresent(f"image {image} is not on {self.instance}; it must be pulled first")
        if "is already in use" in result.stdout:  # a concurrent/duplicated run won the name
            return False
        raise TransientError(
            f"docker run of {self.container} on {self.instance} failed",
            reason=reasons.CONTAINER_START_FAILED,
            cli_message=_message(result),
        )

    def _input_mounts(self, inputs: Sequence[tuple[str, str | None]]) -> list[str]:
        """`-v <earlier step's results>/<path>:/workspace/inputs/<step>/<path>:ro` words."""
        words: list[str] = []
        for step, path in inputs:
            if not STEP_RE.match(step) or (path is not None and not STAGE_PATH_RE.match(path)):
                raise SpecError(f"input {step}/{path} is not a step name and a relative path")
            if path is not None and ".." in path.split("/"):
                raise SpecError(f"input {step}/{path} must not contain '..'")
            rel = f"{STEPS_DIR}/{step}/results" + (f"/{path}" if path else "")
            target = f"{INPUTS_ROOT}/{step}" + (f"/{path}" if path else "")
            words += ["-v", f"{self._path(rel)}:{shlex.quote(target + ':ro')}"]
        return words

    async def container_state(self, *, deadline: datetime | None = None) -> ContainerState | None:
        """The container's State, or None if there is no such container."""
        result = await self._run(
            render("container_state", name=shlex.quote(self.container)),
            self.settings.command_timeout,
            deadline,
            "docker inspect",
        )
        if not result.ok:
            if "no such" in _lower(result):
                return None
            raise TransientError(
                "docker inspect failed", reason=reasons.CONTAINER_INSPECT_FAILED, cli_message=_message(result)
            )
        try:
            return parse_state(result.stdout)
        except (ValueError, IndexError) as exc:
            raise TransientError(
                "docker inspect printed no State",
                reason=reasons.CONTAINER_INSPECT_FAILED,
                cli_message=_message(result),
            ) from exc

    def _wait_seconds(self, timeout_s: float, deadline: datetime | None) -> int:
        """The remote `timeout` of a blocking wait: `timeout_s`, shortened so that the wait plus
        its transport margin ends within the phase budget."""
        seconds = max(1, int(timeout_s))
        if deadline is not None:
            remaining = (deadline - self._clock()).total_seconds() - self.settings.wait_margin
            seconds = max(1, min(seconds, int(remaining)))
        return seconds

    def wait_ends(self, timeout_s: float, deadline: datetime | None) -> datetime:
        """The latest a wait started now returns: its remote timeout plus the transport margin."""
        seconds = self._wait_seconds(timeout_s, deadline) + self.settings.wait_margin
        return self._clock() + timedelta(seconds=seconds)

    async def wait_exit(self, timeout_s: int, *, deadline: datetime | None = None) -> int | None:
        """Block on the instance up to `timeout_s` for the container to exit: its exit code, or
        None if it is still running. One brev call notices an exit within about a second."""
        seconds = self._wait_seconds(timeout_s, deadline)
        command = render("wait_exit", seconds=seconds, name=shlex.quote(self.container))
        result = await self._run(
            command, seconds + self.settings.wait_margin, deadline, "docker wait", own_connection=True
        )
        if result.exit_code == _TIMEOUT_RC:
            return None
        if result.ok:
            lines = result.stdout.strip().splitlines()
            if lines and lines[-1].strip().lstrip("-").isdigit():
                return int(lines[-1].strip())
        raise self._wait_error(result)

    def _wait_error(self, result: ExecResult) -> TaoBrevError:
        if "no such container" in _lower(result):
            return ContainerNotFound(
                f"container {self.container} is not on {self.instance}", cli_message=_message(result)
            )
        return TransientError(
            "docker wait failed", reason=reasons.CONTAINER_WAIT_FAILED, cli_message=_message(result)
        )

    async def wait_exit_with_tail(
        self,
        timeout_s: int,
        tail: int = TAIL_LINES,
        *,
        deadline: datetime | None = None,
        tail_while_running: bool = True,
        progress_of: str | None = None,
        progress_while_running: bool = True,
    ) -> ExitInfo:
        """`wait_exit` plus the container's State.FinishedAt, the tail of TAO's status.json (with
        `progress_of`, the TAO action whose results/<action>/status.json it is) and its last `tail`
        log lines, in the SAME brev call: no extra round trip between the exit and the next step,
        and none for progress. The tail and the progress come back at an exit, and if the
        container still runs only with `tail_while_running` / `progress_while_running`."""
        seconds = self._wait_seconds(timeout_s, deadline)
        read_tail = render("tail_section", log_tail=self._log_tail(tail))
        if not tail_while_running:
            read_tail = render("if_exited", section=read_tail)
        read_progress = ":"
        if progress_of is not None:
            read_progress = render(
                "progress_section",
                status_json=self._work(f"results/{progress_of}/status.json"),
                max_bytes=STATUS_TAIL_BYTES,
            )
            if not progress_while_running:
                read_progress = render("if_exited", section=read_progress)
        command = render(
            "wait_exit_with_tail",
            seconds=seconds,
            name=shlex.quote(self.container),
            read_progress=read_progress,
            read_tail=read_tail,
        )
        result = await self._run(
            command, seconds + self.settings.wait_margin, deadline, "docker wait", own_connection=True
        )
        head, _, rest = result.stdout.partition(f"{_STATE_MARK}\n")
        sections, _, logs = rest.partition(f"{_TAIL_MARK}\n")
        state_text, marked, status_tail = sections.partition(f"{_PROGRESS_MARK}\n")
        lines = clean_log_tail(logs, lines=tail, head_cut=len(logs.encode()) >= TAIL_MAX_BYTES)
        progress = (
            parse_status_tail(status_tail, head_cut=len(status_tail.encode()) >= STATUS_TAIL_BYTES)
            if marked
            else None
        )
        if result.exit_code == _TIMEOUT_RC:
            return ExitInfo(None, None, tuple(lines), progress)
        if result.ok:
            words = head.strip().splitlines()
            if words and words[-1].strip().lstrip("-").isdigit():
                return ExitInfo(int(words[-1].strip()), _finished_at(state_text), tuple(lines), progress)
        raise self._wait_error(result)

    async def logs(self, tail: int = 200, *, deadline: datetime | None = None) -> list[str]:
        """The last `tail` lines the container printed (stdout and stderr), cleaned like the
        status tail (`clean_log_tail`)."""
        result = await self._run(
            render("logs", log_tail=self._log_tail(tail)),
            self.settings.command_timeout,
            deadline,
            "docker logs",
        )
        if not result.ok:
            if "no such container" in _lower(result):
                raise ContainerNotFound(
                    f"container {self.container} is not on {self.instance}", cli_message=_message(result)
                )
            raise TransientError(
                "docker logs failed", reason=reasons.CONTAINER_LOGS_FAILED, cli_message=_message(result)
            )
        return clean_log_tail(
            result.stdout, lines=tail, head_cut=len(result.stdout.encode()) >= TAIL_MAX_BYTES
        )

    async def stop_container(self, grace_s: int | None = None, *, deadline: datetime | None = None) -> None:
        """SIGTERM, then SIGKILL after `grace_s` (default: settings.stop_grace_s); a missing
        container counts as stopped. Bounded on both sides: the remote `timeout` ends a hung
        docker, the call timeout (grace + stop_margin, or less by `deadline`) an unreachable
        instance, so a stop always ends with success or a TransientError."""
        grace = max(0, int(self.settings.stop_grace_s if grace_s is None else grace_s))
        # docker stop waits `grace`, then SIGKILLs and waits for the exit: give it 10 s for that.
        command = render("stop_container", limit=grace + 10, grace=grace, name=shlex.quote(self.container))
        result = await self._run(command, grace + self.settings.stop_margin, deadline, "docker stop")
        if result.ok or "no such container" in _lower(result):
            return
        if result.exit_code == _TIMEOUT_RC:
            raise TransientError(
                f"docker stop of {self.container} did not return within {grace + 10} s",
                reason=reasons.CONTAINER_STOP_FAILED,
                cli_message=_message(result),
            )
        raise TransientError(
            "docker stop failed", reason=reasons.CONTAINER_STOP_FAILED, cli_message=_message(result)
        )

    async def upload_results(
        self,
        results_uri: str,
        endpoint: str | None = None,
        region: str | None = None,
        *,
        credentials: S3Credentials,
        deadline: datetime | None = None,
    ) -> tuple[int, int]:
        """Save `docker logs` to logs/container.log, copy results/ and logs/ to <uri>/results and
        <uri>/logs, then verify the bucket holds every local file with its size, in ONE remote
        command during which alone the S3 keys are on the instance.
        Returns (objects, bytes) verified; raises TransientError on any mismatch."""
        bucket, prefix = split_s3_uri(results_uri, "resultsUri")
        base = results_uri.rstrip("/")
        read_only = [f"{self._work('results')}:/job/results:ro", f"{self._work('logs')}:/job/logs:ro"]
        results_key, logs_key = self.upload_keys()
        command = render(
            "upload_results",
            ckpt=shlex.quote(self.container + CKPT_SUFFIX),
            abort_incomplete_uploads=self._abort_incomplete_uploads(results_uri, endpoint, region, []),
            results=self._work("results"),
            logs=self._work("logs"),
            name=shlex.quote(self.container),
            tmp_log=self._work("logs/container.log.tmp"),
            log=self._work("logs/container.log"),
            owner_mark=self._work(f"logs/{OWNER_MARK}"),
            aws_mounted=self._aws(read_only, endpoint, region),
            results_uri=shlex.quote(f"{base}/{results_key}"),
            logs_uri=shlex.quote(f"{base}/{logs_key}"),
            job_dir=self._work(),
            aws=self._aws([], endpoint, region),
            bucket=shlex.quote(bucket),
            prefix_option=["--prefix", shlex.quote(f"{prefix}/")] if prefix else [],
        )
        # The copy, then the listing that verifies it (short), in the same call.
        result = await self._with_s3_keys(
            command,
            credentials=credentials,
            region=region,
            limit=self.settings.transfer_timeout + self.settings.command_timeout,
            deadline=deadline,
            what="uploading results",
        )
        step, text = last_step(result.stdout)
        if not result.ok:
            failed = ExecResult(result.exit_code, text, result.stderr)
            if step == "verify":
                raise TransientError(
                    "listing uploaded results failed",
                    reason=reasons.UPLOAD_FAILED,
                    cli_message=_message(failed),
                )
            raise TransientError(
                f"uploading results to {results_uri} failed",
                reason=reasons.UPLOAD_FAILED,
                cli_message=_message(failed),
            )
        return self._verified(bucket, prefix, text, self.upload_keys())

    def upload_keys(self) -> tuple[str, str]:
        """Where results/ and logs/ go under the resultsUri: results and logs, or a workflow
        step's <step> and logs/<step> (so one step's upload never touches another's)."""
        return ("results", "logs") if self.step is None else (self.step, f"logs/{self.step}")

    @staticmethod
    def _verified(
        bucket: str, prefix: str, listing_output: str, keys: tuple[str, str] = ("results", "logs")
    ) -> tuple[int, int]:
        try:
            local, remote = parse_listing(listing_output)
        except (ValueError, IndexError, TypeError) as exc:
            raise TransientError(
                "could not read the upload verification listing",
                reason=reasons.UPLOAD_FAILED,
                cli_message=listing_output.strip()[-2000:],
            ) from exc
        key_prefix = f"{prefix}/" if prefix else ""
        # Local `results/x` and `logs/x` (in the work directory) are `<keys[0]>/x`, `<keys[1]>/x`.
        where = {"results": keys[0], "logs": keys[1]}

        def key(path: str) -> str:
            top, _, rest = path.partition("/")
            return f"{key_prefix}{where.get(top, top)}/{rest}"

        missing = [path for path, size in local.items() if remote.get(key(path)) != size]
        if missing:
            raise TransientError(
                f"upload verification failed: {len(missing)} of {len(local)} files missing or of the wrong "
                f"size in s3://{bucket}/{key_prefix} (first: {sorted(missing)[0]})",
                reason=reasons.UPLOAD_INCOMPLETE,
            )
        return len(local), sum(local.values())

    # -- checkpoints --------------------------------------------------------------------------

    def _abort_incomplete_uploads(
        self, results_uri: str, endpoint: str | None, region: str | None, mounts: Sequence[str]
    ) -> str:
        """abort_incomplete_uploads.sh: the parts a killed sync left under this job's checkpoints/."""
        bucket, key_prefix = split_s3_uri(self.checkpoint_prefix(results_uri), "resultsUri")
        return render(
            "abort_incomplete_uploads",
            aws=self._aws(mounts, endpoint, region),
            bucket=shlex.quote(bucket),
            prefix=shlex.quote(f"{key_prefix}/"),
        )

    @staticmethod
    def _newest_whole_checkpoint() -> str:
        """newest_whole_checkpoint.sh: `TAOBREV_LATEST <epoch> <path>` (and `TAOBREV_UNREADABLE`
        for each newer checkpoint that is no whole archive)."""
        return render("newest_whole_checkpoint", whole_zip=render("whole_zip"))

    def checkpoint_prefix(self, results_uri: str) -> str:
        """Where this job's checkpoints live: under its own job id (name + uid digest), so a
        resultsUri another job used before never resumes that job's run (issue 25, scenario 11)."""
        base = f"{results_uri.rstrip('/')}/checkpoints/{self.job_id}"
        return base if self.step is None else f"{base}/{self.step}"

    async def sync_checkpoints(
        self,
        results_uri: str,
        endpoint: str | None = None,
        region: str | None = None,
        *,
        credentials: S3Credentials,
        deadline: datetime | None = None,
    ) -> SyncReport:
        """ONE short call per interval: report how the previous detached sync ended (and remove
        its container, whose config carried the S3 keys), then start the next one, detached:
        `aws s3 sync` of results/ to <uri>/checkpoints/<job id>/ copies only new or changed files. The copy
        never blocks this call, so exit notice and teardown are never delayed by it. The S3 keys
        file exists only while this command runs (docker reads --env-file at `docker run`)."""
        split_s3_uri(results_uri, "resultsUri")
        command = render(
            "sync_checkpoints",
            results=self._work("results"),
            ckpt_dir=self._work("ckpt"),
            pending=self._work("ckpt/pending"),
            ckpt=shlex.quote(self.container + CKPT_SUFFIX),
            job_dir=self._work(),
            whole_checkpoint_filters=render("whole_checkpoint_filters", whole_zip=render("whole_zip")),
            newest_whole_checkpoint=self._newest_whole_checkpoint(),
            label=shlex.quote(f"tao-job={self.job_id}"),
            s3_env=self._secret(S3_ENV_FILE),
            image=shlex.quote(self.settings.aws_cli_image),
            s3_options=_s3_options(endpoint, region),
            target=shlex.quote(self.checkpoint_prefix(results_uri)),
        )
        result = await self._with_s3_keys(
            command,
            credentials=credentials,
            region=region,
            limit=self.settings.command_timeout,
            deadline=deadline,
            what="checkpoint sync",
        )
        return parse_sync_report(result)

    async def restore_checkpoints(
        self,
        results_uri: str,
        endpoint: str | None = None,
        region: str | None = None,
        *,
        credentials: S3Credentials,
        deadline: datetime | None = None,
    ) -> RestoreReport:
        """Copy <uri>/results/ (when this job uploaded it) and <uri>/checkpoints/<job id>/ into
        results/ (before the container starts) and report the latest checkpoint by epoch number;
        empty prefixes restore nothing (not an error: training starts from scratch)."""
        split_s3_uri(results_uri, "resultsUri")
        base = results_uri.rstrip("/")
        source = self.checkpoint_prefix(results_uri)
        mounts = [f"{self._path('results')}:/job/results", f"{self._path('owner')}:/job/owner"]
        command = render(
            "restore_checkpoints",
            results=self._path("results"),
            owner_dir=self._path("owner"),
            owner_file=self._path("owner/job"),
            abort_incomplete_uploads=self._abort_incomplete_uploads(results_uri, endpoint, region, mounts),
            aws=self._aws(mounts, endpoint, region),
            owner_uri=shlex.quote(f"{base}/logs/{OWNER_MARK}"),
            job_id=shlex.quote(self.job_id),
            results_uri=shlex.quote(f"{base}/results"),
            checkpoints_uri=shlex.quote(source),
            job_dir=self._path(),
            newest_whole_checkpoint=self._newest_whole_checkpoint(),
        )
        result = await self._with_s3_keys(
            command,
            credentials=credentials,
            region=region,
            limit=self.settings.transfer_timeout,
            deadline=deadline,
            what="checkpoint restore",
        )
        if not result.ok:
            raise TransientError(
                f"restoring checkpoints from {source} failed",
                reason=reasons.CHECKPOINT_RESTORE_FAILED,
                cli_message=_message(result),
            )
        return parse_restore_report(result.stdout)

    async def restore_steps(
        self,
        results_uri: str,
        endpoint: str | None = None,
        region: str | None = None,
        *,
        outputs: Sequence[str],
        credentials: S3Credentials,
        deadline: datetime | None = None,
    ) -> RestoreReport:
        """A workflow step (this Workload's) about to start on an instance that does not hold the
        earlier steps' results: copy <uri>/<name>/ into steps/<name>/results/ for each of
        `outputs`, then this step's synced checkpoints, in ONE call; report the latest whole
        checkpoint (paths relative to steps/<step>/). An earlier step with no stored results is
        a Configuration error naming it (spec.startAtStep past results that were never
        uploaded)."""
        assert self.step is not None, "restore_steps is a workflow step's"
        split_s3_uri(results_uri, "resultsUri")
        base = results_uri.rstrip("/")
        aws = self._aws([f"{self._path(STEPS_DIR)}:/job/{STEPS_DIR}"], endpoint, region)
        fragments = [
            render(
                "restore_step_output",
                target=self._path(f"{STEPS_DIR}/{name}/results"),
                aws=aws,
                uri=shlex.quote(f"{base}/{name}"),
                dest=shlex.quote(f"/job/{STEPS_DIR}/{name}/results"),
                step=shlex.quote(name),
            )
            for name in outputs
            if STEP_RE.match(name)
        ]
        command = render(
            "restore_steps",
            results=self._work("results"),
            abort_incomplete_uploads=self._abort_incomplete_uploads(results_uri, endpoint, region, []),
            outputs="; ".join(fragments) if fragments else ":",
            aws=aws,
            checkpoints_uri=shlex.quote(self.checkpoint_prefix(results_uri)),
            dest=shlex.quote(f"/job/{self.work}/results"),
            work_dir=self._work(),
            newest_whole_checkpoint=self._newest_whole_checkpoint(),
        )
        result = await self._with_s3_keys(
            command,
            credentials=credentials,
            region=region,
            limit=self.settings.transfer_timeout * (1 + len(fragments)),
            deadline=deadline,
            what="restoring earlier steps' results",
        )
        if not result.ok:
            step, _text = last_step(result.stdout)
            raise TransientError(
                f"restoring {step or 'earlier steps'} from {base} failed",
                reason=reasons.CHECKPOINT_RESTORE_FAILED,
                cli_message=_message(result),
            )
        found = dict(re.findall(rf"^{_OUTPUT} (\S+) (\d+)$", result.stdout, re.MULTILINE))
        for name in outputs:
            if found.get(name, "0") == "0":
                raise SpecError(
                    f"no results of step {name} under {base}/{name}/ to run step {self.step} from: "
                    f"run the workflow from step {name} (spec.startAtStep) or from the start"
                )
        return parse_restore_report(result.stdout)

    async def clear(
        self,
        *,
        deadline: datetime | None = None,
        keep: bool = False,
        keep_container: bool = False,
        steps: Sequence[str] = (),
    ) -> None:
        """Remove the job's containers (the checkpoint sync's too: its config carries the S3 keys)
        and ~/taobrev/<job> (with any secret file an interrupted step left) in ONE remote call:
        it is the teardown's last call before `brev delete`, and every call there is billed time.
        Containers write results as root, hence the non-interactive sudo fallback on a real VM.
        Each part is checked and reported on its own.

        `keep` (an instance kept for debugging): remove only what holds a secret — the checkpoint
        sync's container, the secrets directory, and the job's container unless `keep_container`
        (its config carries no secret env) — and leave the rest for a person to look at.
        `steps`: a workflow's step names, whose containers (and checkpoint syncs) go too."""
        containers = [self.job_id, *(step_container(self.job_id, s) for s in steps if STEP_RE.match(s))]
        syncs = [c + CKPT_SUFFIX for c in containers]
        if keep:
            remove = syncs + ([] if keep_container else containers)
            command = render(
                "keep_for_debug",
                rm_containers=[shlex.quote(n) for n in remove],
                secrets_dir=self._path("secrets"),
            )
        else:
            command = render(
                "clear",
                names=[shlex.quote(n) for n in containers + syncs],
                job_dir=self._path(),
            )
        result = await self._run(command, self.settings.command_timeout, deadline, "cleanup")
        found = re.search(rf"^{_CLEARED} ([01]) ([01])$", result.stdout, re.MULTILINE)
        if not result.ok or found is None or found.group(1) == "1":
            raise TransientError(
                "docker rm -f failed", reason=reasons.CONTAINER_REMOVE_FAILED, cli_message=_message(result)
            )
        if found.group(2) == "1":
            raise TransientError(
                f"could not remove {self.remote_dir} on {self.instance}",
                reason=reasons.CLEANUP_FAILED,
                cli_message=_message(result),
            )


def parse_sync_report(result: ExecResult) -> SyncReport:
    """The output of `sync_checkpoints`' command."""
    lines = [line.strip() for line in result.stdout.splitlines()]
    if _SYNC_RUNNING in lines:
        return SyncReport("running", started=False, message="the previous sync is still copying")
    started = _SYNC_STARTED in lines
    prev = next((line.split()[1:] for line in lines if line.startswith(_SYNC_PREV + " ")), None)
    if prev is None:
        state, epoch, objects, message = "none", None, None, ""
    else:
        code = prev[1] if len(prev) > 1 else ""
        pending = next((line.split()[1:] for line in lines if line.startswith(_SYNC_PENDING + " ")), [])
        log = " ".join(line.removeprefix(_SYNC_LOG).strip() for line in lines if line.startswith(_SYNC_LOG))
        objects = int(pending[0]) if pending and pending[0].isdigit() else None
        epoch = int(pending[1]) if len(pending) > 1 and pending[1].isdigit() else None
        if code == "0":
            state, message = "ok", ""
        else:
            state, message = "failed", f"aws s3 sync exited {code or '?'}: {log or 'no output'}"[:1000]
    if not result.ok or not started:
        # The previous one's report stands; the failed start is this interval's failure.
        raise TransientError(
            "starting the checkpoint sync failed",
            reason=reasons.CHECKPOINT_SYNC_FAILED,
            cli_message=_message(result),
        )
    return SyncReport(state, started=True, epoch=epoch, objects=objects, message=message)


def parse_restore_report(stdout: str) -> RestoreReport:
    objects, latest, epoch = 0, None, None
    unreadable: list[str] = []
    for line in stdout.splitlines():
        words = line.split()
        if words[:1] == [_RESTORED] and len(words) > 1 and words[1].isdigit():
            objects = int(words[1])
        if words[:1] == [_LATEST] and len(words) == 3 and words[1].isdigit():
            epoch, latest = int(words[1]), words[2]
        if words[:1] == [_UNREADABLE] and len(words) == 2:
            unreadable.append(words[1])
    return RestoreReport(objects=objects, latest=latest, epoch=epoch, unreadable=tuple(unreadable))


def _finished_at(state_text: str) -> datetime | None:
    try:
        return parse_docker_time(parse_state(state_text).finished_at)
    except (ValueError, IndexError):
        return None
