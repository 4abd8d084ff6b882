"""The TaoBrevJob status (taobrev.io/v1alpha1), made of owned parts.

Top level: what users read first (phase, outcome, reason, message, conditions, times, billing
totals). The rest is sub-records, each written by one process of the lifecycle:

- `queue`: admission under the instance quotas (run_phases.admit);
- `attempts[]`: one per instance the job used; the last is current and owns its `instance`
  (name, id, identity, create/delete times, absence evidence), its `run` (container, exit, log
  tail) and its `upload`. Recovery appends an attempt; it never clears a finished one;
- `teardown`: why teardown is not finished yet;
- `progress`: the training's epoch, ETA and last KPIs from TAO's status.json (across attempts);
- `checkpoint`, `preflight`, `plan`.

Status written by releases before this shape was flat (`instanceName`, `exitCode`, ...): it is
read by `legacy.from_flat` (kopf's from_storage habit), and the next write stores the new shape
and nulls the flat keys (merge_patch). Fixtures: tests/data/status-f73585a/.

Pure module: no kopf, kubernetes, os or subprocess imports (`make lint`: .importlinter).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AwareDatetime, ConfigDict, Field, PlainSerializer, model_validator

from controller.api import status_legacy
from controller.api.timestamps import format_time
from controller.api.vocabulary import ConditionStatus, FailureClass, Outcome, StatusModel, list_map
from controller.brev.progress_parse import TaoProgress
from controller.lifecycle.phases import Phase

# Kubernetes stores second-resolution UTC `Z` timestamps; serialising the same way keeps a status
# that did not change byte-identical, so an idle pass writes nothing.
Timestamp = Annotated[AwareDatetime, PlainSerializer(format_time, return_type=str, when_used="json")]


class Condition(StatusModel):
    """A kstatus-compatible condition (same shape as metav1.Condition)."""

    type: str = Field(max_length=316, description="Condition type, e.g. Ready, Reconciling, Stalled.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str | None = Field(default=None, description="CamelCase reason.")
    message: str | None = Field(default=None, description="Human-readable detail.")
    last_transition_time: Timestamp | None = Field(default=None, description="When status last changed.")
    observed_generation: int | None = Field(
        default=None, description="metadata.generation this condition was computed from."
    )


class ResultsSummary(StatusModel):
    """What was uploaded to spec.data.resultsUri."""

    uri: str | None = Field(default=None, description="Where the results are.")
    objects: int | None = Field(default=None, description="Number of objects uploaded.")
    bytes: int | None = Field(default=None, description="Total bytes uploaded.")


class CheckpointStatus(StatusModel):
    """The checkpoint sync to <resultsUri>/checkpoints/<job id>/ (what each attempt resumed from is in
    attempts[])."""

    epoch: int | None = Field(default=None, description="Latest epoch found in the synced files.")
    synced_at: Timestamp | None = Field(default=None, description="When the last sync finished.")
    objects: int | None = Field(default=None, ge=0, description="Objects under checkpoints/ after it.")
    sync_requested_at: Timestamp | None = Field(
        default=None, description="When the last sync was started (one per interval)."
    )
    failures: int | None = Field(
        default=None, ge=0, description="Consecutive failed syncs (transient; retried next interval)."
    )
    last_error: str | None = Field(default=None, description="Why the last sync failed.")


class PreflightProblem(StatusModel):
    """One thing the pre-flight found that keeps the job from starting."""

    field: str = Field(description="The spec field at fault, e.g. spec.data.resultsUri.")
    reason: str = Field(description="CamelCase reason, e.g. ResultsBucketNotFound.")
    message: str = Field(description="What is wrong and how to fix it.")


class PreflightStatus(StatusModel):
    """The checks made before `brev create` (Secrets, S3, inputs, instance selection, image)."""

    checked_at: Timestamp | None = Field(default=None, description="When the pre-flight last ran.")
    passed_at: Timestamp | None = Field(default=None, description="When it last found nothing wrong.")
    failing_since: Timestamp | None = Field(
        default=None,
        description="Start of the current streak of failed checks (spec.timeouts.pendingSeconds "
        "counts from here).",
    )
    problems: list[PreflightProblem] = Field(
        default_factory=list, max_length=8, description="What the last check found (empty: nothing)."
    )
    candidates: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="Instance types `brev create` would try, in order, with their hourly price.",
    )


class PlanStatus(StatusModel):
    """What the operator would do (spec.dryRun), from the pre-flight: nothing was created."""

    planned_at: Timestamp | None = Field(default=None, description="When the plan was made.")
    instance_types: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="Instance types `brev create` would try, in fallback order, with their hourly price.",
    )
    reuse: str | None = Field(default=None, description="The existing instance the job would run on.")
    images: list[str] = Field(default_factory=list, description="Images pulled on the instance.")
    inputs: list[str] = Field(default_factory=list, description="S3 inputs and where they are staged.")
    uploads: list[str] = Field(default_factory=list, description="What is uploaded where in S3.")
    max_billed_seconds: int | None = Field(
        default=None,
        description="The most the job can bill: every phase's timeout and attempt, or the budget.",
    )
    cost_ceiling_dollars: float | None = Field(
        default=None,
        description="max billed seconds x the dearest candidate's price, capped by "
        "spec.budget.maxCostDollars.",
    )
    ready: bool | None = Field(
        default=None, description="Whether the pre-flight passed (the job could start)."
    )


class QueueRecord(StatusModel):
    """Admission under the instance quotas (docs/queueing.md)."""

    admitted_at: Timestamp | None = Field(
        default=None,
        description=(
            "When the job was admitted under the instance quotas (written before anything is "
            "created); it holds its quota slot from then until finishedAt."
        ),
    )
    reason: str | None = Field(
        default=None,
        description=(
            "Why a Pending job is not admitted yet: ClusterInstanceLimit, NamespaceInstanceLimit, "
            "NamespaceGPULimit or Suspended (the Queued / Suspended conditions)."
        ),
    )
    message: str | None = Field(
        default=None, description="The limit, its usage and the job's place in its queue."
    )
    position: int | None = Field(
        default=None,
        ge=1,
        description="1-based place in its queue (the namespace's, or the cluster's for the cluster cap).",
    )
    queued_at: Timestamp | None = Field(
        default=None,
        description=(
            "Since when a limit has held the job back without a break (spec.timeouts.queuedSeconds "
            "counts from it); cleared when it is admitted, suspended or leaves the queue."
        ),
    )

    def wait(self, reason: str, message: str, position: int | None, now: datetime, *, held: bool) -> None:
        """Not admitted yet: why, and the job's place in its queue. `held`: by a limit (the
        queue's time counts), not by spec.suspend (it does not)."""
        self.reason, self.message, self.position = reason, message, position
        if not held:
            self.queued_at = None
        elif self.queued_at is None:
            self.queued_at = now

    def leave(self) -> None:
        """Out of the queue (finished, or waiting for its inputs instead)."""
        self.reason = self.message = self.position = self.queued_at = None

    def admit(self, now: datetime) -> None:
        """Admitted: holds its quota slot from now until the job finishes."""
        self.admitted_at = now
        self.leave()


