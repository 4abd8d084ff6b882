"""Observe -> decide -> act -> patch status, for one TaoBrevJob at a time. No kopf import.

Both the per-object daemon and the delete handler call `Reconciler.reconcile`; a per-object lock
serialises them, and the status we last wrote is remembered so a pass never acts on a stale copy
that the watch has not caught up with yet (the operator is the only writer of status).

Memory per waiting job (issue 11): a running job spends its life inside a pass, in the blocking
exit wait. Across an action the pass holds no typed status or spec (~16 KiB and ~10 KiB of pydantic
objects): the status last written is kept pickled (~2 KiB, exact), and both are rebuilt after.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import pickle
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import structlog
from pydantic import ValidationError

from controller.api import reasons, status_legacy
from controller.api.errors import (
    MissingSecretError,
    NotLeading,
    PermanentError,
    SpecError,
    TaoBrevError,
    TransientError,
)
from controller.api.models import TaoBrevJobSpec, phase_timeout
from controller.api.naming import CANCEL_ANNOTATION
from controller.api.spec_parse import parse_spec
from controller.api.status import TaoBrevJobStatus, merge_patch
from controller.brev.envfile import JobSecrets
from controller.effects.actions import ActionRunner, JobContext
from controller.effects.directory import InstanceDirectory
from controller.effects.pricing import PriceBook
from controller.fleet import kueue
from controller.fleet.admission import Admission, JobFacts, gpus_of
from controller.fleet.kueue_gate import KueueGate
from controller.fleet.ledger import Fleet
from controller.fleet.retained import RetainedStore
from controller.fleet.retained_record import record_for
from controller.kube.access import KubeAccess
from controller.kube.secret_cache import SecretCache
from controller.lifecycle import budget, recovery
from controller.lifecycle.backoff import exponential
from controller.lifecycle.conditions import is_admitted
from controller.lifecycle.phases import Phase
from controller.lifecycle.phases import row as phase_row
from controller.lifecycle.steps import (
    READ_SECRETS,
    Action,
    ActionFailure,
    CreateInstance,
    Decide,
    Decision,
    DeleteInstance,
    Observation,
    StartInstance,
    Verdict,
)
from controller.lifecycle.tunables import Tunables
from controller.notify.delivery import Notifier
from controller.observability.logs import register_secret
from controller.observability.metrics import Recorder
from controller.preflight.checker import Preflight, SecretLoader

log = structlog.get_logger("taobrev.reconciler")
# How old a listing the pass that saw a container's exit may use (see _observe).
EXIT_LISTING_MAX_AGE = 60.0

# Passes chained without waiting when an action completed (bounded so one job cannot spin).
MAX_STEPS_PER_PASS = 12
# The status field the notifier writes (controller/notify/delivery.py), never the reconciler.
_NOTIFIED = "notifications"
# kopf's finalizer for this operator (handlers.py configures kopf with the same name).
FINALIZER = "taobrev.io/teardown"


@dataclass(frozen=True)
class JobRef:
    namespace: str
    name: str
    uid: str
    generation: int
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    deleting: bool
    body: Any = None  # the object, for Events
    # Our finalizer is on the object; until it is, the machine creates nothing.
    has_finalizer: bool = True
    # The annotation taobrev.io/cancel's value (`kubectl taobrev cancel`), when set.
    cancel_requested: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_body(cls, body: Mapping[str, Any], *, deleting: bool | None = None) -> JobRef:
        meta = body.get("metadata") or {}
        cancel = (meta.get("annotations") or {}).get(CANCEL_ANNOTATION)
        return cls(
            namespace=meta["namespace"],
            name=meta["name"],
            uid=meta["uid"],
            generation=int(meta.get("generation") or 1),
            spec=dict(body.get("spec") or {}),
            status=dict(body.get("status") or {}),
            deleting=bool(meta.get("deletionTimestamp")) if deleting is None else deleting,
            body=body,
            has_finalizer=FINALIZER in (meta.get("finalizers") or ()),
            cancel_requested=str(cancel) if cancel is not None else None,
            labels=dict(meta.get("labels") or {}),
        )


class PreflightFactory(Protocol):
    """Builds the pre-flight around the reconciler's own Secret loading (one cache, one masking)."""

    def __call__(self, load_secrets: SecretLoader, read_secret: Callable[[str, str], Any]) -> Preflight: ...


class EventSink(Protocol):
    def __call__(self, ref: JobRef, type_: str, reason: str, message: str) -> None: ...


