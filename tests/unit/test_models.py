"""The TaoBrevJob models (controller.api.models) and the CRD generated from them (tests.devenv.crdgen).

`INVALID_SPECS` is shared with tests/e2e/test_crd.py: every bad spec in it must be refused by the
pydantic model here AND by the real API server there, each time naming the offending field.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.api.errors import SpecError
from controller.api.models import OnCompletion, TaoBrevJobSpec, default_input_path
from controller.api.spec_parse import parse_spec
from controller.api.status import AttemptRecord, RunRecord, TaoBrevJobStatus
from controller.api.vocabulary import Outcome
from controller.kube.access import FINISHED_FIELD
from controller.lifecycle.phases import Phase
from controller.versions import load_versions
from tests.devenv import crdgen

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_DIR = REPO_ROOT / "crds" / "examples"
# The API server applies the CRD's default image; specs parsed here get the same pinned value.
PINNED_IMAGE = load_versions().images.tao_toolkit.pyt

Manifest = dict[str, Any]


def valid_job(name: str = "job") -> Manifest:
    """A valid TaoBrevJob manifest (no namespace: callers apply it with -n)."""
    return {
        "apiVersion": "taobrev.io/v1alpha1",
        "kind": "TaoBrevJob",
        "metadata": {"name": name},
        "spec": {
            "task": {
                "networkArch": "classification_pyt",
                "action": "train",
                "specContent": "train:\n  num_epochs: 1\n",
                "env": [{"name": "TAO_LOG_LEVEL", "value": "INFO"}],
            },
            "instance": {"ephemeral": {"gpuName": "L40S"}},
            "data": {
                "inputs": [{"uri": "s3://tao-data/datasets/cats/"}],
                "resultsUri": "s3://tao-results/run-1",
            },
            "credentials": {
                "ngcApiKey": {"name": "ngc"},
                "s3": {"name": "s3"},
                "extraEnv": [{"name": "HF_TOKEN", "secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}}],
            },
        },
    }


def _set(path: str, value: Any) -> Callable[[Manifest], None]:
    """Mutation: set spec.<path> (dotted, ints index lists) to value."""

    def mutate(manifest: Manifest) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node: Any = manifest["spec"]
        for part in parents:
            node = node[part]
        node[last] = value

    return mutate


def _drop(path: str) -> Callable[[Manifest], None]:
    """Mutation: delete spec.<path>."""

    def mutate(manifest: Manifest) -> None:
        *parents, last = path.split(".")
        node: Any = manifest["spec"]
        for part in parents:
            node = node[part]
        del node[last]

    return mutate


def _both(*mutations: Callable[[Manifest], None]) -> Callable[[Manifest], None]:
    def mutate(manifest: Manifest) -> None:
        for m in mutations:
            m(manifest)

    return mutate


@dataclass(frozen=True)
class InvalidSpec:
    id: str
    mutate: Callable[[Manifest], None]
    field: str  # the API path both the model and the API server must name
    server_says: str  # a fragment of the API server's message (the fix or the kind of error)

    def manifest(self, name: str = "bad") -> Manifest:
        manifest = copy.deepcopy(valid_job(name))
        self.mutate(manifest)
        return manifest


INVALID_SPECS = [
    InvalidSpec("missing-task", _drop("task"), "spec.task", "set exactly one of spec.task"),
    # Workflows (spec.steps, issue 28): the CEL rules and the model say the same.
    InvalidSpec(
        "task-and-steps",
        _set("steps", [{"name": "train", "networkArch": "dino", "action": "train", "specContent": "a: 1\n"}]),
        "spec.task",
        "set exactly one of spec.task",
    ),
    InvalidSpec(
        "start-at-step-without-steps",
        _set("startAtStep", "train"),
        "spec.startAtStep",
        "must name one of spec.steps",
    ),
    InvalidSpec(
        "step-input-from-no-step",
        _both(
            _drop("task"),
            _set(
                "steps",
                [
                    {
                        **{
                            "name": "train",
                            "networkArch": "dino",
                            "action": "train",
                            "specContent": "a: 1\n",
                        },
                        "inputs": [{"fromStep": "prep"}],
                    }
                ],
            ),
        ),
        "spec.steps",
        "fromStep",
    ),
    InvalidSpec("missing-network-arch", _drop("task.networkArch"), "spec.task.networkArch", "Required value"),
    InvalidSpec("missing-action", _drop("task.action"), "spec.task.action", "Required value"),
    InvalidSpec("missing-results-uri", _drop("data.resultsUri"), "spec.data.resultsUri", "Required value"),
    InvalidSpec(
        "missing-ngc-key-ref", _drop("credentials.ngcApiKey"), "spec.credentials.ngcApiKey", "Required"
    ),
    InvalidSpec("missing-s3-creds", _drop("credentials.s3"), "spec.credentials.s3", "Required value"),
    InvalidSpec(
        "network-arch-not-a-tao-word",
        _set("task.networkArch", "Visual-ChangeNet"),
        "spec.task.networkArch",
        "should match",
    ),
    InvalidSpec(
        "bad-on-completion-enum",
        _set("instance.onCompletion", "Keep"),
        "spec.instance.onCompletion",
        "Unsupported value",
    ),
    InvalidSpec(
        "brev-name-pattern",
        _both(_drop("instance.ephemeral"), _set("instance.reuse", {"name": "-my instance"})),
        "spec.instance.reuse.name",
        "should match",
    ),
    InvalidSpec(
        "brev-name-over-63",
        _both(_drop("instance.ephemeral"), _set("instance.reuse", {"name": "a" * 64})),
        "spec.instance.reuse.name",
        "Too long",
    ),
    InvalidSpec(
        "input-uri-not-s3",
        _set("data.inputs.0.uri", "https://tao-data/cats"),
        "spec.data.inputs[0].uri",
        "should match",
    ),
    InvalidSpec(
        "input-uri-empty-segment",
        _set("data.inputs.0.uri", "s3://tao-data//cats"),
        "spec.data.inputs[0].uri",
        "should match",
    ),
    InvalidSpec(
        "results-uri-bad-bucket", _set("data.resultsUri", "s3://B/x"), "spec.data.resultsUri", "should match"
    ),
    InvalidSpec(
        "timeout-below-10",
        _set("timeouts", {"runningSeconds": 5}),
        "spec.timeouts.runningSeconds",
        "greater than or equal to 10",
    ),
    InvalidSpec(
        "timeout-above-a-week",
        _set("timeouts", {"provisioningSeconds": 604801}),
        "spec.timeouts.provisioningSeconds",
        "less than or equal to 604800",
    ),
    InvalidSpec(
        "reuse-and-ephemeral",
        _set("instance.reuse", {"name": "my-box"}),
        "spec.instance",
        "set exactly one of reuse",
    ),
    InvalidSpec(
        "neither-reuse-nor-ephemeral",
        _drop("instance.ephemeral"),
        "spec.instance",
        "set exactly one of reuse",
    ),
    InvalidSpec(
        "reuse-with-delete",
        _both(
            _drop("instance.ephemeral"),
            _set("instance.reuse", {"name": "my-box"}),
            _set("instance.onCompletion", "Delete"),
        ),
        "spec.instance.onCompletion",
        "never deletes an instance it did not create",
    ),
    InvalidSpec(
        "spec-path-and-content",
        _set("task.specPath", "/workspace/data/spec.yaml"),
        "spec.task",
        "exactly one of specPath",
    ),
    InvalidSpec(
        "neither-spec-path-nor-content", _drop("task.specContent"), "spec.task", "exactly one of specPath"
    ),
    InvalidSpec(
        "relative-spec-path",
        _both(_drop("task.specContent"), _set("task.specPath", "data/spec.yaml")),
        "spec.task.specPath",
        "should match",
    ),
    InvalidSpec(
        "duplicate-env-names",
        _set("task.env", [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
        "spec.task.env",
        "Duplicate value",
    ),
    InvalidSpec(
        "extra-env-collides-with-env",
        _set("task.env", [{"name": "HF_TOKEN", "value": "oops"}]),
        "spec.credentials.extraEnv",
        "also set in spec.task.env",
    ),
    InvalidSpec(
        "env-name-pattern",
        _set("task.env", [{"name": "1BAD", "value": "x"}]),
        "spec.task.env[0].name",
        "should match",
    ),
    InvalidSpec(
        "image-with-space",
        _set("task.image", "nvcr.io/nvidia/tao toolkit:6"),
        "spec.task.image",
        "should match",
    ),
    InvalidSpec("image-with-shell", _set("task.image", "img;rm -rf /"), "spec.task.image", "should match"),
    InvalidSpec("gpus-above-8", _set("task.gpus", 9), "spec.task.gpus", "less than or equal to 8"),
    InvalidSpec("shm-size-pattern", _set("task.shmSize", "16 GB"), "spec.task.shmSize", "should match"),
    InvalidSpec("too-many-args", _set("task.args", ["x"] * 65), "spec.task.args", "Too many"),
    InvalidSpec(
        "input-path-dotdot", _set("data.inputs.0.path", "cats/../../etc"), "spec.data.inputs[0].path", "'..'"
    ),
    InvalidSpec(
        "duplicate-default-input-paths",
        _set("data.inputs", [{"uri": "s3://tao-data/a/cats/"}, {"uri": "s3://other-bucket/cats"}]),
        "spec.data.inputs",
        "distinct path",
    ),
    InvalidSpec(
        "instance-type-pattern",
        _set("instance.ephemeral.types", ["g5 xlarge"]),
        "spec.instance.ephemeral.types[0]",
        "should match",
    ),
    InvalidSpec(
        "min-vram-zero",
        _set("instance.ephemeral.minVram", 0),
        "spec.instance.ephemeral.minVram",
        "greater than or equal to 1",
    ),
    InvalidSpec(
        "secret-name-not-dns",
        _set("credentials.s3.name", "S3_Creds"),
        "spec.credentials.s3.name",
        "should match",
    ),
]


def examples() -> Iterator[tuple[Path, Manifest]]:
    for path in sorted(EXAMPLES_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path, doc


def example_jobs() -> list[Manifest]:
    return [doc for _, doc in examples() if doc["kind"] == "TaoBrevJob"]


# --- spec ------------------------------------------------------------------------------------


def test_valid_job_parses() -> None:
    """The base manifest of the invalid-spec table is itself valid (so each case breaks one thing)."""
    parse_spec(valid_job()["spec"], default_image=PINNED_IMAGE)


@pytest.mark.parametrize("case", INVALID_SPECS, ids=lambda c: c.id)
def test_invalid_spec_is_refused_naming_the_field(case: InvalidSpec) -> None:
    """Each bad spec raises SpecError whose message names the offending API field path."""
    with pytest.raises(SpecError) as info:
        parse_spec(case.manifest()["spec"], default_image=PINNED_IMAGE)
    assert case.field in str(info.value), str(info.value)
    assert info.value.reason == "InvalidSpec"


def test_invalid_table_is_large_enough() -> None:
    """The shared table covers at least the dozen kinds of mistakes the CRD must refuse."""
    assert len(INVALID_SPECS) >= 12
    assert len({c.id for c in INVALID_SPECS}) == len(INVALID_SPECS)


def test_unknown_field_is_an_error_in_python() -> None:
    """extra="forbid": a typo in a field name is reported with its path, not silently dropped."""
    spec = valid_job()["spec"]
    spec["task"]["specContnet"] = "typo"
    with pytest.raises(SpecError, match=r"spec\.task\.specContnet: Extra inputs are not permitted"):
        parse_spec(spec, default_image=PINNED_IMAGE)


def test_every_bad_field_is_reported_at_once() -> None:
    """One SpecError lists all problems, so the user fixes them in one round."""
    spec = valid_job()["spec"]
    spec["task"]["gpus"] = 0
    spec["data"]["resultsUri"] = "gs://nope"
    with pytest.raises(SpecError) as info:
        parse_spec(spec, default_image=PINNED_IMAGE)
    assert "spec.task.gpus" in str(info.value)
    assert "spec.data.resultsUri" in str(info.value)


def test_defaults_follow_the_api_contract() -> None:
    """Omitted fields get the SPEC.md defaults; the image default comes from versions.yaml."""
    spec = parse_spec(valid_job()["spec"], default_image=PINNED_IMAGE)
    assert spec.task is not None
    assert spec.task.image == PINNED_IMAGE
    assert spec.task.shm_size == "16g"
    assert spec.task.gpus is None
    assert spec.task.args == []
    assert spec.data.s3_region == "us-east-1"
    assert spec.credentials.ngc_api_key.key == "NGC_API_KEY"
    assert spec.credentials.s3.access_key_id_key == "AWS_ACCESS_KEY_ID"
    assert spec.credentials.s3.secret_access_key_key == "AWS_SECRET_ACCESS_KEY"
    t = spec.timeouts
    assert (
        t.provisioning_seconds,
        t.waiting_exec_seconds,
        t.pulling_seconds,
        t.running_seconds,
        t.uploading_seconds,
        t.deleting_seconds,
    ) == (1800, 900, 3600, 86400, 1800, 900)
    assert spec.data.inputs[0].path == "cats"


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("s3://bucket", "bucket"),
        ("s3://bucket/", "bucket"),
        ("s3://bucket/datasets/cats", "cats"),
        ("s3://bucket/datasets/cats/", "cats"),
        ("s3://bucket/models/model.pth", "model.pth"),
    ],
)
def test_input_path_defaults_to_last_uri_segment(uri: str, path: str) -> None:
    """An input without path stages into /workspace/data/<last segment of uri>."""
    assert default_input_path(uri) == path
    spec = valid_job()["spec"]
    spec["data"]["inputs"] = [{"uri": uri}]
    assert parse_spec(spec, default_image=PINNED_IMAGE).data.inputs[0].path == path


@pytest.mark.parametrize(
    ("instance", "expected"),
    [
        ({"ephemeral": {}}, OnCompletion.DELETE),
        ({"reuse": {"name": "box"}}, OnCompletion.RETAIN),
        ({"ephemeral": {}, "onCompletion": "Retain"}, OnCompletion.RETAIN),
        ({"reuse": {"name": "box"}, "onCompletion": "Retain"}, OnCompletion.RETAIN),
    ],
)
def test_effective_on_completion(instance: dict[str, Any], expected: OnCompletion) -> None:
    """Default: delete what the job created, keep what it borrowed; explicit values win."""
    spec = valid_job()["spec"]
    spec["instance"] = instance
    assert parse_spec(spec, default_image=PINNED_IMAGE).instance.effective_on_completion() is expected


def test_snake_case_names_are_accepted_and_dump_is_camel_case() -> None:
    """populate_by_name: Python code may build specs with snake_case; the wire format is camelCase
    and a dump parses back to an equal model."""
    spec = parse_spec(valid_job()["spec"], default_image=PINNED_IMAGE)
    dumped = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert dumped["task"]["networkArch"] == "classification_pyt"
    assert dumped["credentials"]["ngcApiKey"] == {"name": "ngc", "key": "NGC_API_KEY"}
    assert "network_arch" not in dumped["task"]
    assert parse_spec(dumped, default_image=PINNED_IMAGE) == spec
    snake = TaoBrevJobSpec.model_validate(spec.model_dump())
    assert snake == spec


def test_api_field_names_match_the_contract() -> None:
    """The camelCase names the reconciler and users rely on (SPEC.md) are exactly these."""
    props = crdgen.openapi_schema()["properties"]["spec"]["properties"]
    assert set(props) == {
        "task", "instance", "data", "credentials", "timeouts", "recovery", "budget", "priority", "suspend",
        "dryRun", "notify", "debug", "ttlSecondsAfterFinished", "steps", "startAtStep",
    }  # fmt: skip
    assert set(props["notify"]["properties"]) == {"notifiers", "namespaceNotifiers", "events"}
    assert set(props["debug"]["properties"]) == {"keepInstanceOnFailure"}
    assert set(props["task"]["properties"]) == {
        "image", "networkArch", "action", "specPath", "specContent", "args", "env", "gpus", "shmSize",
    }  # fmt: skip
    assert set(props["instance"]["properties"]) == {"reuse", "ephemeral", "onCompletion"}
    assert set(props["instance"]["properties"]["ephemeral"]["properties"]) == {
        "types", "gpuName", "provider", "minVram", "minTotalVram", "minCapability", "minDisk",
        "maxBootTimeMinutes", "startupScript", "cloudCredId", "workspaceGroupId", "retainFor",
    }  # fmt: skip
    assert set(props["data"]["properties"]) == {"inputs", "resultsUri", "s3EndpointUrl", "s3Region"}
    assert set(props["credentials"]["properties"]) == {"ngcApiKey", "s3", "extraEnv"}
    assert set(props["credentials"]["properties"]["s3"]["properties"]) == {
        "name", "accessKeyIdKey", "secretAccessKeyKey",
    }  # fmt: skip
    assert set(props["timeouts"]["properties"]) == {
        "provisioningSeconds", "waitingExecSeconds", "pullingSeconds", "runningSeconds",
        "uploadingSeconds", "deletingSeconds", "pendingSeconds", "queuedSeconds",
    }  # fmt: skip
    status = crdgen.openapi_schema()["properties"]["status"]["properties"]
    current = {k for k, v in status.items() if not v["description"].startswith("Deprecated")}
    assert current == {
        "phase", "outcome", "runOutcome", "reason", "message", "failureClass", "observedGeneration", "jobId",
        "backendRef", "phaseTimes", "finishedAt", "stalledReason", "stalledMessage", "retries",
        "billedSeconds", "estimatedCostDollars", "costKnown", "conditions", "queue", "attempts", "teardown",
        "checkpoint", "preflight", "plan", "notifications", "progress", "steps", "step", "failedStep",
    }  # fmt: skip
    assert set(status["steps"]["items"]["properties"]) == {
        "name", "action", "phase", "attempt", "startedAt", "finishedAt", "exitCode", "resultsVerified",
        "results", "message", "progress",
    }  # fmt: skip
    # The flat fields of releases before sub-records stay in the schema (Deprecated) so the objects
    # they wrote survive until rewritten.
    assert set(status) - current == {
        "instanceName", "instanceId", "instanceCreated", "brevIdentity", "gpu", "createRequestedAt",
        "createReturnedAt", "startRequestedAt", "deleteRequestedAt", "deleteAcceptedAt", "absentListings",
        "absentSince", "absentCheckedAt", "containerStartedAt", "containerExitedAt", "runEndedAt",
        "exitCode", "lastLogLines", "unansweredSince", "unansweredCheckedAt", "cleanedUpAt",
        "uploadAttempts", "uploadedAt", "results", "admittedAt", "queueReason", "queueMessage",
        "queuePosition", "teardownMessage", "attempt",
    }  # fmt: skip
    assert set(status["queue"]["properties"]) == {"admittedAt", "reason", "message", "position", "queuedAt"}
    assert set(status["teardown"]["properties"]) == {"message"}
    # The plugin reads these names (kubectl taobrev get): exactly these.
    assert set(status["progress"]["properties"]) == {
        "epoch", "maxEpoch", "percent", "eta", "etaSeconds", "timePerEpochSeconds", "loss", "metrics",
        "readAt",
    }  # fmt: skip
    attempt = status["attempts"]["items"]["properties"]
    assert {k for k, v in attempt.items() if not v["description"].startswith("Deprecated")} == {
        "attempt", "instance", "run", "upload", "endedAt", "endedReason", "endedMessage", "restoredAt",
        "resumedFrom", "resumedFromEpoch", "billedSeconds", "estimatedCostDollars",
    }  # fmt: skip
    assert set(attempt["instance"]["properties"]) == {
        "name", "id", "created", "identity", "type", "gpu", "pricePerHour", "createRequestedAt",
        "createReturnedAt", "billedFrom", "startRequestedAt", "deleteRequestedAt", "deleteAcceptedAt",
        "deletedAt", "absence", "keptUntil", "keepEndedAt",
    }  # fmt: skip
    absence = attempt["instance"]["properties"]["absence"]
    assert set(absence["properties"]) == {"listings", "since", "checkedAt"}
    assert set(attempt["run"]["properties"]) == {
        "startedAt", "exitedAt", "endedAt", "exitCode", "logTail", "unansweredSince", "unansweredCheckedAt",
        "cleanedUpAt", "step",
    }  # fmt: skip
    assert set(attempt["upload"]["properties"]) == {"attempts", "uploadedAt", "results"}
    assert set(props["recovery"]["properties"]) == {
        "maxAttempts", "checkpointIntervalSeconds", "retryOnExitCodes",
    }  # fmt: skip
    assert set(props["budget"]["properties"]) == {"maxBilledSeconds", "maxCostDollars"}


# --- status ----------------------------------------------------------------------------------


def test_phase_and_outcome_values() -> None:
    """The phase and outcome vocabularies are exactly those of the API contract."""
    assert [p.value for p in Phase] == [
        "Pending", "Provisioning", "WaitingExec", "Pulling", "Running", "Uploading", "Deleted",
    ]  # fmt: skip
    assert [o.value for o in Outcome] == ["Succeeded", "Failed", "Canceled"]
    assert Phase("Running") == "Running"  # StrEnum: compares and serializes as its value


@pytest.mark.parametrize("raw", [None, {}])
def test_status_of_a_new_object_is_empty(raw: dict[str, Any] | None) -> None:
    """A just-created object has no status: from_k8s gives an empty status, not an error."""
    status = TaoBrevJobStatus.from_k8s(raw)
    assert status.phase is None
    assert status.conditions == []
    assert status.retries == 0


def test_status_round_trips_through_the_wire_format() -> None:
    """Status parses camelCase from the API server and dumps back to the same JSON."""
    raw = {
        "phase": "Running",
        "phaseTimes": {"Pending": "2026-01-02T03:04:05Z", "Running": "2026-01-02T03:10:00Z"},
        "retries": 1,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "Running",
                "lastTransitionTime": "2026-01-02T03:10:00Z",
                "observedGeneration": 1,
            }
        ],
        "queue": {"admittedAt": "2026-01-02T03:04:06Z"},
        "attempts": [
            {
                "attempt": 1,
                "instance": {
                    "name": "tbj-1234",
                    "created": True,
                    "absence": {"listings": 1, "since": "2026-01-02T03:09:00Z"},
                },
                "run": {"startedAt": "2026-01-02T03:10:00Z", "logTail": ["epoch 1", "epoch 2"]},
                "upload": {"results": {"uri": "s3://b/p", "objects": 3, "bytes": 1024}},
            }
        ],
        "teardown": {"message": "waiting"},
    }
    status = TaoBrevJobStatus.from_k8s(raw)
    assert status.phase is Phase.RUNNING
    assert status.phase_times["Running"] == datetime(2026, 1, 2, 3, 10, tzinfo=UTC)
    assert status.attempt == 1
    assert status.instance.name == "tbj-1234"
    assert status.instance.absence.listings == 1
    assert status.run.started_at == datetime(2026, 1, 2, 3, 10, tzinfo=UTC)
    assert status.run.log_tail == ["epoch 1", "epoch 2"]
    assert status.upload.results is not None
    assert status.upload.results.objects == 3
    assert status.queue.admitted_at == datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC)
    assert status.teardown.message == "waiting"
    assert status.to_k8s() == raw


def test_a_cloned_status_equals_a_deep_copy_and_shares_nothing_mutable() -> None:
    """`clone()` (every pass copies its status with it) makes what model_copy(deep=True) makes,
    set fields included, and a change to the copy's lists, dicts or records leaves the original."""
    status = TaoBrevJobStatus.from_k8s(
        {
            "phase": "Running",
            "phaseTimes": {"Pending": "2026-01-02T03:04:05Z"},
            "conditions": [{"type": "Ready", "status": "False", "reason": "Running"}],
            "attempts": [
                {
                    "attempt": 1,
                    "instance": {"name": "tbj-1", "absence": {"listings": 1}},
                    "run": {"logTail": ["a"]},
                }
            ],
        }
    )
    before = status.to_k8s()
    cloned = status.clone()
    assert cloned == status.model_copy(deep=True)
    assert cloned.model_fields_set == status.model_fields_set
    assert cloned.model_dump(exclude_unset=True) == status.model_dump(exclude_unset=True)
    cloned.phase_times["Running"] = datetime(2026, 1, 2, 3, 10, tzinfo=UTC)
    cloned.conditions[0].reason = "Changed"
    cloned.run.log_tail.append("b")
    cloned.instance.absence.listings = 2
    cloned.attempts.append(cloned.attempts[0].model_copy(update={"attempt": 2}))
    assert status.to_k8s() == before


