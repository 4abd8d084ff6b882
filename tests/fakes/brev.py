"""An in-memory Brev: instances with ids and owners, a lifecycle driven by a `FakeClock`, and
declared faults. Implements the `controller.brev.client.BrevClient` protocol; `identity()`
answers in the real client's format (`org-key:<org>:<digest>`, `user:<subject>`).

Behaviour follows the real CLI contract (tests/brevsim/SIM-CONTRACT.md sections 3 and 4), and is at least
as hostile as Brev where the contract allows it:

* `ls` lists the whole org for an API-key login; a token login lists only its own instances
  unless the client lists with `--all` (`list_all`, on by default as the real client's
  `ls --json --all`). `exec`/`delete` resolve a name or id only
  among the caller's own instances under a token login, the whole org under an API key.
* Name resolution: failed instances are dropped first; several matches left is an error.
* `create` of a name the caller already has (not failed, not being deleted) is adopted.
* A new instance is DEPLOYING for `deploy_s`, RUNNING from then on, and accepts exec only
  `sshd_lag_s` later. An accepted delete leaves the instance listed unchanged for
  `delete_lag_s`, then DELETING for `deleting_s`, then gone. Ids never repeat.

Everything that happens is recorded (creates, deletes, exec answers, uploads) so tests can state
invariants about the world, not about what the operator believes.
"""

from __future__ import annotations

import base64
import dataclasses
import heapq
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from controller.api.errors import BrevPermanentError, BrevTransientError, InstanceNotFound
from controller.brev.client import (
    DELETING,
    DEPLOYING,
    FAILURE,
    RUNNING,
    STARTING,
    STOPPED,
    BrevCredentials,
    CreateRequest,
    CreateResult,
    ExecResult,
    Instance,
    SearchResult,
)
from controller.brev.credentials import API_KEY_PREFIX, identity_of
from tests.fakes.clock import FakeClock

CLI_VERSION = "v0.6.327"
ORG_ID = "org-fake"


def identity_string(principal: str, login: str, org_id: str = ORG_ID) -> str:
    """What the real client's `identity()` answers for `principal` logged in with `login`
    ("api-key": an org API key `bak-<principal>`; "token": a token issued to user `principal`)."""
    if login == "api-key":
        creds = BrevCredentials(api_key=f"{API_KEY_PREFIX}{principal}", org_id=org_id)
    else:
        creds = BrevCredentials(token=_jwt(principal))
    return identity_of(creds, "", {})[0]


def _jwt(subject: str) -> str:
    """An unsigned JWT naming `subject` (the client reads claims without verifying them)."""

    def part(doc: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part({'sub': subject})}.sig"