class Reconciler:
    def __init__(
        self,
        *,
        kube: KubeAccess,
        directory: InstanceDirectory,
        runner: ActionRunner,
        recorder: Recorder,
        events: EventSink,
        tunables: Tunables,
        decide: Decide,
        listing_max_age: float,
        secret_max_age: float = 0.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        default_image: str | None = None,
        step_images: Mapping[str, str] | None = None,
        retained: RetainedStore | None = None,
        prices: PriceBook | None = None,
        fleet: Fleet | None = None,
        kueue: KueueGate | None = None,
        wake_queued: bool = False,
        preflight: PreflightFactory | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self._kube = kube
        self._secrets = SecretCache(kube.read_secret, secret_max_age)
        # Checks before anything bills (controller/preflight/checker.py); None: not wired, and a missing
        # Secret fails a Pending job at once as it did before.
        self._preflight = preflight(self._load_secrets, self._secrets.get) if preflight else None
        # Admission under the quotas (None: none wired, every job is admitted at once).
        self._fleet = fleet
        # Admission by a real Kueue for jobs labelled with a queue (None: TAOBREV_KUEUE=false).
        self._kueue = kueue
        # A queued job's pass waits (unlocked) for a released slot instead of the whole poll
        # interval: the fleet wakes it when a job holding a slot finishes.
        self._wake_queued = wake_queued
        # Quota warnings already posted per uid (a bad namespace annotation), posted once each.
        self._quota_warned: dict[str, set[str]] = {}
        self._directory = directory
        self._runner = runner
        self._recorder = recorder
        self._events = events
        self._tunables = tunables
        # The pure state machine (machine.decide), handed in by the composition root.
        self._decide = decide
        self._listing_max_age = listing_max_age
        self._clock = clock
        # The pinned TAO image, for a spec that reached us without the CRD's default applied.
        self._default_image = default_image
        # Workflow steps' default images by kind (versions.yaml), for steps that name none.
        self._step_images = step_images
        # Where a job that keeps its instance (onCompletion: Retain) records it before it finishes
        # (controller/fleet/retained.py); None: not recorded (tests without a sweeper).
        self._retained = retained
        # Hourly prices by instance type (`brev search`, cached): billed cost in status.
        self._prices = prices
        # Notifications of the transitions each written status shows (controller/notify); None: off.
        self._notifier = notifier
        self._locks: dict[str, asyncio.Lock] = {}
        # The status last written per uid, as sent (the watch may lag behind it): pickled.
        self._written: dict[str, _Written] = {}
        # uid -> the status patch on its way (it outlives a cancelled pass)
        self._sending: dict[str, asyncio.Future[bool]] = {}
        # uid -> (consecutive failed passes, reason of the last one)
        self._api_failures: dict[str, tuple[int, str | None]] = {}
        # uid -> set when a watch event brings a cancel the job's pass (or wait) does not know of
        self._cancels: dict[str, asyncio.Event] = {}

    def forget(self, ref: JobRef) -> None:
        self._cancels.pop(ref.uid, None)
        self._locks.pop(ref.uid, None)
        self._written.pop(ref.uid, None)
        self._api_failures.pop(ref.uid, None)
        self._quota_warned.pop(ref.uid, None)
        if self._notifier is not None:
            self._notifier.forget(ref.uid)
        if self._fleet is not None:
            self._fleet.forget(ref.uid)
        if self._kueue is not None:
            self._kueue.forget(ref.uid)
        if self._preflight is not None:
            self._preflight.forget(ref.uid)
        self._recorder.job_forgotten(ref.namespace, ref.name)

    def finished_seen(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """A finished job met at start-up (its daemon makes no pass): only its spend gauges, read
        from the stored status, so a restart does not drop it from the spend-per-namespace panel;
        nothing else is kept or done for it."""
        billed, cost = _number(status.get("billedSeconds")), _number(status.get("estimatedCostDollars"))
        if billed is not None:
            self._recorder.job_billing(namespace, name, billed, cost)

    def notice(self, ref: JobRef) -> None:
        """A watch event of the job (kopf's on-event handler). A cancel annotation the job's pass
        in flight (or its wait until the next one) started without cuts that pass or wait short,
        so a cancel is acted on within moments, not after a 120 s exit wait."""
        if ref.cancel_requested is None or ref.deleting:
            return
        cancel = self._cancels.get(ref.uid)
        if cancel is not None:
            cancel.set()

    def wake(self, uid: str, *, evicted: bool) -> None:
        """Kueue evicted (or admitted) the job's Workload (a watch event, controller/handlers.py):
        cut short the pass or wait in flight, so an eviction stops the run within moments rather
        than at the end of a long exit wait. An admission wakes only a job that waits for one."""
        wake = self._cancels.get(uid)
        if wake is None:
            return
        written = self._written.get(uid)
        waiting = written is not None and (written.queued or recovery.awaiting_readmission(written.status()))
        if evicted or waiting:
            wake.set()

    async def rest(self, ref: JobRef, delay: float, wait: Callable[[float], Awaitable[object]]) -> None:
        """The daemon's wait between passes, `wait(delay)` (kopf's stopped.wait: the delay, or
        until the daemon is stopped), cut short by a cancel the last pass did not know of."""
        if ref.cancel_requested is not None:
            await wait(delay)
            return
        cancel = self._cancels[ref.uid] = asyncio.Event()
        waits = {asyncio.ensure_future(wait(delay)), asyncio.ensure_future(cancel.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def reconcile(self, ref: JobRef) -> float | None:
        """One pass. Returns seconds until the next pass, or None once the job is finished."""
        if ref.cancel_requested is not None or ref.deleting:
            return await self._reconcile(ref)
        # A pass that does not know of a cancel is cut short when one arrives (its status patch
        # on the way still lands, as when the Lease is lost): the next pass, at once, acts on it.
        cancel = self._cancels[ref.uid] = asyncio.Event()  # one per pass: bound to this loop
        work = asyncio.ensure_future(self._reconcile(ref))
        woken = asyncio.ensure_future(cancel.wait())
        try:
            await asyncio.wait({work, woken}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            work.cancel()
            raise
        finally:
            woken.cancel()
        if work.done() or not cancel.is_set():
            return await work
        work.cancel()
        await asyncio.wait({work})  # let it unwind (locks released, subprocess groups killed)
        log.info("woken (cancel annotation or Kueue); passing again", name=ref.name, namespace=ref.namespace)
        return 0.0

    async def _reconcile(self, ref: JobRef) -> float | None:
        if ref.deleting and self._fleet is not None:
            self._fleet.interrupt(ref.uid)  # the daemon's queued wait ends: deletion goes first
        if ref.deleting and self._preflight is not None:
            self._preflight.interrupt(ref.uid)  # ... and so does a wait for a missing Secret
        delay = await self._reconcile_locked(ref)
        if delay and self._fleet is not None and self._wake_queued and self._queued(ref.uid):
            # Outside the lock, so the delete handler's pass never waits behind this.
            await self._fleet.wait_for_release(delay, ref.uid)
            return 0.0
        preflight = self._preflight
        if delay and not ref.deleting and preflight is not None and preflight.waits_for_secrets(ref.uid):
            # Pending for a missing Secret: the job checks again the moment it appears.
            await preflight.wait(ref.uid, delay)
            return 0.0
        return delay

    def _queued(self, uid: str) -> bool:
        written = self._written.get(uid)
        return written is not None and written.queued

    async def _reconcile_locked(self, ref: JobRef) -> float | None:
        lock = self._locks.setdefault(ref.uid, asyncio.Lock())
        async with lock:
            sending = self._sending.get(ref.uid)
            if sending is not None:
                await asyncio.wait({sending})  # a cancelled pass's patch still on its way
            started = time.monotonic()
            phase, instance = self._where(ref)
            # Every log line of this pass (the brev client's too) carries the job's identity.
            with structlog.contextvars.bound_contextvars(
                namespace=ref.namespace, name=ref.name, uid=ref.uid, phase=phase, instance=instance
            ):
                try:
                    delay = await self._pass(ref)
                except TransientError as exc:
                    return self._retry_later(ref, exc)
                finally:
                    self._recorder.reconcile_duration(time.monotonic() - started)
                self._api_failures.pop(ref.uid, None)
                return delay

    def _retry_later(self, ref: JobRef, exc: TransientError) -> float:
        """The one retry layer for a pass that failed transiently (the API server or Brev outside
        an action is down, throttling or not ready after a restart): back off and come again,
        never crash the daemon. One Warning Event per streak of the same reason: the pass may
        have failed before writing any status (a forbidden Secret), and the user needs to see
        why the job does not move."""
        failures, last_reason = self._api_failures.get(ref.uid, (0, None))
        failures += 1
        self._api_failures[ref.uid] = (failures, exc.reason)
        self._recorder.reconcile_error(exc.reason)
        if exc.reason != last_reason:
            self._events(ref, "Warning", exc.reason, str(exc))
        t = self._tunables
        delay = exponential(failures, base=t.backoff_base, cap=t.backoff_max)
        log.warning(
            "reconcile failed; retrying", reason=exc.reason, error=str(exc), attempt=failures, retry_in=delay
        )
        return delay

    def _where(self, ref: JobRef) -> tuple[str, str]:
        """The phase and instance a pass starts from, for its log lines."""
        written = self._written.get(ref.uid)
        if written is not None:
            return written.phase, written.instance
        # From the stored dict: a log line is no reason to parse the status (the pass does).
        return str(ref.status.get("phase") or Phase.PENDING), status_legacy.instance_name(ref.status) or "-"

    def _status(self, ref: JobRef) -> TaoBrevJobStatus:
        """Status parsed where it enters: our last write if the watch lags behind it."""
        written = self._written.get(ref.uid)
        return written.status() if written is not None else parse_status(ref.status)

    def _spec(self, ref: JobRef) -> tuple[TaoBrevJobSpec | None, str | None]:
        """The parsed spec, or why it does not parse."""
        try:
            return parse_spec(
                dict(ref.spec), default_image=self._default_image, step_images=self._step_images
            ), None
        except SpecError as exc:
            # The API server validated it already: a CRD newer than this operator, or a rule
            # pydantic checks more strictly than CEL. Never a reason to abandon an instance.
            return None, f"{exc}; fix the spec or run an operator version that understands it"

    async def _pass(self, ref: JobRef) -> float | None:
        status = self._status(ref)
        spec, spec_error = self._spec(ref)

        verdict = await self._preflight_verdict(ref, spec, status)
        admission = await self._admission(ref, spec, status) if _may_admit(spec, verdict) else None
        # A queued job reads no Secrets on each pass (its first pass checked them already).
        queued = admission is not None and not admission.admitted
        secrets, blocker, trouble = await self._pass_secrets(ref, spec, status, queued)
        obs = (await self._observe(status, ref, blocker)).with_(
            failure=trouble, admission=admission, preflight=verdict, evicted=await self._evicted(ref, status)
        )
        requeue: float | None = None
        held: TaoBrevJobStatus | None = None  # the status last written, while a newer one is held back
        for step in range(MAX_STEPS_PER_PASS):
            # A transient action failure comes back as obs.failure: decide() records it, asks for
            # a backoff and returns no actions, which ends the pass.
            decision = self._decide(
                spec,
                status,
                obs,
                namespace=ref.namespace,
                name=ref.name,
                uid=ref.uid,
                generation=ref.generation,
                tunables=self._tunables,
                spec_error=spec_error,
            )
            hold = step < MAX_STEPS_PER_PASS - 1 and _holdable(decision, ref)
            if not await self._write(ref, status, decision, spec, base=held, hold=hold):
                return None  # the object is gone: nothing of this pass may act any more
            if hold:
                # Nothing was asked of Brev yet and this step acts on nothing: decide again now
                # (admission, then the listing) and write both steps' status as one patch.
                held = held or status
                status = decision.status
                try:
                    verdict = await self._preflight_verdict(ref, spec, status)
                    admission = (
                        await self._admission(ref, spec, status) if _may_admit(spec, verdict) else None
                    )
                    obs = (await self._observe(status, ref, blocker)).with_(
                        failure=trouble, admission=admission, preflight=verdict
                    )
                except TransientError:
                    # The retried pass starts from the server's status: let it start from this.
                    await self._patch(ref, held, status, spec)
                    raise
                continue
            held = None
            status, requeue, actions = decision.status, decision.requeue_after, decision.actions
            structlog.contextvars.bind_contextvars(
                phase=str(status.phase), instance=status.instance.name or "-"
            )
            if not actions or step == MAX_STEPS_PER_PASS - 1:
                # Out of steps: act next pass rather than lose the last action's result unseen.
                break
            if secrets is None and spec is not None and any(_reaches_instance(a) for a in actions):
                # Each step delivers its own secret: a container (re)start needs the NGC key and the
                # extra env, the upload the S3 keys — also after a cancel, a timeout or a failure.
                # A step that needs none may still bring text from the instance (a log tail the
                # training printed a secret into, an error): a new process masks only values it
                # has read, so it reads them before that step too (issue 25, scenario 6).
                secrets = await self._secrets_for_step(ref.namespace, spec)
            job = JobContext(ref.namespace, ref.name, str(status.job_id), self._spec_loader(ref), secrets)
            deadline = _deadline(spec, status, self._clock())
            log.debug("acting", actions=[type(a).__name__ for a in actions])
            # The act may be the exit wait, for hours: hold no typed status or spec across it.
            del decision, status
            spec = None
            after = await self._act(actions, job, obs.with_(failure=None, completed=()), deadline)
            status = self._status(ref)
            spec, spec_error = self._spec(ref)
            if after.failure is not None:
                self._recorder.reconcile_error(after.failure.reason)
                log.warning(
                    "action failed",
                    action=after.failure.action,
                    reason=after.failure.reason,
                    error=after.failure.message,
                    permanent=after.failure.permanent,
                )
            obs = await self._observe(status, ref, blocker, base=after)
        return requeue

    async def _pass_secrets(
        self, ref: JobRef, spec: TaoBrevJobSpec | None, status: TaoBrevJobStatus, queued: bool
    ) -> tuple[JobSecrets | None, ActionFailure | None, ActionFailure | None]:
        """The job's Secrets for a pass before the run: (secrets, a permanent blocker, a transient
        trouble). A job in pre-flight had them read (or found missing) by the pre-flight."""
        if (
            spec is None
            or not phase_row(status.phase).needs_secrets
            or status.run_outcome
            or ref.deleting
            or queued
            or (self._preflight is not None and status.phase in (None, Phase.PENDING))
        ):
            return None, None, None
        try:
            return await self._load_secrets(ref.namespace, spec), None, None
        except PermanentError as exc:
            return None, ActionFailure(READ_SECRETS, exc.reason, str(exc), permanent=True), None
        except TransientError as exc:
            trouble = ActionFailure(READ_SECRETS, exc.reason, _secret_trouble(ref.namespace, exc), False)
            return None, None, trouble

    def _spec_loader(self, ref: JobRef) -> Callable[[], TaoBrevJobSpec]:
        """Parses the spec when an action reads it; teardown actions read only the job id and
        instance name, so a spec that does not parse gives them a blank one."""

        def load() -> TaoBrevJobSpec:
            return self._spec(ref)[0] or _teardown_only_spec()

        return load

    async def _preflight_verdict(
        self, ref: JobRef, spec: TaoBrevJobSpec | None, status: TaoBrevJobStatus
    ) -> Verdict | None:
        """The pre-flight's verdict for a Pending job that may be admitted next (None: not due).
        Only once the job's names are assigned: the S3 marker is named for the job id."""
        if self._preflight is None or spec is None or ref.deleting or not ref.has_finalizer:
            return None
        if status.phase != Phase.PENDING or status.run_outcome or is_admitted(status) or not status.job_id:
            return None
        return await self._preflight.verdict(ref.namespace, spec, status.job_id, ref.uid)

    def _by_kueue(self, ref: JobRef) -> bool:
        return self._kueue is not None and kueue.managed_body(
            {"metadata": {"labels": ref.labels}, "spec": ref.spec}
        )

    async def _evicted(self, ref: JobRef, status: TaoBrevJobStatus) -> str | None:
        """Kueue's eviction message for an admitted Kueue-managed job whose attempt still runs."""
        if self._kueue is None or not self._by_kueue(ref) or ref.deleting or status.run_outcome:
            return None
        if status.phase in (None, Phase.PENDING, Phase.UPLOADING, Phase.DELETED):
            return None
        if status.current.ended_at is not None or recovery.awaiting_readmission(status):
            return None
        return await self._kueue.evicted(ref.namespace, ref.name, ref.uid)

    async def _admission(
        self, ref: JobRef, spec: TaoBrevJobSpec | None, status: TaoBrevJobStatus
    ) -> Admission | None:
        """The fleet's (or Kueue's) verdict for a Pending job that is not admitted yet and could be
        now, or for a job Kueue evicted that waits to be admitted again."""
        if spec is None or ref.deleting or not ref.has_finalizer:
            return None
        if self._kueue is not None and self._by_kueue(ref):
            pending = status.phase == Phase.PENDING and not status.run_outcome and not is_admitted(status)
            if not (pending or recovery.awaiting_readmission(status)):
                return None
            return await self._kueue.verdict(ref.namespace, ref.name, ref.uid, ref.labels, spec, ref.spec)
        if self._fleet is None:
            return None
        if status.phase != Phase.PENDING or status.run_outcome or is_admitted(status):
            return None
        meta = (ref.body or {}).get("metadata") or {} if isinstance(ref.body, Mapping) else {}
        facts = JobFacts(
            namespace=ref.namespace,
            name=ref.name,
            uid=ref.uid,
            created=JobFacts.from_body({"metadata": dict(meta)}).created,
            priority=spec.priority,
            suspended=spec.suspend,
            creates_instance=spec.instance.ephemeral is not None,
            gpus=gpus_of(ref.spec),
        )
        verdict = await self._fleet.verdict(facts)
        self._recorder.queued(self._fleet.queued())
        warned = self._quota_warned.setdefault(ref.uid, set())
        for problem in verdict.warnings:
            if problem not in warned:
                warned.add(problem)
                self._events(ref, "Warning", reasons.QUOTA_ANNOTATION_INVALID, problem)
        return verdict.admission

    async def _secrets_for_step(self, namespace: str, spec: TaoBrevJobSpec) -> JobSecrets | None:
        """Secrets for a step after the run started. A Secret that went missing or cannot be read
        must not end a running job: the step that needs it fails transiently (SecretsNotLoaded) and
        the phase's own bound decides."""
        try:
            return await self._load_secrets(namespace, spec)
        except TaoBrevError as exc:
            log.warning("secrets for this step could not be read", reason=exc.reason, error=str(exc))
            return None

    async def _act(
        self, actions: Sequence[Action], job: JobContext, obs: Observation, deadline: datetime | None
    ) -> Observation:
        """Run the actions; record which completed. The runner shields a create once it started
        (it may already have reached Brev) and never starts one whose pass was cancelled while it
        queued for its lane (issue 25, scenario 1)."""
        after = await self._runner.run(actions, job, obs, deadline=deadline)
        if job.secrets is None and after.log_tail:
            # The job's secret values are unknown to this process (Secret gone, unreadable, or the
            # spec does not parse): nothing could mask them in the tail, so it is withheld.
            log.warning("log tail withheld: the job's Secrets could not be read to mask it")
            after = after.with_(log_tail=())
        names = [type(a).__name__ for a in actions]
        done = names if after.failure is None else names[: names.index(after.failure.action)]
        return after.with_(completed=tuple(done))

    async def _observe(
        self,
        status: TaoBrevJobStatus,
        ref: JobRef,
        blocker: ActionFailure | None,
        base: Observation | None = None,
    ) -> Observation:
        obs = (base or Observation(now=self._clock())).with_(
            now=self._clock(),
            deleting=ref.deleting,
            cancel_requested=ref.cancel_requested,
            blocker=blocker,
            has_finalizer=ref.has_finalizer,
        )
        name = status.instance.name
        if not name or (status.phase in (None, Phase.PENDING) and not status.instance.create_requested_at):
            # Nothing was asked of Brev yet (a queued job among them): no listing to read.
            return obs.with_(instance_known=True, instance=None)
        max_age = self._listing_max_age
        if obs.exit_code is not None:
            # An exit this pass just saw is the instance answering: reporting it does not wait
            # for a fresh `brev ls` (a refresh in flight delayed exit notices by 1-3 s at 1,000
            # running jobs). An absence still counts once per listing, whatever its age.
            max_age = max(max_age, EXIT_LISTING_MAX_AGE)
        seen = await self._directory.find(name, status.instance.id, max_age=max_age)
        # The listing's age is measured after it came back: take it from a clock read now, not
        # from obs.now (read before a listing this pass may have waited seconds for: one slow
        # `brev ls` then looked like two listings a poll interval apart and counted twice).
        seen_at = self._clock()
        price: float | None = None
        inst = seen.instance
        if self._prices is not None and inst is not None and inst.instance_type and status.instance.created:
            price = await self._prices.price(inst.instance_type)
        return obs.with_(
            instance_known=seen.known,
            instance=seen.instance,
            instance_ambiguous=seen.ambiguous,
            identity=seen.identity,
            listed_at=None if seen.age is None else seen_at - timedelta(seconds=seen.age),
            price_per_hour=price,
        )

    async def _load_secrets(self, namespace: str, spec: TaoBrevJobSpec) -> JobSecrets:
        cache: dict[str, Mapping[str, bytes] | None] = {}

        async def value(secret: str, key: str, field: str) -> bytes:
            if secret not in cache:
                cache[secret] = await self._secrets.get(namespace, secret)
            data = cache[secret]
            if data is None:
                raise MissingSecretError(
                    f"Secret {namespace}/{secret} (spec.{field}.name) does not exist; create it with "
                    f"key {key!r}"
                )
            if key not in data or not data[key]:
                # Name the missing key only: the Secret's other key names are not ours to show.
                raise MissingSecretError(
                    f"Secret {namespace}/{secret} has no (or an empty) key {key!r} (spec.{field}); "
                    f"add the key to the Secret or point spec.{field} at the right one"
                )
            register_secret(data[key].decode(errors="replace"))
            return data[key]

        creds = spec.credentials
        ngc = await value(creds.ngc_api_key.name, creds.ngc_api_key.key, "credentials.ngcApiKey")
        s3 = creds.s3
        key_id = await value(s3.name, s3.access_key_id_key, "credentials.s3")
        secret_key = await value(s3.name, s3.secret_access_key_key, "credentials.s3")
        extra: dict[str, bytes] = {}
        for i, env in enumerate(creds.extra_env or ()):
            ref = env.secret_key_ref
            extra[env.name] = await value(ref.name, ref.key, f"credentials.extraEnv[{i}].secretKeyRef")
        return JobSecrets(ngc, key_id, secret_key, extra)

    async def _write(
        self,
        ref: JobRef,
        old: TaoBrevJobStatus,
        decision: Decision,
        spec: TaoBrevJobSpec | None = None,
        *,
        base: TaoBrevJobStatus | None = None,
        hold: bool = False,
    ) -> bool:
        """Post the Events, patch status if it changed. False if the object is gone (404).
        `hold`: the status is not sent yet (the next step's write carries it); `base`: the status
        last written, when this pass held one back (the patch goes from it)."""
        new = decision.status
        for note in decision.events:
            self._events(ref, note.type, note.reason, note.message)
        if not hold and not await self._patch(ref, base or old, new, spec):
            return False
        if not hold and self._notifier is not None:
            # Only a written (durable) status: a restart derives the same events from it.
            stored = ref.status.get(_NOTIFIED)
            self._notifier.observe(ref.namespace, ref.name, ref.uid, stored=stored, status=new, spec=spec)
        by_kueue = self._by_kueue(ref)
        if self._fleet is not None and not by_kueue:  # in no built-in queue (Fleet's `excluded`)
            self._fleet.observe(ref.uid, new)
        if not hold and self._kueue is not None and by_kueue:
            await self._kueue.settle(ref.namespace, ref.name, ref.uid, new)
        self._account(ref, old, new)
        if new.phase:
            self._gauges(ref, new, spec)
        return True

    async def _patch(
        self, ref: JobRef, old: TaoBrevJobStatus, new: TaoBrevJobStatus, spec: TaoBrevJobSpec | None
    ) -> bool:
        """Patch status from `old` (the one on the server) to `new` if it changed."""
        if self._retained is not None and new.finished_at and not old.finished_at:
            # BEFORE the status says finished: a failed write fails this pass (retried), so no
            # retained instance is ever left unrecorded for the orphan sweeper to take.
            record = record_for(ref.namespace, ref.name, spec, new)
            if record is not None:
                await self._retained.record(record)
        old_k8s, new_k8s = old.to_k8s(), new.to_k8s()
        # status.notifications is the notifier's to write (its own patch): never from here.
        old_k8s.pop(_NOTIFIED, None)
        new_k8s.pop(_NOTIFIED, None)
        # Status an earlier release stored flat: this write moves it into sub-records.
        flat = status_legacy.stored_flat(ref.status) if ref.uid not in self._written else frozenset()
        if _comparable(new_k8s) != _comparable(old_k8s) or flat:
            patch = merge_patch(old_k8s, new_k8s) | {k: None for k in flat if k not in new_k8s}
            # Shielded: a pass cancelled while its patch is on the way (kopf stops a daemon 2 s
            # after deletion) must still learn what the server now holds, and the next pass waits
            # for it; else that pass starts from the status before the patch (a Succeeded turned
            # Canceled; found by the simulation, seed 365).
            send = asyncio.ensure_future(self._send(ref, patch, new))
            self._sending[ref.uid] = send
            send.add_done_callback(functools.partial(self._sent, ref.uid))
            if not await asyncio.shield(send):
                log.info("object is gone; stopping this pass")
                return False
        elif ref.uid in self._written:
            # Nothing to send: the new status equals the written one in every field that is
            # serialised; condition times are carried over while their status holds, and the
            # next pass starts from this one exactly.
            self._written[ref.uid] = _Written.of(new)
        return True

    async def _send(self, ref: JobRef, patch: Mapping[str, Any], new: TaoBrevJobStatus) -> bool:
        """Serialised once where it leaves; fields cleared since the last write go as null.
        Fenced by the term as a change to Brev is (the runner holds the fence): a pass that
        decided before its event loop stalled past the renew deadline must not write what it
        decided then (a finishedAt the next leader, reading the status before it, wrote again
        with another value; found by the simulation's stalled loop, seed 825)."""
        if not self._runner.fence():
            raise NotLeading(f"status of {ref.namespace}/{ref.name} not written: this replica's term ended")
        if not await self._kube.patch_status(ref.namespace, ref.name, patch):
            self._written.pop(ref.uid, None)
            return False
        self._written[ref.uid] = _Written.of(new)
        return True

    def _sent(self, uid: str, send: asyncio.Future[bool]) -> None:
        if self._sending.get(uid) is send:
            del self._sending[uid]
        if not send.cancelled():
            send.exception()  # retrieved: a cancelled pass's caller is gone, its next pass retries

    def _gauges(self, ref: JobRef, status: TaoBrevJobStatus, spec: TaoBrevJobSpec | None) -> None:
        """Per-job gauges follow status on every pass (also right after an operator restart)."""
        phase = status.phase or Phase.PENDING
        entered = status.phase_times.get(str(phase))
        finished = status.finished_at
        self._recorder.job_state(
            ref.namespace,
            ref.name,
            phase=str(phase),
            entered_at=entered.timestamp() if entered else None,
            timeout_seconds=(phase_timeout(spec, phase) if spec is not None and not finished else None),
            outcome=str(status.outcome) if status.outcome else None,
            ended_at=finished.timestamp() if finished else None,
        )
        progress = status.progress
        if status.run_outcome or progress.percent is None:
            self._recorder.job_progress(ref.namespace, ref.name, None, None, None)
        else:
            ratio = (progress.epoch or 0) / (progress.max_epoch or 1)
            self._recorder.job_progress(ref.namespace, ref.name, ratio, progress.eta_seconds, progress.loss)
        if status.billed_seconds is not None:
            # Exact, not the stored figure (which moves in recovery.BILL_STEP_SECONDS steps).
            billed, cost = budget.exact_totals(status, self._clock())
            self._recorder.job_billing(ref.namespace, ref.name, billed, cost)

    def _account(self, ref: JobRef, old: TaoBrevJobStatus, new: TaoBrevJobStatus) -> None:
        old_phase, new_phase = old.phase, new.phase
        now = self._clock()
        if new_phase and old_phase != new_phase:
            entered = old.phase_times.get(str(old_phase)) if old_phase else None
            spent = (now - entered).total_seconds() if entered else None
            previous = str(old_phase) if old_phase else None
            self._recorder.phase_changed(ref.namespace, ref.name, previous, str(new_phase), spent)
            log.info(
                "phase changed",
                phase=str(new_phase),
                previous=previous,
                instance=new.instance.name or "-",
                message=new.message,
            )
        for gone in _deleted_ids(new) - _deleted_ids(old):
            self._recorder.node_deleted(gone)  # its OpenCost series go now, not at the next listing
        if new.run_outcome and not old.finished_at and new.finished_at:
            self._recorder.outcome(str(new.run_outcome), new.reason or "")
            exited = new.run.exited_at
            if exited is not None:
                self._recorder.exit_to_teardown((now - exited).total_seconds())
            if new.instance.name:
                self._recorder.instance_released(ref.namespace, ref.name, new.instance.name)
        elif (
            new.instance.created
            and new.instance.create_requested_at
            and not new.finished_at
            and new.instance.name
        ):
            created = new.instance.create_requested_at
            self._recorder.instance_uptime(
                ref.namespace, ref.name, new.instance.name, (now - created).total_seconds()
            )


def _deleted_ids(status: TaoBrevJobStatus) -> set[str]:
    """Brev ids of the instances whose deletion the status confirms."""
    return {a.instance.id for a in status.attempts if a.instance.id and a.instance.deleted_at}


def _may_admit(spec: TaoBrevJobSpec | None, verdict: Verdict | None) -> bool:
    """Ask the quotas for a slot only for a job that could start: its pre-flight passed (or none
    is wired) and it is no dry run (the fleet records an admission the moment it grants one)."""
    return not (spec is not None and spec.dry_run) and (verdict is None or verdict.passed)


def _holdable(decision: Decision, ref: JobRef) -> bool:
    """A step whose status may go out with the next step's: it acts on nothing and asks to go on
    at once, before anything was asked of Brev (Pending, then Provisioning up to the create). A
    status lost there with this process costs only the step; held, the new job's first steps are
    one status write instead of three (the API server's main cost per job)."""
    s = decision.status
    return (
        not decision.actions
        and decision.requeue_after == 0
        and not ref.deleting
        and phase_row(s.phase).holdable
        and not (s.instance.create_requested_at or s.finished_at or s.run_outcome)
    )


class _Written:
    """A status this process wrote, pickled (exact, ~2 KiB instead of ~16 KiB of pydantic
    objects), with what is read of it between passes."""

    __slots__ = ("instance", "phase", "queued", "raw")

    def __init__(self, raw: bytes, phase: str, instance: str, queued: bool) -> None:
        self.raw, self.phase, self.instance, self.queued = raw, phase, instance, queued

    @classmethod
    def of(cls, status: TaoBrevJobStatus) -> _Written:
        return cls(
            pickle.dumps(status, protocol=pickle.HIGHEST_PROTOCOL),
            str(status.phase or Phase.PENDING),
            status.instance.name or "-",
            status.queue.reason is not None and status.queue.admitted_at is None,
        )

    def status(self) -> TaoBrevJobStatus:
        # Our own bytes, written by this process: never input from outside.
        loaded: TaoBrevJobStatus = pickle.loads(self.raw)  # noqa: S301
        return loaded


def _comparable(status: Mapping[str, Any]) -> dict[str, Any]:
    # Conditions carry timestamps that only change with their status; compare everything else
    # plus each condition's status/reason/message, so an unchanged pass writes nothing.
    out = {k: v for k, v in status.items() if k != "conditions"}
    out["conditions"] = [
        (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
        for c in status.get("conditions") or []
    ]
    return out


def _secret_trouble(namespace: str, exc: TransientError) -> str:
    """A Secret that could not be read for now; a 403 names the RBAC fix."""
    if exc.reason in (reasons.SECRET_ACCESS_DENIED, "Forbidden"):
        return (
            f"{exc}; the operator may not read Secrets in namespace {namespace}: grant its "
            "ServiceAccount `get` on secrets there (Role + RoleBinding); retrying with backoff"
        )
    return f"{exc}; retrying with backoff"


def _teardown_only_spec() -> TaoBrevJobSpec:
    """A blank spec for a job whose spec does not parse: decide() then asks only for teardown
    actions (stop, cleanup, delete), which read the job id and instance name, never the spec."""
    blank: dict[str, Any] = {}
    return TaoBrevJobSpec.model_construct(**blank)


def parse_status(raw: Mapping[str, Any]) -> TaoBrevJobStatus:
    """`.status` as stored. A field this version cannot read (hand-edited, or written by another
    version) is dropped with a warning rather than wedging the job in a crash loop: every fact
    the machine needs is re-derived or re-observed. Only that field goes (one bad time in one
    attempt must not take every attempt's names, ids and deletion proof with it), or, when it
    is required, the smallest record that holds it."""
    try:
        return TaoBrevJobStatus.from_k8s(dict(raw))
    except ValidationError:
        pass  # the rare case: find what cannot be read, on a copy
    # Error paths are those of the sub-record shape, so a flat status is converted first.
    data = copy.deepcopy(status_legacy.status_from_flat(dict(raw)))
    for _ in range(_MAX_DROPS):
        try:
            return TaoBrevJobStatus.from_k8s(data)
        except ValidationError as exc:
            loc = next((tuple(e["loc"]) for e in exc.errors() if e["loc"]), None)
            if loc is None or not _drop(data, loc):
                raise
            log.warning("dropping unreadable status field", field=".".join(str(part) for part in loc))
    return TaoBrevJobStatus()


_MAX_DROPS = 64


def _drop(data: Any, loc: tuple[Any, ...]) -> bool:
    """Remove what `loc` points at; when it is missing (a required field), its holder. False
    when nothing at all along `loc` is there."""
    holders: list[tuple[Any, Any]] = []
    node = data
    for part in loc:
        present = (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        )
        if not present:
            break
        holders.append((node, part))
        node = node[part]
    if not holders:
        return False
    holder, key = holders[-1]
    del holder[key]
    return True


def _reaches_instance(action: Action) -> bool:
    """The step runs on the instance (exec/ssh), so its result may carry text from it. Only the
    Brev API calls (create, start, delete) do not."""
    return not isinstance(action, CreateInstance | StartInstance | DeleteInstance)


def _deadline(spec: TaoBrevJobSpec | None, status: TaoBrevJobStatus, now: datetime) -> datetime | None:
    """The end of the current phase's budget, for the steps that fill a phase with a timeout:
    probe (WaitingExec), registry login + pull + staging (Pulling) and the results upload
    (Uploading). A call gets the time left — for its lane slot and its remote calls — so the phase
    never overruns its timeout by a whole per-call timeout. The runner applies it to those steps
    only: stop, cleanup and delete keep their own bounds, and a spent budget never keeps an
    instance from being deleted.

    Uploading is counted from entering the phase, except that the first upload attempt always
    gets the whole uploadingSeconds from now: an operator that was down past the budget must
    still try the upload once (controller/lifecycle/teardown.py), not fail it unattempted."""
    if spec is None or status.phase is None:
        return None
    bound = phase_row(status.phase)
    if not bound.deadline_bound or (bound.pre_run and status.run_outcome):
        return None  # not bounded, or the run ended before it ran: only teardown is left
    entered = status.phase_times.get(str(status.phase))
    limit = phase_timeout(spec, status.phase)
    if entered is None or limit is None:
        return None
    end = entered + timedelta(seconds=limit)
    if status.phase == Phase.UPLOADING and not status.upload.attempts:
        return max(end, now + timedelta(seconds=limit))
    return end


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