class AbsenceRecord(StatusModel):
    """Listings that did not show the instance: one proves nothing (docs/brev-cli.md section 11)."""

    listings: int | None = Field(
        default=None,
        ge=0,
        description="Consecutive listings (spaced by the poll interval) that did not show the instance.",
    )
    since: Timestamp | None = Field(
        default=None, description="First of the consecutive listings that did not show the instance."
    )
    checked_at: Timestamp | None = Field(default=None, description="Last listing counted in listings.")

    def count(self, listed_at: datetime) -> None:
        """One more listing (new evidence, taken at `listed_at`) that did not show the instance."""
        self.listings = (self.listings or 0) + 1
        self.since = self.since or listed_at
        self.checked_at = listed_at

    def clear(self) -> None:
        """A listing showed the instance: the count starts again."""
        self.listings = self.since = self.checked_at = None


class InstanceRecord(StatusModel):
    """The attempt's brev instance: what was asked, what Brev answered, and the proof it is gone."""

    name: str = Field(description="brev instance name (recorded before `brev create`).")
    id: str | None = Field(
        default=None,
        description="Brev's instance id, recorded when the instance is first listed; matched by id after.",
    )
    created: bool | None = Field(
        default=None, description="True when this job created (and so owns) the instance."
    )
    identity: str | None = Field(
        default=None,
        description=(
            "The Brev identity the operator was logged in as when it asked for the instance; only "
            "that identity's answers (listings, `brev delete`) count during teardown."
        ),
    )
    type: str | None = Field(default=None, description="Instance type as `brev ls` shows it.")
    gpu: str | None = Field(default=None, description="The instance's GPU as `brev ls` reports it.")
    price_per_hour: float | None = Field(
        default=None, description="Hourly price of the type from `brev search` (absent: unknown)."
    )
    create_requested_at: Timestamp | None = Field(
        default=None, description="When `brev create` was last sent."
    )
    create_returned_at: Timestamp | None = Field(
        default=None,
        description="When the last `brev create` call returned or failed (the settle time starts here).",
    )
    billed_from: Timestamp | None = Field(
        default=None,
        description="The first `brev create` that may have made the instance: billing starts here.",
    )
    start_requested_at: Timestamp | None = Field(
        default=None, description="When `brev start` was sent for a STOPPED reused instance."
    )
    delete_requested_at: Timestamp | None = Field(
        default=None, description="When `brev delete` was last sent."
    )
    delete_accepted_at: Timestamp | None = Field(
        default=None, description="When brev first accepted the `brev delete`."
    )
    deleted_at: Timestamp | None = Field(
        default=None, description="When deletion of the instance was confirmed (absent: pending)."
    )
    absence: AbsenceRecord = Field(
        default_factory=AbsenceRecord, description="Listings that did not show the instance."
    )
    kept_until: Timestamp | None = Field(
        default=None,
        description=(
            "spec.debug.keepInstanceOnFailure: the instance is kept for debugging (`brev shell "
            "<name>`; the job's secrets removed) until this time, then deleted."
        ),
    )
    keep_ended_at: Timestamp | None = Field(
        default=None,
        description="When keeping the instance for debugging ended (its deadline, or earlier: "
        "deletion, cancel, budget); the delete follows.",
    )

    def assign(self, name: str, *, created: bool) -> None:
        """Names follow the spec while nothing exists on Brev (Pending)."""
        self.name, self.created = name, created

    def seen(self, instance_id: str, gpu: str | None) -> None:
        """Listed: its id (matched by id from now on), its GPU, and the absence count cleared."""
        if self.id is None:
            self.id = instance_id
        self.gpu = gpu
        self.absence.clear()

    def create_sent(self, now: datetime, identity: str | None, *, asked_before: bool) -> None:
        """`brev create` is about to be sent (the status lands before the call). The identity is
        the one the first create that may make the instance was sent under; the settle time of a
        re-send runs from the earlier call's return, or its send if it never came back."""
        if self.identity is None or not asked_before:
            self.identity = identity
        if not asked_before:
            self.create_returned_at = None
        elif self.create_returned_at is None:
            self.create_returned_at = self.create_requested_at
        self.create_requested_at = now

    def create_returned(self, now: datetime) -> None:
        self.create_returned_at = now

    def create_refused(self) -> None:
        """The only create that could have made it was refused: nothing was asked of Brev."""
        self.create_requested_at = self.identity = None

    def start_sent(self, now: datetime | None) -> None:
        """`brev start` sent (None: it failed, ask again after the backoff)."""
        self.start_requested_at = now

    def delete_sent(self, now: datetime) -> None:
        self.delete_requested_at = now

    def delete_accepted(self, now: datetime) -> None:
        """Brev accepted a `brev delete` (the first acceptance counts)."""
        self.delete_accepted_at = self.delete_accepted_at or now

    def keep(self, until: datetime) -> None:
        """Kept for debugging (its secrets removed) until `until` (the first keep counts)."""
        self.kept_until = self.kept_until or until

    def end_keep(self, now: datetime) -> None:
        """No longer kept: the delete may follow."""
        self.keep_ended_at = self.keep_ended_at or now

    def deleted(self, at: datetime) -> None:
        """Confirmed gone (not-found under the creating identity, or enough listings)."""
        self.deleted_at = at

    def bill(self, billed_from: datetime | None, instance_type: str | None, price: float | None) -> None:
        """Billing facts: from the first create that may have made it (None: nothing was made),
        its type as listed, and the type's hourly price once known."""
        self.billed_from = billed_from
        if instance_type:
            self.type = instance_type
        if price is not None and self.price_per_hour is None and self.type:
            self.price_per_hour = price


