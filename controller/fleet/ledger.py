"""The fleet: the operator's view of every TaoBrevJob, for admission under the quotas.

One leader process runs many reconcile passes concurrently (asyncio). Two Pending jobs must never
both take the last slot, so every admission decision goes through `Fleet.verdict`, under one
lock: it brings the view up to date (a listing at the start of a leadership term and then every
`relist_after` seconds, plus each pass's own facts and status writes), runs the pure
`admission.admit`, and records an admission in memory at once — before the pass writes
status.queue.admittedAt. Memory only ever adds admissions and finishes on top of what the API says
(both are one-way), so a listing that lags behind a status write cannot free a slot twice.
After a restart or a failover the new leader's first listing (status.queue.admittedAt) is the truth.

Namespace limits come from the operator settings, overridden per namespace by annotations
(`taobrev.io/max-instances`, `taobrev.io/max-gpus`), read on demand and cached for
`namespace_ttl` seconds. A bad value, or a Namespace the operator may not read, falls back to the
settings with a warning naming the annotation (or the grant) and the fix; never a crash.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import structlog

from controller.api.errors import KubeAccessDenied, TransientError
from controller.api.status import TaoBrevJobStatus
from controller.fleet import admission
from controller.fleet.admission import Admission, JobFacts, NamespaceLimits, Quotas
from controller.fleet.waiting import first_event

log = structlog.get_logger("taobrev.fleet")

RBAC_NAMESPACES = "grant `get` on namespaces to the operator (deploy/base/rbac.yaml, taobrev-operator-quotas)"


class FleetSource(Protocol):
    async def map_jobs(
        self,
        each: Callable[[dict[str, Any]], JobFacts | None],
        namespaces: Sequence[str] = (),
        *,
        finished: bool | None = None,
    ) -> list[JobFacts]: ...

    async def namespace_annotations(self, name: str) -> Mapping[str, str] | None: ...


@dataclass(frozen=True)
class Verdict:
    admission: Admission
    # Problems with this job's namespace limits (a bad annotation, an unreadable Namespace).
    warnings: tuple[str, ...] = ()


def quotas_from(max_instances: int, namespace_max_instances: int, namespace_max_gpus: int) -> Quotas:
    """The operator settings as quotas (0 = unlimited)."""
    return Quotas(
        cluster_max_instances=max_instances or None,
        default=NamespaceLimits(namespace_max_instances or None, namespace_max_gpus or None),
    )


class Fleet:
    def __init__(
        self,
        source: FleetSource,
        quotas: Quotas,
        *,
        namespaces: Sequence[str] = (),
        relist_after: float = 60.0,
        namespace_ttl: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        excluded: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> None:
        self._source = source
        # Jobs another admission owns (Kueue's: controller/fleet/kueue_gate.py): in no built-in queue.
        self._excluded = excluded
        self._defaults = quotas
        self._namespaces = tuple(namespaces)
        self._relist_after = relist_after
        self._namespace_ttl = namespace_ttl
        self._clock = clock
        self._lock = asyncio.Lock()
        self._jobs: dict[str, JobFacts] = {}
        self._listed_at: float | None = None
        # One-way facts this process knows before the API shows them.
        self._admitted: set[str] = set()
        self._finished: set[str] = set()
        # Namespace -> (read at, limits, problems).
        self._ns_cache: dict[str, tuple[float, NamespaceLimits, tuple[str, ...]]] = {}
        self._verdicts: dict[str, Admission] = {}
        self._dirty = True
        self._quotas: Quotas | None = None
        self._released = asyncio.Event()
        self._interrupts: dict[str, asyncio.Event] = {}

    # -- what passes tell the fleet ---------------------------------------------------------------

    async def verdict(self, facts: JobFacts) -> Verdict:
        """Admitted now, or why not and where it stands. An admission is recorded before this
        returns: the caller writes status.queue.admittedAt before it creates anything."""
        async with self._lock:
            if self._listed_at is None or self._clock() - self._listed_at >= self._relist_after:
                await self._relist()
            self._put(facts)
            job = self._jobs[facts.uid]
            quotas, problems = await self._current_quotas(job.namespace)
            if job.admitted:
                return Verdict(Admission(True, admission.ADMITTED, "admitted"), problems)
            if self._dirty or quotas != self._quotas:
                self._verdicts = admission.admit(self._jobs.values(), quotas)
                self._quotas, self._dirty = quotas, False
            found = self._verdicts.get(job.uid)
            if found is None:  # not waiting (finished, or deletion requested)
                found = Admission(False, admission.NOT_ADMITTED, "not waiting for admission")
            if found.admitted:
                self._admitted.add(job.uid)
                self._jobs[job.uid] = replace(job, admitted=True)
                self._dirty = True
                log.info("admitted", namespace=job.namespace, name=job.name, detail=found.message)
            return Verdict(found, problems)

    def observe(self, uid: str, status: TaoBrevJobStatus) -> None:
        """A status this process wrote: admissions and finishes are known before any listing."""
        admitted = status.queue.admitted_at is not None
        finished = status.finished_at is not None
        preflight = status.preflight
        inputs_pending = preflight is not None and preflight.failing_since is not None and not admitted
        job = self._jobs.get(uid)
        if job is not None and job.inputs_pending != inputs_pending:
            # Leaving the queue may let the jobs behind it go; joining it changes their places.
            self._jobs[uid] = replace(job, inputs_pending=inputs_pending)
            self._dirty = True
            if inputs_pending:
                self._wake()
        if admitted and uid not in self._admitted:
            self._admitted.add(uid)
            self._update(uid)
        if finished and uid not in self._finished:
            held = (job := self._jobs.get(uid)) is not None and job.holds_slot
            self._finished.add(uid)
            self._update(uid)
            if held:
                self._wake()

    def forget(self, uid: str) -> None:
        """The object is gone (its finalizer released)."""
        job = self._jobs.pop(uid, None)
        self._admitted.discard(uid)
        self._finished.discard(uid)
        self._dirty = True
        if job is not None and job.holds_slot:
            self._wake()

    async def wait_for_release(self, seconds: float, uid: str | None = None) -> None:
        """Until a slot is released (a job holding one finished or is gone), or `interrupt(uid)`,
        at most `seconds`."""
        events = [self._released]
        if uid is not None:
            events.append(self._interrupts.setdefault(uid, asyncio.Event()))
        try:
            await first_event(events, seconds)
        finally:
            if uid is not None:
                self._interrupts.pop(uid, None)

    def interrupt(self, uid: str) -> None:
        """End the wait of this job's queued pass (its deletion must not wait for a slot)."""
        event = self._interrupts.get(uid)
        if event is not None:
            event.set()

    def queued(self) -> dict[tuple[str, str], int]:
        """Jobs waiting per (namespace, reason), from the last decision (the queue gauge)."""
        out: dict[tuple[str, str], int] = {}
        for uid, v in self._verdicts.items():
            job = self._jobs.get(uid)
            if job is not None and job.waiting and not v.admitted:
                out[(job.namespace, v.reason)] = out.get((job.namespace, v.reason), 0) + 1
        return out

    # -- internals --------------------------------------------------------------------------------

    def _wake(self) -> None:
        released, self._released = self._released, asyncio.Event()
        released.set()

    def _sticky(self, facts: JobFacts) -> JobFacts:
        return replace(
            facts,
            admitted=facts.admitted or facts.uid in self._admitted,
            finished=facts.finished or facts.uid in self._finished,
        )

    def _put(self, facts: JobFacts) -> None:
        old = self._jobs.get(facts.uid)
        new = self._sticky(facts)
        if old is not None and new.created == admission.EPOCH:
            new = replace(new, created=old.created)  # a pass without the object's metadata
        if new != old:
            self._jobs[facts.uid] = new
            self._dirty = True

    def _update(self, uid: str) -> None:
        job = self._jobs.get(uid)
        if job is not None:
            self._jobs[uid] = self._sticky(job)
        self._dirty = True

    async def _relist(self) -> None:
        excluded = self._excluded

        def facts(body: dict[str, Any]) -> JobFacts | None:
            # In the lister's thread, page by page: the facts are kept, never the bodies.
            return None if excluded is not None and excluded(body) else JobFacts.from_body(body)

        # Unfinished jobs only (selected by the API server): a finished job holds no slot and
        # waits for none, and a namespace may keep thousands of them (issue 30).
        found = await self._source.map_jobs(facts, self._namespaces, finished=False)
        listed = {f.uid: self._sticky(f) for f in found if f.uid}
        for uid in set(self._admitted) - set(listed):
            self._admitted.discard(uid)
        for uid in set(self._finished) - set(listed):
            self._finished.discard(uid)
        self._jobs = listed
        self._listed_at = self._clock()
        self._dirty = True
        log.debug("fleet listed", jobs=len(listed))

    async def _current_quotas(self, own_namespace: str) -> tuple[Quotas, tuple[str, ...]]:
        """Quotas over every namespace with a waiting or slot-holding job (annotations cached)."""
        wanted = {j.namespace for j in self._jobs.values() if j.waiting or j.holds_slot} | {own_namespace}
        limits: dict[str, NamespaceLimits] = {}
        for ns in sorted(wanted):
            limits[ns] = await self._namespace_limits(ns)
        return replace(self._defaults, namespaces=limits), self._ns_cache[own_namespace][2]

    async def _namespace_limits(self, namespace: str) -> NamespaceLimits:
        now = self._clock()
        cached = self._ns_cache.get(namespace)
        if cached is not None and now - cached[0] < self._namespace_ttl:
            return cached[1]
        try:
            annotations = await self._source.namespace_annotations(namespace)
        except KubeAccessDenied as exc:
            problem = (
                f"cannot read Namespace {namespace} for its quota annotations ({exc}); "
                f"{RBAC_NAMESPACES} — until then the operator's defaults apply"
            )
            self._remember(namespace, now, self._defaults.default, (problem,))
            return self._defaults.default
        except TransientError:
            if cached is None:
                raise  # the pass backs off; admission waits rather than guess a limit
            log.warning(
                "namespace quota annotations not readable now; using the last ones", namespace=namespace
            )
            return cached[1]
        limits, problems = admission.namespace_limits(namespace, annotations, self._defaults.default)
        self._remember(namespace, now, limits, tuple(problems))
        return limits

    def _remember(
        self, namespace: str, now: float, limits: NamespaceLimits, problems: tuple[str, ...]
    ) -> None:
        old = self._ns_cache.get(namespace)
        if problems and (old is None or old[2] != problems):
            for problem in problems:
                log.warning("namespace quota annotation not used", namespace=namespace, problem=problem)
        self._ns_cache[namespace] = (now, limits, problems)
