"""The pre-flight's pure half (issue 32): the checks that need no I/O, and what decide() makes of a
verdict — a Pending job that waits (not Stalled, out of the queue, re-checked with backoff) and
fails only when its problems outlive spec.timeouts.pendingSeconds. The S3 calls are tested against
a real S3 server (tests/integration/test_s3_checks.py), the whole path on the real control plane
(tests/e2e/test_preflight.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from controller.api import reasons
from controller.api.models import EphemeralInstance, TaoBrevJobSpec
from controller.api.spec_parse import parse_spec
from controller.api.status import TaoBrevJobStatus
from controller.api.vocabulary import Outcome
from controller.brev.client import SearchResult
from controller.fleet.admission import JobFacts, admit
from controller.lifecycle.phases import Phase
from controller.lifecycle.steps import Problem, Verdict
from controller.preflight.checks import image_problems, marker_key, selection_problems
from tests.unit.test_admission import job, per_ns
from tests.unit.test_machine import EPHEMERAL, T0, cond, decide

# --- the image reference ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "image",
    [
        "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt",
        "nvcr.io/nvidia/tao/tao-toolkit@sha256:" + "a" * 64,
        "localhost:5000/tao:dev",
        "ubuntu",
        "Registry.Example.com/team/tao:1",  # a registry host may have capitals; the path may not
    ],
)
def test_valid_image_references_pass(image: str) -> None:
    assert image_problems(image) == []


@pytest.mark.parametrize(
    "image",
    [
        "TAO/toolkit:6",  # no registry: the repository must be lowercase
        "nvcr.io/nvidia/TAO/tao-toolkit:6",  # a path component in uppercase
        "nvcr.io/nvidia/tao/tao-toolkit:",  # an empty tag
        "nvcr.io//tao:6",  # an empty path component
        "nvcr.io/" + "a" * 260 + ":1",  # a name over 255 characters
    ],
)
def test_malformed_image_references_name_the_field_and_the_fix(image: str) -> None:
    (problem,) = image_problems(image)
    assert problem.field == "spec.task.image"
    assert problem.reason == reasons.IMAGE_REFERENCE_INVALID
    assert "spec.task.image" in problem.message


# --- where the marker goes --------------------------------------------------------------------


def test_the_marker_is_written_under_the_results_prefix_named_for_the_job() -> None:
    assert marker_key("s3://bucket/runs/one", "job-1") == ("bucket", "runs/one/.taobrev-preflight-job-1")
    assert marker_key("s3://bucket/runs/one/", "job-1") == ("bucket", "runs/one/.taobrev-preflight-job-1")
    assert marker_key("s3://bucket", "job-1") == ("bucket", ".taobrev-preflight-job-1")


# --- the instance selection ---------------------------------------------------------------------


def entry(type_: str, gpu: str = "L40S", price: float = 1.0, provider: str = "aws") -> SearchResult:
    return SearchResult(
        type=type_, provider=provider, gpu_name=gpu, gpu_count=1, vram_per_gpu_gb=48, price_per_hour=price
    )


CATALOG = [
    entry("g6e.xlarge", "L40S", 1.86),
    entry("g5.xlarge", "A10G", 1.01),
    entry("a2-highgpu-1g:A100:1", "A100", 3.67, provider="gcp"),
    entry("odd.type", "H100", 0.0),
]


def ephemeral(**fields: Any) -> EphemeralInstance:
    return EphemeralInstance.model_validate(fields)


def test_named_types_must_all_be_in_the_catalog_each_unknown_one_named_by_index() -> None:
    problems, candidates = selection_problems(ephemeral(types=["g6e.xlarge", "g6e.xlarg"]), CATALOG)
    assert [p.field for p in problems] == ["spec.instance.ephemeral.types[1]"]
    assert problems[0].reason == reasons.INSTANCE_TYPE_UNKNOWN
    assert "'g6e.xlarg'" in problems[0].message
    assert candidates == [("g6e.xlarge", 1.86)]


def test_named_types_are_tried_in_the_given_order_with_their_prices() -> None:
    problems, candidates = selection_problems(ephemeral(types=["g5.xlarge", "g6e.xlarge"]), CATALOG)
    assert problems == []
    assert candidates == [("g5.xlarge", 1.01), ("g6e.xlarge", 1.86)]


def test_an_unknown_gpu_name_is_found_before_anything_is_created() -> None:
    problems, candidates = selection_problems(ephemeral(gpuName="L40"), CATALOG)
    assert problems == [] and candidates == [("g6e.xlarge", 1.86)]  # a substring, as brev matches
    problems, candidates = selection_problems(ephemeral(gpuName="L4OS"), CATALOG)
    assert [(p.field, p.reason) for p in problems] == [
        ("spec.instance.ephemeral.gpuName", reasons.GPU_NAME_UNKNOWN)
    ]
    assert "L40S" in problems[0].message  # the known names are shown
    assert candidates == []


def test_filters_give_every_match_cheapest_first_and_an_unknown_provider_is_named() -> None:
    _, candidates = selection_problems(ephemeral(), CATALOG)
    assert [t for t, _ in candidates] == ["g5.xlarge", "g6e.xlarge", "a2-highgpu-1g:A100:1", "odd.type"]
    problems, _ = selection_problems(ephemeral(provider="azure"), CATALOG)
    assert [p.field for p in problems] == ["spec.instance.ephemeral.provider"]


def test_a_price_must_be_known_for_a_named_type_and_for_some_filtered_match() -> None:
    problems, _ = selection_problems(ephemeral(types=["odd.type"]), CATALOG)
    assert [p.reason for p in problems] == [reasons.PRICE_UNKNOWN]
    problems, _ = selection_problems(ephemeral(gpuName="H100"), CATALOG)
    assert [p.reason for p in problems] == [reasons.PRICE_UNKNOWN]
    problems, _ = selection_problems(ephemeral(), CATALOG)
    assert problems == []  # the cheapest priced match is known


# --- what decide() makes of a verdict ------------------------------------------------------------

PROBLEM = Problem(
    "spec.data.resultsUri",
    reasons.RESULTS_BUCKET_NOT_FOUND,
    "spec.data.resultsUri s3://nope/x: bucket 'nope' does not exist: create it or fix the URI",
)


def pending_job() -> TaoBrevJobStatus:
    """A new job's status after its first step (names assigned, Pending)."""
    return decide(TaoBrevJobStatus()).status


