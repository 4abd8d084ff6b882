"""One operator process (a replica) built like controller.app.build, driven like
controller.handlers drives it under kopf: a daemon per object (stopped on deletion and cancelled
2 s later, kopf's cancellation_timeout), the delete handler retried until it returns (then the
finalizer goes), the leader election loop and the orphan sweeper."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from controller.api.errors import NotLeading
from controller.api.naming import CANCEL_ANNOTATION
from controller.api.reasons import RESULTS_BUCKET_NOT_FOUND
from controller.effects.directory import InstanceDirectory
from controller.effects.lanes import LANES, Lane, Lanes
from controller.fleet.leadership import LeaderElector, lead_or_stop
from controller.fleet.ledger import Fleet, quotas_from
from controller.fleet.orphans import Policy
from controller.fleet.retained import RetainedStore
from controller.fleet.sweeper import Sweeper
from controller.handlers import event_text
from controller.kube.secret_arrivals import SecretArrivals
from controller.lifecycle.machine import decide
from controller.lifecycle.steps import Problem
from controller.lifecycle.tunables import Timing
from controller.observability.metrics import Recorder
from controller.preflight.checker import Preflight, SecretLoader
from controller.preflight.checks import s3_location
from controller.preflight.s3 import S3Checks, S3Target
from controller.reconciler import JobRef, Reconciler
from controller.settings import Settings
from tests.simulation.world import CURRENT, MISSING_BUCKET, SimRunner

if TYPE_CHECKING:
    from tests.simulation.run import Simulation

CANCELLATION_TIMEOUT = 2.0  # kopf.daemon(cancellation_timeout=2.0) in controller/handlers.py


@dataclass(frozen=True)
class Deployment:
    name: str
    namespaces: tuple[str, ...]
    operator_namespace: str
    replicas: int
    settings: Settings


class SimS3Checks(S3Checks):
    """The pre-flight's S3 calls against the simulated world: one Kubernetes-like latency, and
    the bucket of Knobs.missing_bucket does not exist."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__()
        self.sim = sim

    async def check(
        self, target: S3Target, results_uri: str, inputs: list[str], job_id: str
    ) -> list[Problem]:
        await self.sim.latency()
        self.sim.alive_caller()
        bucket, _ = s3_location(results_uri)
        if bucket == MISSING_BUCKET:
            message = f"spec.data.resultsUri {results_uri}: bucket {bucket!r} does not exist"
            return [Problem("spec.data.resultsUri", RESULTS_BUCKET_NOT_FOUND, message)]
        return []