def test_empty_sub_records_are_left_out_of_the_stored_status() -> None:
    """Empty sub-records ({}), an empty log tail and no attempts are not stored."""
    status = TaoBrevJobStatus(phase=Phase.PENDING)
    assert not {"queue", "teardown", "attempts"} & set(status.to_k8s())
    status.start_attempt("tbj-1", created=True)
    wire = status.to_k8s()
    assert wire["attempts"] == [{"attempt": 1, "instance": {"name": "tbj-1", "created": True}}]
    assert not {"queue", "teardown"} & set(wire)


FLAT_STORED: dict[str, Any] = {
    "phase": "Running",
    "instanceName": "tbj-1234",
    "instanceId": "i-1",
    "instanceCreated": True,
    "brevIdentity": "alice",
    "gpu": "L40S",
    "createRequestedAt": "2026-01-02T03:04:10Z",
    "absentListings": 1,
    "absentSince": "2026-01-02T03:09:00Z",
    "containerStartedAt": "2026-01-02T03:10:00Z",
    "exitCode": 3,
    "lastLogLines": ["epoch 1"],
    "uploadAttempts": 1,
    "results": {"uri": "s3://b/p", "objects": 3},
    "admittedAt": "2026-01-02T03:04:06Z",
    "queuePosition": 2,
    "teardownMessage": "waiting",
    "attempt": 2,
    "attempts": [
        {
            "attempt": 1,
            "instanceName": "tbj-first",
            "instanceId": "i-0",
            "instanceType": "g6.xlarge",
            "pricePerHour": 1.5,
            "createRequestedAt": "2026-01-02T03:00:00Z",
            "deletedAt": "2026-01-02T03:04:00Z",
        }
    ],
}