class RunRecord(StatusModel):
    """The training container on the attempt's instance."""

    started_at: Timestamp | None = Field(default=None, description="When the container started.")
    exited_at: Timestamp | None = Field(default=None, description="When the container exited.")
    ended_at: Timestamp | None = Field(
        default=None, description="When the run ended (exit, failure, timeout or cancellation)."
    )
    exit_code: int | None = Field(default=None, description="The container's exit code.")
    log_tail: list[str] = Field(default_factory=list, max_length=20, description="Tail of the container log.")
    unanswered_since: Timestamp | None = Field(
        default=None,
        description=(
            "While Running: the first of the consecutive failed waits (the instance did not answer); "
            "cleared by any answer. Past the answer bound the run (or attempt) ends InstanceUnresponsive."
        ),
    )
    unanswered_checked_at: Timestamp | None = Field(
        default=None,
        description=(
            "The last failed wait counted in unansweredSince; a gap longer than the answer bound "
            "(operator down, Lease elsewhere) starts the count again."
        ),
    )
    cleaned_up_at: Timestamp | None = Field(
        default=None, description="When the container and the job's files (secrets) were removed."
    )
    step: str | None = Field(
        default=None, description="A workflow's step whose container this is (spec.steps[].name)."
    )

    def started(self, now: datetime, step: str | None = None) -> None:
        self.started_at, self.step = now, step

    def exited(self, code: int, at: datetime) -> None:
        self.exit_code, self.exited_at = code, at

    def ended(self, now: datetime) -> None:
        """The run is over (first call wins: the stop grace counts from it)."""
        self.ended_at = self.ended_at or now

    def tail(self, lines: list[str]) -> None:
        self.log_tail = lines

    def unanswered(self, now: datetime, bound: float) -> float:
        """A wait failed because the instance did not answer: seconds it has been silent. Failed
        waits more than `bound` apart start the count again (nobody asked in between)."""
        last = self.unanswered_checked_at
        if self.unanswered_since is None or last is None or (now - last).total_seconds() > bound:
            self.unanswered_since = now
        self.unanswered_checked_at = now
        return (now - self.unanswered_since).total_seconds()

    def answered(self) -> None:
        self.unanswered_since = self.unanswered_checked_at = None

    def cleaned(self, now: datetime) -> None:
        """Container and job files (with the secrets) removed, or nothing left to remove."""
        self.cleaned_up_at = self.cleaned_up_at or now


