"""Billed idle of a 5-step TAO chain (train, evaluate, prune, retrain, export): ONE workflow
(spec.steps: one instance, one boot, each image pulled once) vs FIVE single jobs (one instance
each), side by side at the same F on their own simulators and operators.

Idle = billed seconds (`brev create` sent -> `brev delete` sent, every instance of the chain)
minus the work both forms must do: the steps' runs (epochs x epoch seconds each, the simulated
training) and the uploads of their results (each step's results reach S3 either way; from each
upload's start to the next command on its instance). What is left is every boot, first exec,
registry login and pull, and the operator's own waiting: what chaining on one instance saves.
The singles run at once (their order would only change the wall time, not what each one bills);
the workflow's steps run one after another on its instance."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from controller.versions import load_versions
from tests.bench.figures import Figure, union_seconds
from tests.bench.scale import Scale
from tests.bench.scenario_idle import attempts_of, billed_spans
from tests.bench.stack import APPLY_TIMEOUT, Bench, Scenario, finished
from tests.brevsim.harness import SimCall

CHAIN = (("train", "train"), ("evaluate", "evaluate"), ("prune", "prune"), ("retrain", "retrain"),
         ("export", "export"))  # fmt: skip
EPOCHS = 2
EPOCH_SECONDS = 100.0


def _spec(_action: str) -> str:
    return f"simulation:\n  epochs: {EPOCHS}\n  epoch_seconds: {EPOCH_SECONDS:g}\n"


def _single(sc: Scenario, name: str, action: str) -> dict[str, Any]:
    m = sc.stack.job_manifest(name, timeouts=sc.scale.timeouts(), extra_env=False)
    m["metadata"]["namespace"] = sc.stack.namespace
    m["spec"]["task"].update({"networkArch": "dino", "action": action, "specContent": _spec(action)})
    # The image a workflow step of this action runs (export: -deploy), so both pull the same.
    if action == "export":
        m["spec"]["task"]["image"] = load_versions().images.tao_toolkit.deploy
    return m


def _workflow(sc: Scenario, name: str) -> dict[str, Any]:
    m = sc.stack.job_manifest(name, timeouts=sc.scale.timeouts(), extra_env=False)
    m["metadata"]["namespace"] = sc.stack.namespace
    del m["spec"]["task"]
    steps: list[dict[str, Any]] = []
    for step, action in CHAIN:
        entry: dict[str, Any] = {
            "name": step,
            "networkArch": "dino",
            "action": action,
            "specContent": _spec(action),
        }
        if steps:
            entry["inputs"] = [{"fromStep": steps[-1]["name"]}]
        steps.append(entry)
    m["spec"]["steps"] = steps
    # The whole chain runs in one Running phase: its timeout bounds all five steps.
    m["spec"]["timeouts"]["runningSeconds"] = 5 * m["spec"]["timeouts"]["runningSeconds"]
    return m


def _is_upload(call: SimCall) -> bool:
    """An `aws s3 cp|sync ... s3://...` (results to S3) run in an aws-cli container."""
    if call.program != "aws" or "s3" not in call.argv:
        return False
    words = [a for a in call.argv[call.argv.index("s3") + 1 :] if not a.startswith("-")]
    return bool(words) and words[0] in ("cp", "sync") and words[-1].startswith("s3://")


def upload_seconds(remote: list[SimCall]) -> float:
    """Time an instance spent uploading results: each upload until the next command on it."""
    ordered = sorted(remote, key=lambda c: c.ts)
    return union_seconds([(c.ts, nxt.ts) for c, nxt in itertools.pairwise(ordered) if _is_upload(c)])


def _apply(sc: Scenario, items: list[dict[str, Any]]) -> float:
    began = time.time()
    sc.stack.cp.kubectl(
        "create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        timeout=APPLY_TIMEOUT,
    )  # fmt: skip
    return began


@dataclass(frozen=True)
class ChainResult:
    label: str
    instances: int  # instances the chain was billed for
    idle_wall: float | None  # the chain's billed idle, wall s (None: not every job Succeeded)
    billed_wall: float
    upload_wall: float  # of which uploading the steps' results (work, not idle)
    outcomes: Counter[str]
    wall: float  # apply -> the last job finished


def _collect(sc: Scenario, names: list[str], began: float) -> ChainResult:
    try:
        nominal = sc.scale.brev_durations()
        lifecycle = sc.scale.wall(sum(nominal[k] for k in ("deploy_s", "ssh_delay_s", "pull_seconds")))
        runs = sc.scale.wall(len(CHAIN) * EPOCHS * EPOCH_SECONDS)
        sc.watch.wait(names, finished, timeout=max(600.0, 20 * lifecycle + 4 * runs))
        calls = sc.calls()
        outcomes: Counter[str] = Counter()
        billed, uploads, instances, complete = 0.0, 0.0, 0, True
        for n in names:
            st = sc.watch.status.get(n, {})
            outcomes[str(st.get("outcome") or "unfinished")] += 1
            spans = billed_spans(calls, attempts_of(st)) if st.get("outcome") == "Succeeded" else None
            if not spans:
                complete = False
                continue
            billed += sum(d - c for c, d in spans)
            instances += len(spans)
            for (name, _), (_, deleted) in zip(attempts_of(st), spans, strict=True):
                on_it = [c for c in calls if c.where == "remote" and c.instance == name and c.ts < deleted]
                uploads += upload_seconds(on_it)
        wall = max((sc.watch.first_seen[n].get("Deleted", 0.0) for n in names), default=0.0) - began
        idle = max(0.0, billed - runs - uploads) if complete else None
        return ChainResult(sc.name, instances, idle, billed, uploads, outcomes, wall)
    finally:
        sc.close()


def run(bench: Bench, scale: Scale) -> tuple[ChainResult, ChainResult]:
    """The workflow and the five singles side by side (same clock, same machine load)."""
    flow = bench.scenario("chain-flow", scale=scale)
    try:
        singles = bench.scenario("chain-jobs", scale=scale)
    except BaseException:
        flow.close()
        raise
    names = [f"single-{step}" for step, _ in CHAIN]
    try:
        flow_began = _apply(flow, [_workflow(flow, "chain")])
        singles_began = _apply(
            singles, [_single(singles, n, a) for n, (_, a) in zip(names, CHAIN, strict=True)]
        )
    except BaseException:
        flow.close()
        singles.close()
        raise
    try:
        flow_result = _collect(flow, ["chain"], flow_began)
    finally:
        singles_result = _collect(singles, names, singles_began)
    return flow_result, singles_result


def figures(flow: ChainResult, singles: ChainResult, scale: Scale) -> list[Figure]:
    def real(wall: float | None) -> float | None:
        return None if wall is None else scale.real(wall)

    note = (
        f"5 steps ({', '.join(s for s, _ in CHAIN)}), {EPOCHS} x {EPOCH_SECONDS:g} s each; workflow "
        f"{dict(flow.outcomes)} on {flow.instances} instance(s), {flow.wall:.0f} s wall; singles "
        f"{dict(singles.outcomes)} on {singles.instances} instances, {singles.wall:.0f} s wall; side by "
        f"side at F = {scale.factor:g}. Billed (real s): workflow {scale.real(flow.billed_wall):.0f} "
        f"(uploads {scale.real(flow.upload_wall):.0f}), singles {scale.real(singles.billed_wall):.0f} "
        f"(uploads {scale.real(singles.upload_wall):.0f}); runs {len(CHAIN) * EPOCHS * EPOCH_SECONDS:.0f} "
        "each. Fixed per-call costs count 1/F-fold (an upper bound on the workflow's idle)"
    )
    f, s = real(flow.idle_wall), real(singles.idle_wall)
    return [
        Figure(f"5-step chain billed idle: one workflow (F = {scale.factor:g})", f, "real s", note=note),
        Figure("5-step chain billed idle: five single jobs", s, "real s"),
        Figure(
            "chain billed idle: five single jobs / one workflow",
            None if not f or s is None else s / f,
            "x",
            4.0,
            ">=",
            note="" if f is not None and s is not None else "not every job Succeeded",
            incomplete=f is None or s is None,
        ),
    ]
