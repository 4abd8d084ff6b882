"""The argv and remote command strings the client sends to brev (pure): create flags, the exec
sentinel wrapper, remote paths and the stdin file-delivery command."""

from __future__ import annotations

import base64
import re
import secrets
import shlex

from controller.api.errors import SpecError
from controller.brev.client import CreateRequest

NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$")  # brev pkg/names/validate.go


def format_number(value: float) -> str:
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
            argv += [flag, format_number(value)]
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
    (brev exec hangs on multi-line payloads, brevdev/brev-cli issue #429)."""
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