class UploadRecord(StatusModel):
    """The results upload to spec.data.resultsUri from the attempt's instance."""

    attempts: int | None = Field(default=None, ge=0, description="Upload attempts so far.")
    uploaded_at: Timestamp | None = Field(
        default=None, description="When the results upload finished and was verified in S3."
    )
    results: ResultsSummary | None = Field(default=None, description="What was uploaded.")

    def tried(self) -> None:
        """An upload came back failed (counted on return: a crash mid-call is no attempt)."""
        self.attempts = (self.attempts or 0) + 1

    def retire(self) -> None:
        """Its attempt ended with no upload to follow: the count no longer means anything."""
        self.attempts = None

    def uploaded(self, now: datetime, results: ResultsSummary) -> None:
        self.tried()
        self.uploaded_at, self.results = now, results


class AttemptRecord(StatusModel):
    """One instance the job used (attempt n >= 2 runs on `<instance>-a<n>`)."""

    @model_validator(mode="before")
    @classmethod
    def _from_flat(cls, data: Any) -> Any:
        return status_legacy.attempt_from_flat(data)

    attempt: int = Field(ge=1, description="1-based attempt number.")
    instance: InstanceRecord = Field(description="The attempt's brev instance.")
    run: RunRecord = Field(default_factory=RunRecord, description="The training container.")
    upload: UploadRecord = Field(default_factory=UploadRecord, description="The results upload.")
    ended_at: Timestamp | None = Field(default=None, description="When the attempt was judged over.")
    ended_reason: str | None = Field(default=None, description="Why the attempt ended (CamelCase).")
    ended_message: str | None = Field(default=None, description="Why the attempt ended.")
    restored_at: Timestamp | None = Field(
        default=None, description="When <resultsUri>/checkpoints/<job id>/ was restored onto this instance."
    )
    resumed_from: str | None = Field(
        default=None,
        description="Checkpoint this attempt resumed from (train.resume_training_checkpoint_path).",
    )
    resumed_from_epoch: int | None = Field(default=None, description="Epoch of that checkpoint.")
    billed_seconds: int | None = Field(
        default=None, ge=0, description="billedFrom to confirmed deletion (or now, while it lasts)."
    )
    estimated_cost_dollars: float | None = Field(
        default=None, ge=0, description="billedSeconds x pricePerHour / 3600 (absent: price unknown)."
    )

    def end(self, now: datetime, reason: str, message: str) -> None:
        """The attempt is over (first call wins), and why."""
        if self.ended_at is None:
            self.ended_at, self.ended_reason, self.ended_message = now, reason, message

    def retire_run(self) -> None:
        """Recovery ends this attempt while its instance is deleted: nothing may read its run as a
        container that could still exit or upload (its log tail and cleanup stay)."""
        self.run = RunRecord(log_tail=self.run.log_tail, cleaned_up_at=self.run.cleaned_up_at)
        self.upload.retire()

    def next_step(self) -> None:
        """A workflow's next step runs in a new container on this instance: the run and upload
        records are that container's (the previous step's are in its step record)."""
        self.run = RunRecord(cleaned_up_at=self.run.cleaned_up_at)
        self.upload = UploadRecord()

    def restored(self, now: datetime, path: str | None, epoch: int | None) -> None:
        self.restored_at, self.resumed_from, self.resumed_from_epoch = now, path, epoch

    def bill(self, seconds: int, price: float | None) -> None:
        self.billed_seconds = seconds
        if price is not None:
            self.estimated_cost_dollars = round(seconds * price / 3600, 4)


