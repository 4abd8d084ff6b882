"""One simulated run: a seed -> a world, a workload of jobs, faults, and the invariants.

Deployment `a` (two replicas, leader election) watches namespace team-a; deployment `b` (one
replica) watches team-b. Both share the cluster (one cluster id) and one Brev org (one API key),
the normal platform set-up of issue 25's scenario 2.

Phases: jobs arrive and some are cancelled while faults fire (`ACTIVE_S`); then faults stop,
crashed replicas are back, every job is deleted, and the world drains (`DRAIN_S`). Invariants
are checked at every call that could break them and after the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import json
import logging
import multiprocessing
import random
import signal
import threading
import traceback
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any, TextIO, cast

import structlog
from prometheus_client import generate_latest

from controller.api import status_legacy
from controller.api.naming import CANCEL_ANNOTATION
from controller.api.timestamps import format_time
from controller.lifecycle.tunables import Tunables
from controller.observability import logs
from controller.reconciler import JobRef
from controller.settings import Settings
from tests import status_paths as sp
from tests.fakes.harness import job_spec
from tests.simulation.availability import Availability
from tests.simulation.loop import Deadlock, SimLoop
from tests.simulation.operator import Deployment, Process
from tests.simulation.world import (
    CURRENT,
    MISSING_BUCKET,
    Crashed,
    Knobs,
    SimBrev,
    SimClock,
    SimKube,
    SimLeaseStore,
)

CLUSTER_ID = "sim-cluster-0001"
# Wall-clock seconds a seed may take (they take about one: a spin is the only way past it).
HANG_S = 300.0
ACTIVE_S = 3600.0
ABSENT_LISTINGS = Tunables().absent_listings
DRAIN_S = 2 * 3600.0
SWEEP_S = 1200.0  # after the drain: the sweeper's grace (600 s) and two intervals (300 s)
# Bounds on billing the README states, checked every BOUNDS_EVERY_S while the world runs. An
# instance that went silent after a non-zero exit: exit_answer_timeout (300 s) past the settle
# listings, then its delete; with margin for crashes, partitions and queued lanes (scenario 5).
SILENT_BOUND_S = 900.0
# An instance no unfinished job names and no Retain job keeps: the sweeper's grace (600 s) from
# the current leader's first sweep, two intervals (300 s each) and margin (scenario 3).
UNOWNED_BOUND_S = 1500.0
BOUNDS_EVERY_S = 30.0
S3_SECRET = "sim-s3-secret-value"  # every job's S3 Secret (the NGC key is each job's own)
# Billing is counted from the earlier of Brev's boot and the attempt's first create marker (what
# the operator counts from), so the only slack is status's whole seconds.
BUDGET_MARGIN_S = 2.0
# A kept instance (spec.debug.keepInstanceOnFailure) has its delete accepted within this of its
# deadline: the pass due at the deadline, a crash (restart 1-60 s), a Lease failover, a slow lane.
KEEP_BOUND_S = 600.0


@dataclass
class Job:
    namespace: str
    name: str
    uid: str
    retain: bool
    secret: str
    budget_s: float | None = None  # spec.budget.maxBilledSeconds
    near_budget: bool = False  # its run exits just inside the budget (Knobs.near_budget)
    ngc_secret: str = ""  # the name of its NGC Secret (created late with Knobs.late_secret)
    missing_bucket: bool = False  # its results bucket never exists (Knobs.missing_bucket)
    instance_names: set[str] = field(default_factory=set)
    # spec.debug.keepInstanceOnFailure (issue 27), and whether its container gets secret env.
    keep: str | None = None
    secret_env: bool = False
    canceled_at: float | None = None  # when `kubectl taobrev cancel` annotated it
    steps: int = 0  # a workflow's steps (Knobs.workflows); 0: spec.task
    released_at: float | None = None
    final_status: dict[str, Any] = field(default_factory=dict)


class Violation(AssertionError):
    pass


class _Switch:
    """Swaps the running process's secret registry into controller.observability.logs (process-wide there)."""

    def enter(self, context: Any) -> None:
        proc = context.get(CURRENT)
        self.current = proc
        if proc is not None:
            logs._registered, logs._registered_re = proc.secrets_registry
        else:
            logs._registered, logs._registered_re = frozenset(), None

    def leave(self, context: Any) -> None:
        proc = context.get(CURRENT)
        if proc is not None:
            proc.secrets_registry = (logs._registered, logs._registered_re)


