"""One job, one operator, one Brev world: the real Reconciler, ActionRunner (with the in-memory
workload), InstanceDirectory and machine, wired to the fakes the way `controller.app.build` wires
the real pieces, and driven the way `controller.handlers` drives them (daemon loop, then the
delete handler until teardown is confirmed).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from controller.api import naming
from controller.api.errors import TransientError
from controller.effects.directory import InstanceDirectory
from controller.effects.pricing import PriceBook
from controller.fleet.admission import Quotas
from controller.fleet.ledger import Fleet
from controller.lifecycle import machine
from controller.observability.metrics import Recorder
from controller.reconciler import JobRef, Reconciler
from tests import status_paths
from tests.fakes.brev import FakeBrev, Faults, Interrupt
from tests.fakes.clock import FakeClock
from tests.fakes.kube import FakeEvents, FakeKube, FakeObject
from tests.fakes.metrics import NullRecorder
from tests.fakes.workload import FakeActionRunner

NAMESPACE = "ns"
NAME = "job"
UID = "0f0e0d0c-0000-4000-8000-000000000001"

SECRETS: Mapping[str, Mapping[str, bytes]] = {
    "ngc": {"api-key": b"nvapi-fake-ngc-key"},
    "s3": {"AWS_ACCESS_KEY_ID": b"AKIAFAKE", "AWS_SECRET_ACCESS_KEY": b"fake-s3-secret"},
}

TUNABLES = machine.Tunables(
    poll_interval=5, wait_timeout=30, create_settle=120, backoff_base=2, backoff_max=60
)


def job_spec(**overrides: Any) -> dict[str, Any]:
    """A valid TaoBrevJob spec (camelCase, as stored); top-level keys are replaced by overrides."""
    spec: dict[str, Any] = {
        "task": {
            "image": "nvcr.io/nvidia/tao/tao-toolkit:5.5.0-pyt",
            "networkArch": "classification_pyt",
            "action": "train",
            "specContent": "a: 1\n",
        },
        "instance": {"ephemeral": {"gpuName": "L40S"}},
        "data": {"resultsUri": "s3://bucket/out"},
        "credentials": {
            "ngcApiKey": {"name": "ngc", "key": "api-key"},
            "s3": {"name": "s3"},
        },
        "timeouts": {
            "provisioningSeconds": 600,
            "waitingExecSeconds": 600,
            "pullingSeconds": 600,
            "runningSeconds": 900,
            "uploadingSeconds": 300,
            "deletingSeconds": 300,
        },
    }
    spec.update(copy.deepcopy(overrides))
    return spec


class Harness:
    def __init__(
        self,
        spec: Mapping[str, Any] | None = None,
        *,
        faults: Faults | None = None,
        tunables: machine.Tunables = TUNABLES,
        listing_max_age: float = 10.0,
        max_list_items: int | None = None,
        metrics: bool = True,
        quotas: Quotas | None = None,
        wake_queued: bool = False,
    ) -> None:
        self.clock = FakeClock()
        self.brev = FakeBrev(self.clock, faults=faults)
        self.kube = FakeKube(max_list_items=max_list_items)
        for name, data in SECRETS.items():
            self.kube.add_secret(NAMESPACE, name, data)
        self.kube.create(NAMESPACE, NAME, UID, spec if spec is not None else job_spec())
        self.events = FakeEvents()
        self.recorder: Recorder = (
            Recorder(CollectorRegistry(), clock=self.clock.unix) if metrics else NullRecorder()
        )
        self.tunables = tunables
        self.listing_max_age = listing_max_age
        self.restarts = 0
        # With quotas, admission goes through a Fleet over the fake API (as controller.app wires it).
        self.quotas = quotas
        self.wake_queued = wake_queued
        self.start_operator()

    def start_operator(self) -> None:
        """A new operator process: every in-memory cache is lost; status comes from Kubernetes."""
        self.directory = InstanceDirectory(self.brev, clock=self.clock.monotonic)
        self.runner = FakeActionRunner(self.brev, self.directory)
        self.fleet = (
            None if self.quotas is None else Fleet(self.kube, self.quotas, clock=self.clock.monotonic)
        )
        self.reconciler = Reconciler(
            kube=self.kube,
            directory=self.directory,
            runner=self.runner,
            recorder=self.recorder,
            events=self.events,
            tunables=self.tunables,
            decide=machine.decide,
            listing_max_age=self.listing_max_age,
            clock=self.clock.now,
            prices=PriceBook(self.brev, clock=self.clock.monotonic),
            fleet=self.fleet,
            wake_queued=self.wake_queued,
        )

    def restart(self) -> None:
        self.restarts += 1
        self.start_operator()

    # -- the job as stored -------------------------------------------------------------------

    @property
    def obj(self) -> FakeObject | None:
        return self.kube.get(NAMESPACE, NAME)

    @property
    def status(self) -> dict[str, Any]:
        """The status as Kubernetes holds it (after the last write), or {} once the object is gone."""
        obj = self.obj
        if obj is not None:
            return obj.status
        writes = [w for w in self.kube.writes if w.name == NAME]
        return writes[-1].status if writes else {}

    @property
    def phase(self) -> str | None:
        return self.status.get("phase")

    @property
    def finished(self) -> bool:
        return bool(self.status.get("finishedAt"))

    @property
    def instance_name(self) -> str | None:
        """The current attempt's instance name."""
        name = status_paths.instance(self.status).get("name")
        return str(name) if name is not None else None

    def _interrupted(self, kind: str | None) -> None:
        if kind == "crash":
            self.restart()
        elif kind == "delete":
            self.delete_job()

    def delete_job(self) -> None:
        if self.obj is not None:
            self.kube.request_delete(NAMESPACE, NAME)

    # -- driving -----------------------------------------------------------------------------

    async def reconcile_once(self) -> float | None:
        """One pass as kopf would run it: the daemon while the object lives, the delete handler
        once deletion was requested (releasing the finalizer when teardown is done). Returns the
        delay the handler would wait, None when it stops (finished, or the object is gone)."""
        self._interrupted(self.brev.take_interrupt())  # one that came due between passes
        obj = self.obj
        if obj is None:
            return None
        ref = JobRef.from_body(obj.body())
        try:
            delay = await self.reconciler.reconcile(ref)
        except TransientError:
            delay = self.tunables.poll_interval
        except Interrupt as stop:
            self._interrupted(stop.kind)
            return 0.0  # the new process's daemon, or the delete handler, starts at once
        if delay is None and ref.deleting:
            self.reconciler.forget(ref)
            self.kube.release(NAMESPACE, NAME)
        return delay

    async def run(self, *, seconds: float, until_finished: bool = True, max_passes: int = 10_000) -> int:
        """Passes, waiting each requested delay on the fake clock, for `seconds` of simulated time
        (or until the job finished, or, when deleting, until the object is gone). Returns passes."""
        deadline = self.clock.monotonic() + seconds
        passes = 0
        while self.clock.monotonic() < deadline and passes < max_passes:
            delay = await self.reconcile_once()
            passes += 1
            if delay is None:
                if self.obj is None or until_finished:
                    return passes
                delay = self.tunables.poll_interval  # finished, object kept: nothing runs
            self.clock.advance(delay)
        return passes

    async def run_until(self, predicate: Any, *, seconds: float = 7200) -> bool:
        """Passes until `predicate(self)` holds (checked before each pass); False if it never did."""
        deadline = self.clock.monotonic() + seconds
        while self.clock.monotonic() < deadline:
            if predicate(self):
                return True
            delay = await self.reconcile_once()
            if delay is None:
                return bool(predicate(self))
            self.clock.advance(delay)
        return bool(predicate(self))

    # -- what the world says ------------------------------------------------------------------

    def created_ids(self) -> list[str]:
        name = self.instance_name
        return self.brev.created_ids(name) if name else []

    def attempt_names(self, base: str, max_attempts: int = 10) -> list[str]:
        """Every instance name the job may use (attempt n >= 2 runs on `<base>-a<n>`)."""
        return [naming.attempt_instance_name(base, n) for n in range(1, max_attempts + 1)]

    def all_created_ids(self, base: str) -> list[str]:
        """Ids of every instance created under any attempt's name, in creation order."""
        names = set(self.attempt_names(base))
        return [c.id for c in self.brev.creates if c.accepted and c.id is not None and c.name in names]

    def live_instances(self) -> list[str]:
        return [i for i in self.created_ids() if self.brev.live(i)]

    def phases_written(self) -> list[str]:
        out: list[str] = []
        for w in self.kube.writes:
            phase = w.status.get("phase")
            if phase and (not out or out[-1] != phase):
                out.append(phase)
        return out
