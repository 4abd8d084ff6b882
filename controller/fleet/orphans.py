"""What the orphan sweep decides (PURE): which of OUR instances no TaoBrevJob references, how long
they have been unreferenced, and what to do about each.

An instance is ours only when its name carries this deployment's mark (controller/api/naming.py:
cluster id + deployment id) and, with TAOBREV_NAMESPACES set, names one of our namespaces: only
then does "no job we list references it" prove an orphan. Another deployment's, another
cluster's, a person's or an unmarked `tbj-` instance is never touched. Two kinds we cannot prove
ours are reported after the grace and never deleted, whatever the policy: our mark on a namespace
we do not watch (TAOBREV_NAMESPACES changed), and the cluster's legacy mark (names made before
deployments were marked, by any deployment of this cluster) on a namespace we watch.

A job we list that FINISHED and whose status names (or ids) an instance it created proves that
instance ours, legacy mark or not; finishedAt is written only after the teardown confirmed its
delete, so that teardown will never act again and the live instance (the recorded id or another:
a create that landed late) is swept like an orphan (`finished_job`). An instance a job reused was
lent to it, never created: a finished job's reuse still keeps it from the sweeper.

Ours and unreferenced, an instance becomes an orphan only after `grace` seconds from the moment
THIS process first saw it unreferenced (kept in memory: an operator restart or a new leader
restarts the grace, which can only delay a delete). The grace covers an in-flight create: the
name is in the job's status before `brev create` runs, and the sweeper lists Brev BEFORE it lists
the jobs, so a job that created an instance is always in the job list read after the listing that
shows it.

Never sweep blind: a failed listing, a failed job list or an unreadable retained record means no
sweep at all (None is "unknown", never "nothing is referenced").

Deletes follow the issue's "trust no single observation" rule: one `brev delete` by id, then wait
until the listing no longer shows the instance, then ONE confirming `brev delete` that must answer
not-found; only then is it counted deleted (and its retained record dropped).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from controller.api import naming, status_legacy
from controller.brev.client import DELETING, Instance
from controller.fleet.retained_record import RetainedRecord

# An accepted delete whose instance is still listed (not DELETING) this long after is sent again:
# brev may have dropped it.
REDELETE_AFTER = 600.0


class Policy(StrEnum):
    DELETE = "Delete"
    REPORT = "Report"


class State(StrEnum):
    """The `state` label of taobrev_orphan_instances."""

    PENDING_GRACE = "pending_grace"  # ours, unreferenced, grace not over
    REPORTED = "reported"  # an orphan left alone (policy Report, or brev refused the delete)
    DELETING = "deleting"  # delete accepted, not confirmed yet


class Why(StrEnum):
    """Why an instance is swept (label `reason` of taobrev_orphans_deleted_total)."""

    ORPHAN = "orphan"  # no TaoBrevJob references it
    RETENTION_EXPIRED = "retention_expired"  # retained with retainFor, and the time is up
    FINISHED_JOB = "finished_job"  # only a finished job (which will never act again) names it
    # Reported only, never deleted (not proven ours):
    LEGACY_MARK = "legacy_mark"  # the cluster's pre-deployment mark: any deployment may own it
    OUTSIDE_NAMESPACES = "outside_namespaces"  # our mark, for a namespace we do not list


# Findings never deleted, whatever the policy: the sweeper cannot prove them its own orphans.
UNPROVEN = frozenset({Why.LEGACY_MARK, Why.OUTSIDE_NAMESPACES})


STATES = tuple(State)
REASONS = tuple(Why)


@dataclass(frozen=True)
class Reference:
    """An instance name or id a TaoBrevJob refers to; `active` while the job has not finished."""

    job: str  # namespace/name
    names: frozenset[str]
    ids: frozenset[str]
    active: bool
    # Names and ids of an instance the job reuses (spec.instance.reuse): lent, never created.
    reused: frozenset[str] = frozenset()
    # The current attempt's instance is kept for debugging until then (instance.keptUntil, an
    # RFC 3339 time as status stores it; spec.debug.keepInstanceOnFailure): in use until then,
    # and past it unreferenced like any other (the job's own teardown deletes it first).
    kept: tuple[frozenset[str], str] | None = None


@dataclass(frozen=True)
class DeleteMark:
    """A delete brev accepted and we have not confirmed yet."""

    instance_id: str
    name: str
    why: Why
    accepted_at: datetime


@dataclass(frozen=True)
class Memory:
    """What the sweeper remembers between sweeps (in memory only)."""

    first_seen: Mapping[str, datetime] = field(default_factory=dict)  # by instance id
    deleting: Mapping[str, DeleteMark] = field(default_factory=dict)  # by instance id


@dataclass(frozen=True)
class Finding:
    instance: Instance
    state: State
    why: Why
    since: datetime  # first seen unreferenced (or the retain deadline)
    job: str | None = None  # the finished job naming it (Why.FINISHED_JOB)


@dataclass(frozen=True)
class Plan:
    skipped: str | None = None  # why nothing was decided (then everything else is empty)
    findings: tuple[Finding, ...] = ()
    delete: tuple[Finding, ...] = ()  # send `brev delete <id>` (first time, or again)
    confirm: tuple[DeleteMark, ...] = ()  # accepted and no longer listed: one confirming delete
    retained: tuple[str, ...] = ()  # names left alone because they are retained
    foreign: int = 0  # `tbj-` instances with another deployment's or cluster's mark, or none
    memory: Memory = field(default_factory=Memory)

    def counts(self) -> dict[State, int]:
        out = dict.fromkeys(State, 0)
        for f in self.findings:
            out[f.state] += 1
        return out


def references_of(
    job: Mapping[str, Any], cluster_id: str, deployment: str = naming.DEFAULT_DEPLOYMENT
) -> Reference:
    """Every instance name/id a TaoBrevJob object refers to: its status (every attempt's
    instance name and id in status.attempts[]), a reused instance's name, and
    the name the operator would give it (a Pending job whose status is not written yet)."""
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    names: set[str] = set()
    ids: set[str] = set()
    reused: set[str] = set()

    def take(entry: Any) -> None:
        if not isinstance(entry, Mapping):
            return
        for key, target in (("name", names), ("id", ids)):
            value = entry.get(key)
            if isinstance(value, str) and value:
                target.add(value)
                # created false: the status names the reused instance (written before any call).
                if entry.get("created") is False:
                    reused.add(value)

    # Status an earlier release wrote is flat until the job's next pass rewrites it.
    attempts = status_legacy.status_from_flat(dict(status)).get("attempts")
    for attempt in attempts if isinstance(attempts, list) else ():
        take(attempt.get("instance") if isinstance(attempt, Mapping) else None)
    reuse = (spec.get("instance") or {}).get("reuse") if isinstance(spec, Mapping) else None
    if isinstance(reuse, Mapping) and isinstance(reuse.get("name"), str):
        names.add(reuse["name"])
        reused.add(reuse["name"])
    kept: tuple[frozenset[str], str] | None = None
    current = attempts[-1] if isinstance(attempts, list) and attempts else None
    rec = current.get("instance") if isinstance(current, Mapping) else None
    if isinstance(rec, Mapping) and isinstance(rec.get("keptUntil"), str):
        ended = rec.get("keepEndedAt")
        until = ended if isinstance(ended, str) else rec["keptUntil"]
        kept = (frozenset(v for v in (rec.get("name"), rec.get("id")) if isinstance(v, str) and v), until)
    namespace, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
    if namespace and name and uid:
        names.add(
            naming.instance_name(
                str(namespace), str(name), str(uid), cluster_id=cluster_id, deployment=deployment
            )
        )
    return Reference(
        job=f"{namespace}/{name}",
        names=frozenset(names),
        ids=frozenset(ids),
        active=not status.get("finishedAt"),
        reused=frozenset(reused),
        kept=kept,
    )


def decide(
    *,
    listing: Sequence[Instance] | None,
    references: Iterable[Reference] | None,
    retained: Mapping[str, RetainedRecord] | None,
    memory: Memory,
    now: datetime,
    cluster_id: str,
    policy: Policy,
    grace: float,
    deployment: str = naming.DEFAULT_DEPLOYMENT,
    namespaces: Sequence[str] = (),
) -> Plan:
    """`namespaces`: TAOBREV_NAMESPACES, the only namespaces `references` cover (empty: all)."""
    if listing is None:
        return Plan(skipped="the brev listing failed", memory=memory)
    if references is None:
        return Plan(skipped="the TaoBrevJob list failed", memory=memory)
    if retained is None:
        return Plan(skipped="the retained-instance record could not be read", memory=memory)

    index = _Index(list(references), retained, now)
    findings: list[Finding] = []
    delete: list[Finding] = []
    kept: list[str] = []
    foreign = 0
    first_seen: dict[str, datetime] = {}
    listed_ids = {i.id for i in listing}
    marks = (naming.owner_mark(cluster_id, deployment), naming.legacy_mark(cluster_id))

    for inst in listing:
        ours, unproven = _provenance(inst.name, marks, namespaces)
        if not ours:
            foreign += inst.name.startswith(naming.PREFIX)
            continue
        if index.in_use(inst):
            continue  # a job still running (or tearing down) uses it
        record = index.record(inst)
        if record is not None and not record.expired(now):
            kept.append(inst.name)  # released on purpose (onCompletion: Retain): never swept
            continue
        finding = index.classify(
            inst, record, unproven, memory=memory, now=now, grace=grace, first_seen=first_seen
        )
        if finding is None:
            continue
        if finding.state is State.PENDING_GRACE:
            findings.append(finding)
            continue
        if policy is Policy.REPORT or finding.why in UNPROVEN:
            findings.append(replace(finding, state=State.REPORTED))
            continue
        findings.append(finding)
        mark = memory.deleting.get(inst.id)
        if mark is None or (
            inst.status != DELETING and (now - mark.accepted_at).total_seconds() >= REDELETE_AFTER
        ):
            delete.append(finding)

    # Accepted deletes whose instance the listing no longer shows: confirm with one more delete.
    confirm = tuple(m for i, m in memory.deleting.items() if i not in listed_ids)
    return Plan(
        findings=tuple(findings),
        delete=tuple(delete),
        confirm=confirm,
        retained=tuple(kept),
        foreign=foreign,
        memory=Memory(first_seen=first_seen, deleting=dict(memory.deleting)),
    )


def _provenance(name: str, marks: tuple[str, str], namespaces: Sequence[str]) -> tuple[bool, Why | None]:
    """(may be ours, why it is not proven ours). `marks`: (this deployment's, the cluster's legacy
    one). Our mark on a namespace we do not list, or the legacy mark on one we do, may be ours but
    is unproven; the legacy mark elsewhere is most likely another deployment's: not ours."""
    mark = naming.mark_of(name)
    # Only for a name made for a namespace we list do the jobs we list cover its job.
    listed = not namespaces or naming.made_for_namespaces(name, namespaces)
    if mark == marks[0]:
        return True, None if listed else Why.OUTSIDE_NAMESPACES
    if mark == marks[1] and listed:
        return True, Why.LEGACY_MARK
    return False, None