def _assert_flat_fields_landed(status: TaoBrevJobStatus) -> None:
    first, current = status.attempts
    assert (first.attempt, first.instance.name, first.instance.id) == (1, "tbj-first", "i-0")
    assert (first.instance.type, first.instance.price_per_hour) == ("g6.xlarge", 1.5)
    assert first.instance.billed_from == datetime(2026, 1, 2, 3, 0, tzinfo=UTC)
    assert first.instance.deleted_at == datetime(2026, 1, 2, 3, 4, tzinfo=UTC)
    assert first.instance.created is True
    assert current is status.current
    assert status.attempt == 2
    inst = status.instance
    assert (inst.name, inst.id, inst.created) == ("tbj-1234", "i-1", True)
    assert (inst.identity, inst.gpu) == ("alice", "L40S")
    assert inst.create_requested_at == datetime(2026, 1, 2, 3, 4, 10, tzinfo=UTC)
    assert (inst.absence.listings, inst.absence.since) == (1, datetime(2026, 1, 2, 3, 9, tzinfo=UTC))
    assert status.run.started_at == datetime(2026, 1, 2, 3, 10, tzinfo=UTC)
    assert (status.run.exit_code, status.run.log_tail) == (3, ["epoch 1"])
    assert status.upload.attempts == 1
    assert status.upload.results is not None and status.upload.results.objects == 3
    assert status.queue.admitted_at == datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC)
    assert status.queue.position == 2
    assert status.teardown.message == "waiting"