class Process:
    """One incarnation of one replica; a restart builds a new one (nothing in memory survives)."""

    def __init__(self, sim: Simulation, deployment: Deployment, replica: int, incarnation: int) -> None:
        self.sim = sim
        self.deployment = deployment
        self.name = f"{deployment.name}-{replica}#{incarnation}"
        self.identity = f"{deployment.name}-{replica}_{incarnation}"
        self.replica = replica
        self.dead = False
        self.partitioned_until = 0.0
        self.secrets_registry: tuple[Any, Any] = (frozenset(), None)
        # Insertion-ordered (not a set): a crash cancels them in the order they started, the same
        # in every process (a set's order follows memory addresses, and a seed could replay differently).
        self.tasks: dict[asyncio.Task[Any], None] = {}
        self.daemons: dict[tuple[str, str], asyncio.Task[Any]] = {}
        self.stopped: dict[tuple[str, str], asyncio.Event] = {}
        self.deleters: dict[tuple[str, str], asyncio.Task[Any]] = {}
        self.bodies: dict[tuple[str, str], dict[str, Any]] = {}
        self.context = contextvars.copy_context()
        self.context.run(CURRENT.set, self)
        s = deployment.settings
        loop_time = sim.clock.monotonic
        self.directory = InstanceDirectory(sim.brev, clock=loop_time)
        sizes = {lane: (int(getattr(s, f"lane_{lane}")), f"lane {lane}") for lane in LANES}
        lanes = Lanes(sizes, clock=sim.clock.now)
        self.runner = SimRunner(sim.brev, self.directory, lanes)
        self.retained = RetainedStore(sim.kube, deployment.operator_namespace)
        self.registry = CollectorRegistry()  # scraped for secrets at the end (run.py)
        self.recorder = Recorder(self.registry, clock=sim.clock.unix)
        self.elector = LeaderElector(
            sim.leases[deployment.name],
            self.identity,
            Timing(s.leader_lease_duration, s.leader_renew_deadline, s.leader_retry_period),
            clock=loop_time,
            now=sim.clock.now,
            on_change=self._leadership_changed,
        )
        self.runner.fence = self.elector.is_leading  # as controller/app.py wires it
        self.reconciler = self._new_reconciler()
        self.sweeper = Sweeper(
            brev=sim.brev,
            directory=self.directory,
            kube=sim.kube,
            retained=self.retained,
            recorder=self.recorder,
            leadership=self.elector,
            cluster_id=s.resolved_cluster_id(),
            deployment=s.resolved_deployment_id(),
            policy=Policy(s.orphan_policy),
            interval=s.orphan_sweep_interval,
            grace=s.orphan_grace,
            listing_max_age=s.listing_max_age,
            namespaces=s.namespaces,
            clock=sim.clock.now,
        )

    def _new_reconciler(self) -> Reconciler:
        s = self.deployment.settings
        fleet = Fleet(
            self.sim.kube,
            quotas_from(s.max_instances, s.namespace_max_instances, s.namespace_max_gpus),
            namespaces=s.namespaces,
            clock=self.sim.clock.monotonic,
        )
        return Reconciler(
            kube=self.sim.kube,
            directory=self.directory,
            runner=self.runner,
            recorder=self.recorder,
            events=self._event,
            tunables=s.tunables(),
            decide=decide,
            listing_max_age=s.listing_max_age,
            clock=self.sim.clock.now,
            retained=self.retained,
            fleet=fleet,
            wake_queued=True,
            preflight=self._new_preflight,
        )

    def _new_preflight(self, load_secrets: SecretLoader, read_secret: Any) -> Preflight:
        return Preflight(
            load_secrets=load_secrets,
            read_secret=read_secret,
            s3=SimS3Checks(self.sim),
            prices=None,
            arrivals=SecretArrivals(read_secret, self.deployment.settings.secret_poll_interval),
            clock=self.sim.clock.now,
            monotonic=self.sim.clock.monotonic,
        )

    def _leadership_changed(self, leading: bool) -> None:
        self.sim.trace(f"{self.name} {'leads' if leading else 'lost the lead'}")
        now = self.sim.clock.monotonic()
        if leading:
            self.sim.availability.leads(self.name, self.deployment.name, now)
        else:
            self.sim.availability.stops_leading(self.name, now)
        if leading:  # a new term: the sweeper starts its memory (and grace) afresh
            self.sim.term_started[self.deployment.name] = self.sim.clock.monotonic()
        if leading and not self.elector.resumed:  # as controller/app.add_leader_election
            self.reconciler = self._new_reconciler()

    def _event(self, ref: JobRef, type_: str, reason: str, message: str) -> None:
        # What the operator's Event sink posts (controller/handlers.py), not the raw text.
        reason, message = event_text(reason, message)
        self.sim.event_posted(self, ref, type_, reason, message)

    # -- process lifetime ----------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}:{name}", context=self.context)
        self.tasks[task] = None
        task.add_done_callback(lambda done: self.tasks.pop(done, None))
        return task

    def start(self) -> None:
        self.sim.trace(f"{self.name} starts")
        self.spawn(self.elector.run(), "election")
        self.spawn(self.sweeper.run(), "sweeper")
        self.sim.kube.watchers.append(self.on_change)
        for namespace, name in sorted(self.sim.kube.objects):
            self.on_change(namespace, name)

    def crash(self, why: str) -> None:
        if self.dead:
            return
        self.dead = True
        self.sim.trace(f"{self.name} crashes ({why})")
        self.sim.availability.stops_leading(self.name, self.sim.clock.monotonic())
        if self.on_change in self.sim.kube.watchers:
            self.sim.kube.watchers.remove(self.on_change)
        for task in list(self.tasks):
            task.cancel()

    def watches(self, namespace: str) -> bool:
        ns = self.deployment.namespaces
        return not ns or namespace in ns

    def on_change(self, namespace: str, name: str) -> None:
        """A watch event, delivered late; the object is read as it is on arrival (coalesced)."""
        if not self.watches(namespace):
            return
        lag = self.sim.rng.uniform(0, self.sim.knobs.watch_lag_max)
        asyncio.get_running_loop().call_later(lag, self._seen, namespace, name, context=self.context)

    def _seen(self, namespace: str, name: str) -> None:
        if self.dead:
            return
        key = (namespace, name)
        body = self.sim.kube.snapshot(namespace, name)
        if body is None:
            return
        self.bodies[key] = body  # what this replica's watch has delivered (kopf's live body)
        if CANCEL_ANNOTATION in (body["metadata"].get("annotations") or {}):
            # controller/handlers.cancel_requested: kopf calls it for annotated objects only.
            self.reconciler.notice(JobRef.from_body(body))
        deleting = bool(body["metadata"].get("deletionTimestamp"))
        if key not in self.daemons and not deleting and not body.get("status", {}).get("finishedAt"):
            self.stopped[key] = asyncio.Event()
            self.daemons[key] = self.spawn(self._daemon(key), f"daemon {namespace}/{name}")
        if deleting:
            stopped = self.stopped.get(key)
            if stopped is not None and not stopped.is_set():
                stopped.set()
                daemon = self.daemons.get(key)
                if daemon is not None:
                    asyncio.get_running_loop().call_later(CANCELLATION_TIMEOUT, daemon.cancel)
            if key not in self.deleters:
                self.deleters[key] = self.spawn(self._delete_handler(key, body), f"delete {namespace}/{name}")

    # -- kopf's handlers, as controller/handlers.py writes them --------------------------------

    async def _daemon(self, key: tuple[str, str]) -> None:
        stopped = self.stopped[key]
        while not stopped.is_set():
            body = self.bodies.get(key)
            if body is None or body["metadata"].get("deletionTimestamp"):
                return
            if not await lead_or_stop(self.elector, stopped.wait):
                continue
            # kopf's daemon body is live: after a wait it is what the watch delivered last.
            body = self.bodies[key]
            if body["metadata"].get("deletionTimestamp"):
                return
            try:
                delay = await self.elector.while_leading(
                    self.reconciler.reconcile(JobRef.from_body(body, deleting=False))
                )
            except NotLeading:
                continue
            except Exception as exc:  # kopf logs it and restarts the daemon after its backoff
                self.sim.unexpected(self, f"daemon {key}: {type(exc).__name__}: {exc}")
                await asyncio.sleep(5.0)
                continue
            if delay is None:
                return
            if delay > 0:

                async def wait(seconds: float) -> None:  # kopf's stopped.wait(seconds)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stopped.wait(), seconds)

                # As controller/handlers.drive: a cancel the last pass did not know of ends it.
                await self.reconciler.rest(JobRef.from_body(self.bodies[key], deleting=False), delay, wait)

    async def _delete_handler(self, key: tuple[str, str], body: dict[str, Any]) -> None:
        s = self.deployment.settings
        while True:
            if not await self.elector.wait_leading(timeout=float(s.leader_lease_duration)):
                await asyncio.sleep(1.0)  # kopf.TemporaryError(delay=1)
                continue
            # As controller/handlers.teardown: kopf's live body, read after the wait for the Lease.
            ref = JobRef.from_body(self.bodies.get(key, body), deleting=True)
            try:
                delay = await self.elector.while_leading(self.reconciler.reconcile(ref))
            except NotLeading:
                await asyncio.sleep(1.0)
                continue
            except Exception as exc:
                self.sim.unexpected(self, f"delete handler {key}: {type(exc).__name__}: {exc}")
                await asyncio.sleep(s.poll_interval)
                continue
            if delay is None:
                self.reconciler.forget(ref)
                break
            await asyncio.sleep(delay)
        daemon = self.daemons.get(key)
        if daemon is not None:
            await asyncio.wait({daemon})  # kopf removes the finalizer once its daemons are gone
        self.sim.alive_caller()
        await self.sim.latency()
        self.sim.alive_caller()
        self.sim.trace(f"{self.name} releases the finalizer of {key[0]}/{key[1]}")
        self.sim.kube.release(*key)


__all__ = ["Deployment", "Lane", "Process"]