def failing(at: timedelta = timedelta(0), *problems: Problem) -> Verdict:
    return Verdict(checked_at=T0 + at, problems=problems or (PROBLEM,))


def test_a_failing_preflight_keeps_the_job_pending_in_progress_not_stalled_and_creates_nothing() -> None:
    d = decide(pending_job(), preflight=failing())
    s = d.status
    assert s.phase is Phase.PENDING and s.outcome is None
    assert d.actions == ()
    assert s.reason == reasons.RESULTS_BUCKET_NOT_FOUND
    assert "waiting, nothing created" in (s.message or "") and "spec.data.resultsUri" in (s.message or "")
    assert s.queue.admitted_at is None
    assert s.preflight is not None and s.preflight.failing_since == T0
    assert [p.field for p in s.preflight.problems] == ["spec.data.resultsUri"]
    # kstatus InProgress: Reconciling, not Stalled; Ready=False says why.
    assert cond(s, "Reconciling") == "True"
    assert cond(s, "Stalled") == "False"
    ready = next(c for c in s.conditions if c.type == "Ready")
    assert ready.status == "False" and ready.reason == reasons.RESULTS_BUCKET_NOT_FOUND
    assert [(e.type, e.reason) for e in d.events] == [("Warning", reasons.RESULTS_BUCKET_NOT_FOUND)]


def test_rechecks_back_off_and_post_one_event_per_new_reason() -> None:
    s = pending_job()
    delays, events = [], []
    for i in range(6):
        d = decide(s, preflight=failing(timedelta(seconds=i)), now=T0 + timedelta(seconds=i))
        s = d.status
        assert d.requeue_after is not None
        delays.append(d.requeue_after)
        events += [e.reason for e in d.events]
    assert delays == sorted(delays) and delays[0] < delays[-1] <= 60
    assert events == [reasons.RESULTS_BUCKET_NOT_FOUND]
    assert s.preflight is not None and s.preflight.failing_since == T0  # the streak's start stays
    other = Problem("spec.credentials", reasons.SECRET_NOT_FOUND, "Secret ns/ngc does not exist")
    d = decide(s, preflight=failing(timedelta(seconds=9), other), now=T0 + timedelta(seconds=9))
    assert [e.reason for e in d.events] == [reasons.SECRET_NOT_FOUND]


def test_once_the_problem_is_fixed_the_job_is_admitted_and_provisions() -> None:
    s = decide(pending_job(), preflight=failing()).status
    passed = Verdict(checked_at=T0 + timedelta(seconds=30), candidates=(("g6e.xlarge", 1.86),))
    d = decide(s, preflight=passed, now=T0 + timedelta(seconds=30))
    assert d.status.phase is Phase.PROVISIONING
    assert d.status.reason is None
    assert d.status.queue.admitted_at is not None
    assert d.status.preflight is not None
    assert d.status.preflight.failing_since is None and d.status.preflight.problems == []
    assert d.status.preflight.candidates == ["g6e.xlarge ($1.86/h)"]
    assert reasons.PREFLIGHT_PASSED in [e.reason for e in d.events]


