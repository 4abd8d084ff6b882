"""Reading stored TaoBrevJob status dicts (as kubectl or the API returns them) in tests.

The status is made of sub-records (controller/api/status.py); the current attempt is the last of
`attempts[]`. These helpers only walk the dict: they never convert the flat shape of earlier
releases, so a test reading an old-shaped status through them sees nothing (as it should).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def current(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """The current (last) attempt, or {} before the first."""
    attempts = (status or {}).get("attempts") or []
    return dict(attempts[-1]) if attempts else {}


def instance(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """The current attempt's instance record ({} before the first attempt)."""
    return dict(current(status).get("instance") or {})


def run(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """The current attempt's run record."""
    return dict(current(status).get("run") or {})


def upload(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """The current attempt's upload record."""
    return dict(current(status).get("upload") or {})


def queue(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """The queue record."""
    return dict((status or {}).get("queue") or {})


def teardown(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """The teardown record."""
    return dict((status or {}).get("teardown") or {})


def attempt_no(status: Mapping[str, Any] | None) -> int | None:
    """The current attempt's number."""
    n = current(status).get("attempt")
    return int(n) if n is not None else None


# kubectl jsonpath expressions for the same places.
INSTANCE_NAME = "{.status.attempts[-1:].instance.name}"
INSTANCE_ID = "{.status.attempts[-1:].instance.id}"
EXIT_CODE = "{.status.attempts[-1:].run.exitCode}"
