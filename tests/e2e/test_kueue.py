"""Admission by a real Kueue end to end (issue 29.1, docs/kueue.md): kueue-controller-manager
built from the Go module proxy (tests/devenv/kueue.py) admits the operator's Workloads on the
real control plane; the operator (TAOBREV_KUEUE=true) and the Brev simulator do the rest.

One cohort: team-a's ClusterQueue holds 2 GPUs and may not borrow; team-b's holds none and
borrows the 1 GPU an idle `shared` queue lends. Five team-a jobs: 2 admitted, 3 wait with nothing
created. A team-b job runs on borrowed quota. An urgent team-a job (a higher
WorkloadPriorityClass) makes Kueue preempt a running team-a job: it stops through teardown (its
results and checkpoints uploaded, its instance deleted) before its quota goes to the urgent job,
and it resumes, restored, when Kueue admits it again. Never more than 2 team-a instances exist at
once (the simulator's record), and every job ends Succeeded with its Workload Finished.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import pytest

from controller.fleet import kueue as kq
from tests.brevsim.model import NOMINAL
from tests.devenv.kueue import KueueProcess
from tests.fixtures.operator import Stack
from tests.status_paths import instance
from tests.status_paths import queue as queue_of

# ~40 s of training per job (4 epochs x 1000 nominal s x speed 0.01), checkpoints synced every
# 10 s: the urgent job comes once both running jobs have a checkpoint in S3, so the preempted one
# resumes from one.
SIMULATION = {"epochs": 4, "epoch_seconds": 1000}
TEAM_A = [f"a{i}" for i in range(1, 6)]


@pytest.fixture
def operator_env() -> dict[str, str]:
    return {"TAOBREV_KUEUE": "true"}


def apply(stack: Stack, *objs: dict[str, Any]) -> None:
    stack.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})
    )


def kueue_setup(stack: Stack, sfx: str) -> dict[str, str]:
    """Flavor, three ClusterQueues in one cohort, two LocalQueues, one priority class."""
    names = {k: f"{k}-{sfx}" for k in ("brev", "team-a", "team-b", "shared", "research", "urgent")}
    v = "kueue.x-k8s.io/v1beta2"

    def cq(name: str, quota: int, **extra: Any) -> dict[str, Any]:
        resource: dict[str, Any] = {"name": kq.GPU_RESOURCE, "nominalQuota": quota, **extra}
        return {
            "apiVersion": v,
            "kind": "ClusterQueue",
            "metadata": {"name": names[name]},
            "spec": {
                "cohortName": names["research"],
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": [kq.GPU_RESOURCE],
                        "flavors": [{"name": names["brev"], "resources": [resource]}],
                    }
                ],
            },
        }

    ns = stack.namespace
    apply(
        stack,
        {"apiVersion": v, "kind": "ResourceFlavor", "metadata": {"name": names["brev"]}},
        cq("team-a", 2, borrowingLimit=0),
        cq("shared", 1),
        cq("team-b", 0),
        {"apiVersion": v, "kind": "LocalQueue", "metadata": {"name": "team-a", "namespace": ns},
         "spec": {"clusterQueue": names["team-a"]}},
        {"apiVersion": v, "kind": "LocalQueue", "metadata": {"name": "team-b", "namespace": ns},
         "spec": {"clusterQueue": names["team-b"]}},
        {"apiVersion": v, "kind": "WorkloadPriorityClass", "metadata": {"name": names["urgent"]},
         "value": 1000},
    )  # fmt: skip
    return names


def job(stack: Stack, name: str, queue: str, **labels: str) -> dict[str, Any]:
    m = stack.job_manifest(name, simulation=SIMULATION)
    m["metadata"]["namespace"] = stack.namespace
    m["metadata"]["labels"] = {kq.QUEUE_LABEL: queue, **labels}
    m["spec"]["task"]["gpus"] = 1
    m["spec"]["recovery"] = {"maxAttempts": 2, "checkpointIntervalSeconds": 10}
    return m


def statuses(stack: Stack) -> dict[str, dict[str, Any]]:
    items = json.loads(stack.kubectl("get", "tbj", "-n", stack.namespace, "-o", "json").stdout)["items"]
    return {o["metadata"]["name"]: o.get("status") or {} for o in items}


def workloads(stack: Stack) -> dict[str, dict[str, Any]]:
    items = json.loads(stack.kubectl("get", "workloads", "-n", stack.namespace, "-o", "json").stdout)["items"]
    return {o["metadata"]["ownerReferences"][0]["name"]: o for o in items}


def poll(stack: Stack, what: str, check: Any, timeout: float = 180) -> Any:
    """Until check() returns something truthy (the observable signal), failing with the state."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        death = stack.operator_death()
        assert death is None, death
        if time.monotonic() > deadline:
            state = {n: (s.get("phase"), queue_of(s), s.get("reason")) for n, s in statuses(stack).items()}
            pytest.fail(f"{what} not seen in {timeout}s: {json.dumps(state, indent=1, default=str)}")
        time.sleep(0.3)


