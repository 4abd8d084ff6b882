"""Admission (PURE): which waiting TaoBrevJobs may create their instance now, under the
cluster-wide and per-namespace limits, and where the others stand in the queue.

What holds a slot: a job that was admitted (status.queue.admittedAt, or any phase past Pending for a
job admitted before admission existed) and has not finished (status.finishedAt: its instance is
confirmed deleted or released). Billing runs from the create to the confirmed delete, so the slot
does too — a job being torn down still holds it.

What counts:
- instances: one per job that creates its instance (spec.instance.ephemeral). A job on a reused
  instance (spec.instance.reuse) creates nothing and is billed to whoever owns that instance: it
  counts against no limit and waits for none (only spec.suspend holds it back).
- GPUs: `gpus_of()` — spec.task.gpus when set; else the largest GPU count stated by an instance
  type of the form `<machine>:<gpu>:<count>` (as `brev search` lists GCP types); else 1. Set
  spec.task.gpus for an exact count on types whose name does not state it (e.g. g5.12xlarge).

Order: spec.priority (higher first), then creation time, then name, namespace, uid. Each
namespace is a strict FIFO: once its head waits for a namespace limit, the jobs behind it wait too
(no backfilling that could starve a large job). A job that waits for the cluster-wide cap does not
hold back other namespaces' jobs that fit — there are none while the cluster is full anyway.
A job that could never fit (more GPUs than its namespace's limit) waits without blocking anyone.
A suspended job (spec.suspend) is outside the queue: it neither waits in line nor blocks; so is
a job whose pre-flight fails (status.preflight.failingSince), until it passes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from controller.api import status_legacy
from controller.lifecycle.phases import PHASES, Phase, entered_any

# Reasons (CamelCase, for the Queued condition and status.queueReason).
ADMITTED = "Admitted"
SUSPENDED = "Suspended"
CLUSTER_INSTANCE_LIMIT = "ClusterInstanceLimit"
NAMESPACE_INSTANCE_LIMIT = "NamespaceInstanceLimit"
NAMESPACE_GPU_LIMIT = "NamespaceGPULimit"
NOT_ADMITTED = "NotAdmitted"
NOT_QUEUED = "NotQueued"
NOT_SUSPENDED = "NotSuspended"
# Its Workload waits for Kueue (TAOBREV_KUEUE and the label kueue.x-k8s.io/queue-name; docs/kueue.md).
WAITING_FOR_KUEUE = "WaitingForKueue"
LIMIT_REASONS = (CLUSTER_INSTANCE_LIMIT, NAMESPACE_INSTANCE_LIMIT, NAMESPACE_GPU_LIMIT, WAITING_FOR_KUEUE)

# Namespace annotations that override the operator's per-namespace defaults.
MAX_INSTANCES_ANNOTATION = "taobrev.io/max-instances"
MAX_GPUS_ANNOTATION = "taobrev.io/max-gpus"

SUSPENDED_MESSAGE = "spec.suspend is true: not admitted until it is set to false (nothing is created)"
REUSE_MESSAGE = "admitted: runs on a reused instance, which counts against no limit"

_TYPE_GPU_COUNT = re.compile(r"^[^:]+:[^:]+:([0-9]+)$")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class JobFacts:
    """What admission needs to know of one TaoBrevJob."""

    namespace: str
    name: str
    uid: str
    created: datetime
    priority: int = 0
    suspended: bool = False
    admitted: bool = False
    finished: bool = False
    # Deletion requested: a job not admitted by then never will be.
    deleting: bool = False
    creates_instance: bool = True
    gpus: int = 1
    # Its pre-flight fails (a Secret, bucket or input not there yet): outside the queue, like a
    # suspended job, so it never holds back the jobs behind it (controller/preflight/checker.py).
    inputs_pending: bool = False
    # spec.dryRun: a plan only, never admitted; outside the queue too.
    dry_run: bool = False

    @property
    def holds_slot(self) -> bool:
        return self.admitted and not self.finished and self.creates_instance

    @property
    def waiting(self) -> bool:
        held = self.inputs_pending or self.dry_run
        return not self.admitted and not self.finished and not self.deleting and not held

    def order_key(self) -> tuple[int, datetime, str, str, str]:
        return (-self.priority, self.created, self.name, self.namespace, self.uid)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> JobFacts:
        """From the object as the API server returns it (tolerant: the API server validated the
        spec; a field this version cannot read counts as its default)."""
        meta, spec = _map(body, "metadata"), _map(body, "spec")
        # Status an earlier release wrote is flat until the job's next pass rewrites it.
        status = status_legacy.status_from_flat(dict(_map(body, "status")))
        instance = _map(spec, "instance")
        phase = status.get("phase")
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            created=_parse_time(meta.get("creationTimestamp")),
            priority=_int(spec.get("priority"), 0),
            suspended=spec.get("suspend") is True,
            admitted=bool(_map(status, "queue").get("admittedAt"))
            or entered_any(_map(status, "phaseTimes"), lambda r: r.holds_slot)
            or _holds_slot(phase),
            finished=bool(status.get("finishedAt")),
            deleting=bool(meta.get("deletionTimestamp")),
            creates_instance=not instance.get("reuse"),
            gpus=gpus_of(spec),
            inputs_pending=phase in (None, Phase.PENDING)
            and bool(_map(status, "preflight").get("failingSince")),
            dry_run=spec.get("dryRun") is True,
        )


def gpus_of(spec: Mapping[str, Any]) -> int:
    """The GPUs a job counts for (module docstring): spec.task.gpus (a workflow: the largest
    spec.steps[].gpus), else the largest count an
    instance type names (`<machine>:<gpu>:<count>`), else 1."""
    explicit = _int(_map(spec, "task").get("gpus"), 0)
    steps = spec.get("steps")
    if isinstance(steps, list):  # a workflow holds the most any of its steps asks for
        explicit = max([explicit, *(_int(s.get("gpus"), 0) for s in steps if isinstance(s, Mapping))])
    if explicit > 0:
        return explicit
    ephemeral = _map(_map(spec, "instance"), "ephemeral")
    counts = [
        int(m.group(1))
        for t in ephemeral.get("types") or ()
        if isinstance(t, str) and (m := _TYPE_GPU_COUNT.match(t)) and int(m.group(1)) > 0
    ]
    return max(counts, default=1)


@dataclass(frozen=True)
class NamespaceLimits:
    """One namespace's limits (None = unlimited) and where each came from, for messages."""

    max_instances: int | None = None
    max_gpus: int | None = None
    instances_source: str = "TAOBREV_NAMESPACE_MAX_INSTANCES"
    gpus_source: str = "TAOBREV_NAMESPACE_MAX_GPUS"


