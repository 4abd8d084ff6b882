"""Value types that flow through a reconcile pass (PURE): what was observed, what to do next.

`machine.decide()` reads an `Observation` and returns a `Decision` whose actions are plain data;
`actions.py` performs them and folds their results back into the next `Observation`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from controller.api.models import TaoBrevJobSpec
from controller.api.status import TaoBrevJobStatus
from controller.brev.client import CreateRequest, Instance
from controller.brev.progress_parse import TaoProgress
from controller.fleet.admission import Admission
from controller.lifecycle.tunables import Tunables


@dataclass(frozen=True)
class Problem:
    """One thing that keeps the job from starting: the spec field at fault, a CamelCase reason,
    and a message saying what is wrong and how to fix it (never a secret value)."""

    field: str
    reason: str
    message: str


@dataclass(frozen=True)
class Verdict:
    """What one pre-flight found, and when. No problems: nothing known stands in the way."""

    checked_at: datetime
    problems: tuple[Problem, ...] = ()
    # The instance types `brev create` would be asked for, in fallback order, with their hourly
    # price (None: unknown); empty for a reused instance.
    candidates: tuple[tuple[str, float | None], ...] = ()
    # The images the run pulls on the instance (the TAO image, then the S3 transfer tool's).
    images: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.problems


# The pass's own read of the job's Secrets, which fails like an action but is none.
READ_SECRETS = "ReadSecrets"


@dataclass(frozen=True)
class ActionFailure:
    """An action that did not succeed. `permanent` failures end the job; others are retried."""

    action: str  # the Action's class name, or READ_SECRETS
    reason: str
    message: str
    permanent: bool

    def of(self, *kinds: type[Action]) -> bool:
        """Whether an action of one of these types failed (actions are referred to by type)."""
        return any(self.action == kind.__name__ for kind in kinds)


@dataclass(frozen=True)
class UploadSummary:
    objects: int
    bytes: int
    # The workflow step whose results these are (None: the job's results/ and logs/).
    step: str | None = None


@dataclass(frozen=True)
class CheckpointSync:
    """What `SyncCheckpoints` learned about the PREVIOUS detached sync (the one it replaced).

    `state`: "running" (still copying: nothing started), "ok" (it finished; epoch/objects are what
    it copied), "failed" (it exited non-zero or vanished; `message` says how), "none" (no earlier
    sync on this instance). `started` is True when this call started the next sync."""

    state: str
    started: bool
    epoch: int | None = None
    objects: int | None = None
    message: str = ""


@dataclass(frozen=True)
class CheckpointRestore:
    """What `RestoreCheckpoints` put back into the results directory: the latest checkpoint by
    epoch number (`*_epoch_NNN.pth`), as a container path, or None when there was none."""

    objects: int
    path: str | None = None
    epoch: int | None = None
    unreadable: tuple[str, ...] = ()  # newer checkpoints passed over (no whole zip archive)


@dataclass(frozen=True)
class Observation:
    """What the reconciler knows this pass: the world as observed, plus results of actions it just
    performed. Only facts written into status survive a crash; everything here is recomputed."""

    now: datetime
    deleting: bool = False
    # The value of the annotation taobrev.io/cancel (`kubectl taobrev cancel`), when set: the run
    # ends Canceled as on deletion, but the object stays.
    cancel_requested: str | None = None
    # Our finalizer is on the object: until it is, nothing may be created (a delete could
    # otherwise remove the object while an instance of ours is on its way).
    has_finalizer: bool = True
    # The quota verdict for a Pending job not admitted yet (controller/fleet/admission.py, obtained by
    # the reconciler from the fleet under its lock). None: no admission control is wired (unit
    # tests of the machine alone); the job is admitted at once.
    admission: Admission | None = None
    # Kueue's eviction message when it evicted this admitted job's Workload (docs/kueue.md): the run
    # stops through teardown and the job waits to be admitted again. None: not evicted (or no Kueue).
    evicted: str | None = None
    # The pre-flight's verdict for a Pending job (controller/preflight/checker.py). None: no pre-flight
    # wired (unit tests of the machine alone) or not due in this pass; the job goes on.
    preflight: Verdict | None = None
    # A permanent problem found while observing (missing Secret, unsupported spec field, ...).
    blocker: ActionFailure | None = None
    # The instance as the shared listing shows it; `instance_known` is False if listing failed.
    instance_known: bool = False
    instance: Instance | None = None
    # Several healthy instances carry our name (no id recorded yet): neither absent nor ours.
    instance_ambiguous: bool = False
    # Who the CLI is logged in as when it listed (None: the client cannot tell).
    identity: str | None = None
    # When the listing behind instance/instance_known was taken (None: in this pass). The shared
    # listing is served from a cache: an absence counts once per listing, not once per pass.
    listed_at: datetime | None = None
    probe_ok: bool | None = None
    prepared: bool = False
    container_started: bool = False
    # Result of a bounded `docker wait`: None while the container still runs.
    exit_code: int | None = None
    # The container's own FinishedAt (docker inspect), when the workload can tell: the run is
    # judged by it, so operator downtime is never counted against the job.
    exit_finished_at: datetime | None = None
    container_stopped: bool = False
    upload: UploadSummary | None = None
    cleaned: bool = False
    # The cleanup that succeeded kept the instance's files and stopped container for debugging
    # (CleanupWorkload.keep): the job's secrets are gone from it.
    kept_for_debug: bool = False
    delete_requested: bool = False
    # `brev delete` answered "not found": under the creating identity, proof the instance is gone.
    delete_not_found: bool = False
    start_requested: bool = False
    created: bool = False
    log_tail: tuple[str, ...] = ()
    # What TAO's status.json said with the wait (None: not read, or no epoch line in it yet).
    progress: TaoProgress | None = None
    # Hourly price of the listed instance's type from `brev search` (None: unknown / not looked up).
    price_per_hour: float | None = None
    checkpoint_sync: CheckpointSync | None = None
    restored: CheckpointRestore | None = None
    failure: ActionFailure | None = None
    # Names of the actions that completed in this pass (set by the reconciler): evidence of
    # progress, which clears a transient error, and proof a bounded wait really looked.
    completed: tuple[str, ...] = ()

    def with_(self, **changes: object) -> Observation:
        return replace(self, **changes)  # type: ignore[arg-type]

    def did(self, kind: type[Action]) -> bool:
        """Whether an action of this type completed in this pass."""
        return kind.__name__ in self.completed


# ---- actions (data only) ---------------------------------------------------------------------


@dataclass(frozen=True)
class CreateInstance:
    request: CreateRequest


@dataclass(frozen=True)
class StartInstance:
    name: str


@dataclass(frozen=True)
class ProbeExec:
    instance: str
    # Seconds the probe may take; None: the first-exec timeout (a fresh instance's ssh may take
    # >= 600 s). An instance that answered before is probed within what is left of its bound.
    limit: float | None = None


@dataclass(frozen=True)
class PrepareWorkload:
    """Deliver secrets, write the spec, log in to the registry, verify entitlement, pull, stage."""

    instance: str


@dataclass(frozen=True)
class StartContainer:
    instance: str
    # Attempt >= 2 with a restored checkpoint: `train.resume_training_checkpoint_path=<this>`.
    resume_path: str | None = None
    # A workflow's step (spec.steps[].name): its own container, spec and results directory.
    # None: the single-action job's container.
    step: str | None = None


@dataclass(frozen=True)
class WaitForExit:
    instance: str
    timeout_seconds: float
    # While running normally a missing container is (re)started; while stopping it is not.
    start_if_missing: bool = True
    resume_path: str | None = None
    # Also read the log tail if the container still runs at the end (an exit always brings it).
    tail: bool = True
    # The TAO action whose results/<action>/status.json holds the progress (None: not read), and
    # whether to read it while the container still runs (an exit always brings it).
    progress_of: str | None = None
    progress: bool = False
    step: str | None = None  # the workflow step whose container it is (None: the job's)


@dataclass(frozen=True)
class SyncCheckpoints:
    """Look at the previous detached checkpoint sync and start the next one (one brev call):
    never blocks on the copy itself, so exit notice and teardown are never delayed by it."""

    instance: str
    step: str | None = None


@dataclass(frozen=True)
class RestoreCheckpoints:
    """Copy <resultsUri>/checkpoints/<job id>/ into the results directory before the container starts.

    A workflow (`step` set): first each earlier step's results from <resultsUri>/<name>/ for the
    names in `outputs` (they ran on a lost instance, or before spec.startAtStep), then `step`'s
    own synced checkpoints from <resultsUri>/checkpoints/<job id>/<step>/."""

    instance: str
    step: str | None = None
    outputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class StopContainer:
    instance: str
    step: str | None = None


@dataclass(frozen=True)
class UploadResults:
    """Upload and verify the results: the job's results/ and logs/ to <resultsUri>/results and
    /logs, or (`step` set) that workflow step's results to <resultsUri>/<step>/ and its log to
    <resultsUri>/logs/<step>/."""

    instance: str
    step: str | None = None


@dataclass(frozen=True)
class CleanupWorkload:
    """Remove the container and the job directory (with its secret files) from the instance.

    `keep` (spec.debug.keepInstanceOnFailure): remove only what holds a secret — the job's secret
    files and registry login, the checkpoint sync's container — and keep the job directory and the
    stopped training container, unless `keep_container` is False (its config carries secret env)."""

    instance: str
    must_succeed: bool
    keep: bool = False
    keep_container: bool = False


@dataclass(frozen=True)
class DeleteInstance:
    # Brev's instance id once known (the CLI resolves ids and names alike); else the name.
    name: str


Action = (
    CreateInstance
    | StartInstance
    | ProbeExec
    | PrepareWorkload
    | StartContainer
    | WaitForExit
    | StopContainer
    | UploadResults
    | CleanupWorkload
    | DeleteInstance
    | SyncCheckpoints
    | RestoreCheckpoints
)


@dataclass(frozen=True)
class EventNote:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    """The next status (whole), the actions to run now, and when to look again.

    `requeue_after` None means: nothing more to do for this object (finished)."""

    status: TaoBrevJobStatus
    actions: tuple[Action, ...] = ()
    requeue_after: float | None = None
    events: tuple[EventNote, ...] = field(default_factory=tuple)

    @property
    def finished(self) -> bool:
        return self.requeue_after is None and not self.actions


class Decide(Protocol):
    """`machine.decide`'s signature: the reconciler receives the pure state machine from the
    composition root (app.py) instead of importing it, so the imperative shell and the functional
    core sit side by side, not one above the other."""

    def __call__(
        self,
        spec: TaoBrevJobSpec | None,
        status: TaoBrevJobStatus,
        obs: Observation,
        *,
        namespace: str,
        name: str,
        uid: str,
        generation: int,
        tunables: Tunables | None = None,
        spec_error: str | None = None,
    ) -> Decision: ...
