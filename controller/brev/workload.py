"""Remote operations for ONE TAO job on ONE Brev instance, over a `BrevClient`.

Every method composes one shell command string that is exactly what would run on a real Brev VM
(docker is the only tool an instance is sure to have; S3 transfers run the aws-cli image). Commands
are idempotent, because the transport may run them twice. Layout under the instance's home:

    ~/taobrev/<job>/secrets/    0700; ngc_api_key, s3.env, container.env (0600), docker/ (login)
    ~/taobrev/<job>/spec/spec.yaml
    ~/taobrev/<job>/data/<path>/...     staged inputs, mounted at /workspace/data
    ~/taobrev/<job>/results/...         TAO's results_dir, mounted at /workspace/results
    ~/taobrev/<job>/logs/container.log  `docker logs` copy uploaded with the results

Secrets never appear in a command string: they reach the instance through `put_file` (ssh stdin)
and are read there by `--password-stdin` and `--env-file`. The registry login is kept in the job's
own DOCKER_CONFIG under secrets/, so `cleanup()` removes it with the rest.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.brev.client import BrevClient, ExecResult
from controller.errors import (
    BrevTransientError,
    EntitlementError,
    PermanentError,
    SpecError,
    TransientError,
)
from controller.versions import load_versions

JOB_ID_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")
SECRET_FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
STAGE_PATH_RE = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")

NGC_KEY_FILE = "ngc_api_key"
S3_ENV_FILE = "s3.env"
CONTAINER_ENV_FILE = "container.env"

# Container-side layout of the TAO container.
SPEC_IN_CONTAINER = "/workspace/spec/spec.yaml"
RESULTS_IN_CONTAINER = "/workspace/results"
DATA_IN_CONTAINER = "/workspace/data"

_STAGED = "TAOBREV_STAGED"
_LISTING = "TAOBREV_LISTING"
_EXISTS = "TAOBREV_CONTAINER_EXISTS"
_TIMEOUT_RC = 124  # coreutils `timeout` when the time limit was hit
# Separates `docker wait`'s answer from the log tail in one combined remote command.
_TAIL_MARK = "__taobrev_log_tail__"

_AUTH_MARKERS = ("unauthorized", "denied", "forbidden", "incorrect username or password", "401", "403")
_NETWORK_MARKERS = ("timeout", "timed out", "connection refused", "no such host", "tls handshake", "eof")
_MISSING_IMAGE_MARKERS = ("manifest unknown", "no such manifest", "not found")


class ContainerNotFound(PermanentError):
    """The job's container is not on the instance (removed, or the instance was replaced)."""

    reason = "ContainerNotFound"


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
    # PyTorch data loaders need more than docker's 64 MB default /dev/shm.
    shm_size: str | None = "16g"


# ---- pure helpers ---------------------------------------------------------------------------------


def env_file(values: Mapping[str, str]) -> bytes:
    """docker `--env-file` content (`KEY=value` lines, no quoting, no multi-line values)."""
    lines = []
    for key, value in values.items():
        if not ENV_NAME_RE.match(key):
            raise SpecError(f"environment variable name {key!r} is invalid: use letters, digits, '_'")
        if "\n" in value or "\r" in value or "\0" in value:
            raise SpecError(
                f"environment variable {key} has a multi-line value, which --env-file cannot carry"
            )
        lines.append(f"{key}={value}\n")
    return "".join(lines).encode()


def s3_env_file(
    access_key_id: str, secret_access_key: str, *, region: str | None = None, session_token: str | None = None
) -> bytes:
    values = {"AWS_ACCESS_KEY_ID": access_key_id, "AWS_SECRET_ACCESS_KEY": secret_access_key}
    if session_token:
        values["AWS_SESSION_TOKEN"] = session_token
    if region:
        values["AWS_DEFAULT_REGION"] = region
    return env_file(values)


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


def _lower(result: ExecResult) -> str:
    return f"{result.stdout}\n{result.stderr}".lower()


def _message(result: ExecResult) -> str:
    return (result.stdout.strip() or result.stderr.strip())[-2000:]


# ---- the remote job ------------------------------------------------------------------------------