def test_problems_that_outlive_pending_seconds_fail_the_job_with_nothing_created() -> None:
    spec_ = parse_spec(
        {**EPHEMERAL.model_dump(by_alias=True, exclude_none=True), "timeouts": {"pendingSeconds": 120}}
    )
    s = decide(pending_job(), spec_=spec_, preflight=failing()).status
    s = decide(
        s, spec_=spec_, preflight=failing(timedelta(seconds=120)), now=T0 + timedelta(seconds=120)
    ).status
    assert s.outcome is None  # at the limit, still waiting
    d = decide(s, spec_=spec_, preflight=failing(timedelta(seconds=121)), now=T0 + timedelta(seconds=121))
    assert d.status.outcome is Outcome.FAILED
    assert d.status.reason == reasons.RESULTS_BUCKET_NOT_FOUND
    assert "spec.timeouts.pendingSeconds=120" in (d.status.message or "")
    assert d.status.instance.create_requested_at is None and d.status.queue.admitted_at is None
    assert d.status.phase is Phase.DELETED and d.status.finished_at is not None
    assert d.actions == ()


def test_a_job_deleted_while_it_waits_is_released_at_once() -> None:
    s = decide(pending_job(), preflight=failing()).status
    d = decide(s, deleting=True, now=T0 + timedelta(seconds=3))
    assert d.status.outcome is Outcome.CANCELED and d.status.finished_at is not None
    assert d.actions == ()


# --- the queue ----------------------------------------------------------------------------------


def test_a_job_waiting_for_its_inputs_neither_waits_in_line_nor_blocks_the_jobs_behind_it() -> None:
    blocked = JobFacts(**{**job("first", at=0).__dict__, "inputs_pending": True})
    verdicts = admit([blocked, job("second", at=1), job("third", at=2)], per_ns(1))
    assert "uid-team-a-first" not in verdicts
    assert verdicts["uid-team-a-second"].admitted
    assert verdicts["uid-team-a-third"].position == 1


def test_the_listing_shows_which_pending_jobs_wait_for_their_inputs() -> None:
    body = {
        "metadata": {"namespace": "ns", "name": "j", "uid": "u"},
        "spec": {},
        "status": {"phase": "Pending", "preflight": {"failingSince": "2026-11-29T12:00:00Z"}},
    }
    assert JobFacts.from_body(body).inputs_pending
    body["status"] = {"phase": "Pending", "preflight": {"passedAt": "2026-11-29T12:00:00Z"}}
    assert not JobFacts.from_body(body).inputs_pending


# --- an honest outcome while the results are not safe --------------------------------------------


def test_a_failing_upload_after_exit_0_never_shows_succeeded_and_says_fix_and_deadline() -> None:
    from controller.lifecycle.steps import ActionFailure
    from tests.unit.test_machine import at, running

    d = decide(at(Phase.RUNNING), instance=running(), exit_code=0)
    assert d.status.phase is Phase.UPLOADING and d.status.outcome is None
    entered = d.status.phase_times["Uploading"]
    failure = ActionFailure("UploadResults", "UploadFailed", "NoSuchBucket: the bucket does not exist", False)
    d = decide(d.status, instance=running(), failure=failure, now=entered + timedelta(seconds=5))
    s = d.status
    assert s.outcome is None and s.reason == reasons.RUN_COMPLETED  # still not Succeeded
    assert cond(s, "Succeeded") == "Unknown"
    (warning,) = [e for e in d.events if e.type == "Warning"]
    for text in (warning.message, s.teardown.message or ""):
        assert "NoSuchBucket" in text
        assert "s3://bucket/out" in text and "Secret s3" in text  # what to fix
        assert "until 2026-11-29T12:10:00Z" in text  # uploadingSeconds=600 after the upload began
        assert "then it is deleted and they are lost" in text
    # The same streak posts no second Warning.
    d = decide(s, instance=running(), failure=failure, now=entered + timedelta(seconds=20))
    assert [e for e in d.events if e.type == "Warning"] == []
    # Past the deadline: Failed UploadFailed, torn down; it never said Succeeded.
    d = decide(d.status, instance=running(), now=entered + timedelta(seconds=601))
    assert d.status.outcome is Outcome.FAILED and d.status.reason == reasons.UPLOAD_FAILED
    assert d.status.phase is Phase.DELETED