class Simulation:
    def __init__(self, seed: int, *, verbose: bool = False, knobs: Knobs | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)  # noqa: S311 - a simulation's seeded RNG, not crypto
        self.clock = SimClock()
        # Drawn either way: the rest of the seed's draws stay put.
        drawn = Knobs.draw(
            self.rng,
            random.Random(f"later-knobs-{seed}"),  # noqa: S311 - seeded, not crypto
            random.Random(f"workflow-knobs-{seed}"),  # noqa: S311 - seeded, not crypto
            random.Random(f"stall-knobs-{seed}"),  # noqa: S311 - seeded, not crypto
        )
        self.knobs = knobs if knobs is not None else drawn
        # Issue 27's keepInstanceOnFailure and cancel annotation (Knobs.user_cancel,
        # keep_on_failure): each job's draws come from a stream of their own, so the main stream
        # (faults, jobs, the scheduler) of a seed without them is unchanged.
        self.extra = random.Random(f"keep-cancel-{seed}")  # noqa: S311 - seeded, not crypto
        # Issue 28's workflows (Knobs.workflows): which jobs are workflows, and their steps.
        self.flows = random.Random(f"workflows-{seed}")  # noqa: S311 - seeded, not crypto
        self.healed = False
        self.lines: list[str] = []
        self.violations: list[str] = []
        self.verbose = verbose
        self.brev = SimBrev(self)
        self.kube = SimKube(self)
        self.jobs: dict[str, Job] = {}
        self.by_instance_name: dict[str, Job] = {}
        self.later: list[asyncio.Future[None]] = []  # Secrets created late (Knobs.late_secret)
        self.retained_ids: set[str] = set()
        self._unowned_since = {}
        self._flagged = set()
        self.every_process: list[Process] = []
        self.term_started: dict[str, float] = {}  # deployment -> when its current leader's term began
        self.availability = Availability()
        self.unreachable_ids: set[str] = set()
        settings = dict(
            cluster_id=CLUSTER_ID,
            lane_create=self.rng.choice((1, 2, 8)),
            create_settle=120.0,
            orphan_grace=600.0,
            orphan_sweep_interval=300.0,
            max_instances=self.rng.choice((2, 100)),
            leader_election=True,
        )
        self.deployments = [
            # Two installs of one cluster: their own operator namespaces, so their own deployment
            # ids (<namespace>/<Lease>) and instance marks, as a real platform has them.
            Deployment(
                "a",
                ("team-a",),
                "ops-a",
                2,
                Settings(namespaces=("team-a",), operator_namespace="ops-a", **settings),
            ),
            Deployment(
                "b",
                ("team-b",),
                "ops-b",
                1,
                Settings(namespaces=("team-b",), operator_namespace="ops-b", **settings),
            ),
        ]
        self.leases = {d.name: SimLeaseStore(self, d.name) for d in self.deployments}
        self.processes: dict[tuple[str, int], Process] = {}
        self.incarnations: dict[tuple[str, int], int] = {}
        self.loop = SimLoop(self.clock, self.rng, _Switch())
        self.loop.set_exception_handler(self._loop_exception)
        self.loop.stalls = LoopStalls(self)

    # -- the trace -------------------------------------------------------------------------------

    def trace(self, line: str) -> None:
        self.lines.append(f"{self.clock.monotonic():10.3f} {line}")

    def violation(self, what: str) -> None:
        self.trace(f"VIOLATION {what}")
        self.violations.append(f"t={self.clock.monotonic():.3f} {what}")

    def unexpected(self, proc: Process, what: str) -> None:
        self.trace(f"{proc.name} unexpected exception: {what}")

    def _loop_exception(self, _loop: Any, context: dict[str, Any]) -> None:
        """A task of a crashed replica dies with Crashed, never awaited: expected, not printed.
        Anything else goes into the trace (asyncio would print it to stderr)."""
        exc = context.get("exception")
        if isinstance(exc, Crashed):
            return
        self.trace(f"loop: {context.get('message')}: {exc!r}")

    # -- hooks the world calls -------------------------------------------------------------------

    async def latency(self) -> None:
        await asyncio.sleep(self.rng.uniform(0, self.knobs.latency_max))

    async def pay(self) -> None:
        debt = self.clock.take_debt()
        if debt > 0:
            await asyncio.sleep(debt)

    def alive_caller(self) -> Process | None:
        proc = CURRENT.get()
        if proc is not None and proc.dead:
            raise Crashed(proc.name)
        return proc

    def maybe_crash(self, proc: Process | None, where: str) -> None:
        if proc is None or self.healed or self.knobs.crash <= 0:
            return
        if self.rng.random() < self.knobs.crash:
            proc.crash(where)
            self.loop.call_later(self.rng.uniform(1, 60), self._restart, proc.deployment, proc.replica)
            raise Crashed(proc.name)

    def mutation_sent(self, proc: Process | None, op: str, target: str) -> None:
        if proc is None:
            return
        lease = self.leases[proc.deployment.name]
        if not lease.held_by(proc.identity, self.clock.now()):
            self.violation(f"{proc.name} sent brev {op} {target} without holding the Lease")

    def delete_accepted(self, instance_id: str) -> None:
        """No brev delete of an instance a live, unfinished job references or is creating."""
        inst = self.brev.instances.get(instance_id) or self.brev.gone.get(instance_id)
        name = inst.name if inst is not None else ""
        for obj in self.kube.objects.values():
            st = obj.status
            if obj.deletion_requested or st.get("runOutcome") or st.get("outcome") or st.get("finishedAt"):
                continue
            if st.get("phase") in ("Deleted",):
                continue
            if _attempt_ended(st, name, instance_id):
                continue  # the job's own teardown of an attempt it ended (recovery's next attempt)
            inst_rec = sp.instance(st)  # the current attempt's
            listings = (inst_rec.get("absence") or {}).get("listings") or 0
            if inst_rec.get("id") == instance_id and listings >= ABSENT_LISTINGS:
                # Its own confirmation by delete after enough distinct listings left it out
                # (`_check_absence` holds the count to what the listings really showed).
                continue
            if inst_rec.get("id") == instance_id or (inst_rec.get("name") == name and not inst_rec.get("id")):
                self.violation(
                    f"brev delete of {name} ({instance_id}) that running job {obj.namespace}/{obj.name} "
                    f"references (phase {st.get('phase')})"
                )

    def status_written(
        self, proc: Process | None, obj: Any, before: dict[str, Any], after: dict[str, Any]
    ) -> None:
        job = self.jobs.get(obj.uid)
        if job is None:
            return
        # The invariants read the sub-record shape (controller/api/status.py); a flat key of the
        # earlier releases in a written status would be one they never look at.
        legacy = (*status_legacy.CURRENT, *status_legacy.JOB, "attempt")
        flat = sorted(k for k in legacy if after.get(k) is not None)
        if flat:
            self.violation(f"{job.name}: status written with the flat keys of earlier releases {flat}")
        was, now = _traced(before), _traced(after)
        changed = {k: v for k, v in now.items() if was.get(k) != v}
        if changed:
            self.trace(f"{proc.name if proc else '?'} status {obj.namespace}/{obj.name} {changed}")
        # Every instance name the job ever recorded (the current attempt's is the last).
        for attempt in after.get("attempts") or ():
            name = (attempt.get("instance") or {}).get("name")
            if name:
                job.instance_names.add(name)
                self.by_instance_name[name] = job
        # Succeeded comes with the verified results (issue 32), and then never flips.
        if before.get("outcome") == "Succeeded" and after.get("outcome") != "Succeeded":
            self.violation(f"{job.name}: Succeeded flipped to {after.get('outcome')}")
        if after.get("outcome") == "Succeeded" and not sp.upload(after).get("uploadedAt"):
            self.violation(
                f"{job.name}: outcome Succeeded without results verified in S3 (upload.uploadedAt)"
            )
        # Whose move it is, exactly when the job failed (issue 27): the user's next step.
        if (after.get("outcome") == "Failed") != (after.get("failureClass") is not None):
            self.violation(
                f"{job.name}: outcome {after.get('outcome')} with failureClass {after.get('failureClass')}"
            )
        if before.get("finishedAt") and after.get("finishedAt") != before.get("finishedAt"):
            self.violation(
                f"{job.name}: finishedAt changed {before.get('finishedAt')} -> {after.get('finishedAt')}"
            )
        self._check_attempts_ended(job, before, after)
        self._check_canceled(job, before, after)
        self._check_kept(job, after)
        self._check_progress(job, proc, before, after)
        self._check_budget(job, before, after)
        self._check_quota()
        self._check_absence(job, proc, before, after)
        if job.secret in repr(after) or S3_SECRET in repr(after):
            self.violation(f"{job.name}: a secret value in status (written by {proc.name if proc else '?'})")
        job.final_status = after
        self._check_missing_bucket(job)

    def _check_absence(
        self, job: Job, proc: Process | None, before: dict[str, Any], after: dict[str, Any]
    ) -> None:
        """Absence is counted once per distinct listing that left the instance out (scenario 4:
        one cached listing counted three times deleted healthy instances)."""
        rec = sp.instance(after)
        absence = rec.get("absence") or {}
        n, instance_id = absence.get("listings") or 0, rec.get("id")
        # The count so far of the same attempt (a new attempt counts from nothing).
        same = sp.current(before).get("attempt") == sp.current(after).get("attempt")
        counted = ((sp.instance(before).get("absence") or {}).get("listings") or 0) if same else 0
        if n <= counted or not instance_id or proc is None:
            return
        spacing = proc.deployment.settings.tunables().poll_interval
        since = absence.get("since")
        start = 0.0
        if isinstance(since, str):
            ago = (self.clock.now() - datetime.fromisoformat(since.replace("Z", "+00:00"))).total_seconds()
            start = self.clock.monotonic() - ago - 1.0  # whole seconds in status
        # Status keeps whole seconds (instance.absence.checkedAt): a poll interval less up to 2 s apart.
        omitted = self.brev.omitted_listings(instance_id, proc.deployment.name, start, spacing - 2.0)
        if omitted < n:
            self.violation(
                f"{job.name}: absence of {instance_id} counted {n} times, but only {omitted} distinct "
                "listings left it out"
            )

    def _check_canceled(self, job: Job, before: dict[str, Any], after: dict[str, Any]) -> None:
        """A canceled run starts no attempt (recovery stops with the cancel), and a cancel through
        the annotation says so (CanceledByUser) unless the run had ended before it."""
        if before.get("runOutcome") == "Canceled" and len(after.get("attempts") or ()) > len(
            before.get("attempts") or ()
        ):
            self.violation(f"{job.name}: attempt {len(after['attempts'])} started after the run was canceled")
        if after.get("reason") == "CanceledByUser" and job.canceled_at is None:
            self.violation(f"{job.name}: CanceledByUser without a cancel annotation")

    def _check_kept(self, job: Job, status: dict[str, Any]) -> None:
        """No secret on an instance kept for debugging: no file of the job's secrets directory and
        no container whose config holds secret env, while the keep lasts."""
        rec = sp.instance(status)
        if not rec.get("keptUntil") or rec.get("keepEndedAt"):
            return
        if job.keep is None:
            self.violation(f"{job.name}: instance kept without spec.debug.keepInstanceOnFailure")
        inst = self.brev.instances.get(rec.get("id") or "")
        if inst is None or inst.delete_accepted_at is not None:
            return
        secrets = [p for p in inst.files if "/secrets/" in p]
        carrying = [c.job_id for c in inst.containers.values() if c.carries_secrets]
        if (secrets or carrying) and ("kept-secrets", inst.id) not in self._flagged:
            self._flagged.add(("kept-secrets", inst.id))
            self.violation(
                f"{job.name}: instance {inst.name} kept for debugging with secrets on it "
                f"(files {secrets}, containers with secret env {carrying})"
            )

    def _check_keep_deadlines(self) -> None:
        """A kept instance's delete is accepted within KEEP_BOUND_S of instance.keptUntil."""
        for obj in self.kube.objects.values():
            rec = sp.instance(obj.status)
            until = rec.get("keptUntil")
            inst = self.brev.instances.get(rec.get("id") or "")
            if not isinstance(until, str) or inst is None or inst.delete_accepted_at is not None:
                continue
            job = self.jobs.get(obj.uid)
            if job is not None:
                self._check_kept(job, obj.status)
            late = (self.clock.now() - datetime.fromisoformat(until.replace("Z", "+00:00"))).total_seconds()
            if late > KEEP_BOUND_S and ("kept", inst.id) not in self._flagged:
                self._flagged.add(("kept", inst.id))
                self.violation(
                    f"{obj.name}: instance {inst.name} kept for debugging until {until} still live "
                    f"{late:.0f} s later (bound {KEEP_BOUND_S:.0f} s)"
                )

    def _check_progress(
        self, job: Job, proc: Process | None, before: dict[str, Any], after: dict[str, Any]
    ) -> None:
        """status.progress adds up, and costs at most one write per progress interval: a new
        reading only once the interval (in whole waits) has passed since the last, or with the
        container's exit, or in a write that changes more than progress (issue 27)."""
        new, old = after.get("progress") or {}, before.get("progress") or {}
        if not new:
            return
        epoch, last, percent = new.get("epoch"), new.get("maxEpoch"), new.get("percent")
        if not (isinstance(epoch, int) and isinstance(last, int) and 0 <= epoch <= last):
            self.violation(f"{job.name}: progress epoch {epoch} of {last}")
        elif percent != epoch * 100 // last:
            self.violation(f"{job.name}: progress {percent}% at epoch {epoch} of {last}")
        was, now = old.get("readAt"), new.get("readAt")
        if proc is None or not isinstance(was, str) or not isinstance(now, str) or now == was:
            return
        if sp.run(after).get("exitCode") is not None:
            return
        if {k: v for k, v in after.items() if k != "progress"} != {
            k: v for k, v in before.items() if k != "progress"
        }:
            return  # a write that happened anyway (an attempt ended: seed 24128) costs nothing more
        tun = proc.deployment.settings.tunables()
        gap = (_parse_time(now) - _parse_time(was)).total_seconds()
        # Status keeps whole seconds: up to a second less apart.
        if gap < tun.progress_interval - tun.wait_timeout / 2 - 1:
            every = tun.progress_interval
            self.violation(f"{job.name}: progress written {gap:.0f} s after the last (interval {every:g} s)")

    def _check_attempts_ended(self, job: Job, before: dict[str, Any], after: dict[str, Any]) -> None:
        """An attempt ended as lost while its instance is live, its container runs and nothing
        kept it from answering (no exec to it hung or failed while the container ran): listings
        alone were believed, and a healthy run paid a second boot."""
        done = {a.get("attempt") for a in before.get("attempts") or () if a.get("endedAt")}
        for attempt in after.get("attempts") or ():
            if not attempt.get("endedAt") or attempt.get("attempt") in done:
                continue
            if attempt.get("endedReason") not in ("InstanceNotListed", "InstanceLost"):
                continue
            inst = self.brev.instances.get((attempt.get("instance") or {}).get("id") or "")
            if inst is None or inst.delete_accepted_at is not None or inst.id in self.unreachable_ids:
                continue
            runs = [c for c in inst.containers.values() if c.running]
            faulted = self.brev.exec_faulted_at.get(inst.id)
            if runs and (faulted is None or faulted < min(c.started_at for c in runs)):
                self.violation(
                    f"{job.name}: attempt {attempt.get('attempt')} ended {attempt.get('endedReason')} "
                    f"while {inst.name} ({inst.id}) is live and its container runs"
                )

    def _check_budget(self, job: Job, before: dict[str, Any], after: dict[str, Any]) -> None:
        """A run whose container exited 0 inside its budget is no BudgetExceeded, however late the
        exit was seen (scenario 8: after downtime the budget was judged before the exit)."""
        if job.budget_s is None or after.get("reason") != "BudgetExceeded":
            return
        if before.get("reason") == "BudgetExceeded":
            return
        if len(after.get("attempts") or ()) > 1:
            return  # several attempts share the budget: not judged here
        for inst in self._instances_of(job):
            container = next(iter(inst.containers.values()), None)
            if job.steps:
                # A workflow is inside its budget only when its LAST step exited 0 inside it
                # (every step ran on this instance, each exited 0); a budget spent in a later
                # step is a BudgetExceeded whatever the earlier steps did.
                ran = list(inst.containers.values())
                if len(ran) < job.steps or any(c.exited_at is None or c.final_code != 0 for c in ran):
                    continue
                container = max(ran, key=lambda c: c.exited_at or 0.0)
            if container is None or container.exited_at is None or container.final_code != 0:
                continue
            # Billing counts from the attempt's first create marker (the operator cannot know
            # which marked create reached Brev: the listing has no timestamps), or Brev's boot.
            billed = container.exited_at - min(inst.created_at, self._marker(after, inst.created_at))
            if billed < job.budget_s - BUDGET_MARGIN_S:
                self.violation(
                    f"{job.name}: Failed BudgetExceeded, but its container exited 0 inside its budget "
                    f"(billed {billed:.0f} s of {job.budget_s:.0f} s at the exit)"
                )

    def _check_quota(self) -> None:
        """Admitted jobs never exceed a quota: a job holds its slot from queue.admittedAt until
        finishedAt (its instance confirmed deleted or released), whichever replica admitted it."""
        for d in self.deployments:
            cap = d.settings.max_instances
            holding = sorted(
                f"{o.namespace}/{o.name}"
                for o in self.kube.objects.values()
                if o.namespace in d.namespaces
                and sp.queue(o.status).get("admittedAt")
                and not o.status.get("finishedAt")
            )
            if cap and len(holding) > cap and ("quota", *holding) not in self._flagged:
                self._flagged.add(("quota", *holding))
                self.violation(f"deployment {d.name}: {len(holding)} jobs hold slots {holding} (quota {cap})")

    def check_text(self, where: str, text: str) -> None:
        """No secret value in anything an operator process emits (log lines, metrics)."""
        if S3_SECRET in text:
            self.violation(f"the S3 secret key in {where}: {text[:200]!r}")
        for job in self.jobs.values():
            if job.secret in text:
                self.violation(f"a secret value of {job.name} in {where}: {text[:200]!r}")

    def _check_metrics(self) -> None:
        for proc in self.every_process:
            self.check_text(f"the metrics of {proc.name}", generate_latest(proc.registry).decode())

    def _marker(self, status: dict[str, Any], default: float) -> float:
        """The first attempt's billing start (its first create marker), on the loop's clock."""
        first = ((status.get("attempts") or [{}])[0].get("instance") or {}).get("billedFrom")
        if not isinstance(first, str):
            return default
        ago = (self.clock.now() - datetime.fromisoformat(first.replace("Z", "+00:00"))).total_seconds()
        return self.clock.monotonic() - ago - 1.0  # whole seconds in status

    def _instances_of(self, job: Job) -> list[Any]:
        every = [*self.brev.instances.values(), *self.brev.gone.values()]
        return sorted((i for i in every if i.name in job.instance_names), key=lambda i: i.id)

    def _check_bounds(self) -> None:
        self._check_keep_deadlines()
        self._check_billing_bounds()

    def _check_billing_bounds(self) -> None:
        """Billing bounds (every BOUNDS_EVERY_S): a live instance silent since a non-zero exit is
        deleted within SILENT_BOUND_S (scenario 5); one that no unfinished job of any deployment
        names and no Retain job keeps is deleted within UNOWNED_BOUND_S of the current leader's
        term (scenario 3: a finished job's name hid it from the sweeper)."""
        now = self.clock.monotonic()
        names: set[str] = set()
        ids: set[str] = set()
        for obj in self.kube.objects.values():
            if obj.status.get("finishedAt"):
                continue
            for attempt in obj.status.get("attempts") or ():  # the current attempt is the last
                names.add((attempt.get("instance") or {}).get("name") or "")
                ids.add((attempt.get("instance") or {}).get("id") or "")
        kept = set().union(*(self._kept(j) for j in self.jobs.values())) if self.jobs else set()
        for inst in sorted(self.brev.instances.values(), key=lambda i: i.id):
            if inst.delete_accepted_at is not None or inst.id in kept:
                self._unowned_since.pop(inst.id, None)
                continue  # going, or a Retain job's to keep (silent or not)
            if self.unreachable(inst) and inst.id not in self._flagged:
                # From the non-zero exit that silenced it (`unreachable`): a workflow's earlier steps
                # exited 0 and the instance answered after them (seed 319).
                exits = [
                    c.exited_at
                    for c in inst.containers.values()
                    if c.exited_at is not None and c.final_code != 0  # as `unreachable` judges it
                ]
                # Counted while its deployment could act (a leader reaching the API server).
                able = self.availability.able
                silent = able(self._deployment_of(inst.name), min(exits), now) if exits else 0.0
                if silent > SILENT_BOUND_S:
                    self._flagged.add(inst.id)
                    self.violation(
                        f"instance {inst.name} ({inst.id}) has not answered for {silent:.0f} s since its "
                        f"container exited non-zero and still bills (bound {SILENT_BOUND_S:.0f} s)"
                    )
            if inst.name in names or inst.id in ids:
                self._unowned_since.pop(inst.id, None)
                continue
            since = self._unowned_since.setdefault(inst.id, now)
            job = self.by_instance_name.get(inst.name)
            term = self.term_started.get(self._deployment_of(inst.name), 0.0)
            unowned = now - max(since, term)
            if unowned > UNOWNED_BOUND_S and ("unowned", inst.id) not in self._flagged:
                self._flagged.add(("unowned", inst.id))
                finished = f" (named by finished job {job.name})" if job is not None else ""
                self.violation(
                    f"instance {inst.name} ({inst.id}) bills owned by no one for {unowned:.0f} s{finished} "
                    f"(bound {UNOWNED_BOUND_S:.0f} s)"
                )

    def _deployment_of(self, instance_name: str) -> str:
        job = self.by_instance_name.get(instance_name)
        return "a" if job is None or job.namespace == "team-a" else "b"

    async def _watch_bounds(self) -> None:
        while True:
            await asyncio.sleep(BOUNDS_EVERY_S)
            self._check_bounds()

    def event_posted(self, proc: Process, ref: JobRef, type_: str, reason: str, message: str) -> None:
        self.trace(f"{proc.name} event {ref.namespace}/{ref.name} {type_} {reason}")
        self.check_text(f"an Event of {ref.name} ({reason})", f"{reason} {message}")

    def released(self, obj: Any) -> None:
        """The finalizer is gone: nothing of the job may be live unless it retains it."""
        job = self.jobs.get(obj.uid)
        if job is None:
            return
        job.released_at = self.clock.monotonic()
        job.final_status = obj.status
        self.trace(
            f"job {obj.namespace}/{obj.name} gone "
            f"(status {obj.status.get('phase')} {obj.status.get('outcome')})"
        )
        self._check_released(job)

    def _kept(self, job: Job) -> set[str]:
        """Ids of the instances a Retain job keeps: the one its status names, and any its
        retained record holds (by id, or by name while the id was never seen: a create that
        returned after the job finished)."""
        if not job.retain:
            return set()
        kept_id = sp.instance(job.final_status).get("id")
        kept = {kept_id} if kept_id else set()
        for (_ns, cm), (data, _version) in self.kube.config_maps.items():
            if not cm.startswith("taobrev-retained"):
                continue
            for name, raw in data.items():
                record = json.loads(raw)
                if record.get("job") != f"{job.namespace}/{job.name}":
                    continue
                for inst in [*self.brev.by_name(name), *self.brev.gone.values()]:
                    if inst.name == name and record.get("id") in (None, inst.id):
                        kept.add(inst.id)
        return kept

    def _check_released(self, job: Job) -> None:
        kept = self._kept(job)
        for attempt in _superseded(job.final_status):
            for inst in self._instances_of(job):
                rec = attempt.get("instance") or {}
                match = inst.id == rec.get("id") or (not rec.get("id") and inst.name == rec.get("name"))
                if match and inst.delete_accepted_at is None:
                    self.violation(
                        f"job {job.namespace}/{job.name} keeps {inst.name} ({inst.id}) of attempt "
                        f"{attempt.get('attempt')}, which recovery ended (superseded) before the run did"
                    )
                    kept.discard(inst.id)
        for name in sorted(job.instance_names):
            for inst in self.brev.by_name(name):
                if inst.delete_accepted_at is None and inst.id not in kept:
                    self.violation(
                        f"instance {name} ({inst.id}) of job {job.namespace}/{job.name} is live after the "
                        "job is gone (nothing refers to it)"
                    )

    def creates_landed(self) -> None:
        """Checked each iteration: a create that lands after its job is gone."""
        while self._seen_creates < len(self.brev.creates):
            rec = self.brev.creates[self._seen_creates]
            self._seen_creates += 1
            job = self.by_instance_name.get(rec.name)
            if (
                rec.accepted
                and job is not None
                and job.released_at is not None
                and rec.id not in self._kept(job)
            ):
                self.violation(f"brev create {rec.name} ({rec.id}) landed after job {job.name} was gone")
            if rec.accepted and job is not None:
                self._check_one_live(job, rec.id)

    def _check_one_live(self, job: Job, created: str | None) -> None:
        """At most one live instance per job, except an older attempt already being deleted."""
        live = [
            inst.id
            for name in sorted(job.instance_names)
            for inst in self.brev.by_name(name)
            if inst.delete_accepted_at is None
        ]
        if len(live) > 1:
            self.violation(f"job {job.name} has {len(live)} live instances {live} (create {created})")

    _seen_creates = 0
    _unowned_since: dict[str, float]
    _flagged: set[Any]

    def create_sent(self, instance: str) -> None:
        """Nothing bills before it can succeed (issue 32): no `brev create` for a job whose NGC
        Secret does not exist yet or whose results bucket does not exist."""
        job = self.by_instance_name.get(instance)
        if job is None:
            return
        if (job.namespace, job.ngc_secret) not in self.kube.secrets:
            self.violation(f"{job.name}: brev create {instance} before its Secret {job.ngc_secret} exists")
        if job.missing_bucket:
            self.violation(f"{job.name}: brev create {instance} although its results bucket does not exist")
        obj = next((o for o in self.kube.objects.values() if o.uid == job.uid), None)
        if obj is not None and obj.status.get("runOutcome") == "Canceled":
            self.violation(f"{job.name}: brev create {instance} after the run was recorded Canceled")

    def _check_missing_bucket(self, job: Job) -> None:
        """A job whose results bucket never exists ends Failed ResultsBucketNotFound (or with an
        earlier check's SecretNotFound when its Secret is late too, or Canceled when deleted or
        canceled first), with nothing created."""
        st = job.final_status
        if not job.missing_bucket or not st.get("finishedAt"):
            return
        reasons = ("ResultsBucketNotFound", "SecretNotFound")
        failed = st.get("outcome") == "Failed" and st.get("reason") in reasons
        ok = failed or (st.get("outcome"), st.get("reason")) in (
            ("Canceled", "Canceled"),
            ("Canceled", "CanceledByUser"),
        )
        asked = [
            (a.get("instance") or {}).get(k)
            for a in st.get("attempts") or ()
            for k in ("createRequestedAt", "billedFrom")
            if (a.get("instance") or {}).get(k)
        ]
        if not ok or asked:
            self.violation(
                f"{job.name}: results bucket missing, ended {st.get('outcome')} {st.get('reason')} "
                f"(instance.createRequestedAt/billedFrom {asked})"
            )

    async def _secret_later(self, namespace: str, name: str, value: str, delay: float) -> None:
        await asyncio.sleep(delay)
        self.trace(f"kubectl create secret {namespace}/{name} (late)")
        self.kube.add_secret(namespace, name, {"api-key": value.encode()})

    def container_started(self, job_id: str, instance: str) -> None:
        self.trace(f"container {job_id} started on {instance}")
        if self.rng.random() < self.knobs.unreachable_after_exit:
            # Per container: its instance stops answering once it exited non-zero.
            self.unreachable_ids.update(i.id for i in self.brev.by_name(instance))

    def run_near_budget(self, job_id: str, instance: str) -> float | None:
        """For a job drawn to end near its budget: a run length that exits 5-30 s before the
        budget (billed from Brev's boot) runs out."""
        job = next((j for j in self.jobs.values() if j.name in job_id), None)
        booted = [i.created_at for i in self.brev.by_name(instance)]
        if job is None or not job.near_budget or job.budget_s is None or not booted:
            return None
        left = job.budget_s - (self.clock.monotonic() - min(booted)) - self.rng.uniform(5, 30)
        return left if left > 10 else None

    def program_failure(self, job_id: str) -> int | None:
        """For a job with spec.debug.keepInstanceOnFailure, half its runs exit 2 (not in its
        retryOnExitCodes: TrainingFailed, a Program failure), drawn from the extra stream."""
        job = next((j for j in self.jobs.values() if j.name in job_id), None)
        if job is None or job.keep is None:
            return None
        return 2 if self.extra.random() < 0.5 else None

    def printed_secret(self, job_id: str) -> str | None:
        for job in self.jobs.values():
            if job_id.endswith(job.uid[:0]) and job.name in job_id and job.print_secret:  # type: ignore[attr-defined]
                return job.secret
        return None

    def unreachable(self, inst: Any) -> bool:
        if self.healed or self.knobs.unreachable_after_exit <= 0:
            return False
        exited = any(c.exited_at is not None and c.final_code != 0 for c in inst.containers.values())
        return exited and inst.id in self.unreachable_ids

    # -- the run ---------------------------------------------------------------------------------

    def _restart(self, deployment: Deployment, replica: int) -> None:
        key = (deployment.name, replica)
        n = self.incarnations.get(key, 0) + 1
        self.incarnations[key] = n
        proc = Process(self, deployment, replica, n)
        self.processes[key] = proc
        self.every_process.append(proc)
        proc.start()

    async def main(self) -> None:  # noqa: PLR0912 - one script of the run, read top to bottom
        rng = self.rng
        for d in self.deployments:
            for r in range(d.replicas):
                self._restart(d, r)
        bounds = asyncio.ensure_future(self._watch_bounds())
        self.trace(f"seed {self.seed} knobs: {self.knobs.describe()}")
        n_jobs = rng.randint(2, 6)
        plan: list[tuple[float, str, Any]] = []
        for i in range(n_jobs):
            ns = rng.choice(("team-a", "team-b"))
            at = rng.uniform(0, ACTIVE_S / 3)
            plan.append((at, "create", (ns, f"job{i}")))
            if rng.random() < 0.5:
                plan.append((at + rng.uniform(1, 3000), "delete", (ns, f"job{i}")))
            if rng.random() < self.knobs.cancel_soon:
                plan.append((at + rng.uniform(1, 300), "delete", (ns, f"job{i}")))
            if self.knobs.user_cancel and self.extra.random() < self.knobs.user_cancel:
                # `kubectl taobrev cancel`: queued, mid-run, while kept or after it finished.
                plan.append((at + self.extra.choice((1.0, 30.0, 600.0, 2400.0)), "cancel", (ns, f"job{i}")))
        plan.sort(key=lambda p: p[0])
        for at, what, (ns, name) in plan:
            if at > self.clock.monotonic():
                await asyncio.sleep(at - self.clock.monotonic())
            if what == "create":
                self._create_job(ns, name)
            elif what == "cancel":
                self._cancel_job(ns, name)
            elif (ns, name) in self.kube.objects:
                self.trace(f"kubectl delete {ns}/{name}")
                self.kube.request_delete(ns, name)
        # Faults keep firing until ACTIVE_S, or until every job has finished (what is left to
        # go wrong then is the drain's, and it runs next): most seeds need far less than an hour.
        while self.clock.monotonic() < ACTIVE_S and not self._all_finished():  # noqa: ASYNC110
            await asyncio.sleep(min(30.0, ACTIVE_S - self.clock.monotonic()))
        # Heal: faults stop, every replica is up, every job is deleted; then drain.
        self.healed = True
        self.knobs = Knobs(latency_max=self.knobs.latency_max, watch_lag_max=self.knobs.watch_lag_max)
        self.trace("heal: faults off, all jobs deleted")
        for _key, proc in sorted(self.processes.items()):
            if proc.dead:
                self._restart(proc.deployment, proc.replica)
        for ns, name in sorted(self.kube.objects):
            self.kube.request_delete(ns, name)
        deadline = self.clock.monotonic() + DRAIN_S
        while self.kube.objects and self.clock.monotonic() < deadline:  # noqa: ASYNC110 - virtual time
            await asyncio.sleep(10)
        for ns, name in sorted(self.kube.objects):
            self.violation(f"job {ns}/{name} not gone {DRAIN_S:.0f} s after the heal (finalizer kept)")
        # The sweeper's grace and interval for anything unowned (only while something is).
        swept_by = self.clock.monotonic() + SWEEP_S
        while self._unowned() and self.clock.monotonic() < swept_by:  # noqa: ASYNC110
            await asyncio.sleep(30)
        for inst in self._unowned():
            self.violation(f"instance {inst.name} ({inst.id}) leaked: live after the drain")
        bounds.cancel()
        self._check_metrics()
        for proc in self.processes.values():
            proc.crash("end of the run")
        # Their cancellations unwind here, on the seeded loop: left to the teardown below, they
        # would unwind in the order of asyncio's task set (object addresses), and the trace's
        # last lines ("lost the lead") would differ between two runs of one seed.
        ending = [task for proc in self.processes.values() for task in proc.tasks]
        if ending:
            await asyncio.wait(ending, timeout=END_UNWIND_S)

    def _all_finished(self) -> bool:
        return all(obj.status.get("finishedAt") for obj in self.kube.objects.values())

    def _unowned(self) -> list[Any]:
        """Live instances no Retain job keeps (and no accepted delete is taking away)."""
        kept = set().union(*(self._kept(j) for j in self.jobs.values())) if self.jobs else set()
        return [
            inst
            for inst in sorted(self.brev.instances.values(), key=lambda i: i.id)
            if inst.delete_accepted_at is None and inst.id not in kept
        ]

    def _cancel_job(self, namespace: str, name: str) -> None:
        obj = self.kube.objects.get((namespace, name))
        if obj is None or obj.deletion_requested:
            return
        job = self.jobs[obj.uid]
        job.canceled_at = self.clock.monotonic()
        self.trace(f"kubectl taobrev cancel {namespace}/{name}")
        self.kube.annotate(namespace, name, CANCEL_ANNOTATION, format_time(self.clock.now()))

    def _create_job(self, namespace: str, name: str) -> None:
        rng = self.rng
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        secret = f"zq{rng.getrandbits(64):016x}xv"
        retain = rng.random() < 0.3
        job = Job(namespace, name, uid, retain, secret)
        job.print_secret = rng.random() < self.knobs.print_secrets  # type: ignore[attr-defined]
        self.jobs[uid] = job
        secret_name = f"ngc-{name}"
        job.ngc_secret = secret_name
        # Drawn only when the knob is on: the random stream of every seed without it stays as it was.
        if self.knobs.late_secret and rng.random() < self.knobs.late_secret:
            # Applied before its Secret: the job waits Pending and starts once it is there.
            self.later.append(
                asyncio.ensure_future(self._secret_later(namespace, secret_name, secret, rng.uniform(1, 900)))
            )
        else:
            self.kube.add_secret(namespace, secret_name, {"api-key": secret.encode()})
        self.kube.add_secret(
            namespace,
            f"s3-{name}",
            {"AWS_ACCESS_KEY_ID": b"AKIASIM", "AWS_SECRET_ACCESS_KEY": S3_SECRET.encode()},
        )
        spec = job_spec(
            credentials={"ngcApiKey": {"name": secret_name, "key": "api-key"}, "s3": {"name": f"s3-{name}"}},
            instance={"ephemeral": {"gpuName": "L40S"}, "onCompletion": "Retain" if retain else "Delete"},
            recovery={"maxAttempts": rng.choice((1, 2, 3)), "retryOnExitCodes": [1]},
        )
        if rng.random() < 0.3:
            job.budget_s = rng.choice((600, 1800, 3600))
        job.near_budget = rng.random() < self.knobs.near_budget
        if job.near_budget:
            job.budget_s = job.budget_s or 1800
        if job.budget_s is not None:
            spec["budget"] = {"maxBilledSeconds": job.budget_s}
        spec["timeouts"]["runningSeconds"] = 7200
        if rng.random() < self.knobs.tight_timeouts:
            spec["timeouts"]["provisioningSeconds"] = 120
        job.missing_bucket = bool(self.knobs.missing_bucket) and rng.random() < self.knobs.missing_bucket
        if job.missing_bucket:
            spec["data"] = {"resultsUri": f"s3://{MISSING_BUCKET}/{name}"}
            spec["timeouts"]["pendingSeconds"] = rng.choice((60, 600))
        if not retain and self.knobs.keep_on_failure and self.extra.random() < self.knobs.keep_on_failure:
            job.keep = self.extra.choice(("60", "10m", "2h"))
            spec["debug"] = {"keepInstanceOnFailure": job.keep}
            job.secret_env = self.extra.random() < 0.5
            if job.secret_env:  # the container's config then holds a secret: it may not be kept
                ref = {"name": secret_name, "key": "api-key"}
                spec["credentials"]["extraEnv"] = [{"name": "HF_TOKEN", "secretKeyRef": ref}]
        if self.knobs.workflows and self.flows.random() < self.knobs.workflows:
            job.steps = _workflow(self.flows, spec)
        self.trace(
            f"kubectl create {namespace}/{name} uid={uid} retain={retain} keep={job.keep} steps={job.steps}"
        )
        self.kube.create(namespace, name, uid, spec)

    def run(self, hang_after_s: float = HANG_S) -> list[str]:
        self.loop.after_iteration = self.creates_landed
        asyncio.set_event_loop(self.loop)
        try:
            with watchdog(self, hang_after_s):
                self.loop.run_until_complete(self.main())
        except Deadlock as exc:
            self.violation(f"deadlock: {exc}")
        except Hang:
            pass  # the watchdog recorded where
        finally:
            # Until no task is left: one left pending (an exit wait a cancelled pass left running
            # unwinds over several iterations) would be collected during the next seed's run, and
            # its cleanup would run inside that world (test_a_seed_replays_exactly).
            for _ in range(TEARDOWN_ITERATIONS):
                pending = [task for task in asyncio.all_tasks(self.loop) if not task.done()]
                if not pending:
                    break
                for task in pending:
                    task.cancel()
                with contextlib.suppress(Exception):  # tearing down a finished world
                    self.loop.run_until_complete(asyncio.sleep(0))
            asyncio.set_event_loop(None)
            logs.forget_registered_secrets()
        return self.violations