def test_a_flat_stored_status_parses_into_the_sub_records() -> None:
    """Status stored flat by releases before sub-records is read into the new shape, and is
    stored in the new shape only (no flat key survives)."""
    status = TaoBrevJobStatus.from_k8s(copy.deepcopy(FLAT_STORED))
    _assert_flat_fields_landed(status)
    wire = status.to_k8s()
    assert not set(wire) & (set(FLAT_STORED) - {"phase", "attempts"})
    assert all("instance" in a and "instanceName" not in a for a in wire["attempts"])
    assert TaoBrevJobStatus.from_k8s(wire).to_k8s() == wire


def test_flat_keyword_construction_builds_the_sub_records() -> None:
    """Building a status (or an attempt) in Python with the flat snake_case names still works."""
    status = TaoBrevJobStatus(
        phase=Phase.RUNNING,
        instance_name="tbj-1234",
        instance_id="i-1",
        instance_created=True,
        brev_identity="alice",
        gpu="L40S",
        create_requested_at=datetime(2026, 1, 2, 3, 4, 10, tzinfo=UTC),
        absent_listings=1,
        absent_since=datetime(2026, 1, 2, 3, 9, tzinfo=UTC),
        container_started_at=datetime(2026, 1, 2, 3, 10, tzinfo=UTC),
        exit_code=3,
        last_log_lines=["epoch 1"],
        upload_attempts=1,
        results={"uri": "s3://b/p", "objects": 3},
        admitted_at=datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC),
        queue_position=2,
        teardown_message="waiting",
        attempt=2,
        attempts=[
            AttemptRecord(
                attempt=1,
                instance_name="tbj-first",
                instance_id="i-0",
                instance_type="g6.xlarge",
                price_per_hour=1.5,
                create_requested_at=datetime(2026, 1, 2, 3, 0, tzinfo=UTC),
                deleted_at=datetime(2026, 1, 2, 3, 4, tzinfo=UTC),
            )
        ],
    )
    _assert_flat_fields_landed(status)
    assert status.to_k8s() == TaoBrevJobStatus.from_k8s(copy.deepcopy(FLAT_STORED)).to_k8s()