@dataclass(frozen=True)
class Quotas:
    cluster_max_instances: int | None = None
    default: NamespaceLimits = field(default_factory=NamespaceLimits)
    namespaces: Mapping[str, NamespaceLimits] = field(default_factory=dict)

    def of(self, namespace: str) -> NamespaceLimits:
        return self.namespaces.get(namespace, self.default)


@dataclass(frozen=True)
class Admission:
    """The verdict for one job: admitted now, or why not (a limit, or suspended) and where it
    stands in its queue (1-based; None when it is not in a queue)."""

    admitted: bool
    reason: str
    message: str
    position: int | None = None

    @property
    def suspended(self) -> bool:
        return self.reason == SUSPENDED


def limit_value(raw: str | None, *, annotation: str, namespace: str) -> tuple[int | None, str | None]:
    """A namespace annotation's limit: (value, None), or (None, problem) for a bad value.
    "0" means unlimited, like the operator settings."""
    if raw is None:
        return None, None
    text = raw.strip()
    if text.isdigit() and len(text) <= 9:
        value = int(text)
        return (value or None), None
    return None, (
        f"namespace {namespace} has annotation {annotation}={raw!r}, which is not a whole number >= 0 "
        f"(0 = unlimited); fix it with `kubectl annotate namespace {namespace} --overwrite "
        f"{annotation}=<N>` — until then the operator's default applies"
    )


def namespace_limits(
    namespace: str, annotations: Mapping[str, str] | None, default: NamespaceLimits
) -> tuple[NamespaceLimits, list[str]]:
    """The namespace's limits: its annotations where set and valid, else the defaults; plus the
    problems found (each names the annotation and the fix)."""
    annotations = annotations or {}
    problems: list[str] = []
    limits = default
    for key, attr in ((MAX_INSTANCES_ANNOTATION, "max_instances"), (MAX_GPUS_ANNOTATION, "max_gpus")):
        if key not in annotations:
            continue
        value, problem = limit_value(annotations[key], annotation=key, namespace=namespace)
        if problem is not None:
            problems.append(problem)
            continue
        where = f"annotation {key} on namespace {namespace}"
        if attr == "max_instances":
            limits = replace(limits, max_instances=value, instances_source=where)
        else:
            limits = replace(limits, max_gpus=value, gpus_source=where)
    return limits, problems