class ProgressRecord(StatusModel):
    """Training progress as TAO's own status.json reports it (results/<action>/status.json, one
    JSON line per epoch), read with the running job's waits. Kept across attempts: a resumed run
    continues the count from its checkpoint's epoch."""

    epoch: int | None = Field(
        default=None, ge=0, description="Epochs finished (TAO 6 counts from 0: its epoch + 1)."
    )
    max_epoch: int | None = Field(default=None, ge=1, description="Epochs in the run.")
    percent: int | None = Field(default=None, ge=0, le=100, description="epoch / maxEpoch, in percent.")
    eta: str | None = Field(
        default=None,
        max_length=32,
        description="Time left as TAO estimated it at the last epoch, H:MM:SS.",
    )
    eta_seconds: int | None = Field(default=None, ge=0, description="eta in seconds.")
    time_per_epoch_seconds: float | None = Field(
        default=None, ge=0, description="How long the last epoch took, as TAO measured it."
    )
    loss: float | None = Field(default=None, description="The last training loss TAO reported.")
    metrics: dict[str, float] = Field(
        default_factory=dict,
        max_length=8,
        description="The last KPIs TAO reported (kpi and graphical maps of status.json), by name.",
    )
    read_at: Timestamp | None = Field(default=None, description="When this progress was read.")

    def shows(self, got: TaoProgress) -> bool:
        """Whether this record already says what `got` says (reading it again changes nothing)."""
        mine = (self.epoch, self.max_epoch, self.percent, self.eta, self.eta_seconds)
        theirs = (got.epoch, got.max_epoch, got.percent, got.eta, got.eta_seconds)
        rest = (self.time_per_epoch_seconds, self.loss, self.metrics)
        return mine == theirs and rest == (got.time_per_epoch_seconds, got.loss, dict(got.metrics))

    def read(self, now: datetime, got: TaoProgress) -> None:
        """TAO's status.json said `got`, read at `now`."""
        self.epoch, self.max_epoch, self.percent = got.epoch, got.max_epoch, got.percent
        self.eta, self.eta_seconds = got.eta, got.eta_seconds
        self.time_per_epoch_seconds, self.loss = got.time_per_epoch_seconds, got.loss
        self.metrics, self.read_at = dict(got.metrics), now

    def clear(self) -> None:
        """A workflow's next step starts: its progress is its own (the last step's stays in its
        step record)."""
        self.epoch = self.max_epoch = self.percent = self.eta = self.eta_seconds = None
        self.time_per_epoch_seconds = self.loss = self.read_at = None
        self.metrics = {}


class StepPhase(StrEnum):
    """Where one step of a workflow is."""

    PENDING = "Pending"  # not started (or its attempt's instance was lost: it runs again)
    RUNNING = "Running"  # its container runs, or its results are being uploaded
    SUCCEEDED = "Succeeded"  # exited 0, results verified under <resultsUri>/<step>/
    FAILED = "Failed"  # exited non-zero, or the run ended while it ran
    SKIPPED = "Skipped"  # not run: an earlier step failed (when: OnSuccess) or the run ended
    REUSED = "Reused"  # before spec.startAtStep: its stored results are used, it does not run


