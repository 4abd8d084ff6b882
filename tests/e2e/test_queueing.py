"""Quotas and queueing end to end (issue 13.2): ten jobs under a limit of 3, applied at once —
on both admission paths (issue 29.1): the built-in queue (annotation taobrev.io/max-instances on
the Namespace) and a real Kueue (TAOBREV_KUEUE=true, a ClusterQueue of 3 `taobrev.io/gpu`, the
jobs labelled with its LocalQueue; docs/kueue.md).

The jobs are applied while the operator is stopped, then it starts: its first listing sees all of
them, so "admitted in order" has one right answer (a job that does not exist yet when a slot is
given away cannot be ordered before the one that got it). The test reads the simulator's own
state and record: never more than 3 instances alive (polled during the whole run, and recomputed
from the record of creates and deletes), the first three creates are the three highest-ranked
jobs, every job Succeeded. Queued jobs show Queued with their position (`kubectl get -o
jsonpath`); a queued job that is deleted is gone without any brev call naming it; a suspended job
is not admitted until `spec.suspend` is set to false.

What differs between the paths is only what each can promise: Kueue states no place in the queue
(its visibility API does), and it orders jobs of equal priority by their Workloads' creation,
which the operator's concurrent first passes after a start make in no set order — so under Kueue
every job gets its own priority (the same ranking), and the ClusterQueue is held
(stopPolicy: Hold) until every Workload exists, as the built-in queue's first listing sees all.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest

from controller.fleet import kueue as kq
from tests.brevsim.model import NOMINAL
from tests.fixtures.operator import Stack
from tests.status_paths import instance
from tests.status_paths import queue as queue_of

LIMIT = 3
JOBS = [f"q{i:02d}" for i in range(10)]
PRIORITY = {"q07": 5, "q08": 5}  # later in the file, ahead in the queue
DOOMED = "q-delete"  # lowest priority: still queued when it is deleted
SUSPENDED = "q-suspended"
# ~3 s of training per job (3 epochs x 100 nominal s x speed 0.01): runs overlap.
SIMULATION = {"epochs": 3, "epoch_seconds": 100}


@dataclass
class Route:
    """One admission route: how the limit is set, what a held job shows, and the jobs' ranking."""

    name: str
    reason: str  # status.queue.reason of a job the limit holds
    positions: bool  # whether status.queue.position says its place
    priority: dict[str, int] = field(default_factory=lambda: dict(PRIORITY))
    labels: dict[str, str] = field(default_factory=dict)
    operator_env: dict[str, str] = field(default_factory=dict)

    def impose(self, stack: Stack, limit: int) -> None:
        if self.name == "builtin":
            stack.kubectl("annotate", "namespace", stack.namespace, f"taobrev.io/max-instances={limit}")
            return
        v, ns = "kueue.x-k8s.io/v1beta2", stack.namespace
        quota = [{"name": kq.GPU_RESOURCE, "nominalQuota": limit}]
        items = [
            {"apiVersion": v, "kind": "ResourceFlavor", "metadata": {"name": f"brev-{ns}"}},
            {
                "apiVersion": v,
                "kind": "ClusterQueue",
                "metadata": {"name": ns},
                "spec": {
                    "namespaceSelector": {},
                    "stopPolicy": "Hold",
                    "resourceGroups": [
                        {
                            "coveredResources": [kq.GPU_RESOURCE],
                            "flavors": [{"name": f"brev-{ns}", "resources": quota}],
                        }
                    ],
                },
            },
            {
                "apiVersion": v,
                "kind": "LocalQueue",
                "metadata": {"name": "jobs", "namespace": ns},
                "spec": {"clusterQueue": ns},
            },
        ]
        stack.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        )

    def release(self, stack: Stack, workloads: int) -> None:
        """Kueue: once every queued job's Workload exists, the ClusterQueue admits (module doc)."""
        if self.name == "builtin":
            return
        deadline = time.monotonic() + 60
        while (
            len(
                json.loads(stack.kubectl("get", "workloads", "-n", stack.namespace, "-o", "json").stdout)[
                    "items"
                ]
            )
            < workloads
        ):
            assert time.monotonic() < deadline, "the operator did not create every Workload"
            time.sleep(0.2)
        patch = '{"spec":{"stopPolicy":"None"}}'
        stack.kubectl("patch", "clusterqueue", stack.namespace, "--type", "merge", "-p", patch)