class LoopStalls:
    """Knobs.loop_stall_every: stalls at exponential gaps of that mean, 1-45 s each, none once
    healed. Their own stream: a seed with the knob off draws nothing from it."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.rng = random.Random(f"stall-times-{sim.seed}")  # noqa: S311 - seeded, not crypto
        self.at: float | None = None
        self._plan(0.0)

    def _plan(self, now: float) -> None:
        every = self.sim.knobs.loop_stall_every
        self.at = None if every <= 0 or self.sim.healed else now + self.rng.expovariate(1.0 / every)

    def stall(self) -> float:
        if self.sim.healed or self.sim.knobs.loop_stall_every <= 0:
            self.at = None
            return 0.0
        seconds = self.rng.choice((1.0, 5.0, 20.0, 45.0))
        self.sim.trace(f"loop stalled {seconds:g} s")
        self._plan(self.sim.clock.elapsed + seconds)
        return seconds


class Hang(KeyboardInterrupt):
    """The run outlived its wall-clock bound: a callback spinning without an await (or a loop
    that never lets the clock move). A KeyboardInterrupt, because asyncio lets only that and
    SystemExit out of a task (any other exception would be kept by the spinning task while the
    loop goes on)."""


@contextlib.contextmanager
def watchdog(sim: Simulation, seconds: float) -> Iterator[None]:
    """Interrupt a run past `seconds` of wall time and record where it was as a violation."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only
        return

    def fire(_signum: int, frame: FrameType | None) -> None:
        where = traceback.extract_stack(frame)[-3:] if frame is not None else []
        at = " <- ".join(f"{f.name} ({Path(f.filename).name}:{f.lineno})" for f in reversed(where))
        sim.violation(f"hang: the run took over {seconds:g} s of wall time, last in {at}")
        raise Hang

    before = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