# Steps that will not run (again) in this job.
STEP_DONE = frozenset({StepPhase.SUCCEEDED, StepPhase.FAILED, StepPhase.SKIPPED, StepPhase.REUSED})


class StepRecord(StatusModel):
    """One step of a workflow (spec.steps): its container's run and its results in S3."""

    name: str = Field(max_length=64, description="The step's name (spec.steps[].name).")
    action: str | None = Field(default=None, max_length=63, description="Its TAO action.")
    phase: StepPhase = Field(default=StepPhase.PENDING, description="Where the step is.")
    attempt: int | None = Field(default=None, ge=1, description="The attempt (instance) it last ran on.")
    started_at: Timestamp | None = Field(default=None, description="When its container started.")
    finished_at: Timestamp | None = Field(default=None, description="When it ended.")
    exit_code: int | None = Field(default=None, description="Its container's exit code.")
    results_verified: bool | None = Field(
        default=None, description="Its results are verified under <resultsUri>/<name>/."
    )
    results: ResultsSummary | None = Field(default=None, description="What was uploaded for it.")
    message: str | None = Field(default=None, max_length=1024, description="Why it is where it is.")
    progress: ProgressRecord = Field(
        default_factory=ProgressRecord, description="TAO's progress of this step (its last reading)."
    )

    def start(self, now: datetime, attempt: int) -> None:
        """Its container is about to start on attempt `attempt`'s instance."""
        self.phase, self.attempt, self.started_at = StepPhase.RUNNING, attempt, now
        self.finished_at = self.exit_code = self.results_verified = self.results = self.message = None

    def exited(self, code: int, at: datetime) -> None:
        self.exit_code = code
        self.finished_at = self.finished_at or at

    def verified(self, results: ResultsSummary) -> None:
        """Its results are in S3, verified."""
        self.results_verified, self.results = True, results

    def end(
        self, now: datetime, phase: StepPhase, message: str, progress: ProgressRecord | None = None
    ) -> None:
        """It will not run again: Succeeded, Failed or Skipped, and why."""
        self.phase, self.message = phase, message
        if phase != StepPhase.SKIPPED:
            self.finished_at = self.finished_at or now
        if progress is not None:
            self.progress = progress.model_copy(deep=True)

    def reuse(self, message: str) -> None:
        """Before spec.startAtStep: its results are read from S3, it does not run."""
        self.phase, self.message = StepPhase.REUSED, message

    def interrupt(self, message: str) -> None:
        """Its attempt's instance was lost before its results were verified: it runs again on the
        next attempt (nothing it wrote survives but its synced checkpoints)."""
        self.phase, self.message = StepPhase.PENDING, message
        self.exit_code = self.finished_at = self.results_verified = self.results = None


class TeardownRecord(StatusModel):
    """What teardown (upload, cleanup, delete) still waits for."""

    message: str | None = Field(
        default=None, description="Why teardown is not finished yet (e.g. an instance that will not go away)."
    )

    def waiting(self, note: str | None) -> None:
        """What teardown waits for now (None: nothing)."""
        self.message = note


MAX_NOTIFIED_SINKS = 16
MAX_DELIVERED_KEYS = 64


class SinkDeliveries(StatusModel):
    """What one notifier confirmed (a 2xx answer) for this job."""

    notifier: str = Field(max_length=253, description="The TaoBrevNotifier (in the job's namespace).")
    delivered: list[str] = Field(
        default_factory=list,
        max_length=MAX_DELIVERED_KEYS,
        description="Transitions delivered, e.g. admitted, running/1, succeeded/1 (the event ids).",
    )


class NotificationsRecord(StatusModel):
    """Notifications delivered, per notifier: a restarted operator re-sends what is not here
    (same event id, so receivers drop a duplicate). Written only by the notifier's own patch,
    once per batch of confirmed deliveries, never per retry."""

    sinks: list[SinkDeliveries] = Field(
        default_factory=list,
        max_length=MAX_NOTIFIED_SINKS,
        json_schema_extra=list_map("notifier"),
        description="Per notifier, the transitions it confirmed.",
    )

    def delivered_to(self, notifier: str) -> frozenset[str]:
        return frozenset(next((s.delivered for s in self.sinks if s.notifier == notifier), ()))

    def confirm(self, notifier: str, keys: set[str] | frozenset[str]) -> None:
        """`keys` were delivered to `notifier` (a union: a confirmed delivery is never forgotten;
        the oldest keys and notifiers go first past the bounds)."""
        rest = [s for s in self.sinks if s.notifier != notifier]
        current = next((s.delivered for s in self.sinks if s.notifier == notifier), [])
        done = [*current, *sorted(k for k in keys if k not in current)]
        entry = SinkDeliveries(notifier=notifier, delivered=done[-MAX_DELIVERED_KEYS:])
        self.sinks = [*rest, entry][-MAX_NOTIFIED_SINKS:]