def checkpointed(stack: Stack, name: str) -> bool:
    """The periodic checkpoint sync copied something (<resultsUri>/checkpoints/<job id>/)."""
    got = stack.s3.client().list_objects_v2(Bucket=stack.bucket, Prefix=f"{name}/checkpoints/")
    return bool(got.get("Contents"))


def event_time(event: dict[str, Any]) -> float:
    stamp = event.get("eventTime") or event.get("firstTimestamp") or event.get("lastTimestamp")
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


def stopped_within(stack: Stack, job: str, seconds: float) -> bool:
    """The job began to stop (its Warning EvictedByKueue) within `seconds` of Kueue's preemption
    of its Workload (Kueue's own Event on it), not at the end of a long exit wait."""
    got = json.loads(stack.kubectl("get", "events", "-n", stack.namespace, "-o", "json").stdout)["items"]
    wl = [
        e
        for e in got
        if e["involvedObject"]["name"].startswith(f"taobrevjob-{job}-") and e["reason"] == "Preempted"
    ]
    ours = [e for e in got if e["involvedObject"]["name"] == job and e["reason"] == "EvictedByKueue"]
    assert wl and ours, [
        (e["involvedObject"]["name"], e["reason"]) for e in got if job in e["involvedObject"]["name"]
    ]
    return min(map(event_time, ours)) - min(map(event_time, wl)) <= seconds


def admitted(s: dict[str, Any]) -> bool:
    return bool(queue_of(s).get("admittedAt"))


def check_the_record(stack: Stack, done: dict[str, dict[str, Any]], victim: str) -> None:
    """The simulator's record: the urgent job's create came after the victim's instance was gone,
    and team-a never held more than its 2 GPUs of instances at once."""
    delete_s = NOMINAL["delete_s"] * stack.sim.speed
    records = {r["name"]: r for r in stack.sim.instances(include_deleted=True)}
    victim_first = records[done[victim]["attempts"][0]["instance"]["name"]]
    urgent_inst = records[done["urgent"]["attempts"][0]["instance"]["name"]]
    assert float(urgent_inst["created_at"]) >= float(victim_first["phase_at"]) + delete_s
    team_a = {a["instance"]["name"] for n in [*TEAM_A, "urgent"] for a in done[n]["attempts"]}
    edges = sorted(
        [(float(records[i]["created_at"]), 1) for i in team_a]
        + [(float(records[i]["phase_at"]) + delete_s, -1) for i in team_a]
    )
    alive = peak = 0
    for _, step in edges:
        alive += step
        peak = max(peak, alive)
    assert peak == 2


