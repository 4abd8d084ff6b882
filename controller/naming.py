"""Deterministic names derived from the object's identity (PURE).

The instance name is a function of the uid, so a crashed operator that restarts finds (and adopts)
the instance it asked for instead of creating a second one; it is also written to status before
`brev create` runs. Names satisfy brev's rule ``^[a-zA-Z0-9][a-zA-Z0-9._-]*$`` (<= 63 chars) and
docker's container-name rule.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 63
_UNSAFE = re.compile(r"[^a-z0-9-]+")


def _slug(text: str, limit: int) -> str:
    slug = _UNSAFE.sub("-", text.lower()).strip("-")
    return slug[:limit].rstrip("-") or "x"


def _digest(uid: str, length: int = 8) -> str:
    return hashlib.sha256(uid.encode()).hexdigest()[:length]


def instance_name(namespace: str, name: str, uid: str) -> str:
    """``tbj-<ns>-<name>-<hash>``: readable in `brev ls`, unique per object (uid hash)."""
    name_part = f"{_slug(namespace, 16)}-{_slug(name, 30)}"
    return f"tbj-{name_part}-{_digest(uid)}"[:MAX_NAME]


def job_id(name: str, uid: str) -> str:
    """Container name and TAO job id: ``<name>-<uid8>``, unique on a shared instance."""
    return f"{_slug(name, 48)}-{_digest(uid)}"


def backend_ref(instance: str, job: str) -> str:
    """The skill documents' backend reference: the container is unreachable without its instance."""
    return f"{instance}/{job}"


def attempt_instance_name(base: str, attempt: int) -> str:
    """The instance of attempt `attempt`: attempt 1 keeps `base`; attempt n >= 2 is ``<base>-a<n>``,
    cut to 63 characters keeping the suffix (deterministic, so a restart adopts, never duplicates)."""
    if attempt <= 1:
        return base
    suffix = f"-a{attempt}"
    return base[: MAX_NAME - len(suffix)].rstrip("-.") + suffix