class _Index:
    """References and retained records, indexed for one sweep."""

    def __init__(
        self, refs: Sequence[Reference], retained: Mapping[str, RetainedRecord], now: datetime
    ) -> None:
        # A kept instance past its deadline (or whose keep ended) no longer counts as in use.
        over = {k for r in refs if r.kept is not None and _passed(r.kept[1], now) for k in r.kept[0]}
        self.active_names = {n for r in refs if r.active for n in r.names} - over
        self.active_ids = {i for r in refs if r.active for i in r.ids} - over
        self.reused = {k for r in refs for k in r.reused}
        # The finished job that created an instance of this name or id (when several, any one).
        self.finished: dict[str, str] = {k: r.job for r in refs if not r.active for k in r.names | r.ids}
        self.retained = retained
        self.retained_ids = {r.instance_id: r for r in retained.values() if r.instance_id}

    def in_use(self, inst: Instance) -> bool:
        return inst.name in self.active_names or inst.id in self.active_ids

    def record(self, inst: Instance) -> RetainedRecord | None:
        return self.retained.get(inst.name) or self.retained_ids.get(inst.id)

    def classify(
        self,
        inst: Instance,
        record: RetainedRecord | None,
        unproven: Why | None,
        *,
        memory: Memory,
        now: datetime,
        grace: float,
        first_seen: dict[str, datetime],
    ) -> Finding | None:
        """An instance not in use and not kept: None when a finished job reused it, else
        PENDING_GRACE, or DELETING (due; the caller applies the policy and `unproven`)."""
        if record is not None:  # retained, and its retain-until has passed
            return Finding(inst, State.DELETING, Why.RETENTION_EXPIRED, record.until or now)
        if inst.name in self.reused or inst.id in self.reused:
            return None  # lent to a job, never created by one: not the sweeper's
        job = self.finished.get(inst.name) or self.finished.get(inst.id)
        # A job we list created it: ours whatever the mark says.
        why = Why.FINISHED_JOB if job is not None else (unproven or Why.ORPHAN)
        seen = memory.first_seen.get(inst.id, now)
        first_seen[inst.id] = seen
        state = State.PENDING_GRACE if (now - seen).total_seconds() < grace else State.DELETING
        return Finding(inst, state, why, seen, job)


def _passed(when: str, now: datetime) -> bool:
    """Whether a time as status stores it has passed (unreadable: not passed, keep it in use)."""
    try:
        then = datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        return False
    return then.tzinfo is not None and then <= now
