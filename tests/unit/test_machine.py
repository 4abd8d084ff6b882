"""The pure state machine, driven through a small in-memory world (no I/O, injected time)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller import machine
from controller.brev.client import DELETING, DEPLOYING, FAILURE, RUNNING, Instance
from controller.models import Outcome, Phase, TaoBrevJobSpec
from controller.steps import (
    Action,
    ActionFailure,
    CleanupWorkload,
    CreateInstance,
    Decision,
    DeleteInstance,
    Observation,
    PrepareWorkload,
    ProbeExec,
    StartContainer,
    StopContainer,
    UploadResults,
    UploadSummary,
    WaitForExit,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TUN = machine.Tunables(poll_interval=5, wait_timeout=30, create_settle=60, backoff_base=2, backoff_max=60)


def spec(**instance: Any) -> TaoBrevJobSpec:
    inst = instance or {"ephemeral": {"gpuName": "L40S"}}
    return TaoBrevJobSpec.model_validate(
        {
            "task": {"networkArch": "classification_pyt", "action": "train", "specContent": "a: 1\n"},
            "instance": inst,
            "data": {"resultsUri": "s3://bucket/out"},
            "credentials": {"ngcApiKey": {"name": "ngc"}, "s3": {"name": "s3"}},
            "timeouts": {"waitingExecSeconds": 600, "runningSeconds": 3600},
        }
    )


@dataclass
class World:
    """Brev as the machine sees it: one instance, one container."""

    now: datetime = T0
    instance: Instance | None = None
    deploy_passes: int = 2
    probe_failures: int = 1
    exit_code: int | None = None
    run_passes: int = 2
    deleted: bool = False
    created: int = 0
    deletes: int = 0
    log: list[Action] = field(default_factory=list)
    fail_next: ActionFailure | None = None
    prepare_failures: int = 0

    def observe(self, deleting: bool = False) -> Observation:
        if self.instance is not None and self.instance.status == DEPLOYING:
            self.deploy_passes -= 1
            if self.deploy_passes <= 0:
                self.instance = replace(self.instance, status=RUNNING)
        if self.instance is not None and self.instance.status == DELETING:
            self.instance = None
        return Observation(now=self.now, deleting=deleting, instance_known=True, instance=self.instance)

    def act(self, actions: tuple[Action, ...], obs: Observation) -> Observation:
        for a in actions:
            self.log.append(a)
            if self.fail_next is not None:
                f, self.fail_next = self.fail_next, None
                return obs.with_(failure=f)
            match a:
                case CreateInstance(request=req):
                    self.created += 1
                    if self.instance is None:
                        self.instance = Instance(name=req.name, id="i-1", status=DEPLOYING, gpu="L40S")
                    obs = obs.with_(created=True)
                case ProbeExec():
                    self.probe_failures -= 1
                    obs = obs.with_(probe_ok=self.probe_failures < 0)
                case PrepareWorkload():
                    if self.prepare_failures > 0:
                        self.prepare_failures -= 1
                        return obs.with_(failure=ActionFailure("PrepareWorkload", "PullSlow", "x", False))
                    obs = obs.with_(prepared=True)
                case StartContainer():
                    obs = obs.with_(container_started=True)
                case WaitForExit():
                    self.run_passes -= 1
                    code = self.exit_code if self.run_passes <= 0 else None
                    obs = obs.with_(
                        exit_code=code, log_tail=("epoch 1 loss 0.5",) if code is not None else ()
                    )
                case StopContainer():
                    self.run_passes = 0
                    self.exit_code = 143 if self.exit_code is None else self.exit_code
                    obs = obs.with_(container_stopped=True)
                case UploadResults():
                    obs = obs.with_(upload=UploadSummary(objects=3, bytes=300))
                case CleanupWorkload():
                    obs = obs.with_(cleaned=True)
                case DeleteInstance():
                    self.deletes += 1
                    if self.instance is not None:
                        self.instance = replace(self.instance, status=DELETING)
                    obs = obs.with_(delete_requested=True)
        return obs


def drive(
    spec_: TaoBrevJobSpec,
    world: World,
    *,
    status: dict[str, Any] | None = None,
    delete_in: Phase | None = None,
    passes: int = 60,
    partial: bool = False,
    until: Any = None,
    delete_if: Any = None,
) -> tuple[list[dict[str, Any]], list[Decision]]:
    """Run reconcile passes like the reconciler does; returns every status written."""
    status = dict(status or {})
    history: list[dict[str, Any]] = []
    decisions: list[Decision] = []
    deleting = False
    for _ in range(passes):
        deleting = deleting or (delete_in is not None and status.get("phase") == delete_in)
        deleting = deleting or (delete_if is not None and delete_if(status, world))
        if until is not None and until(status, world):
            return history, decisions
        obs = world.observe(deleting)
        for _step in range(12):  # like the reconciler's MAX_STEPS_PER_PASS
            d = machine.decide(
                spec_, status, obs, namespace="ns", name="job", uid="uid-1", generation=1, tunables=TUN
            )
            decisions.append(d)
            status = d.status
            history.append(dict(status))
            if not d.actions:
                break
            obs = world.act(d.actions, obs.with_(failure=None))
            if any(isinstance(a, WaitForExit) for a in d.actions) and obs.exit_code is None:
                world.now += timedelta(seconds=TUN.wait_timeout)
                break
            if obs.failure is not None:
                d = machine.decide(
                    spec_, status, obs, namespace="ns", name="job", uid="uid-1", generation=1, tunables=TUN
                )
                status = d.status
                history.append(dict(status))
                break
        if status.get("finishedAt"):
            return history, decisions
        world.now += timedelta(seconds=d.requeue_after or 1)
    if partial:
        return history, decisions
    raise AssertionError(f"job did not finish; last status {status}")


def phases(history: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for s in history:
        if not out or out[-1] != s["phase"]:
            out.append(s["phase"])
    return out


def cond(status: dict[str, Any], ctype: str) -> str:
    return next(c["status"] for c in status["conditions"] if c["type"] == ctype)


ALL_PHASES = ["Pending", "Provisioning", "WaitingExec", "Pulling", "Running", "Uploading", "Deleted"]


def test_happy_path_walks_every_phase_in_order_and_deletes_the_instance_once() -> None:
    world = World(exit_code=0)
    history, _ = drive(spec(), world)
    final = history[-1]
    assert phases(history) == ALL_PHASES
    assert final["outcome"] == "Succeeded" and final["exitCode"] == 0
    assert world.created == 1 and world.deletes == 1 and world.instance is None
    assert final["results"] == {"uri": "s3://bucket/out", "objects": 3, "bytes": 300}
    assert cond(final, "Ready") == "True" and cond(final, "Succeeded") == "True"
    assert cond(final, "Reconciling") == "False" and cond(final, "Stalled") == "False"
    assert final["backendRef"] == f"{final['instanceName']}/{final['jobId']}"


def test_instance_name_and_create_marker_are_in_status_before_create_runs() -> None:
    _, decisions = drive(spec(), World(exit_code=0))
    creating = next(d for d in decisions if any(isinstance(a, CreateInstance) for a in d.actions))
    create = next(a for a in creating.actions if isinstance(a, CreateInstance))
    assert creating.status["instanceName"] == create.request.name
    assert creating.status["createRequestedAt"]
    assert create.request.gpu_name == "L40S"


def test_restart_after_create_adopts_the_existing_instance_instead_of_creating_again() -> None:
    history, _ = drive(spec(), World(exit_code=0), until=lambda s, w: bool(s.get("createRequestedAt")))
    crashed = history[-1]
    world = World(exit_code=0)
    world.instance = Instance(name=crashed["instanceName"], id="i-1", status=DEPLOYING)
    history2, _ = drive(spec(), world, status=crashed)
    assert world.created == 0
    assert history2[-1]["outcome"] == "Succeeded"


def test_an_ambiguous_create_is_retried_with_the_same_name_only_after_the_settle_time() -> None:
    status = {
        "phase": "Provisioning",
        "phaseTimes": {"Provisioning": "2026-11-29T12:00:00Z"},
        "instanceName": "tbj-ns-job-abc",
        "instanceCreated": True,
        "jobId": "job-abc",
        "createRequestedAt": "2026-11-29T12:00:00Z",
    }
    obs = Observation(now=T0 + timedelta(seconds=30), instance_known=True)
    d = machine.decide(spec(), status, obs, namespace="ns", name="job", uid="u", generation=1, tunables=TUN)
    assert not d.actions, "inside the settle time an absent instance may still be on its way"
    obs = Observation(now=T0 + timedelta(seconds=61), instance_known=True)
    d = machine.decide(spec(), status, obs, namespace="ns", name="job", uid="u", generation=1, tunables=TUN)
    (create,) = d.actions
    assert isinstance(create, CreateInstance) and create.request.name == "tbj-ns-job-abc"


def test_unknown_listing_never_triggers_create_or_finish() -> None:
    status = {
        "phase": "Provisioning",
        "phaseTimes": {"Provisioning": "2026-11-29T12:00:00Z"},
        "instanceName": "i",
        "instanceCreated": True,
        "jobId": "j",
    }
    obs = Observation(now=T0, instance_known=False)
    d = machine.decide(spec(), status, obs, namespace="ns", name="job", uid="u", generation=1, tunables=TUN)
    assert d.actions == () and d.requeue_after == TUN.poll_interval


def test_non_zero_exit_uploads_logs_and_results_then_deletes_and_fails_with_the_code() -> None:
    world = World(exit_code=3)
    history, decisions = drive(spec(), world)
    final = history[-1]
    assert final["outcome"] == "Failed" and final["reason"] == "TrainingFailed" and final["exitCode"] == 3
    assert "code 3" in final["message"] or "code 3" in str([d.events for d in decisions])
    assert any(isinstance(a, UploadResults) for a in world.log)
    assert world.deletes == 1 and world.instance is None
    assert cond(final, "Stalled") == "True" and cond(final, "Succeeded") == "False"


def test_delete_while_running_stops_the_container_uploads_and_tears_down_as_canceled() -> None:
    world = World(exit_code=None, run_passes=1000)
    history, _ = drive(spec(), world, delete_in=Phase.RUNNING)
    final = history[-1]
    kinds = [type(a).__name__ for a in world.log]
    assert kinds.index("StopContainer") < kinds.index("UploadResults") < kinds.index("DeleteInstance")
    assert final["outcome"] == "Canceled" and final["uploadedAt"]
    assert world.instance is None


@pytest.mark.parametrize("phase", [Phase.PROVISIONING, Phase.WAITING_EXEC, Phase.PULLING])
def test_delete_before_the_container_exists_tears_down_without_upload(phase: Phase) -> None:
    world = World(exit_code=0, probe_failures=3, deploy_passes=4, prepare_failures=2)
    history, _ = drive(
        spec(),
        world,
        delete_if=lambda s, w: s.get("phase") == phase and w.created > 0 and not s.get("containerStartedAt"),
    )
    assert phase in phases(history)
    assert history[-1]["outcome"] == "Canceled"
    assert not any(isinstance(a, (UploadResults, StartContainer)) for a in world.log)
    assert world.instance is None and world.deletes == 1


def test_reused_instance_is_neither_created_nor_deleted_but_cleaned_up() -> None:
    world = World(exit_code=0)
    world.instance = Instance(name="shared-box", id="i-9", status=RUNNING, gpu="A100")
    history, _ = drive(spec(reuse={"name": "shared-box"}), world)
    assert world.created == 0 and world.deletes == 0
    cleanups = [a for a in world.log if isinstance(a, CleanupWorkload)]
    assert cleanups and all(c.must_succeed for c in cleanups)
    assert history[-1]["outcome"] == "Succeeded" and history[-1]["instanceCreated"] is False


def test_missing_reused_instance_fails_with_a_reason_naming_the_field() -> None:
    history, _ = drive(spec(reuse={"name": "nope"}), World())
    final = history[-1]
    assert final["outcome"] == "Failed" and final["reason"] == machine.R_REUSE_MISSING
    assert "spec.instance.reuse.name" in final["message"]


def test_exec_never_ready_times_out_naming_the_phase_and_limit_and_still_tears_down() -> None:
    world = World(exit_code=0, probe_failures=10_000)
    history, _ = drive(spec(), world, passes=400)
    final = history[-1]
    assert final["reason"] == "WaitingExecTimeout" and "600s" in final["message"]
    assert world.deletes == 1 and world.instance is None


def test_instance_lost_mid_run_fails_with_a_distinct_reason() -> None:
    world = World(exit_code=None, run_passes=1000)
    history, _ = drive(spec(), world, until=lambda s, w: s.get("phase") == "Running" and w.run_passes < 990)
    assert history[-1]["phase"] == "Running"
    world.instance = None
    history, _ = drive(spec(), world, status=history[-1])
    final = history[-1]
    assert final["reason"] == machine.R_INSTANCE_LOST and final["outcome"] == "Failed"


def test_instance_failure_status_during_provisioning_fails_and_deletes() -> None:
    world = World(exit_code=0, deploy_passes=100)
    history, _ = drive(spec(), world, until=lambda s, w: w.instance is not None)
    assert world.instance is not None
    world.instance = replace(world.instance, status=FAILURE)
    history, _ = drive(spec(), world, status=history[-1])
    assert history[-1]["reason"] == machine.R_INSTANCE_FAILED and world.deletes == 1


def test_transient_failures_back_off_exponentially_and_count_retries() -> None:
    status: dict[str, Any] = {}
    f = ActionFailure("CreateInstance", "BrevUnavailable", "capacity", permanent=False)
    obs = Observation(now=T0, instance_known=True)
    d = machine.decide(spec(), status, obs, namespace="n", name="j", uid="u", generation=1, tunables=TUN)
    d = machine.decide(spec(), d.status, obs, namespace="n", name="j", uid="u", generation=1, tunables=TUN)
    delays = []
    for _ in range(7):
        d = machine.decide(
            spec(),
            d.status,
            obs.with_(failure=f),
            namespace="n",
            name="j",
            uid="u",
            generation=1,
            tunables=TUN,
        )
        delays.append(d.requeue_after)
    assert delays == [2, 4, 8, 16, 32, 60, 60]
    assert d.status["retries"] == 7 and d.status["reason"] == "BrevUnavailable"


def test_permanent_action_failure_ends_the_job_and_tears_down() -> None:
    world = World(exit_code=0)
    history, _ = drive(spec(), world, until=lambda s, w: s.get("phase") == "WaitingExec")
    world.probe_failures = -1
    world.fail_next = ActionFailure("PrepareWorkload", "RegistryEntitlementFailed", "unauthorized", True)
    history, _ = drive(spec(), world, status=history[-1])
    final = history[-1]
    assert final["reason"] == "RegistryEntitlementFailed" and final["outcome"] == "Failed"
    assert world.deletes == 1


def test_blocker_in_pending_finishes_without_touching_brev() -> None:
    obs = Observation(
        now=T0,
        instance_known=True,
        blocker=ActionFailure("ReadSecrets", "SecretNotFound", "Secret ns/ngc does not exist", True),
    )
    d = machine.decide(spec(), {}, obs, namespace="n", name="j", uid="u", generation=4, tunables=TUN)
    assert d.actions == () and d.finished
    assert d.status["phase"] == "Deleted" and d.status["reason"] == "SecretNotFound"
    assert d.status["observedGeneration"] == 4


def test_finished_job_is_left_alone() -> None:
    history, _ = drive(spec(), World(exit_code=0))
    obs = Observation(now=T0 + timedelta(days=1), instance_known=True)
    d = machine.decide(spec(), history[-1], obs, namespace="n", name="j", uid="u", generation=1, tunables=TUN)
    assert d.finished and d.events == ()


def test_conditions_keep_their_transition_time_while_unchanged() -> None:
    history, _ = drive(spec(), World(exit_code=0))
    first = {c["type"]: c for c in history[1]["conditions"]}
    later = {c["type"]: c for c in history[5]["conditions"]}
    assert first["Reconciling"]["lastTransitionTime"] == later["Reconciling"]["lastTransitionTime"]


def test_every_transition_is_declared() -> None:
    for src, dsts in machine.TRANSITIONS.items():
        assert src not in dsts
    assert machine.TRANSITIONS[Phase.DELETED] == frozenset()
    assert Outcome.SUCCEEDED == "Succeeded"


def test_every_status_field_the_machine_writes_is_declared_in_the_crd_status() -> None:
    """The API server prunes undeclared status fields: a field missing from the model would be
    silently lost and break crash recovery."""
    from controller.models import TaoBrevJobStatus

    declared = {f.alias or n for n, f in TaoBrevJobStatus.model_fields.items()}
    written: set[str] = set()
    for world, spec_ in ((World(exit_code=0), spec()), (World(exit_code=None, run_passes=1000), spec())):
        history, _ = drive(spec_, world, delete_in=Phase.RUNNING if world.exit_code is None else None)
        for s in history:
            written |= set(s)
    assert written - declared == set()


def test_status_without_names_past_pending_gets_its_deterministic_names_back() -> None:
    """E.g. a status patched by hand to Running: the machine must not crash, and must still be
    able to find (and tear down) the instance its uid maps to."""
    status = {"phase": "Running", "phaseTimes": {"Running": "2026-11-29T12:00:00Z"}}
    obs = Observation(now=T0, instance_known=True, instance=None)
    d = machine.decide(spec(), status, obs, namespace="ns", name="job", uid="u", generation=1, tunables=TUN)
    assert d.status["instanceName"].startswith("tbj-ns-job-")
    assert d.status["reason"] == machine.R_INSTANCE_LOST


def test_instance_lost_while_uploading_fails_the_job_instead_of_retrying_forever() -> None:
    history, _ = drive(
        spec(), World(exit_code=None, run_passes=1000), until=lambda s, w: s.get("phase") == "Running"
    )
    status = {**history[-1], "phase": "Uploading", "outcome": "Succeeded", "exitCode": 0}
    status["phaseTimes"] = {**status["phaseTimes"], "Uploading": "2026-11-29T12:00:00Z"}
    obs = Observation(now=T0, instance_known=True, instance=None)
    d = machine.decide(spec(), status, obs, namespace="ns", name="job", uid="u", generation=1, tunables=TUN)
    assert d.status["reason"] == machine.R_INSTANCE_LOST and d.status["outcome"] == "Failed"
    assert d.status["phase"] == "Deleted" and not any(isinstance(a, UploadResults) for a in d.actions)


def test_long_cli_errors_are_clipped_keeping_what_failed_and_why() -> None:
    text = "UploadResults: brev exec failed " + "trace " * 500 + "exit status 255"
    out = machine.clip(text)
    assert len(out) <= machine.MAX_MESSAGE
    assert out.startswith("UploadResults: brev exec failed") and out.endswith("exit status 255")