class Interrupt(BaseException):
    """The operator stops in the middle of a pass, before the Brev call it was about to make:
    `crash` (the process dies; a new one starts from the status in Kubernetes) or `delete` (kopf
    cancels the daemon because the object is being deleted). A BaseException, so no `except
    Exception` in the operator can swallow it."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass(frozen=True)
class Faults:
    """Every knob of the fake world, declared once. `FakeBrev.set_faults` rejects unknown names.
    Counters ("next N calls") count down as calls hit them; set a huge count for "broken"."""

    list_failures: int = 0  # next N `brev ls` calls fail (transient)
    list_s: float = 0.0  # a `brev ls` takes this long (the listing is of when it was sent)
    listing_lag_s: float = 0.0  # a new instance is absent from listings this long after create
    capacity_errors: int = 0  # next N creates answer "no capacity" (transient, nothing created)
    create_s: float = 0.0  # a create call runs this long; the instance exists from its start
    create_timeouts: int = 0  # next N creates are accepted by Brev, but the call times out
    delete_failures: int = 0  # next N deletes fail (transient, nothing deleted)
    delete_lag_s: float = 0.0  # after an accepted delete, still listed unchanged this long
    deleting_s: float = 10.0  # then listed DELETING this long, then gone
    deploy_s: float = 60.0  # DEPLOYING -> RUNNING
    sshd_lag_s: float = 20.0  # RUNNING but exec refused this long (RUNNING is not ssh-ready)
    exec_failures: int = 0  # next N exec calls fail fast (ssh refused: sshd/docker/disk dead)
    exec_hangs: int = 0  # next N exec calls hang until their timeout (then a transient error)
    upload_failures: int = 0  # next N uploads fail after reaching the instance
    entitlement_denied: bool = False  # the registry refuses the NGC key (permanent)
    pull_s: float = 30.0  # an image pull takes this long
    run_s: float = 300.0  # the training container runs this long ...
    exit_code: int = 0  # ... and exits with this code
    # Checkpoints (issue 12). epoch_s > 0: the container trains `epochs` epochs of epoch_s each
    # (run_s is then ignored), writes model_epoch_NNN.pth after each, and resumes from the
    # checkpoint named by train.resume_training_checkpoint_path.
    epoch_s: float = 0.0
    epochs: int = 6
    sync_s: float = 5.0  # a detached checkpoint sync lands in S3 this long after it started ...
    sync_failures: int = 0  # ... unless it is one of the next N syncs, which fail
    # Workflows: a step's container exits with this code (by step name; others: exit_code).
    step_exit_codes: dict[str, int] = field(default_factory=dict)


@dataclass
class FakeContainer:
    job_id: str
    started_at: float
    run_s: float
    exit_code: int
    exited_at: float | None = None
    final_code: int | None = None
    # Epoch modelling (Faults.epoch_s > 0): trains epochs first_epoch..last_epoch.
    epoch_s: float = 0.0
    first_epoch: int = 1
    # Started with secret env (`docker run --env-file`): its config holds the values.
    carries_secrets: bool = False

    def epoch_at(self, now: float) -> int:
        """The last epoch whose checkpoint is on disk at `now` (first_epoch - 1 before any)."""
        if self.epoch_s <= 0:
            return 0
        end = now if self.exited_at is None else min(now, self.exited_at)
        done = int(max(0.0, end - self.started_at) // self.epoch_s)
        return self.first_epoch - 1 + done

    def settle(self, now: float) -> None:
        if self.exited_at is None and now >= self.started_at + self.run_s:
            self.exited_at = self.started_at + self.run_s
            self.final_code = self.exit_code

    @property
    def running(self) -> bool:
        return self.exited_at is None


@dataclass
class FakeInstance:
    id: str
    name: str
    owner: str
    status: str
    created_at: float
    running_at: float
    exec_ready_at: float
    listed_from: float
    gpu: str = "L40S"
    delete_accepted_at: float | None = None
    # When it went to FAILURE or was STOPPED by someone else (`set_status`): from then on
    # nothing on it can be reached.
    broken_at: float | None = None
    # When Brev lost it (`vanish`): gone without any delete.
    vanished_at: float | None = None
    deleting_at: float | None = None
    gone_at: float | None = None
    containers: dict[str, FakeContainer] = field(default_factory=dict)
    # The latest checkpoint epoch in each job's results directory on this instance's disk.
    disk_epochs: dict[str, int] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    images: set[str] = field(default_factory=set)  # pulled onto this instance's disk

    def as_listed(self) -> Instance:
        return Instance(
            name=self.name,
            id=self.id,
            status=self.status,
            build_status="COMPLETED" if self.status == RUNNING else "",
            shell_status="READY" if self.status == RUNNING else "",
            health_status="HEALTHY" if self.status == RUNNING else "",
            instance_type="g6.xlarge",
            gpu=self.gpu,
        )


@dataclass(frozen=True)
class CreateRecord:
    name: str
    id: str | None  # None: refused (capacity), nothing was created
    owner: str
    at: float
    accepted: bool
    seq: int  # global order of everything that happened in this world


@dataclass(frozen=True)
class DeleteRecord:
    target: str
    id: str | None
    identity: str
    at: float
    outcome: str  # accepted | not-found | failed | ambiguous
    seq: int  # global order of everything that happened in this world


@dataclass(frozen=True)
class ExecRecord:
    instance_id: str | None
    op: str
    at: float
    answered: bool  # the instance ran the command (whatever its exit code)
    seq: int  # global order of everything that happened in this world


@dataclass(frozen=True)
class ContainerStart:
    instance_id: str
    job_id: str
    at: float
    seq: int
    first_epoch: int = 1  # > 1: resumed from the checkpoint of the epoch before


@dataclass(frozen=True)
class SyncRecord:
    instance_id: str
    job_id: str
    epoch: int
    started_at: float
    lands_at: float
    ok: bool


@dataclass(frozen=True)
class UploadRecord:
    instance_id: str
    job_id: str
    at: float
    ok: bool
    seq: int  # global order of everything that happened in this world
    step: str | None = None  # a workflow step's results (<resultsUri>/<step>/)


class FakeBrev:
    """The world and the client in one object; `identity`/`login` say who is calling."""

    def __init__(
        self,
        clock: FakeClock,
        *,
        identity: str = "alice",
        login: str = "api-key",
        list_all: bool = True,
        org_id: str = ORG_ID,
        faults: Faults | None = None,
    ) -> None:
        self.clock = clock
        self.org_id = org_id
        self.identity_name = identity
        self.login = login  # "api-key" | "token"
        self.list_all = list_all
        self.faults = faults or Faults()
        self.instances: dict[str, FakeInstance] = {}
        self.gone: dict[str, FakeInstance] = {}
        self._ids = itertools.count(1)
        self._omit: dict[str, int] = {}
        self.creates: list[CreateRecord] = []
        self.deletes: list[DeleteRecord] = []
        self.execs: list[ExecRecord] = []
        self.uploads: list[UploadRecord] = []
        # Workflows: images pulled (instance id, image); each step's results on an instance's disk
        # (instance id, job id, step) and in S3 (resultsUri, step); restores of earlier steps.
        self.pulls: list[tuple[str, str]] = []
        self.step_outputs: set[tuple[str, str, str]] = set()
        self.stored_steps: set[tuple[str, str]] = set()
        self.restores: list[tuple[str, str, tuple[str, ...]]] = []
        self.container_starts: list[ContainerStart] = []
        # "S3": the latest checkpoint epoch under <resultsUri>/checkpoints/ per job, and the
        # detached syncs that were started (a sync lands only if its instance still exists).
        self.checkpoints: dict[str, int] = {}
        self.results_epochs: dict[str, int] = {}  # the same for <resultsUri>/results/
        self.syncs: list[SyncRecord] = []
        self._seq = itertools.count()
        self._scheduled: list[tuple[float, int, Callable[[], None]]] = []
        self.pending_interrupt: str | None = None
        self._interrupt_before: tuple[str, str] | None = None
        self.listings = 0
        self.logins = 0

    # -- test controls -----------------------------------------------------------------------

    def set_faults(self, **changes: object) -> None:
        """Change declared knobs; a misspelled name raises TypeError (a typo must not pass)."""
        self.faults = dataclasses.replace(self.faults, **changes)  # type: ignore[arg-type]

    def heal(self) -> None:
        """Faults off; the world's pace (deploy, sshd, pull, run times) is kept."""
        f = self.faults
        self.faults = Faults(
            deploy_s=f.deploy_s,
            sshd_lag_s=f.sshd_lag_s,
            pull_s=f.pull_s,
            run_s=f.run_s,
            exit_code=f.exit_code,
            deleting_s=f.deleting_s,
            epoch_s=f.epoch_s,
            epochs=f.epochs,
            sync_s=f.sync_s,
        )
        self._omit.clear()
        self._scheduled.clear()
        self.pending_interrupt = None

    def schedule(self, delay: float, action: Callable[[], None]) -> None:
        """Run `action` (a fault, an omission, an interrupt) once the clock has moved `delay`
        seconds on, at the next Brev call: faults land in the middle of a pass, not only
        between passes."""
        heapq.heappush(self._scheduled, (self.clock.monotonic() + delay, self.next_seq(), action))

    def interrupt(self, kind: str) -> None:
        """Stop the operator before its next Brev call (see `Interrupt`)."""
        self.pending_interrupt = kind

    def interrupt_before(self, op: str, kind: str) -> None:
        """Stop the operator right before its next remote `op` (e.g. "upload")."""
        self._interrupt_before = (op, kind)

    def take_interrupt(self) -> str | None:
        self._fire()
        kind, self.pending_interrupt = self.pending_interrupt, None
        return kind

    def _fire(self) -> None:
        now = self.clock.monotonic()
        while self._scheduled and self._scheduled[0][0] <= now:
            _, _, action = heapq.heappop(self._scheduled)
            action()

    def _interrupt_point(self) -> None:
        kind = self.take_interrupt()
        if kind is not None:
            raise Interrupt(kind)

    def omit(self, target: str, listings: int) -> None:
        """The instance (name or id) is missing from the next `listings` listings."""
        for inst in self._match(target, self.instances.values()):
            self._omit[inst.id] = listings

    # -- losing an instance (issue 12) ----------------------------------------------------------

    def vanish(self, target: str) -> None:
        """Brev loses the instance: gone from listings at once; `delete` answers not found."""
        for inst in self._match(target, list(self.instances.values())):
            inst.vanished_at = self.clock.monotonic()
            del self.instances[inst.id]
            self.gone[inst.id] = inst

    def set_status(self, target: str, status: str) -> None:
        """The instance goes to FAILURE or STOPPED (not by the operator): exec stops answering."""
        for inst in self._match(target, self.instances.values()):
            if inst.delete_accepted_at is None:
                inst.status = status
                inst.broken_at = self.clock.monotonic() if inst.broken_at is None else inst.broken_at

    def switch_identity(self, identity: str, *, login: str = "token") -> None:
        """Another credential: a token login sees and touches only its own instances."""
        self.identity_name = identity
        self.login = login

    def add_instance(self, name: str, *, owner: str | None = None, status: str = RUNNING) -> FakeInstance:
        """An instance that exists already (a reused one, or a teammate's of the same name)."""
        now = self.clock.monotonic()
        inst = FakeInstance(
            id=self._new_id(),
            name=name,
            owner=owner or self.identity_name,
            status=status,
            created_at=now,
            running_at=now,
            exec_ready_at=now,
            listed_from=now,
        )
        self.instances[inst.id] = inst
        return inst

    def next_seq(self) -> int:
        return next(self._seq)

    # -- queries for invariants ----------------------------------------------------------------

    def accepted_creates(self, name: str) -> list[CreateRecord]:
        return [c for c in self.creates if c.name == name and c.accepted]

    def created_ids(self, name: str) -> list[str]:
        return [c.id for c in self.accepted_creates(name) if c.id is not None]

    def live(self, instance_id: str) -> bool:
        """Exists and no delete of it was accepted: it bills until someone deletes it."""
        self._settle()
        inst = self.instances.get(instance_id)
        return inst is not None and inst.delete_accepted_at is None

    def id_of(self, target: str) -> str:
        """The id a name or id stands for, whoever owns it ("" if none or several): records of
        calls that failed to resolve it still say which instance they were about."""
        ids = [i.id for i in self._match(target, self.instances.values())]
        return ids[0] if len(ids) == 1 else ""

    def exists(self, instance_id: str) -> bool:
        self._settle()
        return instance_id in self.instances

    def by_name(self, name: str) -> list[FakeInstance]:
        self._settle()
        return [i for i in self.instances.values() if i.name == name]

    # -- the lifecycle ---------------------------------------------------------------------------

    def _new_id(self) -> str:
        return f"fk{next(self._ids):06d}"

    def _settle(self) -> None:
        self._fire()
        now = self.clock.monotonic()
        for inst in list(self.instances.values()):
            if inst.status in (DEPLOYING, STARTING) and now >= inst.running_at:
                inst.status = RUNNING
            if inst.deleting_at is not None and now >= inst.deleting_at:
                inst.status = DELETING
            if inst.gone_at is not None and now >= inst.gone_at:
                del self.instances[inst.id]
                self.gone[inst.id] = inst
                continue
            for c in inst.containers.values():
                c.settle(now)

    def _match(self, target: str, pool: object) -> list[FakeInstance]:
        return [i for i in pool if target in (i.name, i.id)]  # type: ignore[attr-defined]

    def _touchable(self) -> list[FakeInstance]:
        """Instances exec/delete can resolve a name among (section 11)."""
        if self.login == "api-key":
            return list(self.instances.values())
        return [i for i in self.instances.values() if i.owner == self.identity_name]

    def _resolve(self, target: str) -> FakeInstance:
        matches = self._match(target, self._touchable())
        if len(matches) == 1:
            return matches[0]  # a single match is taken as is, even FAILURE (SIM-CONTRACT 3)
        healthy = [i for i in matches if i.status != FAILURE]
        if len(healthy) > 1:
            raise BrevPermanentError(
                f"multiple instances found with id/name {target}",
                cli_message=f"multiple instances found with id/name {target}",
            )
        if healthy:
            return healthy[0]
        if matches:
            raise BrevPermanentError(f"instance with id/name {target} is a failed workspace")
        raise InstanceNotFound(
            f"instance {target} does not exist", cli_message=f"instance with id/name {target} not found"
        )

    # -- BrevClient ------------------------------------------------------------------------------

    async def ensure_login(self) -> None:
        self.logins += 1

    async def identity(self) -> str:
        """Who is logged in, in the real client's format (`credentials.identity_of`): an API key
        names its org and a digest of the key, a token the user it was issued to."""
        return identity_string(self.identity_name, self.login, self.org_id)

    async def version(self) -> str:
        return CLI_VERSION

    async def list_instances(self) -> Sequence[Instance]:
        self._settle()
        if self.faults.list_s:
            self.clock.advance(self.faults.list_s)
        if self.faults.list_failures > 0:
            self.set_faults(list_failures=self.faults.list_failures - 1)
            raise BrevTransientError("brev ls failed", cli_message="context deadline exceeded")
        self.listings += 1
        now = self.clock.monotonic()
        everyone = self.login == "api-key" or self.list_all
        out: list[Instance] = []
        for inst in self.instances.values():
            if not everyone and inst.owner != self.identity_name:
                continue
            if now < inst.listed_from:
                continue
            if self._omit.get(inst.id, 0) > 0:
                self._omit[inst.id] -= 1
                continue
            out.append(inst.as_listed())
        return out

    async def get_instance(self, name: str) -> Instance | None:
        for inst in await self.list_instances():
            if name in (inst.name, inst.id):
                return inst
        return None

    async def create_instance(self, request: CreateRequest) -> CreateResult:
        self._interrupt_point()
        self._settle()
        now = self.clock.monotonic()
        f = self.faults
        if f.capacity_errors > 0:
            self.set_faults(capacity_errors=f.capacity_errors - 1)
            self.creates.append(
                CreateRecord(request.name, None, self.identity_name, now, accepted=False, seq=self.next_seq())
            )
            raise BrevTransientError(
                f"no capacity for the requested instance types of {request.name}; will retry",
                reason="InsufficientCapacity",
                cli_message="no capacity available, please retry",
            )
        mine = [
            i
            for i in self._match(request.name, self.instances.values())
            if i.owner == self.identity_name and i.status != FAILURE and i.delete_accepted_at is None
        ]
        if mine:
            return CreateResult(name=request.name, adopted=True)
        inst = FakeInstance(
            id=self._new_id(),
            name=request.name,
            owner=self.identity_name,
            status=DEPLOYING,
            created_at=now,
            running_at=now + f.deploy_s,
            exec_ready_at=now + f.deploy_s + f.sshd_lag_s,
            listed_from=now + f.listing_lag_s,
            gpu=request.gpu_name or "L40S",
        )
        self.instances[inst.id] = inst
        self.creates.append(
            CreateRecord(request.name, inst.id, self.identity_name, now, accepted=True, seq=self.next_seq())
        )
        if f.create_s:
            self.clock.advance(f.create_s)
        if f.create_timeouts > 0:
            self.set_faults(create_timeouts=f.create_timeouts - 1)
            raise BrevTransientError(
                f"brev create {request.name} timed out", cli_message="context deadline exceeded"
            )
        return CreateResult(name=request.name, adopted=False)

    async def delete_instance(self, name_or_id: str) -> None:
        name = name_or_id
        self._interrupt_point()
        self._settle()
        now = self.clock.monotonic()
        f = self.faults
        if f.delete_failures > 0:
            self.set_faults(delete_failures=f.delete_failures - 1)
            self.deletes.append(DeleteRecord(name, None, self.identity_name, now, "failed", self.next_seq()))
            raise BrevTransientError(f"brev delete {name} failed", cli_message="502 Bad Gateway")
        try:
            inst = self._resolve(name)
        except InstanceNotFound:
            self.deletes.append(
                DeleteRecord(name, None, self.identity_name, now, "not-found", self.next_seq())
            )
            raise
        except BrevPermanentError:
            self.deletes.append(
                DeleteRecord(name, None, self.identity_name, now, "ambiguous", self.next_seq())
            )
            raise
        self.deletes.append(DeleteRecord(name, inst.id, self.identity_name, now, "accepted", self.next_seq()))
        if inst.delete_accepted_at is None:
            inst.delete_accepted_at = now
            inst.deleting_at = now + f.delete_lag_s
            inst.gone_at = inst.deleting_at + f.deleting_s
        self._settle()

    async def start_instance(self, name: str) -> None:
        self._interrupt_point()
        self._settle()
        inst = self._resolve(name)
        if inst.status == STOPPED:
            now = self.clock.monotonic()
            inst.status = STARTING
            inst.running_at = now + self.faults.deploy_s
            inst.exec_ready_at = inst.running_at + self.faults.sshd_lag_s

    async def refresh(self) -> None:
        return None

    def exec_gate(self, instance: str, op: str, timeout: float) -> FakeInstance:
        """What every remote call goes through: resolution, readiness, exec faults. A hang costs
        the call's whole timeout of simulated time, then fails like the real client's timeout."""
        if self._interrupt_before is not None and self._interrupt_before[0] == op:
            self.pending_interrupt, self._interrupt_before = self._interrupt_before[1], None
        self._interrupt_point()
        self._settle()
        now = self.clock.monotonic()
        try:
            inst = self._resolve(instance)
        except BrevPermanentError:
            self.execs.append(
                ExecRecord(self.id_of(instance) or None, op, now, answered=False, seq=self.next_seq())
            )
            raise
        f = self.faults
        problem: str | None = None
        if f.exec_hangs > 0:
            self.set_faults(exec_hangs=f.exec_hangs - 1)
            self.clock.advance(timeout)
            problem = f"brev exec {instance} timed out after {timeout:.0f}s"
        elif f.exec_failures > 0:
            self.set_faults(exec_failures=f.exec_failures - 1)
            problem = "ssh: connect to host port 22: Connection refused"
        elif inst.status != RUNNING or inst.delete_accepted_at is not None:
            problem = f"instance {instance} is {inst.status}"
        elif now < inst.exec_ready_at:
            problem = "ssh: connect to host port 22: Connection refused"
        if problem is not None:
            self.execs.append(ExecRecord(inst.id, op, now, answered=False, seq=self.next_seq()))
            raise BrevTransientError(f"brev exec {instance} failed", cli_message=problem)
        self.execs.append(ExecRecord(inst.id, op, now, answered=True, seq=self.next_seq()))
        return inst

    async def ssh_exec(
        self,
        instance: str,
        command: str,
        *,
        timeout: float,  # noqa: ASYNC109
        own_connection: bool = False,
    ) -> ExecResult:
        self.exec_gate(instance, "exec", timeout)
        return ExecResult(0, "ok\n" if command.strip() == "echo ok" else "")

    async def put_file(
        self,
        instance: str,
        remote_path: str,
        content: bytes,
        *,
        mode: int = 0o600,
        timeout: float,  # noqa: ASYNC109 - mirrors the protocol
    ) -> None:
        inst = self.exec_gate(instance, "put_file", timeout)
        inst.files[remote_path] = content

    async def search(
        self, *, gpu_name: str | None = None, min_vram: float | None = None
    ) -> Sequence[SearchResult]:
        return [SearchResult("g6.xlarge", "aws", gpu_name or "L40S", 1, 48.0, 1.5)]