def test_kueue_admits_two_of_five_a_second_team_borrows_and_a_preempted_job_resumes(
    stack: Stack, kueue: KueueProcess
) -> None:
    names = kueue_setup(stack, stack.namespace[-6:])
    apply(stack, *(job(stack, n, "team-a") for n in TEAM_A))

    # 2 of 5 admitted; the other 3 wait for Kueue, in Kueue's words, with nothing created.
    def two_and_three() -> dict[str, dict[str, Any]] | None:
        st = {n: s for n, s in statuses(stack).items() if n in TEAM_A}
        ins = [n for n, s in st.items() if admitted(s)]
        out = [  # in Kueue's words, once it has looked at them
            n
            for n, s in st.items()
            if queue_of(s).get("reason") == "WaitingForKueue"
            and "insufficient unused quota" in queue_of(s).get("message", "")
        ]
        return st if len(ins) == 2 and len(out) == 3 else None

    st = poll(stack, "2 team-a jobs admitted and 3 waiting for Kueue", two_and_three)
    running = sorted(n for n, s in st.items() if admitted(s))
    waiting = sorted(set(TEAM_A) - set(running))
    for n in waiting:
        assert "insufficient unused quota for taobrev.io/gpu" in queue_of(st[n])["message"], queue_of(st[n])
        assert f"LocalQueue team-a, Workload taobrevjob-{n}-" in queue_of(st[n])["message"]
        assert stack.sim.created_count(instance(st[n])["name"]) == 0
    wls = workloads(stack)
    assert sorted(wls) == sorted(TEAM_A)
    for n, wl in wls.items():
        (owner,) = wl["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("TaoBrevJob", n, True)
        assert wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"] == {
            kq.GPU_RESOURCE: "1"
        }
    cond = '{.status.conditions[?(@.type=="Queued")].status}'
    assert (
        stack.kubectl("get", "tbj", waiting[0], "-n", stack.namespace, "-o", f"jsonpath={cond}").stdout
        == "True"
    )

    # team-b has no quota of its own: its job runs on what `shared` lends through the cohort.
    apply(stack, job(stack, "b1", "team-b"))
    poll(stack, "the team-b job admitted", lambda: admitted(statuses(stack).get("b1") or {}))

    def borrowed() -> int:
        cq = json.loads(stack.kubectl("get", "clusterqueue", names["team-b"], "-o", "json").stdout)
        usage = (cq.get("status") or {}).get("flavorsUsage") or []
        return sum(int(r.get("borrowed") or 0) for f in usage for r in f["resources"])

    assert poll(stack, "team-b borrowing 1 GPU", borrowed) == 1
    assert sum(admitted(s) for n, s in statuses(stack).items() if n in TEAM_A) == 2  # no one else's

    # An urgent team-a job: Kueue preempts a running team-a job, which stops through teardown.
    poll(
        stack,
        "both admitted team-a jobs with a checkpoint synced to S3",
        lambda: all(checkpointed(stack, n) for n in running),
    )
    apply(stack, job(stack, "urgent", "team-a", **{kq.PRIORITY_CLASS_LABEL: names["urgent"]}))

    def evicted() -> str | None:
        st = statuses(stack)
        ended = {n: (st[n].get("attempts") or [{}])[0].get("endedReason") for n in running}
        return next((n for n, why in ended.items() if why == "EvictedByKueue"), None)

    victim = poll(stack, "a running team-a job evicted by Kueue", evicted)
    assert stopped_within(stack, victim, seconds=10)  # the Workload watch woke it, no exit wait
    done = {n: stack.wait_finished(n, timeout=600) for n in [*TEAM_A, "b1", "urgent"]}
    assert {n: s["outcome"] for n, s in done.items()} == dict.fromkeys(done, "Succeeded")

    # The victim: results uploaded before its instance went, attempt 2 restored and run to the end.
    first, second = done[victim]["attempts"]
    assert first["endedReason"] == "EvictedByKueue"
    assert "Preempted to accommodate a workload" in first["endedMessage"], first["endedMessage"]
    assert first["upload"].get("uploadedAt"), first["upload"]
    assert second["restoredAt"], second
    assert second["resumedFromEpoch"] >= 1 and second["resumedFrom"], second  # not from scratch
    assert done["urgent"]["attempts"][0]["instance"]["name"]

    check_the_record(stack, done, victim)

    # Every Workload Finished (quota freed), as Kueue reports it.
    def all_finished() -> bool:
        conds = [(wl.get("status") or {}).get("conditions", []) for wl in workloads(stack).values()]
        return all(any(c["type"] == "Finished" and c["status"] == "True" for c in cs) for cs in conds)

    poll(stack, "every Workload Finished", all_finished, timeout=60)
    assert sorted(workloads(stack)) == sorted([*TEAM_A, "b1", "urgent"])