def test_status_ignores_fields_it_does_not_model() -> None:
    """Other writers may leave fields behind; reading status must not fail on them."""
    assert TaoBrevJobStatus.from_k8s({"phase": "Pending", "kopf": {"progress": {}}}).phase is Phase.PENDING


def test_status_refuses_naive_timestamps() -> None:
    """Kubernetes date-time fields need a timezone; a naive datetime would be rejected later by
    the API server, so the model refuses it where it is built."""
    with pytest.raises(ValueError, match="timezone"):
        RunRecord(started_at=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="timezone"):
        TaoBrevJobStatus(container_started_at=datetime(2026, 1, 1), instance_name="tbj-1")
    with pytest.raises(ValueError, match="timezone"):
        TaoBrevJobStatus(finished_at=datetime(2026, 1, 1))


# --- examples --------------------------------------------------------------------------------


def test_examples_cover_the_documented_cases() -> None:
    """crds/examples holds an ephemeral job with inline spec + S3 input, a reuse job with specPath,
    and a minimal job."""
    specs = [parse_spec(job["spec"], default_image=PINNED_IMAGE) for job in example_jobs()]
    assert any(s.instance.ephemeral and s.task and s.task.spec_content and s.data.inputs for s in specs)
    assert any(s.instance.reuse and s.task and s.task.spec_path for s in specs)
    assert any(job["metadata"]["name"] == "minimal" for job in example_jobs())


