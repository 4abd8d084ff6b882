"""Observe -> decide -> act -> patch status, for one TaoBrevJob at a time. No kopf import.

Both the per-object daemon and the delete handler call `Reconciler.reconcile`; a per-object lock
serialises them, and the status we last wrote is remembered so a pass never acts on a stale copy
that the watch has not caught up with yet (the operator is the only writer of status).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from pydantic import ValidationError

from controller import conditions, machine
from controller.actions import ActionRunner, JobContext, JobSecrets
from controller.directory import InstanceDirectory
from controller.errors import MissingSecretError, PermanentError, SpecError
from controller.kube import KubeAccess
from controller.logs import register_secret
from controller.metrics import Recorder
from controller.models import Outcome, Phase, TaoBrevJobSpec
from controller.steps import ActionFailure, Decision, EventNote, Observation
from controller.timestamps import format_time, parse_time

log = structlog.get_logger("taobrev.reconciler")

# Passes chained without waiting when an action completed (bounded so one job cannot spin).
MAX_STEPS_PER_PASS = 12
_SECRETS_NEEDED = {None, Phase.PENDING, Phase.PROVISIONING, Phase.WAITING_EXEC, Phase.PULLING}


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

    @classmethod
    def from_body(cls, body: Mapping[str, Any], *, deleting: bool | None = None) -> JobRef:
        meta = body.get("metadata") or {}
        return cls(
            namespace=meta["namespace"],
            name=meta["name"],
            uid=meta["uid"],
            generation=int(meta.get("generation") or 1),
            spec=dict(body.get("spec") or {}),
            status=dict(body.get("status") or {}),
            deleting=bool(meta.get("deletionTimestamp")) if deleting is None else deleting,
            body=body,
        )


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
        tunables: machine.Tunables,
        listing_max_age: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._kube = kube
        self._directory = directory
        self._runner = runner
        self._recorder = recorder
        self._events = events
        self._tunables = tunables
        self._listing_max_age = listing_max_age
        self._clock = clock
        self._locks: dict[str, asyncio.Lock] = {}
        self._written: dict[str, dict[str, Any]] = {}

    def forget(self, ref: JobRef) -> None:
        self._locks.pop(ref.uid, None)
        self._written.pop(ref.uid, None)
        self._recorder.job_forgotten(ref.namespace, ref.name)

    async def reconcile(self, ref: JobRef) -> float | None:
        """One pass. Returns seconds until the next pass, or None once the job is finished."""
        lock = self._locks.setdefault(ref.uid, asyncio.Lock())
        async with lock:
            started = time.monotonic()
            status = self._written.get(ref.uid) or ref.status
            # Every log line of this pass (the brev client's too) carries the job's identity.
            with structlog.contextvars.bound_contextvars(
                namespace=ref.namespace,
                name=ref.name,
                uid=ref.uid,
                phase=status.get("phase") or "Pending",
                instance=status.get("instanceName") or "-",
            ):
                try:
                    return await self._pass(ref)
                finally:
                    self._recorder.reconcile_duration(time.monotonic() - started)

    async def _pass(self, ref: JobRef) -> float | None:
        status: dict[str, Any] = dict(self._written.get(ref.uid) or ref.status)
        try:
            spec = TaoBrevJobSpec.model_validate(ref.spec)
        except ValidationError as exc:
            # The API server validated it already; this only happens with a newer CRD than us.
            return await self._fail_invalid(ref, status, str(exc))

        secrets: JobSecrets | None = None
        blocker: ActionFailure | None = None
        phase = Phase(status["phase"]) if status.get("phase") else None
        if phase in _SECRETS_NEEDED and not status.get("outcome") and not ref.deleting:
            try:
                secrets = await self._load_secrets(ref.namespace, spec)
            except PermanentError as exc:
                blocker = ActionFailure("ReadSecrets", exc.reason, str(exc), permanent=True)

        obs = await self._observe(status, ref, blocker)
        decision: Decision | None = None
        for _ in range(MAX_STEPS_PER_PASS):
            # A transient action failure comes back as obs.failure: decide() records it, asks for
            # a backoff and returns no actions, which ends the pass.
            decision = machine.decide(
                spec,
                status,
                obs,
                namespace=ref.namespace,
                name=ref.name,
                uid=ref.uid,
                generation=ref.generation,
                tunables=self._tunables,
            )
            await self._write(ref, status, decision, spec)
            status = decision.status
            structlog.contextvars.bind_contextvars(
                phase=status.get("phase"), instance=status.get("instanceName") or "-"
            )
            if not decision.actions:
                break
            job = JobContext(ref.namespace, ref.name, str(status.get("jobId")), spec, secrets)
            log.debug("acting", actions=[type(a).__name__ for a in decision.actions])
            after = await self._runner.run(decision.actions, job, obs.with_(failure=None))
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
        assert decision is not None
        return decision.requeue_after

    async def _observe(
        self,
        status: Mapping[str, Any],
        ref: JobRef,
        blocker: ActionFailure | None,
        base: Observation | None = None,
    ) -> Observation:
        obs = (base or Observation(now=self._clock())).with_(
            now=self._clock(), deleting=ref.deleting, blocker=blocker
        )
        name = status.get("instanceName")
        if not name:
            return obs.with_(instance_known=True, instance=None)
        known, inst = await self._directory.lookup(str(name), max_age=self._listing_max_age)
        return obs.with_(instance_known=known, instance=inst)

    async def _load_secrets(self, namespace: str, spec: TaoBrevJobSpec) -> JobSecrets:
        cache: dict[str, Mapping[str, bytes] | None] = {}

        async def value(secret: str, key: str, field: str) -> bytes:
            if secret not in cache:
                cache[secret] = await self._kube.read_secret(namespace, secret)
            data = cache[secret]
            if data is None:
                raise MissingSecretError(
                    f"Secret {namespace}/{secret} (spec.{field}.name) does not exist; create it with "
                    f"key {key!r}"
                )
            if key not in data or not data[key]:
                raise MissingSecretError(
                    f"Secret {namespace}/{secret} has no (or an empty) key {key!r} (spec.{field}); "
                    f"keys present: {sorted(data)}"
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

    async def _fail_invalid(self, ref: JobRef, status: dict[str, Any], error: str) -> float | None:
        err = SpecError(f"spec does not parse: {error}")
        obs = Observation(
            now=self._clock(),
            deleting=ref.deleting,
            instance_known=True,
            blocker=ActionFailure("ParseSpec", err.reason, str(err), permanent=True),
        )
        # Without a spec there is nothing to run and no instance of ours; finish right away.
        status = {**status, "outcome": str(Outcome.FAILED), "reason": err.reason, "message": str(err)}
        status.setdefault("phase", str(Phase.PENDING))
        status["phase"] = str(Phase.DELETED)
        status["finishedAt"] = format_time(obs.now)
        status["conditions"] = conditions.derive(
            status, status.get("conditions") or [], ref.generation, obs.now
        )
        decision = Decision(status=status, events=(EventNote("Warning", err.reason, str(err)),))
        await self._write(ref, dict(ref.status), decision)
        return None

    async def _write(
        self,
        ref: JobRef,
        old: Mapping[str, Any],
        decision: Decision,
        spec: TaoBrevJobSpec | None = None,
    ) -> None:
        new = decision.status
        for note in decision.events:
            self._events(ref, note.type, note.reason, note.message)
        if _comparable(new) != _comparable(old):
            await self._kube.patch_status(ref.namespace, ref.name, new)
            self._written[ref.uid] = dict(new)
        self._account(ref, old, new)
        if new.get("phase"):
            self._gauges(ref, new, spec)

    def _gauges(self, ref: JobRef, status: Mapping[str, Any], spec: TaoBrevJobSpec | None) -> None:
        """Per-job gauges follow status on every pass (also right after an operator restart)."""
        phase = Phase(str(status["phase"]))
        entered = parse_time((status.get("phaseTimes") or {}).get(str(phase)))
        finished = parse_time(status.get("finishedAt"))
        self._recorder.job_state(
            ref.namespace,
            ref.name,
            phase=str(phase),
            entered_at=entered.timestamp() if entered else None,
            timeout_seconds=(
                machine.phase_timeout(spec, phase) if spec is not None and not finished else None
            ),
            outcome=str(status["outcome"]) if status.get("outcome") else None,
            ended_at=finished.timestamp() if finished else None,
        )

    def _account(self, ref: JobRef, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        old_phase, new_phase = old.get("phase"), new.get("phase")
        now = self._clock()
        if new_phase and old_phase != new_phase:
            entered = parse_time((old.get("phaseTimes") or {}).get(str(old_phase))) if old_phase else None
            spent = (now - entered).total_seconds() if entered else None
            self._recorder.phase_changed(ref.namespace, ref.name, old_phase, str(new_phase), spent)
            log.info(
                "phase changed",
                phase=new_phase,
                previous=old_phase,
                instance=new.get("instanceName") or "-",
                message=new.get("message"),
            )
        if new.get("outcome") and not old.get("finishedAt") and new.get("finishedAt"):
            self._recorder.outcome(str(new["outcome"]), str(new.get("reason") or ""))
            exited = parse_time(new.get("containerExitedAt"))
            if exited is not None:
                self._recorder.exit_to_teardown((now - exited).total_seconds())
            if new.get("instanceName"):
                self._recorder.instance_released(ref.namespace, ref.name, str(new["instanceName"]))
        elif new.get("instanceCreated") and new.get("createRequestedAt") and not new.get("finishedAt"):
            created = parse_time(new.get("createRequestedAt"))
            if created is not None:
                self._recorder.instance_uptime(
                    ref.namespace, ref.name, str(new["instanceName"]), (now - created).total_seconds()
                )


def _comparable(status: Mapping[str, Any]) -> dict[str, Any]:
    # Conditions carry timestamps that only change with their status; compare everything else
    # plus each condition's status/reason/message, so an unchanged pass writes nothing.
    out = {k: v for k, v in status.items() if k != "conditions"}
    out["conditions"] = [
        (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
        for c in status.get("conditions") or []
    ]
    return out