def _kueue_route() -> Route:
    # Every job its own priority, in the built-in ranking's order (module doc).
    ranks = {n: 1000 - i + 100 * PRIORITY.get(n, 0) for i, n in enumerate(JOBS)}
    return Route(
        "kueue",
        reason="WaitingForKueue",
        positions=False,
        priority={**ranks, DOOMED: -1, SUSPENDED: 100},
        labels={kq.QUEUE_LABEL: "jobs"},
        operator_env={"TAOBREV_KUEUE": "true"},
    )


@pytest.fixture(params=["builtin", "kueue"])
def route(request: pytest.FixtureRequest) -> Route:
    if request.param == "kueue":
        request.getfixturevalue("kueue")  # the real kueue-controller-manager (tests/fixtures/kueue.py)
        return _kueue_route()
    return Route("builtin", reason="NamespaceInstanceLimit", positions=True)


@pytest.fixture
def operator_env(route: Route) -> dict[str, str]:
    return route.operator_env


def rank_key(name: str, created: dict[str, str], priority: dict[str, int]) -> tuple[int, str, str]:
    return (-priority.get(name, 0), created[name], name)


def manifest(stack: Stack, name: str, route: Route | None = None, **spec: Any) -> dict[str, Any]:
    m = stack.job_manifest(name, simulation=SIMULATION)
    m["spec"].update(spec)
    m["metadata"]["namespace"] = stack.namespace
    if route is not None and route.labels:
        m["metadata"]["labels"] = dict(route.labels)
        m["spec"]["task"]["gpus"] = 1
    return m


def snapshot(stack: Stack) -> dict[str, dict[str, str]]:
    """Every job's admission state in one read, the way a user would look (jsonpath)."""
    cond = '{.status.conditions[?(@.type=="Queued")]'
    out = stack.kubectl(
        "get",
        "tbj",
        "-n",
        stack.namespace,
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}|{.status.queue.admittedAt}|{.status.queue.position}|"
        + cond
        + ".status}|"
        + cond
        + ".reason}|"
        + cond
        + '.message}|{.status.conditions[?(@.type=="Suspended")].status}{"\\n"}{end}',
    ).stdout
    rows: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        name, admitted, position, queued, reason, message, suspended = line.split("|")
        rows[name] = {
            "admitted": admitted,
            "position": position,
            "queued": queued,
            "reason": reason,
            "message": message,
            "suspended": suspended,
        }
    return rows


def queue_settled(rows: dict[str, dict[str, str]], ranked: list[str], route: Route) -> bool:
    """Three admitted, and every other non-suspended job queued (at its place in rank order,
    where the route states places)."""
    admitted = [n for n in ranked if rows.get(n, {}).get("admitted")]
    waiting = [n for n in ranked if n not in admitted]
    return len(admitted) == LIMIT and all(
        rows[n]["queued"] == "True"
        and rows[n]["reason"] == route.reason
        and (not route.positions or rows[n]["position"] == str(i))
        for i, n in enumerate(waiting, start=1)
    )


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    edges = sorted(
        [(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1])
    )
    alive = peak = 0
    for _, step in edges:
        alive += step
        peak = max(peak, alive)
    return peak


def apply_while_stopped(stack: Stack, route: Route) -> list[str]:
    """All jobs in one `kubectl apply` while the operator is down; the ten in rank order."""
    ns = stack.namespace
    stack.operator.stop()
    prio = route.priority
    items = [manifest(stack, n, route, **({"priority": prio[n]} if n in prio else {})) for n in JOBS]
    items.append(manifest(stack, DOOMED, route, priority=prio.get(DOOMED, -1)))
    items.append(manifest(stack, SUSPENDED, route, suspend=True, priority=prio.get(SUSPENDED, 100)))
    stack.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    created = {
        o["metadata"]["name"]: o["metadata"]["creationTimestamp"]
        for o in json.loads(stack.kubectl("get", "tbj", "-n", ns, "-o", "json").stdout)["items"]
    }
    stack.operator.start()
    stack.operator.wait_leading()
    route.release(stack, workloads=len(JOBS) + 1)  # all but the suspended job's
    return sorted(JOBS, key=lambda n: rank_key(n, created, prio))