def test_example_secrets_hold_every_referenced_key() -> None:
    """Every Secret key an example job references exists in crds/examples/secrets.yaml."""
    secrets = {
        doc["metadata"]["name"]: set(doc["stringData"]) for _, doc in examples() if doc["kind"] == "Secret"
    }
    for job in example_jobs():
        creds = parse_spec(job["spec"], default_image=PINNED_IMAGE).credentials
        refs = [
            (creds.ngc_api_key.name, creds.ngc_api_key.key),
            (creds.s3.name, creds.s3.access_key_id_key),
            (creds.s3.name, creds.s3.secret_access_key_key),
            *((e.secret_key_ref.name, e.secret_key_ref.key) for e in creds.extra_env),
        ]
        for name, key in refs:
            assert key in secrets.get(name, set()), f"{job['metadata']['name']}: Secret {name} lacks {key}"


def test_example_secret_values_are_marked_fake() -> None:
    """The example Secrets must never look like real credentials: each value is marked FAKE, or is
    one of AWS's documented example keys (which end in EXAMPLE / EXAMPLEKEY)."""
    for _, doc in examples():
        if doc["kind"] == "Secret":
            for key, value in doc["stringData"].items():
                assert "FAKE" in value or "EXAMPLE" in value, f"{doc['metadata']['name']}.{key}: {value}"