class Workload:
    def __init__(
        self,
        client: BrevClient,
        instance: str,
        job_id: str,
        *,
        settings: WorkloadSettings | None = None,
    ) -> None:
        if not JOB_ID_RE.match(job_id):
            raise SpecError(f"job id {job_id!r} is not a valid container name ([a-zA-Z0-9][a-zA-Z0-9_.-]*)")
        self.client = client
        self.instance = instance
        self.job_id = job_id
        self.settings = settings or WorkloadSettings()
        self.remote_dir = f"~/taobrev/{job_id}"

    # -- shell fragments ------------------------------------------------------------------------

    def _path(self, sub: str = "") -> str:
        """A job path as one shell word that expands $HOME on the instance."""
        rel = f"taobrev/{self.job_id}" + (f"/{sub}" if sub else "")
        return '"$HOME"/' + shlex.quote(rel)

    def _docker_config(self) -> str:
        return f"DOCKER_CONFIG={self._path('secrets/docker')}"

    def _aws(
        self, args: Sequence[str], mounts: Sequence[str], endpoint: str | None, region: str | None
    ) -> str:
        # AWS_PAGER= : aws-cli v2 would otherwise try to page its output through `less`.
        parts = [
            "docker",
            "run",
            "--rm",
            "--env-file",
            self._path(f"secrets/{S3_ENV_FILE}"),
            "-e",
            "AWS_PAGER=",
        ]
        for mount in mounts:
            parts += ["-v", mount]
        parts.append(shlex.quote(self.settings.aws_cli_image))
        if endpoint:
            parts += ["--endpoint-url", shlex.quote(endpoint)]
        if region:
            parts += ["--region", shlex.quote(region)]
        parts += [shlex.quote(a) for a in args]
        return " ".join(parts)

    async def _run(self, command: str, limit: float | None = None) -> ExecResult:
        return await self.client.exec(
            self.instance, command, timeout=limit if limit is not None else self.settings.command_timeout
        )

    # -- steps ----------------------------------------------------------------------------------

    async def probe(self, limit: float | None = None) -> bool:
        """A two-word command; True once exec works end to end (RUNNING is not ssh-ready)."""
        try:
            result = await self.client.exec(
                self.instance,
                "echo ok",
                timeout=limit if limit is not None else self.settings.probe_timeout,
            )
        except BrevTransientError as exc:
            if exc.reason == "BrevAuthFailed":
                raise
            return False
        return result.ok and result.stdout.strip() == "ok"

    async def deliver_secrets(self, files: Mapping[str, bytes]) -> None:
        """Write each secret file to secrets/<name> (dir 0700, files 0600) over ssh stdin."""
        for name, content in files.items():
            if not SECRET_FILE_RE.match(name) or name in (".", ".."):
                raise SpecError(f"secret file name {name!r} is invalid")
            await self.client.put_file(
                self.instance,
                f"{self.remote_dir}/secrets/{name}",
                content,
                mode=0o600,
                timeout=self.settings.put_timeout,
            )

    async def write_spec(self, content: str | bytes) -> None:
        data = content.encode() if isinstance(content, str) else content
        await self.client.put_file(
            self.instance,
            f"{self.remote_dir}/spec/spec.yaml",
            data,
            mode=0o644,
            timeout=self.settings.put_timeout,
        )

    async def registry_login(self) -> None:
        """`docker login <registry> --password-stdin` from secrets/ngc_api_key (never argv)."""
        registry = shlex.quote(self.settings.registry)
        command = (
            f"{self._docker_config()} docker login {registry} --username {shlex.quote('$oauthtoken')} "
            f"--password-stdin < {self._path(f'secrets/{NGC_KEY_FILE}')} 2>&1"
        )
        result = await self._run(command)
        if result.ok:
            return
        text = _lower(result)
        if any(m in text for m in _AUTH_MARKERS) or "password" in text:
            raise EntitlementError(
                f"docker login to {self.settings.registry} was refused: check the NGC API key in the "
                "job's NGC Secret",
                cli_message=_message(result),
            )
        raise TransientError(
            f"docker login to {self.settings.registry} failed",
            reason="RegistryLoginFailed",
            cli_message=_message(result),
        )

    async def verify_entitlement(self, image: str) -> None:
        """`docker manifest inspect`: fails before any GPU time is spent on an image we may not pull."""
        command = f"{self._docker_config()} docker manifest inspect {shlex.quote(image)} 2>&1 >/dev/null"
        result = await self._run(command)
        if result.ok:
            return
        self._raise_registry_error(image, result, "manifest inspect")

    def _raise_registry_error(self, image: str, result: ExecResult, what: str) -> None:
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
            f"docker {what} of {image} failed", reason="RegistryUnavailable", cli_message=_message(result)
        )

    async def pull(self, image: str) -> None:
        """Pull before the run (a first pull is billed GPU-idle time either way; this separates a
        pull failure from a training failure). A present image is not pulled again."""
        img = shlex.quote(image)
        command = (
            f"docker image inspect {img} >/dev/null 2>&1 || {self._docker_config()} docker pull {img} 2>&1"
        )
        result = await self._run(command, self.settings.pull_timeout)
        if not result.ok:
            self._raise_registry_error(image, result, "pull")

    async def stage_inputs(
        self,
        inputs: Sequence[StageInput | tuple[str, str]],
        s3_endpoint: str | None = None,
        region: str | None = None,
    ) -> int:
        """Copy each S3 prefix (uri, path) to data/<path>; returns the number of files staged. A
        prefix that holds no objects is a spec error (TAO would fail later, less clearly)."""
        total = 0
        for i, raw in enumerate(inputs):
            item = raw if isinstance(raw, StageInput) else StageInput(*raw)
            split_s3_uri(item.uri, f"inputs[{i}].uri")
            if not STAGE_PATH_RE.match(item.path) or ".." in item.path.split("/"):
                raise SpecError(f"inputs[{i}].path {item.path!r} must be a relative path without '..'")
            target = self._path(f"data/{item.path}")
            aws = self._aws(
                ["s3", "cp", item.uri, f"/job/data/{item.path}", "--recursive", "--only-show-errors"],
                [f"{self._path('data')}:/job/data"],
                s3_endpoint,
                region,
            )
            command = (
                f"mkdir -p {target} && {aws} 2>&1 && "
                f"printf '{_STAGED} %s\\n' \"$(find {target} -type f | wc -l)\""
            )
            result = await self._run(command, self.settings.transfer_timeout)
            if not result.ok:
                text = _lower(result)
                if "nosuchbucket" in text or "does not exist" in text:
                    raise SpecError(
                        f"inputs[{i}].uri {item.uri}: bucket does not exist", cli_message=_message(result)
                    )
                if any(
                    m in text for m in ("accessdenied", "invalidaccesskeyid", "signaturedoesnotmatch", "403")
                ):
                    raise PermanentError(
                        f"S3 refused reading inputs[{i}].uri {item.uri}: check the S3 credentials Secret",
                        reason="S3AccessDenied",
                        cli_message=_message(result),
                    )
                raise TransientError(
                    f"staging inputs[{i}] from {item.uri} failed",
                    reason="StagingFailed",
                    cli_message=_message(result),
                )
            match = re.search(rf"{_STAGED} (\d+)", result.stdout)
            count = int(match.group(1)) if match else 0
            if count == 0:
                raise SpecError(f"inputs[{i}].uri {item.uri} holds no objects")
            total += count
        return total

    async def start_container(
        self,
        image: str,
        network_arch: str,
        action: str,
        *,
        spec_path: str = SPEC_IN_CONTAINER,
        gpus: int | None = None,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        shm_size: str | None = None,
    ) -> bool:
        """`docker run -d` the TAO container unless one of that name exists. Returns True if this
        call started it. Non-secret env goes as `-e K=V`; secret env only via container.env."""
        for key in env or {}:
            if not ENV_NAME_RE.match(key):
                raise SpecError(f"env name {key!r} is invalid: use letters, digits and '_'")
        name = shlex.quote(self.job_id)
        run = [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            "--label",
            shlex.quote(f"tao-job={self.job_id}"),
            "--gpus",
            "all" if gpus is None else str(int(gpus)),
        ]
        shm = shm_size or self.settings.shm_size
        if shm:
            run += ["--shm-size", shlex.quote(shm)]
        run += [
            "-v",
            self._path("spec") + ":/workspace/spec:ro",
            "-v",
            self._path("data") + f":{DATA_IN_CONTAINER}",
            "-v",
            self._path("results") + f":{RESULTS_IN_CONTAINER}",
            "--env-file",
            self._path(f"secrets/{CONTAINER_ENV_FILE}"),
        ]
        for key, value in (env or {}).items():
            run += ["-e", shlex.quote(f"{key}={value}")]
        run += [shlex.quote(image), shlex.quote(network_arch), shlex.quote(action)]
        run += ["-e", shlex.quote(spec_path), f"results_dir={RESULTS_IN_CONTAINER}"]
        run += [shlex.quote(a) for a in args]
        command = (
            f"umask 077 && mkdir -p {self._path('spec')} {self._path('data')} {self._path('results')} "
            f"{self._path('logs')} {self._path('secrets')} && "
            f"touch {self._path(f'secrets/{CONTAINER_ENV_FILE}')} && "
            f"if docker inspect {name} >/dev/null 2>&1; then echo {_EXISTS}; else {' '.join(run)} 2>&1; fi"
        )
        result = await self._run(command)
        if result.ok:
            return _EXISTS not in result.stdout
        if "is already in use" in result.stdout:  # a concurrent/duplicated run won the name
            return False
        raise TransientError(
            f"docker run of {self.job_id} on {self.instance} failed",
            reason="ContainerStartFailed",
            cli_message=_message(result),
        )

    async def container_state(self) -> ContainerState | None:
        """The container's State, or None if there is no such container."""
        result = await self._run(
            f"docker inspect --format '{{{{json .State}}}}' {shlex.quote(self.job_id)} 2>&1"
        )
        if not result.ok:
            if "no such" in _lower(result):
                return None
            raise TransientError(
                "docker inspect failed", reason="ContainerInspectFailed", cli_message=_message(result)
            )
        try:
            return parse_state(result.stdout)
        except (ValueError, IndexError) as exc:
            raise TransientError(
                "docker inspect printed no State",
                reason="ContainerInspectFailed",
                cli_message=_message(result),
            ) from exc

    async def wait_exit(self, timeout_s: int) -> int | None:
        """Block on the instance up to `timeout_s` for the container to exit: its exit code, or
        None if it is still running. One brev call notices an exit within about a second."""
        seconds = max(1, int(timeout_s))
        command = f"timeout {seconds} docker wait {shlex.quote(self.job_id)} 2>&1"
        result = await self._run(command, seconds + self.settings.wait_margin)
        if result.exit_code == _TIMEOUT_RC:
            return None
        if result.ok:
            lines = result.stdout.strip().splitlines()
            if lines and lines[-1].strip().lstrip("-").isdigit():
                return int(lines[-1].strip())
        if "no such container" in _lower(result):
            raise ContainerNotFound(
                f"container {self.job_id} is not on {self.instance}", cli_message=_message(result)
            )
        raise TransientError("docker wait failed", reason="ContainerWaitFailed", cli_message=_message(result))

    async def wait_exit_with_tail(self, timeout_s: int, tail: int) -> tuple[int | None, list[str]]:
        """`wait_exit` plus the container's last `tail` log lines, in the SAME brev call: the tail
        costs no extra round trip between the exit and the next step."""
        seconds = max(1, int(timeout_s))
        name = shlex.quote(self.job_id)
        # The tail also comes back while it still runs: progress in status every wait, for free.
        command = (
            f"timeout {seconds} docker wait {name} 2>&1; rc=$?; "
            f"echo {_TAIL_MARK}; docker logs --tail {int(tail)} {name} 2>&1; exit $rc"
        )
        result = await self._run(command, seconds + self.settings.wait_margin)
        head, _, logs = result.stdout.partition(f"{_TAIL_MARK}\n")
        if result.exit_code == _TIMEOUT_RC:
            return None, logs.splitlines()
        if result.ok:
            lines = head.strip().splitlines()
            if lines and lines[-1].strip().lstrip("-").isdigit():
                return int(lines[-1].strip()), logs.splitlines()
        if "no such container" in _lower(result):
            raise ContainerNotFound(
                f"container {self.job_id} is not on {self.instance}", cli_message=_message(result)
            )
        raise TransientError("docker wait failed", reason="ContainerWaitFailed", cli_message=_message(result))

    async def logs(self, tail: int = 200) -> list[str]:
        """The last `tail` lines the container printed (stdout and stderr)."""
        result = await self._run(f"docker logs --tail {int(tail)} {shlex.quote(self.job_id)} 2>&1")
        if not result.ok:
            if "no such container" in _lower(result):
                raise ContainerNotFound(
                    f"container {self.job_id} is not on {self.instance}", cli_message=_message(result)
                )
            raise TransientError(
                "docker logs failed", reason="ContainerLogsFailed", cli_message=_message(result)
            )
        return result.stdout.splitlines()

    async def stop_container(self) -> None:
        """SIGTERM, then SIGKILL after the grace period; a missing container counts as stopped."""
        name = shlex.quote(self.job_id)
        grace = int(self.settings.stop_grace_s)
        command = f"docker stop -t {grace} {name} >/dev/null 2>&1 || ! docker inspect {name} >/dev/null 2>&1"
        result = await self._run(command, self.settings.command_timeout + grace)
        if not result.ok:
            raise TransientError(
                "docker stop failed", reason="ContainerStopFailed", cli_message=_message(result)
            )

    async def upload_results(
        self, results_uri: str, endpoint: str | None = None, region: str | None = None
    ) -> tuple[int, int]:
        """Save `docker logs` to logs/container.log, copy results/ and logs/ to <uri>/results and
        <uri>/logs, then verify the bucket holds every local file with its size.
        Returns (objects, bytes) verified; raises TransientError on any mismatch."""
        bucket, prefix = split_s3_uri(results_uri, "resultsUri")
        base = results_uri.rstrip("/")
        name = shlex.quote(self.job_id)
        logs_dir = self._path("logs")
        tmp_log = self._path("logs/container.log.tmp")
        save_log = (
            f"{{ docker logs {name} > {tmp_log} 2>&1 && mv -f {tmp_log} {self._path('logs/container.log')} "
            f"|| rm -f {tmp_log}; }}"
        )
        mounts = [f"{self._path('results')}:/job/results:ro", f"{logs_dir}:/job/logs:ro"]
        copy_results = self._aws(
            ["s3", "cp", "/job/results", f"{base}/results", "--recursive", "--only-show-errors"],
            mounts,
            endpoint,
            region,
        )
        copy_logs = self._aws(
            ["s3", "cp", "/job/logs", f"{base}/logs", "--recursive", "--only-show-errors"],
            mounts,
            endpoint,
            region,
        )
        command = (
            f"mkdir -p {self._path('results')} {logs_dir} && {save_log} && "
            f"{copy_results} 2>&1 && {copy_logs} 2>&1"
        )
        result = await self._run(command, self.settings.transfer_timeout)
        if not result.ok:
            raise TransientError(
                f"uploading results to {results_uri} failed",
                reason="UploadFailed",
                cli_message=_message(result),
            )
        return await self._verify_upload(bucket, prefix, endpoint, region)

    async def _verify_upload(
        self, bucket: str, prefix: str, endpoint: str | None, region: str | None
    ) -> tuple[int, int]:
        list_args = ["s3api", "list-objects-v2", "--bucket", bucket]
        if prefix:
            list_args += ["--prefix", f"{prefix}/"]
        list_args += ["--query", "Contents[].[Key,Size]", "--output", "json"]
        listing = self._aws(list_args, [], endpoint, region)
        command = (
            f"cd {self._path()} && find results logs -type f -printf 'F\\t%s\\t%p\\n' && "
            f"echo {_LISTING} && {listing}"
        )
        result = await self._run(command, self.settings.transfer_timeout)
        if not result.ok:
            raise TransientError(
                "listing uploaded results failed", reason="UploadFailed", cli_message=_message(result)
            )
        try:
            local, remote = parse_listing(result.stdout)
        except (ValueError, IndexError, TypeError) as exc:
            raise TransientError(
                "could not read the upload verification listing",
                reason="UploadFailed",
                cli_message=_message(result),
            ) from exc
        key_prefix = f"{prefix}/" if prefix else ""
        missing = [path for path, size in local.items() if remote.get(f"{key_prefix}{path}") != size]
        if missing:
            raise TransientError(
                f"upload verification failed: {len(missing)} of {len(local)} files missing or of the wrong "
                f"size in s3://{bucket}/{key_prefix} (first: {sorted(missing)[0]})",
                reason="UploadIncomplete",
            )
        return len(local), sum(local.values())

    async def remove_container(self) -> None:
        name = shlex.quote(self.job_id)
        command = f"docker rm -f {name} >/dev/null 2>&1; ! docker inspect {name} >/dev/null 2>&1"
        result = await self._run(command)
        if not result.ok:
            raise TransientError(
                "docker rm -f failed", reason="ContainerRemoveFailed", cli_message=_message(result)
            )

    async def cleanup(self) -> None:
        """Remove ~/taobrev/<job> (secrets and the job's registry login included). Containers write
        results as root, hence the non-interactive sudo fallback on a real VM."""
        path = self._path()
        command = f"rm -rf {path} 2>/dev/null || sudo -n rm -rf {path}; test ! -e {path}"
        result = await self._run(command)
        if not result.ok:
            raise TransientError(
                f"could not remove {self.remote_dir} on {self.instance}",
                reason="CleanupFailed",
                cli_message=_message(result),
            )