def wait_settled(stack: Stack, queue: list[str], route: Route) -> tuple[dict[str, dict[str, str]], int]:
    """Until three are admitted and the rest show their places (the rows, and the peak of live
    instances seen meanwhile)."""
    deadline = time.monotonic() + 120
    rows = snapshot(stack)
    peak = 0
    while not queue_settled(rows, queue, route):
        assert time.monotonic() < deadline, f"queue never settled: {json.dumps(rows, indent=1)}"
        peak = max(peak, len(stack.live_instances()))
        time.sleep(0.2)
        rows = snapshot(stack)
    return rows, peak


def run_to_the_end(stack: Stack) -> tuple[dict[str, dict[str, Any]], int]:
    """Until all ten finished, polling the simulator's live instances all along."""
    finished: dict[str, dict[str, Any]] = {}
    peak = 0
    deadline = time.monotonic() + 600
    while len(finished) < len(JOBS):
        assert time.monotonic() < deadline, f"not finished: {sorted(set(JOBS) - set(finished))}"
        peak = max(peak, len(stack.live_instances()))
        items = json.loads(stack.kubectl("get", "tbj", "-n", stack.namespace, "-o", "json").stdout)["items"]
        for obj in items:
            name, st = obj["metadata"]["name"], obj.get("status") or {}
            if name in JOBS and st.get("finishedAt"):
                finished[name] = st
        time.sleep(0.2)
    return finished, peak


def check_the_record(stack: Stack, finished: dict[str, dict[str, Any]], ranked: list[str]) -> None:
    """The simulator's record: at most LIMIT instances between create and confirmed gone; the
    first LIMIT creates (before any delete) are the highest-ranked jobs; later jobs are admitted
    in rank order as slots free."""
    delete_s = NOMINAL["delete_s"] * stack.sim.speed
    records = stack.sim.instances(include_deleted=True)
    assert {r["name"] for r in records} == {instance(finished[n])["name"] for n in JOBS}
    assert all(r["lifecycle"] == "delete" for r in records)
    intervals = [(float(r["created_at"]), float(r["phase_at"]) + delete_s) for r in records]
    assert max_overlap(intervals) <= LIMIT

    calls = [c for c in stack.sim.calls() if c.program == "brev" and c.where == "local"]
    first_delete = min(c.ts for c in calls if c.argv[:1] == ["delete"])
    by_instance = {instance(finished[n])["name"]: n for n in JOBS}
    creates = [c for c in calls if c.argv[:1] == ["create"] and len(c.argv) > 1 and c.argv[1] in by_instance]
    early = {by_instance[c.argv[1]] for c in creates if c.ts < first_delete}
    assert early == set(ranked[:LIMIT])
    # Each finish frees one slot for the next job in rank order, so the k-th ranked job (from 0)
    # can be admitted only once k - LIMIT + 1 jobs finished. Jobs admitted by one decision record
    # queue.admittedAt on their own passes, in any order, so this is checked per job, not as a sort.
    # (Second resolution: a finish in the same second as the admission counts, in its favour.)
    finishes = [ts(finished[n]["finishedAt"]) for n in JOBS]
    for k, name in enumerate(ranked):
        admitted = ts(queue_of(finished[name])["admittedAt"])
        done_before = sum(1 for f in finishes if f <= admitted)
        assert k < LIMIT + done_before, (name, k, done_before)