# --- the generated CRD -----------------------------------------------------------------------


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node under an OpenAPI schema, with its path."""
    if not isinstance(node, dict):
        return
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if "items" in node:
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural() -> None:
    """No $ref/$defs/anyOf/title..., and every node has a type (what the API server requires)."""
    schema = crdgen.openapi_schema()
    assert crdgen.forbidden_keywords(schema) == []
    untyped = [path for path, node in _walk(schema) if "type" not in node]
    assert untyped == []
    props_not_object = [p for p, n in _walk(schema) if "properties" in n and n["type"] != "object"]
    assert props_not_object == []


def test_exclusive_bounds_become_openapi_v3_booleans() -> None:
    """The API server reads exclusiveMinimum/Maximum as booleans next to minimum/maximum (OpenAPI
    v3.0); pydantic's gt/lt write the number there (JSON Schema 2020), which it refuses."""
    node = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10}
    assert crdgen.structural(node) == {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 10,
        "exclusiveMaximum": True,
    }


def test_every_field_is_documented() -> None:
    """`kubectl explain` documents every spec and status field (metadata is the API server's)."""
    schema = crdgen.openapi_schema()
    undocumented = [
        path
        for path, node in _walk(schema)
        if path
        and not path.startswith(".metadata")
        and not path.endswith(("[]", "{}"))
        and not node.get("description")
    ]
    assert undocumented == []


