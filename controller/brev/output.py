"""Reading brev's output: JSON with stray lines before it, versions, help text, and the mapping
of its error messages (matched on substrings: they carry trace fragments) onto controller.api.errors."""

from __future__ import annotations

import json
import re
from typing import Any

from controller.api import reasons
from controller.api.errors import (
    BrevPermanentError,
    BrevTransientError,
    InstanceAmbiguous,
    InstanceFailedWorkspace,
    InstanceNotFound,
)
from controller.brev.client import (
    CreateResult,
    Instance,
    SearchResult,
)
from controller.brev.runner import RunResult

LOGGED_OUT_PROMPT = "You are currently logged out"
# Lines the CLI prints on stdout before any real output (pkg/auth/auth.go, pkg/auth/kas.go).


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


# Messages that can never succeed on retry (cobra's flag errors, pkg/names, gpucreate, gpusearch).
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


# brev create's per-type fallback (pkg/cmd/gpucreate): a `Skipping: ...` line is the CLI's own
# availability check (no request sent); a `[Worker N] <type> Failed: ...` line is a request that
# reached Brev and failed, and a 5xx or a timeout there may have created the instance.
_SKIP_LINE = re.compile(r"Skipping: (.*)")
# `[Worker N] Trying <type> for instance ...` precedes every request; `... Failed:` ends one.
_REQUEST_SENT = re.compile(r"\[Worker \d+\] (Trying \S+ for instance|\S+ Failed: )")
_CAPACITY_MARKERS = ("no capacity", "please retry", "try again later")


def create_outcome(name: str, result: RunResult) -> CreateResult:
    """Map `brev create --detached` onto adopt / success / the error hierarchy.

    Classified on what ended the create, never on the fallback's progress lines: a type skipped
    for capacity followed by a request that failed (502, timeout) is that failure — the instance
    may exist — not InsufficientCapacity. A definite refusal is one where no request reached Brev."""
    out = result.output
    if "already exists" in out or "duplicate workspace" in out:
        return CreateResult(name=name, adopted=True)
    if result.returncode == 0:
        return CreateResult(name=name, adopted=False)
    msg = cli_message(result)
    if _REQUEST_SENT.search(out) is not None:
        raise BrevTransientError(
            f"brev create {name} failed after a request reached Brev; the instance may exist, "
            "so it is confirmed before anything concludes it was never created",
            cli_message=msg,
        )
    if "no GPU instances match" in out:
        raise BrevPermanentError(
            f"no instance type matches the requested GPU filters for {name}; relax gpuName / "
            "minVram / types (see `brev search`)",
            reason=reasons.NO_MATCHING_INSTANCE_TYPE,
            cli_message=msg,
        )
    skips = _SKIP_LINE.findall(out)
    if skips and "could only create 0/" in out:
        # Every type was skipped before any request left the CLI: nothing can exist.
        if any(marker in skip for skip in skips for marker in _CAPACITY_MARKERS):
            raise BrevTransientError(
                f"no capacity for the requested instance types of {name}; will retry",
                reason=reasons.INSUFFICIENT_CAPACITY,
                cli_message=msg,
            )
        if all("is not a recognized type" in skip for skip in skips):
            raise BrevPermanentError(
                f"instance type requested for {name} is not a recognized brev type (see `brev search`)",
                reason=reasons.UNKNOWN_INSTANCE_TYPE,
                cli_message=msg,
            )
    raise generic_error("create", name, result)


def start_outcome(name: str, result: RunResult) -> None:
    resolution_error(name, result)
    out = result.output
    # A missing name exits 0 after trying to start a "local path" (pkg/cmd/start/start.go).
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


def resolution_error(name_or_id: str, result: RunResult) -> None:
    """How the CLI resolves a name or id among this login's instances (pkg/cmd/util/util.go):
    several live matches, only FAILURE matches, or none."""
    out = result.output
    if "multiple instances found" in out:
        raise InstanceAmbiguous(
            f"several live instances are named {name_or_id}; address the instance by its id",
            cli_message=cli_message(result),
        )
    if "is a failed workspace" in out:
        raise InstanceFailedWorkspace(
            f"only FAILURE instances are named {name_or_id}; address the instance by its id",
            cli_message=cli_message(result),
        )


def delete_outcome(name_or_id: str, result: RunResult) -> None:
    resolution_error(name_or_id, result)
    if "not found" in result.output:
        raise InstanceNotFound(
            f"no instance {name_or_id} for this brev login", cli_message=cli_message(result)
        )
    if result.returncode != 0:
        raise generic_error("delete", name_or_id, result)


# -- credentials ------------------------------------------------------------------------------