END_UNWIND_S = 60.0  # virtual seconds the crashed processes' tasks get to unwind at the end
TEARDOWN_ITERATIONS = 100  # a bound, so a task that ignores cancellation cannot hang the run

_WORKFLOW_ACTIONS = (("train", "pyt"), ("evaluate", "pyt"), ("export", "deploy"), ("inference", "deploy"))


def _workflow(rng: random.Random, spec: dict[str, Any]) -> int:
    """Turn `spec` into a workflow of 2-4 steps (train, evaluate, export, inference; each reading
    the one before, some `when: Always`) on one instance; returns the number of steps."""
    task = spec.pop("task")
    steps: list[dict[str, Any]] = []
    for i, (action, kind) in enumerate(_WORKFLOW_ACTIONS[: rng.choice((2, 3, 4))]):
        step: dict[str, Any] = {
            "name": action,
            "networkArch": task["networkArch"],
            "action": action,
            "image": task["image"].replace("-pyt", f"-{kind}"),
            "specContent": task["specContent"],
        }
        if i:
            step["inputs"] = [{"fromStep": steps[-1]["name"]}]
            step["when"] = rng.choice(("OnSuccess", "Always"))
        steps.append(step)
    spec["steps"] = steps
    return len(steps)


def _superseded(status: dict[str, Any]) -> list[dict[str, Any]]:
    """Attempts recovery ended before the run did (the run's own end stamps its attempt at the
    current attempt's run.endedAt): their instances are deleted whatever onCompletion says
    (scenario 9)."""
    run_ended = sp.run(status).get("endedAt")
    return [
        a
        for a in status.get("attempts") or ()
        if a.get("endedAt") and (not run_ended or a["endedAt"] < run_ended)
    ]