# Before the first pass records an instance there is no attempt: reads of `status.instance`,
# `.run`, `.upload` then see these empty records, and a write to them fails loudly instead of
# being lost (frozen).
class _NoAbsence(AbsenceRecord):
    model_config = ConfigDict(frozen=True)


class _NoInstance(InstanceRecord):
    model_config = ConfigDict(frozen=True)


class _NoRun(RunRecord):
    model_config = ConfigDict(frozen=True)


class _NoUpload(UploadRecord):
    model_config = ConfigDict(frozen=True)


class _NoAttempt(AttemptRecord):
    model_config = ConfigDict(frozen=True)


def _no_attempt() -> AttemptRecord:
    return _NoAttempt(
        attempt=1,
        instance=_NoInstance(name="", absence=_NoAbsence()),
        run=_NoRun(),
        upload=_NoUpload(),
    )


# Sub-records dumped as {} when nothing in them is set: leave them out of stored status.
_PRUNED = frozenset({"queue", "teardown", "run", "upload", "absence", "progress", "metrics"})


def _prune(value: Any) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            kept = _prune(item)
            if (key in _PRUNED and kept == {}) or (key in ("logTail", "steps") and kept == []):
                continue
            out[key] = kept
        return out
    if isinstance(value, list):
        return [_prune(item) for item in value]
    return value


