"""Deterministic names derived from the object's identity (PURE).

The instance name is a function of (cluster id, namespace, name, uid), so a crashed operator that
restarts finds (and adopts) the instance it asked for instead of creating a second one; it is also
written to status before `brev create` runs. Names satisfy brev's rule
``^[a-zA-Z0-9][a-zA-Z0-9._-]*$`` (<= 63 chars) and docker's container-name rule.

Ownership mark: `brev ls` carries no labels, owner or timestamps (docs brev-cli.md section 11),
so the only durable fact the orphan sweeper can read about an instance is its name. Every instance
this operator creates is named ``tbj-<mark>-<ns>-<name>-<uid8>`` where ``<mark>`` is 8 hex digits
of sha256(cluster id) (TAOBREV_CLUSTER_ID, default the kube-system namespace uid). `owned_by`
tells our instances from a teammate's, another cluster's, or one named by an older operator
version (``tbj-<ns>-<name>-<uid8>``, no mark: never treated as ours). The mark leads the name, so a
suffix added later (per-attempt names) or a cut at 63 characters keeps it.
"""

from __future__ import annotations

import functools
import hashlib
import re

MAX_NAME = 63
PREFIX = "tbj-"
MARK_LEN = 8
_UNSAFE = re.compile(r"[^a-z0-9-]+")
# Budget: "tbj-" 4 + mark 8 + "-" + ns 12 + "-" + name 24 + "-" + uid digest 8 = 59, leaving 4
# characters for a per-attempt suffix within brev's 63.
_NS_CHARS = 12
_NAME_CHARS = 24
_MARKED = re.compile(rf"^{PREFIX}(?P<mark>[0-9a-f]{{{MARK_LEN}}})-[a-z0-9]")


def _slug(text: str, limit: int) -> str:
    slug = _UNSAFE.sub("-", text.lower()).strip("-")
    return slug[:limit].rstrip("-") or "x"


def _digest(uid: str, length: int = 8) -> str:
    return hashlib.sha256(uid.encode()).hexdigest()[:length]


@functools.cache  # one cluster id per process: the sweeper asks for every listed instance
def cluster_mark(cluster_id: str) -> str:
    """The 8 hex digits naming a cluster in instance names (any id in, a fixed alphabet out)."""
    if not cluster_id:
        raise ValueError("cluster id is empty: set TAOBREV_CLUSTER_ID (default: the kube-system uid)")
    return _digest(f"taobrev-cluster:{cluster_id}", MARK_LEN)


def instance_name(namespace: str, name: str, uid: str, *, cluster_id: str) -> str:
    """``tbj-<mark>-<ns>-<name>-<uid8>``: ours (mark), readable in `brev ls`, unique per object."""
    name_part = f"{_slug(namespace, _NS_CHARS)}-{_slug(name, _NAME_CHARS)}"
    result = f"{PREFIX}{cluster_mark(cluster_id)}-{name_part}-{_digest(uid)}"
    assert len(result) <= MAX_NAME, result  # guaranteed by the slug budgets above
    return result


def mark_of(name: str) -> str | None:
    """The cluster mark an instance name carries, or None (not an operator-made marked name)."""
    found = _MARKED.match(name)
    return found.group("mark") if found else None


def owned_by(name: str, cluster_id: str) -> bool:
    """True only for a name this cluster's operator made (a foreign or unmarked name: False)."""
    return mark_of(name) == cluster_mark(cluster_id)


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
