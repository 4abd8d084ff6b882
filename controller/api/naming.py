"""Deterministic names derived from the object's identity (PURE).

The instance name is a function of (cluster id, namespace, name, uid), so a crashed operator that
restarts finds (and adopts) the instance it asked for instead of creating a second one; it is also
written to status before `brev create` runs. Names satisfy brev's rule
``^[a-zA-Z0-9][a-zA-Z0-9._-]*$`` (<= 63 chars) and docker's container-name rule.

Ownership mark: `brev ls` carries no labels, owner or timestamps (docs brev-cli.md section 11),
so the only durable fact the orphan sweeper can read about an instance is its name. Every instance
this operator creates is named ``tbj-<mark>-<ns>-<name>-<uid8>`` where ``<mark>`` is 8 hex digits
of sha256(cluster id, deployment): the cluster id is TAOBREV_CLUSTER_ID (default the kube-system
namespace uid), the deployment TAOBREV_DEPLOYMENT_ID (default ``<operator namespace>/<Lease
name>``: two replicas sharing a Lease are one deployment, two operators in one cluster never share
one). So two operators of one cluster sharing a Brev org (each with its own TAOBREV_NAMESPACES)
tell their instances apart. `owned_by` tells ours from another deployment's, another cluster's, a
person's, or one named by an older operator version: ``tbj-<ns>-<name>-<uid8>`` (no mark) or
``tbj-<legacy_mark>-...`` (the cluster's mark alone, before deployments were marked; any
deployment of the cluster may own it, so the sweeper never deletes one it cannot tie to a job it
lists). The mark leads the name, so a suffix added later (per-attempt names) or a cut at 63
characters keeps it.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable

# Set by `kubectl taobrev cancel NAME` (value: an RFC 3339 time): the run ends Canceled, results
# are uploaded, the instance is deleted, and the TaoBrevJob stays (reason CanceledByUser).
CANCEL_ANNOTATION = "taobrev.io/cancel"

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


# The deployment Settings derive when TAOBREV_DEPLOYMENT_ID is unset and the operator namespace
# and Lease name keep their defaults (controller/settings.py); pure callers and tests use it too.
DEFAULT_DEPLOYMENT = "taobrev-system/taobrev-operator"


def _check_cluster_id(cluster_id: str) -> None:
    if not cluster_id:
        raise ValueError("cluster id is empty: set TAOBREV_CLUSTER_ID (default: the kube-system uid)")


@functools.cache  # one identity per process: the sweeper asks for every listed instance
def owner_mark(cluster_id: str, deployment: str) -> str:
    """The 8 hex digits naming one operator deployment of one cluster in instance names."""
    _check_cluster_id(cluster_id)
    if not deployment:
        raise ValueError("deployment id is empty: set TAOBREV_DEPLOYMENT_ID (default: <namespace>/<lease>)")
    # A newline cannot occur in either id (settings patterns), so the pair maps to one text.
    return _digest(f"taobrev-owner:{cluster_id}\n{deployment}", MARK_LEN)


@functools.cache
def legacy_mark(cluster_id: str) -> str:
    """The mark operators wrote before deployments were marked: the cluster's alone. Names with it
    may belong to any deployment of the cluster (never proven ours by the mark)."""
    _check_cluster_id(cluster_id)
    return _digest(f"taobrev-cluster:{cluster_id}", MARK_LEN)


def instance_name(
    namespace: str, name: str, uid: str, *, cluster_id: str, deployment: str = DEFAULT_DEPLOYMENT
) -> str:
    """``tbj-<mark>-<ns>-<name>-<uid8>``: ours (mark), readable in `brev ls`, unique per object."""
    name_part = f"{_slug(namespace, _NS_CHARS)}-{_slug(name, _NAME_CHARS)}"
    result = f"{PREFIX}{owner_mark(cluster_id, deployment)}-{name_part}-{_digest(uid)}"
    assert len(result) <= MAX_NAME, result  # guaranteed by the slug budgets above
    return result


def mark_of(name: str) -> str | None:
    """The mark an instance name carries, or None (not an operator-made marked name)."""
    found = _MARKED.match(name)
    return found.group("mark") if found else None


def owned_by(name: str, cluster_id: str, deployment: str = DEFAULT_DEPLOYMENT) -> bool:
    """True only for a name this deployment made (another deployment's, a foreign, an unmarked or
    a legacy-marked name: False)."""
    return mark_of(name) == owner_mark(cluster_id, deployment)


def made_for_namespaces(name: str, namespaces: Iterable[str]) -> bool:
    """Whether a marked name may have been made for a job in one of `namespaces` (the namespace
    part is a cut slug, so two namespaces can share it: "may", never "was")."""
    mark = mark_of(name)
    if mark is None:
        return False
    return any(name.startswith(f"{PREFIX}{mark}-{_slug(ns, _NS_CHARS)}-") for ns in namespaces)


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
