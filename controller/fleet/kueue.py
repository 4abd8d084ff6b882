"""Admission by a real Kueue (PURE): the Workload a TaoBrevJob's demand becomes, and what Kueue's
answers on it mean for the job (docs/kueue.md).

Route. Kueue's job integrations (`integrations.frameworks`) are Go code compiled into Kueue
(pkg/controller/jobframework's GenericJob). A controller written outside it follows the same
contract by hand, as Kueue v0.17.0's jobframework reconciler does (reconciler.go, steps 6-7):

- it creates one Workload per job, owned by the job (a controller ownerReference: Kueue's
  workload controller finalises a Workload without owners as an orphan), with spec.queueName
  from the job's `kueue.x-k8s.io/queue-name` label;
- it starts the job only while the Workload is Admitted (QuotaReserved and every admission check);
- on Evicted=True (preemption, a deactivated or deleted queue) it stops the job, and once nothing
  runs any more it clears the reservation itself — QuotaReserved=False (reason Pending),
  status.admission removed, Admitted synced, Requeued=True for a preemption — so Kueue may admit it
  again; the job resumes when it is;
- it marks the Workload Finished (Succeeded or Failed) when the job ends, which frees the quota.

`integrations.externalFrameworks` (TaoBrevJob.v1alpha1.taobrev.io) only tells Kueue's built-in
integrations that children owned by such an object are managed elsewhere; the operator makes no
Pods or Jobs, so it changes nothing here and is optional (docs/kueue.md).

Demand: one podSet `instance` (count 1, so a ClusterQueue that covers `pods` counts instances)
requesting `taobrev.io/gpu: <GPUs>` — the count the built-in queue uses (`admission.gpus_of`).
A resource of its own, not `nvidia.com/gpu`: Brev GPUs are bought per hour from a cloud, not the
cluster's nodes, and one name for both would let Brev jobs eat the quota of in-cluster GPU pods.
`spec.instance.ephemeral.gpuName` becomes the podSet's nodeSelector `taobrev.io/gpu-name`, so a
ResourceFlavor per GPU model (nodeLabels `taobrev.io/gpu-name: a100`) gives quotas per GPU name,
and one flavor without nodeLabels covers every model.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from controller.api.timestamps import format_time

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
WORKLOADS = "workloads"
PRIORITY_CLASSES = "workloadpriorityclasses"

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
# Kueue's own label for the owning job's uid (jobframework sets it too): finds the Workload.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# On every Workload the operator makes: its watch (controller/handlers.py) filters on it.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "taobrev-operator"
GPU_RESOURCE = "taobrev.io/gpu"
GPU_NAME_LABEL = "taobrev.io/gpu-name"
PODSET = "instance"

OWNER_API_VERSION = "taobrev.io/v1alpha1"
OWNER_KIND = "TaoBrevJob"
# As Kueue's integrations do for their jobs: <kind>-<name>-<hash of the uid>.
_PREFIX = "taobrevjob-"
_NAME_MAX = 253
_LABEL_VALUE = re.compile(r"[^a-z0-9._-]+")

# Condition types on a Workload (apis/kueue/v1beta2/workload_types.go).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
REQUEUED = "Requeued"
FINISHED = "Finished"
PREEMPTED_REASON = "Preempted"


def managed(labels: Mapping[str, str] | None, *, creates_instance: bool) -> bool:
    """Does Kueue admit this job (the integration on is the caller's test)? Only a job that
    creates its instance: a reused one is billed to its owner and counts against nothing."""
    return creates_instance and bool((labels or {}).get(QUEUE_LABEL))


def managed_body(body: Mapping[str, Any]) -> bool:
    """`managed` for a TaoBrevJob as the API server returns it (the fleet's listing)."""
    meta, spec = _map(body, "metadata"), _map(body, "spec")
    return managed(_map(meta, "labels"), creates_instance=not _map(spec, "instance").get("reuse"))


def _map(parent: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = parent.get(key)
    return value if isinstance(value, Mapping) else {}


def workload_name(job_name: str, uid: str) -> str:
    """Deterministic from the job: a restart or another leader finds the same Workload."""
    digest = hashlib.sha256(uid.encode()).hexdigest()[:5]
    stem = f"{_PREFIX}{job_name}"[: _NAME_MAX - 6].rstrip("-.")
    return f"{stem}-{digest}"


def gpu_name_label(gpu_name: str) -> str:
    """spec.instance.ephemeral.gpuName as a label value (lower case; other characters as `-`)."""
    return _LABEL_VALUE.sub("-", gpu_name.lower()).strip("-._")[:63] or "unknown"


@dataclass(frozen=True)
class Demand:
    """What one job asks Kueue for."""

    queue: str
    gpus: int
    gpu_name: str | None = None
    priority: int = 0
    # A WorkloadPriorityClass (label kueue.x-k8s.io/priority-class); its value is `priority`.
    priority_class: str | None = None


def workload_body(namespace: str, job_name: str, uid: str, demand: Demand, image: str) -> dict[str, Any]:
    """The Workload for the job, owned by it (controller ref: deleted with it by the garbage
    collector). The podSet template only carries the demand; nothing runs from it."""
    container: dict[str, Any] = {
        "name": PODSET,
        "image": image,
        "resources": {"requests": {GPU_RESOURCE: str(demand.gpus)}},
    }
    pod_spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never"}
    if demand.gpu_name:
        pod_spec["nodeSelector"] = {GPU_NAME_LABEL: gpu_name_label(demand.gpu_name)}
    spec: dict[str, Any] = {
        "queueName": demand.queue,
        "podSets": [{"name": PODSET, "count": 1, "template": {"spec": pod_spec}}],
        "priority": demand.priority,
    }
    if demand.priority_class:
        spec["priorityClassRef"] = {
            "group": GROUP,
            "kind": "WorkloadPriorityClass",
            "name": demand.priority_class,
        }
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job_name, uid),
            "namespace": namespace,
            "labels": {JOB_UID_LABEL: uid, MANAGED_BY_LABEL: MANAGED_BY},
            "ownerReferences": [
                {
                    "apiVersion": OWNER_API_VERSION,
                    "kind": OWNER_KIND,
                    "name": job_name,
                    "uid": uid,
                    # No blockOwnerDeletion: it would need update on taobrevjobs/finalizers
                    # where OwnerReferencesPermissionEnforcement is on, for a foreground delete only.
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }


class State(StrEnum):
    PENDING = "Pending"  # waiting for quota (or its admission checks)
    ADMITTED = "Admitted"
    EVICTED = "Evicted"  # admitted once, now evicted: the job must stop
    FINISHED = "Finished"


@dataclass(frozen=True)
class WorkloadView:
    """The parts of a Workload the operator acts on."""

    name: str
    resource_version: str
    conditions: tuple[Mapping[str, Any], ...]
    reserved: bool  # status.admission is set (quota reserved)
    cluster_queue: str | None

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> WorkloadView:
        meta, status = _map(obj, "metadata"), _map(obj, "status")
        admission = _map(status, "admission") or None
        found = status.get("conditions")
        conds: list[Any] = found if isinstance(found, list) else []
        return cls(
            name=str(meta.get("name") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            conditions=tuple(c for c in conds if isinstance(c, Mapping)),
            reserved=admission is not None,
            cluster_queue=str(admission.get("clusterQueue")) if admission else None,
        )

    def condition(self, kind: str) -> Mapping[str, Any] | None:
        return next((c for c in self.conditions if c.get("type") == kind), None)

    def true(self, kind: str) -> bool:
        c = self.condition(kind)
        return c is not None and c.get("status") == "True"

    def message(self, kind: str) -> str:
        c = self.condition(kind)
        return str(c.get("message") or "") if c is not None else ""

    @property
    def state(self) -> State:
        if self.true(FINISHED):
            return State.FINISHED
        if self.true(EVICTED):
            return State.EVICTED
        if self.true(ADMITTED) and self.reserved:
            return State.ADMITTED
        return State.PENDING

    def waiting_message(self, queue: str) -> str:
        """Why Kueue has not admitted it yet, in Kueue's words when it gave some."""
        why = self.message(QUOTA_RESERVED) if not self.true(QUOTA_RESERVED) else self.message(ADMITTED)
        head = f"waiting for Kueue (LocalQueue {queue}, Workload {self.name})"
        return f"{head}: {why}" if why else head


def wakes(obj: Mapping[str, Any]) -> tuple[str, State] | None:
    """(the owning job's uid, the Workload's state) when a watch event of it may change what
    the job does now: an eviction (its run must stop) or an admission (its wait ends)."""
    uid = _map(_map(obj, "metadata"), "labels").get(JOB_UID_LABEL)
    state = WorkloadView.of(obj).state
    if not uid or state not in (State.EVICTED, State.ADMITTED):
        return None
    return str(uid), state


def _condition(kind: str, status: bool, reason: str, message: str, now: datetime) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": format_time(now),
    }


def _merged(conditions: tuple[Mapping[str, Any], ...], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`conditions` with `new` set (metav1 SetStatusCondition: the transition time moves only
    when the status does)."""
    out = [dict(c) for c in conditions]
    for cond in new:
        old = next((c for c in out if c.get("type") == cond["type"]), None)
        if old is None:
            out.append(cond)
            continue
        since = old.get("lastTransitionTime") if old.get("status") == cond["status"] else None
        out[out.index(old)] = {**cond, "lastTransitionTime": since or cond["lastTransitionTime"]}
    return out


def release_patch(view: WorkloadView, now: datetime) -> dict[str, Any]:
    """The evicted job has stopped (its instance is confirmed deleted): give the quota back so
    Kueue may admit it again — what Kueue's jobframework does once a job is no longer active.
    Carries the resourceVersion it was computed from: a Workload changed since is re-read."""
    evicted = view.condition(EVICTED) or {}
    reason = str(evicted.get("reason") or "Evicted")
    message = str(evicted.get("message") or "evicted by Kueue")
    conditions = _merged(
        view.conditions,
        [
            _condition(REQUEUED, reason == PREEMPTED_REASON, reason, message, now),
            _condition(QUOTA_RESERVED, False, "Pending", message, now),
            _condition(ADMITTED, False, "NoReservation", "The workload has no reservation", now),
        ],
    )
    return {
        "metadata": {"resourceVersion": view.resource_version},
        "status": {"admission": None, "conditions": conditions},
    }


def finished_patch(view: WorkloadView, succeeded: bool, message: str, now: datetime) -> dict[str, Any]:
    """The job ended: Finished=True (Succeeded or Failed) frees its quota for good."""
    reason = "Succeeded" if succeeded else "Failed"
    conditions = _merged(view.conditions, [_condition(FINISHED, True, reason, message or reason, now)])
    return {"metadata": {"resourceVersion": view.resource_version}, "status": {"conditions": conditions}}
