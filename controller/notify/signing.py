"""The Taobrev-Signature header (PURE): HMAC-SHA256 over the timestamp and the exact body bytes.

    Taobrev-Signature: t=1767225600,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd

`v1` is the lower-case hex HMAC-SHA256, keyed with the notifier Secret's hmacKey, of the bytes
`<t>.` followed by the request body exactly as received (read the raw body; a JSON parser and
re-encoder changes it). `t` is the Unix time of the request (each retry signs anew): a receiver
refuses a `t` more than its tolerance (5 minutes is usual) from its own clock, so a captured
request cannot be replayed later, and drops an event id it has seen (a retry after a lost
answer, or a re-send after an operator restart, carries the same id). Several `v1=` values may
appear while a key is rotated; one match is enough. `verify` is the receiver's side.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "Taobrev-Signature"
DEFAULT_TOLERANCE = 300


def signature(key: bytes, body: bytes, timestamp: int) -> str:
    """The header value for `body` sent at Unix time `timestamp`."""
    digest = hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(key: bytes, body: bytes, header: str, now: float, tolerance: float = DEFAULT_TOLERANCE) -> bool:
    """Whether `header` signs `body` with `key` at a time within `tolerance` seconds of `now`."""
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == "v1":
            candidates.append(value)
    if timestamp is None or abs(now - timestamp) > tolerance:
        return False
    expected = hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(expected, c) for c in candidates)
