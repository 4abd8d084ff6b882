"""Model-based test of admission (issue 13.2): Hypothesis drives arrivals, concurrent reconcile
passes that interleave at every await (verdict, status write, fleet update), finishes, deletes,
suspend flips, relists and operator restarts, against the real `Fleet` over the fake API.

Invariant after every step: the jobs the API shows admitted (status.queue.admittedAt) and not finished
— the only ones that may have created an instance — never exceed the cluster cap, a namespace's
instance limit or its GPU limit. At the end, with every holder finished and suspend lifted, the
highest-ranked waiting job is admitted on its next pass (nobody is stuck behind a ghost slot).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from controller.api.status import TaoBrevJobStatus
from controller.fleet.admission import JobFacts, NamespaceLimits, Quotas
from controller.fleet.ledger import Fleet
from tests.fakes.clock import FakeClock
from tests.fakes.kube import FakeKube
from tests.status_paths import queue

NAMESPACES = ("team-a", "team-b")
STAMP = "2026-11-30T12:00:00Z"


class Admissions(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.kube = FakeKube()
        self.clock = FakeClock()
        self.count = 0
        self.passes: dict[str, asyncio.Task[None]] = {}
        self.quotas = Quotas()
        self.fleet = self._fleet()

    def _fleet(self) -> Fleet:
        return Fleet(self.kube, self.quotas, relist_after=30, clock=self.clock.monotonic)

    def teardown(self) -> None:
        for task in self.passes.values():
            task.cancel()
        self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()

    @initialize(
        cluster=st.sampled_from([None, 2, 3]),
        per_ns=st.sampled_from([None, 1, 2]),
        gpus=st.sampled_from([None, 2, 3]),
    )
    def limits(self, cluster: int | None, per_ns: int | None, gpus: int | None) -> None:
        self.quotas = Quotas(cluster_max_instances=cluster, default=NamespaceLimits(per_ns, gpus))
        self.fleet = self._fleet()

    # -- the world ----------------------------------------------------------------------------

    def objects(self) -> list[Any]:
        return list(self.kube.objects.values())

    def waiting(self) -> list[Any]:
        return [
            o
            for o in self.objects()
            if not queue(o.status).get("admittedAt")
            and not o.status.get("finishedAt")
            and not o.deletion_requested
        ]

    def holders(self) -> list[Any]:
        return [
            o for o in self.objects() if queue(o.status).get("admittedAt") and not o.status.get("finishedAt")
        ]

    def facts(self, obj: Any) -> JobFacts:
        return JobFacts.from_body(obj.body())

    @rule(
        ns=st.sampled_from(NAMESPACES),
        priority=st.integers(0, 2),
        suspended=st.booleans(),
        gpus=st.integers(1, 2),
        second=st.integers(0, 59),
        gap=st.integers(0, 10),
    )
    def arrive(self, ns: str, priority: int, suspended: bool, gpus: int, second: int, gap: int) -> None:
        self.count += 1
        spec = {
            "priority": priority,
            "suspend": suspended,
            "task": {"gpus": gpus},
            "instance": {"ephemeral": {}},
        }
        self.kube.create(
            ns, f"j{self.count}", f"uid-{self.count}", spec, created=f"2026-11-30T12:00:{second:02d}Z"
        )
        obj = self.kube.objects[(ns, f"j{self.count}")]
        obj.status = {"phase": "Pending"}
        # kopf starts the new object's daemon at once: its first pass races the others.
        self.passes[obj.uid] = self.loop.create_task(self._pass(obj, (gap, gap)))

    @precondition(lambda self: bool(self.waiting()))
    @rule(data=st.data())
    def start_pass(self, data: st.DataObject) -> None:
        """A reconcile pass of a waiting job: verdict, then the status write, then the fleet
        learns of the write — each an await where other passes run."""
        candidates = [o for o in self.waiting() if o.uid not in self.passes]
        if not candidates:
            return
        obj = data.draw(st.sampled_from(candidates))
        # How long (in loop turns) the status write and the fleet update take to land.
        gaps = data.draw(st.tuples(st.integers(0, 10), st.integers(0, 10)))
        self.passes[obj.uid] = self.loop.create_task(self._pass(obj, gaps))

    async def _pass(self, obj: Any, gaps: tuple[int, int] = (1, 1)) -> None:
        try:
            verdict = await self.fleet.verdict(self.facts(obj))
            for _ in range(gaps[0]):
                await asyncio.sleep(0)
            if not verdict.admission.admitted:
                return
            # The machine writes queue.admittedAt (leaving Pending) before any create.
            if not await self.kube.patch_status(
                obj.namespace, obj.name, {"queue": {"admittedAt": STAMP}, "phase": "Provisioning"}
            ):
                return
            for _ in range(gaps[1]):
                await asyncio.sleep(0)
            self.fleet.observe(obj.uid, TaoBrevJobStatus.from_k8s(obj.status))
        finally:
            self.passes.pop(obj.uid, None)

    @precondition(lambda self: bool(self.waiting()))
    @rule(gaps=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10)), min_size=8, max_size=8))
    def tick(self, gaps: list[tuple[int, int]]) -> None:
        """Every waiting job's daemon comes round (each poll interval): a pass for each at once."""
        for obj, gap in zip(self.waiting(), gaps * 8, strict=False):
            if obj.uid not in self.passes:
                self.passes[obj.uid] = self.loop.create_task(self._pass(obj, gap))

    @rule(steps=st.integers(1, 3))
    def run_loop(self, steps: int) -> None:
        for _ in range(steps):
            self.loop.run_until_complete(asyncio.sleep(0))

    @precondition(lambda self: bool(self.holders()))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        """A holder's teardown confirmed its instance gone: finishedAt written, the fleet told."""
        obj = data.draw(st.sampled_from(self.holders()))
        obj.status = {**obj.status, "finishedAt": STAMP, "phase": "Deleted"}
        self.fleet.observe(obj.uid, TaoBrevJobStatus.from_k8s(obj.status))

    @precondition(lambda self: bool(self.objects()))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        obj = data.draw(st.sampled_from(self.objects()))
        self.kube.request_delete(obj.namespace, obj.name)
        if obj.status.get("finishedAt") or not queue(obj.status).get("admittedAt"):
            # Nothing created (or already released): the finalizer goes in this pass.
            self.kube.release(obj.namespace, obj.name)
            self.fleet.forget(obj.uid)

    @precondition(lambda self: bool(self.objects()))
    @rule(data=st.data())
    def flip_suspend(self, data: st.DataObject) -> None:
        obj = data.draw(st.sampled_from(self.objects()))
        obj.spec = {**obj.spec, "suspend": not obj.spec.get("suspend")}

    @rule(seconds=st.sampled_from([5.0, 40.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)  # past relist_after: the next verdict lists again

    @rule()
    def restart(self) -> None:
        """The operator process dies: passes in flight stop where they are; a new one starts from
        a listing."""
        for task in list(self.passes.values()):
            task.cancel()
        self.loop.run_until_complete(asyncio.sleep(0))
        self.passes.clear()
        self.fleet = self._fleet()

    # -- the invariant -------------------------------------------------------------------------

    @invariant()
    def never_over_a_limit(self) -> None:
        holders = self.holders()
        cap = self.quotas.cluster_max_instances
        if cap is not None:
            assert len(holders) <= cap, [h.name for h in holders]
        per_ns = Counter(h.namespace for h in holders)
        gpus = Counter({ns: 0 for ns in NAMESPACES})
        for h in holders:
            gpus[h.namespace] += self.facts(h).gpus
        lim = self.quotas.default
        for ns in NAMESPACES:
            if lim.max_instances is not None:
                assert per_ns[ns] <= lim.max_instances, (ns, per_ns)
            if lim.max_gpus is not None:
                assert gpus[ns] <= lim.max_gpus, (ns, gpus)

    @rule()
    def drain(self) -> None:
        """Every holder finishes and suspend is lifted: the top-ranked waiting job that can ever
        fit is admitted by its next pass. Passes in flight complete first: an admission they got
        is theirs until their write lands (or the job finishes)."""
        while self.passes:
            self.loop.run_until_complete(asyncio.sleep(0))
        for obj in self.holders():
            obj.status = {**obj.status, "finishedAt": STAMP, "phase": "Deleted"}
            self.fleet.observe(obj.uid, TaoBrevJobStatus.from_k8s(obj.status))
        for obj in self.objects():
            obj.spec = {**obj.spec, "suspend": False}
        fits = [
            o
            for o in self.waiting()
            if self.quotas.default.max_gpus is None or self.facts(o).gpus <= self.quotas.default.max_gpus
        ]
        if not fits:
            return
        top = min(fits, key=lambda o: self.facts(o).order_key())
        self.loop.run_until_complete(self._pass(top))
        assert queue(top.status).get("admittedAt"), (top.name, [(o.name, o.status) for o in self.objects()])


TestAdmissions = Admissions.TestCase
TestAdmissions.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