def test_ten_jobs_under_a_limit_of_three_are_admitted_in_order_and_never_exceed_it(
    stack: Stack, route: Route
) -> None:
    ns = stack.namespace
    route.impose(stack, LIMIT)
    ranked = apply_while_stopped(stack, route)
    queue = [*ranked, DOOMED]  # DOOMED ranks last; SUSPENDED is outside the queue

    # Queued jobs show Queued, the limit (and their place), through kubectl jsonpath.
    rows, peak_before = wait_settled(stack, queue, route)
    assert {n for n in queue if rows[n]["admitted"]} == set(ranked[:LIMIT])
    last = rows[DOOMED]
    assert last["reason"] == route.reason
    if route.positions:
        assert f"namespace {ns} may have {LIMIT} instance(s) at once" in last["message"]
        assert f"annotation taobrev.io/max-instances on namespace {ns}" in last["message"]
        assert f"{len(queue) - LIMIT}th in namespace {ns}'s queue" in last["message"]
    else:
        assert f"waiting for Kueue (LocalQueue jobs, Workload taobrevjob-{DOOMED}-" in last["message"]
    assert rows[SUSPENDED]["suspended"] == "True"
    assert rows[SUSPENDED]["admitted"] == ""
    assert "QUEUE" in stack.kubectl("get", "tbj", DOOMED, "-n", ns).stdout.splitlines()[0]

    # Deleting a queued job: gone, and no brev call ever named its instance.
    doomed_instance = instance(stack.status(DOOMED))["name"]
    stack.kubectl("delete", "tbj", DOOMED, "-n", ns, "--wait=false")
    stack.wait_gone(DOOMED, timeout=30)

    finished, peak_after = run_to_the_end(stack)
    peak = max(peak_before, peak_after)
    assert peak <= LIMIT
    assert peak == LIMIT  # the limit was really reached, so the bound above was tested
    assert {n: s["outcome"] for n, s in finished.items()} == dict.fromkeys(JOBS, "Succeeded")
    check_the_record(stack, finished, ranked)
    assert not [c for c in stack.sim.calls() if doomed_instance in c.argv]

    # The suspended job was never admitted; set suspend to false and it runs.
    held = stack.status(SUSPENDED)
    assert held["phase"] == "Pending"
    assert "admittedAt" not in queue_of(held)
    assert queue_of(held)["reason"] == "Suspended"
    assert stack.sim.created_count(instance(held)["name"]) == 0
    stack.kubectl("patch", "tbj", SUSPENDED, "-n", ns, "--type", "merge", "-p", '{"spec":{"suspend":false}}')
    done = stack.wait_finished(SUSPENDED, timeout=180)
    assert done["outcome"] == "Succeeded"
    assert queue_of(done)["admittedAt"]


def test_a_job_a_quota_holds_past_queued_seconds_fails_quota_having_created_nothing(
    stack: Stack, route: Route
) -> None:
    """spec.timeouts.queuedSeconds: the second job under a limit of one instance waits behind the
    first, then fails QueueTimeout with failureClass Quota; nothing was created for it."""
    ns = stack.namespace
    route.impose(stack, 1)
    route.release(stack, workloads=0)
    holder = manifest(stack, "holder", route)
    holder["spec"]["task"]["specContent"] = stack.job_manifest(
        "holder",
        simulation={"epochs": 3, "epoch_seconds": 2000},  # ~60 s
    )["spec"]["task"]["specContent"]
    stack.apply(holder)

    def admitted(o: dict[str, Any] | None) -> bool:
        return bool(queue_of((o or {}).get("status") or {}).get("admittedAt"))

    stack.wait_for("holder", admitted, "the holder admitted")
    waiting = manifest(stack, "waiting", route)
    waiting["spec"]["timeouts"] = {"queuedSeconds": 10}
    stack.apply(waiting)
    status = stack.wait_finished("waiting", timeout=120)
    assert (status["outcome"], status["reason"], status["failureClass"]) == (
        "Failed",
        "QueueTimeout",
        "Quota",
    )
    assert route.reason in status["message"] and "nothing was created" in status["message"]
    assert stack.sim.created_count(instance(status)["name"]) == 0 if instance(status).get("name") else True
    assert stack.status("holder").get("outcome") is None, "the holder still runs"
    wide = stack.kubectl("get", "tbj", "waiting", "-n", ns, "-o", "wide").stdout
    assert "Quota" in wide.splitlines()[1]
