"""Every knob of the simulator, declared once: name, default and one line of meaning each.

A knob is either a DURATION (nominal seconds of a lifecycle step; the harness multiplies by the
speed factor) or a FAULT (a behaviour that makes the world hostile). Both live in the state
directory's `faults.json`, written by `BrevSim.set_faults(...)`, read by each short-lived
simulator process through `Store.fault(name)`. An undeclared name is an error on both sides, so a
typo can never make a test that cannot fail. SIM-CONTRACT.md lists the same table for readers.

Targeted faults take `True` (every instance) or a list of instance names and/or ids.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.brevsim.model import NOMINAL


@dataclass(frozen=True)
class Knob:
    name: str
    default: Any
    doc: str


_DURATION_DOCS: dict[str, str] = {
    "deploy_s": "DEPLOYING lasts this long after `brev create`",
    "ssh_delay_s": "after RUNNING, ssh is refused (Connection refused) for this long",
    "build_s": "after RUNNING, build_status stays BUILDING (shell NOT READY) for this long",
    "delete_s": "an accepted delete shows DELETING for this long, then the instance is gone",
    "delete_lag_s": "an accepted delete keeps showing the pre-delete status (e.g. RUNNING) this long",
    "stop_s": "STOPPING lasts this long",
    "start_s": "STARTING lasts this long",
    "pull_seconds": "`docker pull` of the TAO image takes this long",
    "epoch_seconds": "one TAO epoch (a job's spec `simulation.epoch_seconds` wins)",
    "upload_s": "an `aws s3 cp/sync/mv` upload takes this long",
    "checkpoint_write_s": "TAO writes each checkpoint in place over this long (half, then the rest)",
    "create_poll_s": "`brev create`/`brev start` poll interval while waiting",
    "create_s": "a create request takes this long at the server before the instance exists (unlisted)",
    "ssh_wait_interval_s": "WaitForSSHToBeAvailable sleep between ssh probes",
    "device_login_s": "the device-flow login waits this long, then times out",
}

_FAULTS: tuple[Knob, ...] = (
    Knob(
        "auth_eof_once",
        0,
        "the next N CLI calls see a logged-out prompt and fail with `EOF`; a login ends it",
    ),
    Knob("token_ttl_s", None, "lifetime (nominal s) of access JWTs minted by KAS refresh; default 3600"),
    Knob("capacity", [], "instance types `brev create` skips as `currently unavailable (no capacity)`"),
    Knob(
        "create_fails", None, "a message: every server create fails with `500 Internal Server Error: <msg>`"
    ),
    Knob(
        "create_reply_lost",
        None,
        "a message: the server creates the instance, then its answer is lost: the worker fails with "
        "`502 Bad Gateway: <msg>` (the instance exists)",
    ),
    Knob("failure_status", None, "True or a message: created instances end in FAILURE (CREATE_FAILED)"),
    Knob("disappear_after_s", None, "created instances vanish (no DELETING) this long after RUNNING"),
    Knob("ls_omit", {}, "{name or id: N}: the next N `brev ls` listings that would show it leave it out"),
    Knob("exec_never_ready", False, "targeted: ssh is refused forever although `ls` says RUNNING/READY"),
    Knob("sshd_dead", False, "targeted: ssh gets `Connection reset by peer` (exit 255) while RUNNING"),
    Knob("exec_hangs", False, "targeted: ssh connects, then never answers (until the caller kills it)"),
    Knob("docker_dead", False, "targeted: every `docker` command fails: cannot connect to the daemon"),
    Knob("slow_exec_s", 0, "every remote command starts this late (nominal s)"),
    Knob("ngc_entitlement", False, "nvcr.io manifest/pull of the TAO image is denied (no entitlement)"),
    Knob("pull_fails", None, "a message: `docker pull` fails with it"),
    Knob("train_exit_code", None, "the TAO stand-in exits with this code after its epochs"),
    Knob("tao_progress_bars", False, "the TAO stand-in draws tqdm-style `\\r` progress bars per epoch"),
    Knob("tao_long_line_bytes", 0, "the TAO stand-in prints one line of this many bytes (no newline inside)"),
    Knob("upload_fails", None, "a message: uploads through the aws-cli image fail with it"),
    Knob("vanish_at_epoch", {}, "{name or id: N}: the instance vanishes (no DELETING) when TAO ends epoch N"),
    Knob("failure_at_epoch", {}, "{name or id: N}: the instance turns FAILURE when TAO ends epoch N"),
    Knob("stop_at_epoch", {}, "{name or id: N}: the instance is STOPPED (preempted) when TAO ends epoch N"),
    Knob(
        "epoch_fault_sync_wait_s",
        0,
        "an `*_at_epoch` fault first holds training (up to this long, nominal s) until a checkpoint "
        "sync started after epoch N's checkpoint has ended on the instance",
    ),
    Knob(
        "checkpoint_sync_fails",
        0,
        "the next N `aws s3 sync` calls TO a `.../checkpoints/` destination fail with an S3 error",
    ),
    Knob(
        "api_rate_limit",
        None,
        "calls per nominal second Brev's API accepts from all CLI processes together (ls, create, "
        "delete, stop, start, refresh, search, exec's lookup, login); past it a call fails with "
        "`<url> 429 Too Many Requests {...}` (exit 1) and is not counted",
    ),
    Knob("restore_finds_nothing", False, "targeted: `aws s3 sync` FROM `.../checkpoints/` copies nothing"),
    Knob(
        "instance_durations",
        {},
        "{instance id, name or name substring: {duration knob: nominal s}}: at `brev create` the first "
        "matching entry's durations replace the global ones for that instance (kept in its record)",
    ),
)

# The epoch-triggered faults (the TAO stand-in fires them) and the world change each makes.
EPOCH_STRIKES: dict[str, str] = {
    "vanish_at_epoch": "vanish",
    "failure_at_epoch": "failure",
    "stop_at_epoch": "stop",
}

KNOBS: dict[str, Knob] = {
    **{k: Knob(k, v, _DURATION_DOCS[k]) for k, v in NOMINAL.items()},
    **{k.name: k for k in _FAULTS},
}


class UnknownFault(KeyError):
    """A fault/duration name that is not declared in KNOBS."""

    def __init__(self, name: str) -> None:
        close = difflib.get_close_matches(name, KNOBS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        super().__init__(
            f"unknown simulator fault {name!r}{hint} Declared knobs: {', '.join(sorted(KNOBS))} "
            "(tests/brevsim/faults.py)"
        )
        self.name = name

    def __str__(self) -> str:
        return str(self.args[0])


def check(faults: Mapping[str, object]) -> None:
    """Raise UnknownFault for the first undeclared name (ValueError for a malformed value of a
    structured knob)."""
    for name in faults:
        if name not in KNOBS:
            raise UnknownFault(name)
    if faults.get("instance_durations") is not None:
        check_instance_durations(faults["instance_durations"])


# The durations an instance may carry in its own record: what model.observe and its own `docker
# pull` read. Epochs come from the job's spec (`simulation.epoch_seconds`), not from here.
INSTANCE_DURATION_KEYS: frozenset[str] = frozenset(
    {"deploy_s", "ssh_delay_s", "build_s", "delete_s", "delete_lag_s", "stop_s", "start_s", "pull_seconds"}
)


def check_instance_durations(value: object) -> dict[str, dict[str, float]]:
    """The `instance_durations` knob, validated: {match: {duration knob: nominal s >= 0}}."""
    where = "instance_durations"
    if not isinstance(value, Mapping):
        raise ValueError(
            f"{where} must be a mapping {{match: {{knob: seconds}}}}, got {type(value).__name__}"
        )
    out: dict[str, dict[str, float]] = {}
    for match, durations in value.items():
        if not isinstance(match, str) or not match:
            raise ValueError(
                f"{where}: every key must be a non-empty instance id, name or substring, got {match!r}"
            )
        if not isinstance(durations, Mapping) or not durations:
            raise ValueError(f"{where}[{match!r}] must be a non-empty mapping {{knob: seconds}}")
        out[match] = {}
        for key, seconds in durations.items():
            if key not in INSTANCE_DURATION_KEYS:
                raise ValueError(
                    f"{where}[{match!r}]: {key!r} is not a per-instance duration; use one of "
                    f"{', '.join(sorted(INSTANCE_DURATION_KEYS))}"
                )
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
                raise ValueError(f"{where}[{match!r}][{key!r}] must be nominal seconds >= 0, got {seconds!r}")
            out[match][key] = float(seconds)
    return out


def durations_for(value: object, name: str, instance_id: str) -> dict[str, float]:
    """The nominal durations `instance_durations` gives a new instance: the first entry (in
    order) whose key is its id, or its name or a substring of it; {} when none matches."""
    for match, durations in check_instance_durations(value).items():
        if match == instance_id or match in name:
            return durations
    return {}


def default(name: str) -> Any:
    if name not in KNOBS:
        raise UnknownFault(name)
    value = KNOBS[name].default
    return value.copy() if isinstance(value, dict | list) else value


def targets(value: object, name: str, instance_id: str) -> bool:
    """Whether a targeted fault (`True` or a list of names/ids) hits this instance."""
    if value is True:
        return True
    if isinstance(value, list | tuple | set | frozenset):
        return name in value or instance_id in value
    return False


def epoch_for(value: object, name: str, instance_id: str) -> int | None:
    """The epoch at which an `*_at_epoch` fault ({name or id: N}) hits this instance, if any."""
    if not isinstance(value, Mapping):
        return None
    hit = value.get(instance_id, value.get(name))
    return None if hit is None else int(hit)