def _traced(status: dict[str, Any]) -> dict[str, Any]:
    """What a status write's trace line shows when it changes (the current attempt's fields by
    their path under attempts[-1])."""
    inst, cur = sp.instance(status), sp.current(status)
    return {
        **{k: status.get(k) for k in ("phase", "reason", "outcome", "runOutcome")},
        "attempt": cur.get("attempt"),
        "instance.id": inst.get("id"),
        "instance.absence.listings": (inst.get("absence") or {}).get("listings"),
        "upload.attempts": sp.upload(status).get("attempts"),
        "instance.createRequestedAt": inst.get("createRequestedAt"),
        "instance.createReturnedAt": inst.get("createReturnedAt"),
        "instance.deleteRequestedAt": inst.get("deleteRequestedAt"),
        "finishedAt": status.get("finishedAt"),
        "progress.epoch": (status.get("progress") or {}).get("epoch"),
    }


def _attempt_ended(status: dict[str, Any], name: str, instance_id: str) -> bool:
    """Whether the job's status records the attempt on this instance as ended."""
    for attempt in status.get("attempts") or ():
        rec = attempt.get("instance") or {}
        if attempt.get("endedAt") and (rec.get("id") == instance_id or rec.get("name") == name):
            return True
    return False


class _LogSink(io.TextIOBase):
    """Where the operator's own logging setup writes (controller.observability.logs.configure_logging: the
    production chain, redaction included): every line is checked for secrets, then dropped."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def write(self, text: str) -> int:
        self.sim.check_text("a log line", text)
        return len(text)


@contextlib.contextmanager
def operator_logs(sim: Simulation) -> Iterator[None]:
    """The operator's logging as production configures it (JSON, INFO), into a checking sink;
    the previous structlog and root-logger setup is restored afterwards."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    logs.configure_logging(json=True, level="INFO", stream=cast(TextIO, _LogSink(sim)))
    try:
        yield
    finally:
        structlog.configure(**saved)
        root.handlers[:], root.level = handlers, level