class TaoBrevJobStatus(StatusModel):
    """Written only by the operator, through the status subresource."""

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        """Flat status of earlier releases becomes sub-records; status written before runOutcome
        existed (or built by name in tests) has outcome only: then that is how the run ended."""
        data = status_legacy.status_from_flat(data)
        known = isinstance(data, dict) and (data.get("runOutcome") or data.get("run_outcome"))
        if isinstance(data, dict) and data.get("outcome") is not None and not known:
            return {**data, "runOutcome": data["outcome"]}
        return data

    phase: Phase | None = Field(default=None, description="Where the job is.")
    outcome: Outcome | None = Field(
        default=None,
        description="How the job ended, as users read it: Succeeded only once the results are "
        "verified in S3 (while a run that exited 0 uploads, it is unset and reason says so).",
    )
    run_outcome: Outcome | None = Field(
        default=None,
        description="How the run ended, set when it ends (the operator's own record; outcome shows "
        "it once it is final).",
    )
    reason: str | None = Field(
        default=None, description="CamelCase reason of the outcome or current problem."
    )
    message: str | None = Field(default=None, description="Human-readable detail.")
    failure_class: FailureClass | None = Field(
        default=None,
        description=(
            "With outcome Failed, whose move it is: Infrastructure (Brev, the instance, the network; "
            "recovery retries), Program (the training exited non-zero or ran out of time), "
            "Configuration (spec, Secrets, entitlement: fix and apply again), Quota or Budget."
        ),
    )
    observed_generation: int | None = Field(
        default=None, description="metadata.generation the status was computed from."
    )
    job_id: str | None = Field(default=None, description="Container name and TAO job id.")
    backend_ref: str | None = Field(default=None, description="<instance>/<jobId> of the current attempt.")
    phase_times: dict[str, Timestamp] = Field(
        default_factory=dict, description="When each phase was entered, keyed by phase name."
    )
    finished_at: Timestamp | None = Field(default=None, description="When the job reached its end.")
    stalled_reason: str | None = Field(
        default=None,
        description=(
            "Why the operator cannot make progress without help (e.g. InvalidSpec, "
            "InstanceNotAccessible); the Stalled condition carries it until resolved."
        ),
    )
    stalled_message: str | None = Field(default=None, description="What is wrong and how to fix it.")
    retries: int = Field(default=0, ge=0, description="Consecutive transient failures in this phase.")
    billed_seconds: int | None = Field(
        default=None, ge=0, description="Billed instance seconds over all attempts."
    )
    estimated_cost_dollars: float | None = Field(
        default=None,
        ge=0,
        description="Estimated cost over all attempts; absent while a price is unknown (see costKnown).",
    )
    cost_known: bool | None = Field(
        default=None, description="False when some attempt's hourly price was not found in `brev search`."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra=list_map("type"),
        description="Ready / Reconciling / Stalled and the operator's own conditions.",
    )
    queue: QueueRecord = Field(
        default_factory=QueueRecord, description="Admission under the instance quotas."
    )
    attempts: list[AttemptRecord] = Field(
        default_factory=list,
        json_schema_extra=list_map("attempt"),
        description="Every instance the job used; the last is the current attempt.",
    )
    teardown: TeardownRecord = Field(default_factory=TeardownRecord, description="What teardown waits for.")
    progress: ProgressRecord = Field(
        default_factory=ProgressRecord,
        description="Training progress and ETA from TAO's status.json (absent until the first epoch ends).",
    )
    steps: list[StepRecord] = Field(
        default_factory=list,
        json_schema_extra=list_map("name"),
        description="A workflow's steps (spec.steps), in order.",
    )
    step: str | None = Field(
        default=None,
        description="A workflow's current step as `<n>/<total> <name>` (the STEP column).",
    )
    failed_step: str | None = Field(
        default=None, description="With outcome Failed, the workflow step that failed (or was running)."
    )
    checkpoint: CheckpointStatus | None = Field(default=None, description="Checkpoint sync and resume.")
    preflight: PreflightStatus | None = Field(
        default=None, description="The checks made before anything is created (Pending)."
    )
    plan: PlanStatus | None = Field(default=None, description="What the job would do (spec.dryRun).")
    notifications: NotificationsRecord | None = Field(
        default=None,
        description="Notifications delivered per notifier (written by the notifier, not the reconciler).",
    )

    # -- the current attempt (read-only views; writes go through the records) --

    @property
    def current(self) -> AttemptRecord:
        """The current attempt (the last), or a frozen empty one before the first is recorded."""
        return self.attempts[-1] if self.attempts else _no_attempt()

    @property
    def attempt(self) -> int | None:
        """The current attempt's number (None before the first)."""
        return self.attempts[-1].attempt if self.attempts else None

    @property
    def instance(self) -> InstanceRecord:
        return self.current.instance

    @property
    def run(self) -> RunRecord:
        return self.current.run

    @property
    def upload(self) -> UploadRecord:
        return self.current.upload

    def step_record(self, name: str) -> StepRecord:
        """The record of step `name` (workflows; KeyError when there is none)."""
        for rec in self.steps:
            if rec.name == name:
                return rec
        raise KeyError(name)

    def plan_steps(self, steps: list[tuple[str, str]]) -> None:
        """A workflow's step records, (name, action) in order, once (before its first step)."""
        if not self.steps:
            self.steps = [StepRecord(name=name, action=action) for name, action in steps]

    def start_attempt(self, name: str, *, created: bool) -> AttemptRecord:
        """Append the next attempt, on instance `name` (the only way an attempt begins)."""
        n = self.attempts[-1].attempt + 1 if self.attempts else 1
        rec = AttemptRecord(attempt=n, instance=InstanceRecord(name=name, created=created))
        self.attempts = [*self.attempts, rec]
        return rec

    @classmethod
    def from_k8s(cls, status: dict[str, Any] | None) -> TaoBrevJobStatus:
        """Parse `.status` as read from the API server (absent on a new object; flat when an
        earlier release wrote it)."""
        return cls.model_validate(status or {})

    def to_k8s(self) -> dict[str, Any]:
        """`.status` as stored by the API server: camelCase, unset fields and empty sub-records
        omitted. A field that must be cleared needs an explicit null in the merge patch (see
        `merge_patch`)."""
        out: dict[str, Any] = _prune(self.model_dump(by_alias=True, exclude_none=True, mode="json"))
        if not out.get("attempts"):
            out.pop("attempts", None)
        return out


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) taking stored status `old` to `new`: fields present before
    and absent now are sent as null, which is how merge patch deletes them — at every depth,
    because merge patch merges nested objects (e.g. status.checkpoint) key by key. Lists are
    replaced whole."""
    patch = dict(new)
    for key, before in old.items():
        if key not in new:
            patch[key] = None
        elif isinstance(before, dict) and isinstance(new[key], dict):
            patch[key] = merge_patch(before, new[key])
    return patch