# --- a plan before a run (spec.dryRun) -----------------------------------------------------------


def dry_run_spec(**budget: Any) -> TaoBrevJobSpec:
    raw = EPHEMERAL.model_dump(by_alias=True, exclude_none=True)
    raw["dryRun"] = True
    raw["recovery"] = {"maxAttempts": 2, "checkpointIntervalSeconds": 600}
    if budget:
        raw["budget"] = budget
    return parse_spec(raw)


def test_a_dry_run_plans_and_creates_nothing_even_when_its_preflight_passes() -> None:
    spec_ = dry_run_spec()
    verdict = Verdict(
        checked_at=T0,
        candidates=(("g6e.xlarge", 1.86), ("g6e.2xlarge", 2.24)),
        images=("nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt", "public.ecr.aws/aws-cli/aws-cli:2"),
    )
    d = decide(pending_job(), spec_=spec_, preflight=verdict)
    s = d.status
    assert s.phase is Phase.PENDING and s.queue.admitted_at is None and d.actions == ()
    assert s.reason == reasons.DRY_RUN
    plan = s.plan
    assert plan is not None and plan.ready is True
    assert plan.instance_types == ["g6e.xlarge ($1.86/h)", "g6e.2xlarge ($2.24/h)"]
    assert plan.images[0] == "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt"
    # Every billed phase's timeout (waitingExec 600, running 3600, uploading 600 in this spec;
    # provisioning 1800, pulling 3600, deleting 900 by default) over 2 attempts.
    assert plan.max_billed_seconds == 2 * (1800 + 600 + 3600 + 3600 + 600 + 900)
    assert plan.cost_ceiling_dollars == round(plan.max_billed_seconds / 3600 * 2.24, 2)
    assert any(u.startswith("s3://bucket/out/checkpoints/") for u in plan.uploads)
    assert "would create g6e.xlarge ($1.86/h), then g6e.2xlarge ($2.24/h)" in (s.message or "")
    assert "set spec.dryRun to false to run" in (s.message or "")
    assert [e.reason for e in d.events] == [reasons.DRY_RUN]
    # Still a plan on the next pass: no second Event, never admitted.
    d = decide(s, spec_=spec_, preflight=verdict, now=T0 + timedelta(seconds=60))
    assert d.status.queue.admitted_at is None and d.events == ()


def test_a_dry_run_shows_its_problems_and_the_budget_caps_the_ceiling_but_never_fails() -> None:
    spec_ = dry_run_spec(maxCostDollars=5, maxBilledSeconds=3600)
    verdict = Verdict(checked_at=T0, problems=(PROBLEM,), candidates=(("g6e.xlarge", 1.86),))
    s = decide(pending_job(), spec_=spec_, preflight=verdict).status
    later = Verdict(
        checked_at=T0 + timedelta(days=1), problems=(PROBLEM,), candidates=(("g6e.xlarge", 1.86),)
    )
    d = decide(s, spec_=spec_, preflight=later, now=T0 + timedelta(days=1))
    assert d.status.run_outcome is None  # a plan never fails for its problems
    plan = d.status.plan
    assert plan is not None and plan.ready is False
    assert plan.max_billed_seconds == 3600 and plan.cost_ceiling_dollars == 1.86
    assert "bucket 'nope' does not exist" in (d.status.message or "")


def test_turning_the_dry_run_off_runs_the_job() -> None:
    verdict = Verdict(checked_at=T0, candidates=(("g6e.xlarge", 1.86),))
    s = decide(pending_job(), spec_=dry_run_spec(), preflight=verdict).status
    d = decide(s, preflight=verdict, now=T0 + timedelta(seconds=5))
    assert d.status.phase is Phase.PROVISIONING and d.status.queue.admitted_at is not None
    assert d.status.reason is None  # no DryRun left in the REASON column


def test_a_queued_job_whose_check_fails_later_leaves_the_queue() -> None:
    from controller.fleet.admission import Admission

    queued = Admission(False, "NamespaceInstanceLimit", "3rd in namespace ns's queue", position=3)
    passed = Verdict(checked_at=T0)
    s = decide(pending_job(), preflight=passed, admission=queued).status
    assert s.queue.position == 3 and s.queue.reason == "NamespaceInstanceLimit"
    d = decide(s, preflight=failing(timedelta(seconds=10)), now=T0 + timedelta(seconds=10))
    assert d.status.queue.reason is None and d.status.queue.position is None
    assert d.status.reason == reasons.RESULTS_BUCKET_NOT_FOUND
    assert cond(d.status, "Queued") == "False"
