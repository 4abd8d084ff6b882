"""Reading status written by releases before it had sub-records (PURE).

Up to f73585a the status was flat: the current instance, run, upload, queue and teardown fields
sat at the top level and `attempts[]` held a copy of a few instance fields. These functions turn
such a dict (camelCase as stored, or snake_case as built in Python) into the sub-record shape
before pydantic validates it, as kopf's `from_storage` does for its own state. Nothing here is
written back as it was read: the next status write stores the new shape and nulls the flat keys.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# flat key -> (sub-record of the current attempt, key in it)
CURRENT: dict[str, tuple[str, ...]] = {
    "instanceName": ("instance", "name"),
    "instanceId": ("instance", "id"),
    "instanceCreated": ("instance", "created"),
    "brevIdentity": ("instance", "identity"),
    "gpu": ("instance", "gpu"),
    "createRequestedAt": ("instance", "createRequestedAt"),
    "createReturnedAt": ("instance", "createReturnedAt"),
    "startRequestedAt": ("instance", "startRequestedAt"),
    "deleteRequestedAt": ("instance", "deleteRequestedAt"),
    "deleteAcceptedAt": ("instance", "deleteAcceptedAt"),
    "absentListings": ("instance", "absence", "listings"),
    "absentSince": ("instance", "absence", "since"),
    "absentCheckedAt": ("instance", "absence", "checkedAt"),
    "containerStartedAt": ("run", "startedAt"),
    "containerExitedAt": ("run", "exitedAt"),
    "runEndedAt": ("run", "endedAt"),
    "exitCode": ("run", "exitCode"),
    "lastLogLines": ("run", "logTail"),
    "unansweredSince": ("run", "unansweredSince"),
    "unansweredCheckedAt": ("run", "unansweredCheckedAt"),
    "cleanedUpAt": ("run", "cleanedUpAt"),
    "uploadAttempts": ("upload", "attempts"),
    "uploadedAt": ("upload", "uploadedAt"),
    "results": ("upload", "results"),
}
# flat key -> (job-level sub-record, key in it)
JOB: dict[str, tuple[str, str]] = {
    "admittedAt": ("queue", "admittedAt"),
    "queueReason": ("queue", "reason"),
    "queueMessage": ("queue", "message"),
    "queuePosition": ("queue", "position"),
    "teardownMessage": ("teardown", "message"),
}
# A flat attempts[] entry: key -> path in the new entry. Its createRequestedAt was the first
# create that may have made the instance, i.e. where billing starts.
ATTEMPT: dict[str, tuple[str, ...]] = {
    "instanceName": ("instance", "name"),
    "instanceId": ("instance", "id"),
    "instanceType": ("instance", "type"),
    "pricePerHour": ("instance", "pricePerHour"),
    "createRequestedAt": ("instance", "billedFrom"),
    "deletedAt": ("instance", "deletedAt"),
}


FLAT_KEYS = frozenset({*CURRENT, *JOB, "attempt"})


def stored_flat(raw: Any) -> frozenset[str]:
    """The flat keys a stored status still holds (to null in the next patch), plus "attempts"
    when its entries are flat: such a status must be written in the new shape once, even when
    nothing in it changed (a finished job), so every reader sees one shape."""
    if not isinstance(raw, dict):
        return frozenset()
    keys = FLAT_KEYS & raw.keys()
    attempts = raw.get("attempts")
    if isinstance(attempts, list) and any(isinstance(a, dict) and "instance" not in a for a in attempts):
        keys |= {"attempts"}
    return frozenset(keys)


def instance_name(raw: Any) -> str | None:
    """The current attempt's instance name in a stored status of either shape (log context,
    without parsing the whole status)."""
    if not isinstance(raw, Mapping):
        return None
    attempts = raw.get("attempts")
    last = attempts[-1] if isinstance(attempts, list) and attempts else None
    if isinstance(last, Mapping) and isinstance(last.get("instance"), Mapping):
        name = last["instance"].get("name")
        return str(name) if name else None
    flat = raw.get("instanceName")
    return str(flat) if flat else None


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _put(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target.setdefault(path[-1], value)


def attempt_from_flat(data: Any) -> Any:
    """One attempts[] entry in the new shape (entries already in it are returned as they are)."""
    if not isinstance(data, dict) or "instance" in data:
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = ATTEMPT.get(_camel(key))
        if path is None:
            out[key] = value
        elif value is not None:
            _put(out, path, value)
    # Flat releases kept attempts[] only for instances the job created.
    _put(out, ("instance", "created"), True)
    return out


def status_from_flat(data: Any) -> Any:
    """The whole status in the new shape: flat current-attempt fields move into the last
    attempt (started here when the flat status had none, e.g. a reused instance). Without an
    instance name nothing ran, and its run fields (runEndedAt of a job deleted while Pending)
    are dropped."""
    if not isinstance(data, dict):
        return data
    flat = {_camel(k): v for k, v in data.items() if _camel(k) in CURRENT or _camel(k) in JOB}
    legacy_attempts = any(isinstance(a, dict) and "instance" not in a for a in data.get("attempts") or ())
    if not flat and not legacy_attempts and "attempt" not in data:
        return data
    out = {k: v for k, v in data.items() if _camel(k) not in CURRENT and _camel(k) not in JOB}
    number = out.pop("attempt", None)
    attempts = [_as_dict(a) for a in out.get("attempts") or ()]
    for key, (record, field) in JOB.items():
        if flat.get(key) is not None:
            out[record] = {**_as_dict(out.get(record) or {}), field: flat[key]}
    name = flat.get("instanceName")
    if name:
        last = attempts[-1] if attempts else None
        if last is None or (last.get("instance") or {}).get("name") != name:
            n = number or (int(last.get("attempt") or 0) + 1 if last else 1)
            attempts.append({"attempt": n, "instance": {"name": name}})
        current = attempts[-1]
        for key, path in CURRENT.items():
            if flat.get(key) is not None:
                _put(current, path, flat[key])
    if attempts or "attempts" in out:
        out["attempts"] = attempts
    return out


def _as_dict(value: Any) -> dict[str, Any]:
    """A record given as a model (tests build status from records) as its stored dict."""
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        return dict(dump(by_alias=True, exclude_none=True, mode="json"))
    if isinstance(value, dict):
        converted: dict[str, Any] = attempt_from_flat(copy.deepcopy(value))
        return converted
    return {}
