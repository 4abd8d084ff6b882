"""Many jobs at once: all finish, and the brev call budget per job holds (counted from the
simulator's record of every argv it received)."""

from __future__ import annotations

import json
import math
from collections import Counter
from datetime import datetime
from typing import Any

from tests.fixtures.operator import Stack
from tests.status_paths import instance

JOBS = 20


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def test_twenty_jobs_at_once_all_finish_within_the_brev_call_budget(stack: Stack) -> None:
    # ~10 s of training each (5 epochs x 200 nominal s x speed 0.01).
    names = [f"bulk-{i:02d}" for i in range(JOBS)]
    for name in names:
        stack.apply(stack.job_manifest(name, simulation={"epochs": 5, "epoch_seconds": 200}))
    statuses: dict[str, dict[str, Any]] = {n: stack.wait_finished(n, timeout=600) for n in names}

    assert {s["outcome"] for s in statuses.values()} == {"Succeeded"}
    assert stack.sim.created_count() == JOBS
    assert stack.live_instances() == []

    calls = [c for c in stack.sim.calls() if c.program == "brev" and c.where == "local"]
    # Remote commands travel over the operator's own ssh: `ssh [options] <alias> <command>`.
    ssh_calls = [c for c in stack.sim.calls() if c.program == "ssh" and c.where == "local"]
    by_instance: dict[str, Counter[str]] = {}
    running_execs: Counter[str] = Counter()
    log = [json.loads(line) for line in stack.operator.log_text().splitlines() if line.startswith("{")]
    # Each new leader term re-arms every running job's wait; a wait or a pass that failed is sent
    # again. On a loaded machine both happen (the flake hunt saw 3 waits in an 18 s run against a
    # budget of 2), so each one the operator reports adds one wait to the budget.
    new_terms = sum(1 for e in log if e.get("event") == "became leader") - 1
    for name, st in statuses.items():
        inst = instance(st)["name"]
        # Delete addresses the instance by the id recorded at first sighting.
        refs = {inst, instance(st)["id"]}
        verbs = Counter(c.argv[0] for c in calls if len(c.argv) > 1 and refs & set(c.argv[1:]))
        by_instance[name] = verbs
        start, end = ts(st["phaseTimes"]["Running"]), ts(st["phaseTimes"]["Uploading"])
        execs = [c.argv[-1] for c in ssh_calls if c.argv[-2:-1] == [inst]]
        waits = sum(1 for cmd in execs if "docker wait" in cmd)
        running_execs[name] = waits
        # While the container runs: one blocking `docker wait` per 30 s and nothing else besides
        # starting it and reading the log tail once it exited.
        interrupted = [
            e
            for e in log
            if e.get("name") == name and e.get("event") in ("action failed", "reconcile failed; retrying")
        ]
        budget = 1 + math.ceil((end - start + 1) / 30) + new_terms + len(interrupted)
        assert waits <= budget, (name, waits, budget, end - start, new_terms, interrupted)
        kinds = {
            "docker wait",
            "docker logs --tail",
            "docker run",
            "docker login",
            "manifest inspect",
            "docker pull",
            "docker rm -f",
            "s3 cp",
            "s3api",
            "rm -rf",
            "echo ok",
            "docker stop",
            "cat > ",  # put_file: a file delivered on ssh's stdin
        }
        unknown = [cmd for cmd in execs if not any(k in cmd for k in kinds)]
        assert not unknown, unknown
        assert verbs["create"] == 1, (name, verbs)
        # One accepted delete, then one per poll interval until a "not found" under the creating
        # identity proves the instance gone (absence is confirmed, never assumed): usually one
        # more; with 4 test workers loading 2 cores, a listing that still shows it (or a delete
        # that lands while it is DELETING) takes one more. A storm would be many more.
        assert 1 <= verbs["delete"] <= 3, (name, verbs)

    # One shared listing serves all jobs: far fewer `brev ls` than jobs x reconcile passes.
    listings = sum(1 for c in calls if c.argv[:1] == ["ls"])
    per_job = {n: sum(v.values()) for n, v in by_instance.items()}
    print(f"\nbrev calls per job (excluding shared ls): {sorted(per_job.values())}")
    print(f"shared `brev ls` calls for {JOBS} jobs: {listings}")
    print(f"blocking docker-wait calls per job: {sorted(running_execs.values())}")
    assert listings < JOBS * 10