def run_seed(seed: int, knobs: Knobs | None = None, *, hang_after_s: float = HANG_S) -> Simulation:
    """One seed; `knobs` fixes the faults instead of drawing them (a directed search)."""
    # Earlier seeds' worlds in this process (their tasks, futures, handles), collected before
    # this one is built: left to the collector they would be finalized at some point of this
    # run, which would then no longer replay exactly (test_a_seed_replays_exactly after others).
    # What the process held before its first seed (modules, the operator's code) is frozen out
    # of the collector's view, so each collection scans a seed's leftovers only (70 -> 6 ms).
    if gc.get_freeze_count() == 0:  # once per process (a fork's children inherit it)
        gc.collect()
        gc.freeze()
    gc.collect()
    # Nor may the collector run during it: when it runs depends on the process's heap, and the
    # finalizers it runs (a pending task's coroutine closed) would change the interleaving.
    gc.disable()
    try:
        sim = Simulation(seed, knobs=knobs)
        with operator_logs(sim):
            sim.run(hang_after_s)
    finally:
        gc.enable()
    return sim


def _violations_of(seed: int) -> tuple[int, list[str]]:
    return seed, run_seed(seed).violations


def run_seeds(seeds: Iterable[int], *, jobs: int = 1) -> Iterator[tuple[int, list[str]]]:
    """(seed, violations) for each seed, in order; `jobs` worker processes (each seed is a pure
    function of its number, so where it runs changes nothing)."""
    if jobs <= 1:
        yield from map(_violations_of, seeds)
        return
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        yield from pool.imap(_violations_of, seeds, chunksize=4)


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