def test_crd_carries_bounds_defaults_and_list_semantics() -> None:
    """Spot checks that pydantic constraints reach the CRD as OpenAPI keywords."""
    spec = crdgen.openapi_schema()["properties"]["spec"]["properties"]
    task = spec["task"]["properties"]
    assert task["image"]["default"] == PINNED_IMAGE
    assert task["specContent"]["maxLength"] == 262144
    assert (task["gpus"]["minimum"], task["gpus"]["maximum"]) == (1, 8)
    assert task["env"]["x-kubernetes-list-type"] == "map"
    assert task["env"]["x-kubernetes-list-map-keys"] == ["name"]
    assert task["args"]["maxItems"] == 64
    extra = spec["credentials"]["properties"]["extraEnv"]
    assert (extra["x-kubernetes-list-type"], extra["x-kubernetes-list-map-keys"], extra["maxItems"]) == (
        "map",
        ["name"],
        32,
    )
    assert spec["instance"]["properties"]["onCompletion"]["enum"] == ["Delete", "Retain"]
    assert "default" not in spec["instance"]["properties"]["onCompletion"]  # depends on reuse/ephemeral
    assert spec["timeouts"]["default"] == {}
    for timeout in spec["timeouts"]["properties"].values():
        assert (timeout["minimum"], timeout["maximum"]) == (10, 604800)
    assert "path" not in spec["data"]["properties"]["inputs"]["items"].get("required", [])
    status = crdgen.openapi_schema()["properties"]["status"]
    assert status["properties"]["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    assert status["properties"]["lastLogLines"]["maxItems"] == 20
    assert not [p for p, n in _walk(status) if "default" in n]


def test_every_cel_rule_explains_itself() -> None:
    """Each CEL rule's message names a spec field and says what to do."""
    rules = [r for _, n in _walk(crdgen.openapi_schema()) for r in n.get("x-kubernetes-validations", [])]
    assert len(rules) >= 10
    for rule in rules:
        assert rule["message"].startswith("spec."), rule
        assert any(w in rule["message"] for w in ("set", "remove", "give", "create")), rule


def test_immutability_rules_guard_every_section_but_timeouts() -> None:
    """Root-level transition rules freeze task/instance/data/credentials after Pending only."""
    rules = crdgen.openapi_schema()["x-kubernetes-validations"]
    guarded = {r["fieldPath"] for r in rules}
    assert guarded == {
        ".spec.task", ".spec.instance", ".spec.data", ".spec.credentials", ".spec.steps", ".spec.startAtStep"
    }  # fmt: skip
    assert all("oldSelf.status.phase == 'Pending'" in r["rule"] for r in rules)


def test_crd_names_columns_and_subresources() -> None:
    """Kind, short name, categories, status subresource and printer columns per the contract."""
    crd = crdgen.crd()
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"]) == ("TaoBrevJob", "taobrevjobs", "taobrevjob")
    assert names["shortNames"] == ["tbj"]
    assert names["categories"] == ["tao"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: (c["jsonPath"], c.get("priority", 0)) for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Phase": (".status.phase", 0),
        "Outcome": (".status.outcome", 0),
        "Instance": (".status.attempts[-1:].instance.name", 0),
        "GPU": (".status.attempts[-1:].instance.gpu", 0),
        "Queue": (".status.queue.position", 0),
        "Progress": (".status.progress.percent", 0),
        "ETA": (".status.progress.eta", 0),
        "Queued": (".status.queue.reason", 1),
        "Step": (".status.step", 0),
        "Action": (".spec.task.action", 1),
        "Reason": (".status.reason", 1),
        "Failure": (".status.failureClass", 1),
        "Kept-Until": (".status.attempts[-1:].instance.keptUntil", 1),
        "Attempt": (".status.attempts[-1:].attempt", 1),
        "Billed": (".status.billedSeconds", 1),
        "Cost": (".status.estimatedCostDollars", 1),
        "Age": (".metadata.creationTimestamp", 0),
    }


def test_render_is_deterministic() -> None:
    """Two renders are byte-identical (the drift check compares text)."""
    assert crdgen.render() == crdgen.render()


def test_committed_crd_is_up_to_date() -> None:
    """`python -m tests.devenv.crdgen --check` passes on crds/taobrevjob.yaml."""
    assert crdgen.main(["--check"]) == 0


def test_check_reports_drift_with_a_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--check exits 1 and prints a unified diff when the file differs from the models."""
    stale = tmp_path / "taobrevjob.yaml"
    stale.write_text(crdgen.render().replace("maxItems: 64", "maxItems: 65"))
    assert crdgen.main(["--check", "--path", str(stale)]) == 1
    out = capsys.readouterr()
    assert re.search(r"^-\s+maxItems: 65$", out.out, re.MULTILINE), out.out
    assert re.search(r"^\+\s+maxItems: 64$", out.out, re.MULTILINE), out.out
    assert "make crds" in out.err


def test_write_then_check_round_trips(tmp_path: Path) -> None:
    """--write produces a file that --check accepts."""
    target = tmp_path / "crd.yaml"
    assert crdgen.main(["--write", "--path", str(target)]) == 0
    assert crdgen.main(["--check", "--path", str(target)]) == 0
    assert yaml.safe_load(target.read_text())["kind"] == "CustomResourceDefinition"


def test_the_crd_declares_the_field_the_operators_listings_select_on() -> None:
    """The admission relist and the sweep ask for `status.finishedAt=` (controller/kube/access.py);
    the field must be selectable, a string in the schema."""
    version = crdgen.crd()["spec"]["versions"][0]
    selectable = [f["jsonPath"] for f in version["selectableFields"]]
    assert "." + FINISHED_FIELD in selectable
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for path in selectable:
        assert status[path.removeprefix(".status.")]["type"] == "string", path