class _Usage:
    """Slots in use while admission walks the queue (holders first, then each job it admits)."""

    def __init__(self, jobs: list[JobFacts], quotas: Quotas) -> None:
        self.quotas = quotas
        self.instances: Counter[str] = Counter()
        self.gpus: Counter[str] = Counter()
        self.total = 0
        for j in jobs:
            if j.holds_slot:
                self.take(j)

    def take(self, j: JobFacts) -> None:
        self.instances[j.namespace] += 1
        self.gpus[j.namespace] += j.gpus
        self.total += 1

    def never_fits(self, j: JobFacts) -> str | None:
        lim = self.quotas.of(j.namespace)
        if lim.max_gpus is not None and j.gpus > lim.max_gpus:
            return (
                f"needs {j.gpus} GPUs, more than namespace {j.namespace} may use at once ({lim.max_gpus}, "
                f"{lim.gpus_source}): it can never be admitted; lower spec.task.gpus or raise the limit"
            )
        return None

    def namespace_full(self, j: JobFacts) -> tuple[str, str] | None:
        ns, lim = j.namespace, self.quotas.of(j.namespace)
        if lim.max_instances is not None and self.instances[ns] >= lim.max_instances:
            return NAMESPACE_INSTANCE_LIMIT, (
                f"namespace {ns} may have {lim.max_instances} instance(s) at once "
                f"({lim.instances_source}) and {self.instances[ns]} are in use"
            )
        if lim.max_gpus is not None and self.gpus[ns] + j.gpus > lim.max_gpus:
            return NAMESPACE_GPU_LIMIT, (
                f"needs {j.gpus} GPU(s); namespace {ns} may use {lim.max_gpus} at once "
                f"({lim.gpus_source}) and {self.gpus[ns]} are in use"
            )
        return None

    def cluster_full(self) -> str | None:
        cap = self.quotas.cluster_max_instances
        if cap is not None and self.total >= cap:
            return (
                f"the cluster may have {cap} instance(s) at once (TAOBREV_MAX_INSTANCES) and "
                f"{self.total} are in use"
            )
        return None

    def describe(self, ns: str) -> str:
        lim, cap = self.quotas.of(ns), self.quotas.cluster_max_instances
        parts = [f"namespace {ns}: {self.instances[ns]}/{lim.max_instances or 'unlimited'} instances"]
        if lim.max_gpus is not None:
            parts.append(f"{self.gpus[ns]}/{lim.max_gpus} GPUs")
        parts.append(f"cluster: {self.total}/{cap or 'unlimited'} instances")
        return ", ".join(parts)


def admit(jobs: Iterable[JobFacts], quotas: Quotas) -> dict[str, Admission]:
    """A verdict (by uid) for every waiting job, given every job the operator knows of."""
    jobs = list(jobs)
    usage = _Usage(jobs, quotas)
    verdicts: dict[str, Admission] = {}
    # A namespace whose head waits for a namespace limit: (reason, why) the rest wait behind.
    blocked: dict[str, tuple[str, str]] = {}
    queued: list[tuple[JobFacts, str, str]] = []
    for j in sorted((j for j in jobs if j.waiting), key=JobFacts.order_key):
        if j.suspended:
            verdicts[j.uid] = Admission(False, SUSPENDED, SUSPENDED_MESSAGE)
        elif not j.creates_instance:
            verdicts[j.uid] = Admission(True, ADMITTED, REUSE_MESSAGE)
        elif j.namespace in blocked:
            reason, why = blocked[j.namespace]
            queued.append((j, reason, f"{why}; behind an earlier job of namespace {j.namespace}"))
        elif (never := usage.never_fits(j)) is not None:
            queued.append((j, NAMESPACE_GPU_LIMIT, never))
        elif (full := usage.namespace_full(j)) is not None:
            blocked[j.namespace] = full
            queued.append((j, *full))
        elif (capped := usage.cluster_full()) is not None:
            queued.append((j, CLUSTER_INSTANCE_LIMIT, capped))
        else:
            usage.take(j)
            verdicts[j.uid] = Admission(True, ADMITTED, f"admitted ({usage.describe(j.namespace)})")

    # Positions: in the namespace's queue for a namespace limit, in the cluster's for the cap.
    in_namespace: Counter[str] = Counter()
    for in_cluster, (j, reason, why) in enumerate(queued, start=1):
        in_namespace[j.namespace] += 1
        if reason == CLUSTER_INSTANCE_LIMIT:
            pos, where = in_cluster, "the cluster's queue"
        else:
            pos, where = in_namespace[j.namespace], f"namespace {j.namespace}'s queue"
        verdicts[j.uid] = Admission(False, reason, f"waiting: {why}; {ordinal(pos)} in {where}", pos)
    return verdicts


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _map(parent: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = parent.get(key)
    return value if isinstance(value, Mapping) else {}


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _parse_time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
    return EPOCH


def _holds_slot(phase: object) -> bool:
    """A job in this phase holds its slot (the `holds_slot` flag); a phase this release does
    not know (a newer one wrote it) is taken to hold one, so the quota is never overrun."""
    if phase is None:
        return False
    try:
        return PHASES[Phase(str(phase))].holds_slot
    except ValueError:
        return True
