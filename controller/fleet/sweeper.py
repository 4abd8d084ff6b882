"""The orphan sweep loop (I/O): leader only, every `interval` seconds.

One sweep: the shared `brev ls --json --all` (controller/effects/directory.py, the same listing the jobs
use), THEN every unfinished TaoBrevJob of the cluster, then the retained-instance record; the pure
controller/fleet/orphans.py decides; this module sends the deletes and confirmations, logs every decision
(structlog events `orphan_*`) and keeps the metrics. The order matters: see controller/fleet/orphans.py.

The finished jobs (thousands in a namespace that keeps them) are read only when an instance is
left that no unfinished job explains: only then can one change the verdict (it created the
instance: `finished_job`; it reused it: never swept). They are listed after the unfinished ones,
so a job finishing in between is in one list or both, never in neither.

Its memory (first seen unreferenced, deletes accepted) lives only in this process and is reset
when a replica starts a new leader term: a restart or a failover restarts the grace, which can only
delay a delete, never hasten one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

import structlog

from controller.api import naming
from controller.api.errors import InstanceNotFound, NotLeading, TaoBrevError, TransientError
from controller.brev.client import BrevClient, Instance
from controller.effects.directory import InstanceDirectory
from controller.fleet.leadership import Leadership
from controller.fleet.orphans import (
    UNPROVEN,
    DeleteMark,
    Finding,
    Memory,
    Plan,
    Policy,
    Reference,
    State,
    Why,
    decide,
    references_of,
)
from controller.fleet.retained import RetainedStore
from controller.fleet.retained_record import RetainedRecord
from controller.kube.access import KubeAccess
from controller.observability.metrics import Recorder

log = structlog.get_logger("taobrev.sweeper")
# What a person does about an instance the sweeper cannot prove its own (it never deletes one).
_UNPROVEN_FIX = {
    Why.LEGACY_MARK: "named by an older operator version (cluster mark only): any operator of this "
    "cluster may own it; delete it by hand (brev delete <id>) if no TaoBrevJob of any operator uses it",
    Why.OUTSIDE_NAMESPACES: "carries this operator's mark for a namespace outside TAOBREV_NAMESPACES: "
    "add the namespace back, or delete it by hand (brev delete <id>) if its job is gone",
}


class Sweeper:
    def __init__(
        self,
        *,
        brev: BrevClient,
        directory: InstanceDirectory,
        kube: KubeAccess,
        retained: RetainedStore,
        recorder: Recorder,
        leadership: Leadership,
        cluster_id: str,
        policy: Policy,
        interval: float,
        grace: float,
        listing_max_age: float,
        namespaces: Sequence[str] = (),
        deployment: str = naming.DEFAULT_DEPLOYMENT,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._brev = brev
        self._directory = directory
        self._kube = kube
        self._retained = retained
        self._recorder = recorder
        self._leadership = leadership
        self._cluster_id = cluster_id
        self._deployment = deployment  # with the cluster id, the mark in our instances' names
        self._policy = policy
        self._interval = interval
        self._grace = grace
        self._max_age = listing_max_age
        # TAOBREV_NAMESPACES: the jobs this operator may list (and the only ones it creates for).
        self._namespaces = tuple(namespaces)
        self._clock = clock
        self.memory = Memory()

    async def run(self) -> None:
        """Forever: sweep while leading, idle as a standby. A crash in one sweep is logged and
        the next one runs on schedule (the sweeper must not die silently)."""
        log.info(
            "orphan_sweeper_started",
            policy=str(self._policy),
            interval=self._interval,
            grace=self._grace,
            cluster_id=self._cluster_id,
            deployment=self._deployment,
            namespaces=list(self._namespaces),
        )
        while True:
            if not self._leadership.is_leading():
                # A new term starts from what it sees, not from an old term's clock; a standby
                # shows no orphans (the leader's gauges count them).
                self.memory = Memory()
                self._recorder.orphan_counts({})
                await self._leadership.wait_leading()
            try:
                await self._leadership.while_leading(self.sweep_once())
            except NotLeading:
                continue
            except Exception:
                log.exception("orphan_sweep_crashed")
            await asyncio.sleep(self._interval)

    async def sweep_once(self) -> Plan:
        listing = await self._directory.listing(max_age=self._max_age)
        references, retained = await self._read_kube()
        now = self._clock()
        plan = self._decide(listing, references, retained, now)
        if plan.findings and references is not None:
            # Something no unfinished job explains: the finished jobs may (see the docstring).
            more = await self._references(finished=True)
            references = None if more is None else references + more
            plan = self._decide(listing, references, retained, now)
        if plan.skipped is not None:
            # No list, no sweep: the gauges keep the last complete sweep's numbers.
            log.warning("orphan_sweep_skipped", why=plan.skipped)
            self._recorder.orphan_sweep("skipped")
            return plan
        return await self._carry_out(plan, now)

    def _decide(
        self,
        listing: Sequence[Instance] | None,
        references: list[Reference] | None,
        retained: dict[str, RetainedRecord] | None,
        now: datetime,
    ) -> Plan:
        return decide(
            listing=listing,
            references=references,
            retained=retained,
            memory=self.memory,
            now=now,
            cluster_id=self._cluster_id,
            deployment=self._deployment,
            namespaces=self._namespaces,
            policy=self._policy,
            grace=self._grace,
        )

    async def _references(self, *, finished: bool) -> list[Reference] | None:
        """The references of the unfinished or the finished jobs; None when the list failed."""
        cluster, deployment = self._cluster_id, self._deployment
        try:
            return await self._kube.map_jobs(
                lambda job: references_of(job, cluster, deployment), self._namespaces, finished=finished
            )
        except TransientError as exc:
            log.warning("orphan_sweep_job_list_failed", error=str(exc), reason=exc.reason, finished=finished)
            return None

    async def _read_kube(self) -> tuple[list[Reference] | None, dict[str, RetainedRecord] | None]:
        """The unfinished jobs' references, then the retained record; None for what could not
        be read."""
        references = await self._references(finished=False)
        if references is None:
            return None, None
        try:
            return references, await self._retained.read()
        except TransientError as exc:
            log.warning("orphan_sweep_retained_unreadable", error=str(exc), reason=exc.reason)
            return references, None

    async def _carry_out(self, plan: Plan, now: datetime) -> Plan:
        memory = plan.memory
        deleting = dict(memory.deleting)
        refused: set[str] = set()
        for finding in plan.delete:
            answer = await self._delete(finding)
            if answer == "accepted":
                deleting[finding.instance.id] = DeleteMark(
                    finding.instance.id, finding.instance.name, finding.why, now
                )
            elif answer == "refused":
                refused.add(finding.instance.id)
            # "failed" (transient): still due, sent again at the next sweep.
        for mark in plan.confirm:
            if await self._confirm(mark):
                deleting.pop(mark.instance_id, None)
            else:
                deleting[mark.instance_id] = replace(mark, accepted_at=now)
        if plan.delete or plan.confirm:
            self._directory.invalidate()
        self.memory = Memory(first_seen=memory.first_seen, deleting=deleting)
        findings = [
            replace(f, state=State.REPORTED) if f.instance.id in refused else f for f in plan.findings
        ]
        for f in findings:
            self._log_finding(f)
        counts = dict.fromkeys(State, 0)
        for f in findings:
            counts[f.state] += 1
        # Confirmations pending for instances no longer listed are still deletes in flight.
        counts[State.DELETING] += sum(1 for m in plan.confirm if m.instance_id in deleting)
        self._recorder.orphan_counts({str(k): v for k, v in counts.items()})
        self._recorder.orphan_sweep("done")
        log.info(
            "orphan_sweep_done",
            pending_grace=counts[State.PENDING_GRACE],
            reported=counts[State.REPORTED],
            deleting=counts[State.DELETING],
            retained=len(plan.retained),
            foreign=plan.foreign,
            policy=str(self._policy),
        )
        return replace(plan, findings=tuple(findings), memory=self.memory)

    def _log_finding(self, f: Finding) -> None:
        fields = {
            "instance": f.instance.name,
            "instance_id": f.instance.id,
            "why": str(f.why),
            "unreferenced_since": f.since.isoformat(),
        }
        if f.job is not None:
            fields["finished_job"] = f.job  # finished, so its teardown will never act again
        if f.state is State.PENDING_GRACE:
            log.info("orphan_pending_grace", grace=self._grace, **fields)
        elif f.state is State.REPORTED:
            if f.why in UNPROVEN:
                fields["fix"] = _UNPROVEN_FIX[f.why]
            log.warning("orphan_reported", policy=str(self._policy), **fields)
        else:
            log.info("orphan_deleting", **fields)

    def _fenced(self, instance_id: str) -> None:
        """Right before a delete: the term may have ended while this sweep waited, and the
        election loop that would cancel the sweep runs late on a starved event loop."""
        if not self._leadership.is_leading():
            raise NotLeading(f"brev delete {instance_id} not sent: this replica's leader term has ended")

    async def _delete(self, f: Finding) -> str:
        """Send the delete by id: "accepted", "refused" (this identity cannot find it) or
        "failed" (transient)."""
        inst = f.instance
        self._fenced(inst.id)
        try:
            await self._brev.delete_instance(inst.id)
        except InstanceNotFound as exc:
            # Listed, yet this identity's delete cannot find it: another user's instance with our
            # mark (a token login), or gone since the listing. Never counted as deleted.
            log.warning("orphan_delete_not_found", instance=inst.name, instance_id=inst.id, error=str(exc))
            return "refused"
        except TaoBrevError as exc:
            log.warning("orphan_delete_failed", instance=inst.name, instance_id=inst.id, error=str(exc))
            return "failed"
        log.warning("orphan_delete_requested", instance=inst.name, instance_id=inst.id, why=str(f.why))
        return "accepted"

    async def _confirm(self, mark: DeleteMark) -> bool:
        """One more delete for an accepted delete the listing no longer shows: not-found is the
        proof it is gone. True when confirmed."""
        self._fenced(mark.instance_id)
        try:
            await self._brev.delete_instance(mark.instance_id)
        except InstanceNotFound:
            self._recorder.orphan_deleted(str(mark.why))
            log.warning("orphan_deleted", instance=mark.name, instance_id=mark.instance_id, why=str(mark.why))
            if mark.why is Why.RETENTION_EXPIRED:
                try:
                    await self._retained.remove(mark.name)
                except TransientError as exc:
                    # A stale entry for a gone instance protects nothing and harms nothing.
                    log.warning("retained_record_not_removed", instance=mark.name, error=str(exc))
            return True
        except TaoBrevError as exc:
            log.warning("orphan_delete_confirm_failed", instance=mark.name, error=str(exc))
            return False
        # Accepted: it still existed (a listing glitch hid it); wait for the next absence.
        log.info("orphan_delete_not_confirmed_yet", instance=mark.name, instance_id=mark.instance_id)
        return False
