"""Admission by a real Kueue: each Kueue-managed TaoBrevJob's Workload, created, read and
settled (docs/kueue.md; what the answers mean is controller/fleet/kueue.py, PURE).

The reconciler asks three things:
- `verdict`: a Pending job (or one waiting to be admitted again after an eviction) may create its
  instance now? The Workload is created on the first ask, before anything exists at Brev.
- `evicted`: has Kueue evicted an admitted job whose run goes on? (The lifecycle stops it.)
- `settle`, after each status write: the job finished -> Finished on the Workload; the evicted
  attempt's instance is confirmed deleted -> the quota reservation goes back to Kueue.

Memory only saves reads: a Workload marked finished is not read again by this process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

import structlog

from controller.api.models import TaoBrevJobSpec
from controller.api.status import TaoBrevJobStatus
from controller.api.vocabulary import Outcome
from controller.fleet import admission, kueue
from controller.fleet.admission import Admission
from controller.fleet.kueue import Demand, State, WorkloadView
from controller.lifecycle import recovery

log = structlog.get_logger("taobrev.kueue")

CLASS_NOT_FOUND = "WorkloadPriorityClassNotFound"


class WorkloadSource(Protocol):
    async def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def create(self, body: Mapping[str, Any]) -> dict[str, Any]: ...

    async def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool: ...

    async def priority_class_value(self, name: str) -> int | None: ...


class KueueGate:
    def __init__(self, store: WorkloadSource, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock
        self._finished: set[str] = set()

    @staticmethod
    def manages(labels: Mapping[str, str] | None, spec: TaoBrevJobSpec) -> bool:
        return kueue.managed(labels, creates_instance=spec.instance.ephemeral is not None)

    async def verdict(  # noqa: PLR0917 - the job's identity, labels and spec, as the reconciler holds them
        self,
        namespace: str,
        name: str,
        uid: str,
        labels: Mapping[str, str],
        spec: TaoBrevJobSpec,
        raw_spec: Mapping[str, Any],
    ) -> Admission:
        """Admitted by Kueue now, or why not (its Workload created first if need be). A suspended
        job (spec.suspend) has no Workload made until it is resumed: it is in no queue."""
        if spec.suspend:
            return Admission(False, admission.SUSPENDED, admission.SUSPENDED_MESSAGE)
        queue = labels[kueue.QUEUE_LABEL]
        found = await self._store.get(namespace, kueue.workload_name(name, uid))
        if found is None:
            demand, problem = await self._demand(queue, labels, spec, raw_spec)
            if problem is not None:
                return Admission(False, CLASS_NOT_FOUND, problem)
            assert demand is not None
            # The Workload's one pod template names the first step's image (Kueue reads only its requests).
            body = kueue.workload_body(namespace, name, uid, demand, spec.workflow()[0].image or "")
            found = await self._store.create(body)
            log.info("workload created", workload=body["metadata"]["name"], queue=queue, gpus=demand.gpus)
        view = WorkloadView.of(found)
        if view.state == State.ADMITTED:
            return Admission(
                True,
                admission.ADMITTED,
                f"admitted by Kueue (ClusterQueue {view.cluster_queue}, Workload {view.name})",
            )
        return Admission(False, admission.WAITING_FOR_KUEUE, view.waiting_message(queue))

    async def evicted(self, namespace: str, name: str, uid: str) -> str | None:
        """Kueue's eviction message when it evicted this admitted job's Workload, else None."""
        found = await self._store.get(namespace, kueue.workload_name(name, uid))
        if found is None:
            return None
        view = WorkloadView.of(found)
        if view.state != State.EVICTED:
            return None
        return view.message(kueue.EVICTED) or "evicted by Kueue"

    async def settle(self, namespace: str, name: str, uid: str, status: TaoBrevJobStatus) -> None:
        """Tell Kueue what the written status means for its Workload, if anything."""
        finished = status.finished_at is not None
        released = recovery.awaiting_readmission(status)
        if not (finished or released) or uid in self._finished:
            return
        wl_name = kueue.workload_name(name, uid)
        found = await self._store.get(namespace, wl_name)
        if found is None:
            if finished:
                self._finished.add(uid)
            return
        view = WorkloadView.of(found)
        now = self._clock()
        if finished:
            if view.state != State.FINISHED:
                ok = status.outcome == Outcome.SUCCEEDED
                patch = kueue.finished_patch(view, ok, status.message or "", now)
                if not await self._store.patch_status(namespace, wl_name, patch):
                    return  # changed since it was read: the next pass settles it
                log.info("workload finished", workload=wl_name, succeeded=ok)
            self._finished.add(uid)
        elif (
            view.state == State.EVICTED
            and view.reserved
            and await self._store.patch_status(namespace, wl_name, kueue.release_patch(view, now))
        ):
            log.info("workload requeued: the evicted job's instance is deleted", workload=wl_name)

    def forget(self, uid: str) -> None:
        self._finished.discard(uid)

    async def _demand(
        self, queue: str, labels: Mapping[str, str], spec: TaoBrevJobSpec, raw_spec: Mapping[str, Any]
    ) -> tuple[Demand | None, str | None]:
        ephemeral = spec.instance.ephemeral
        gpu_name = ephemeral.gpu_name if ephemeral is not None else None
        gpus = admission.gpus_of(raw_spec)
        cls = labels.get(kueue.PRIORITY_CLASS_LABEL)
        if not cls:
            return Demand(queue, gpus, gpu_name, spec.priority), None
        value = await self._store.priority_class_value(cls)
        if value is None:
            return None, (
                f"label {kueue.PRIORITY_CLASS_LABEL}={cls} names no WorkloadPriorityClass; create it "
                f"(kubectl get workloadpriorityclasses) or remove the label — no Workload is made until then"
            )
        return Demand(queue, gpus, gpu_name, value, cls), None
