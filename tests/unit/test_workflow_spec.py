"""spec.steps (workflows): the API, its normalisation and the per-step status records.

An object applied before workflows existed (spec.task, no steps) parses unchanged and reads as a
one-step workflow; a spec.steps object gets each omitted image by its action."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from controller.api.errors import SpecError
from controller.api.models import ImageKind, StepWhen, image_kind
from controller.api.spec_parse import derived_step_images, parse_spec
from controller.api.status import ResultsSummary, StepPhase, TaoBrevJobStatus
from controller.versions import load_versions

PINS = load_versions().images.tao_toolkit
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def base(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "instance": {"ephemeral": {}},
        "data": {"resultsUri": "s3://bucket/out"},
        "credentials": {"ngcApiKey": {"name": "ngc"}, "s3": {"name": "s3"}},
    }
    spec.update(overrides)
    return spec


def step(name: str, action: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "networkArch": "dino", "action": action, "specContent": "a: 1\n", **extra}


# The shape every TaoBrevJob had before workflows (as stored by the API server, image defaulted).
OLD_SHAPE = base(
    task={
        "image": "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt",
        "networkArch": "classification_pyt",
        "action": "dataset_convert",
        "specPath": "/workspace/data/spec.yaml",
        "args": ["epochs=2"],
        "gpus": 2,
    }
)


def test_an_object_in_the_old_shape_parses_and_is_a_one_step_workflow() -> None:
    spec = parse_spec(OLD_SHAPE, default_image=PINS.pyt, step_images=PINS.by_kind())
    assert not spec.is_workflow
    assert spec.task is not None and spec.steps is None
    (only,) = spec.workflow()
    # Named for its action (a step name is a DNS label); everything else carried over as given.
    assert only.name == "dataset-convert"
    assert (only.network_arch, only.action, only.spec_path, only.args, only.gpus) == (
        "classification_pyt", "dataset_convert", "/workspace/data/spec.yaml", ["epochs=2"], 2,
    )  # fmt: skip
    assert only.image == "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt"  # its own image, not a step default
    assert spec.images() == ["nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt"]
    # And it round-trips in the old shape (nothing added to what is stored).
    dumped = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert "steps" not in dumped and "startAtStep" not in dumped


def test_each_omitted_step_image_is_the_pinned_one_for_its_action() -> None:
    spec = parse_spec(
        base(
            steps=[
                step("convert", "dataset_convert"),
                step("train", "train"),
                step("export", "export"),
                step("engine", "gen_trt_engine"),
                step("infer", "inference", image="registry.example.com/mine:1"),
            ]
        ),
        default_image=PINS.pyt,
        step_images=PINS.by_kind(),
    )
    assert spec.is_workflow
    assert [s.image for s in spec.workflow()] == [
        PINS.data_services, PINS.pyt, PINS.deploy, PINS.deploy, "registry.example.com/mine:1",
    ]  # fmt: skip
    # Each distinct image once, in step order: what Pulling pulls.
    assert spec.images() == [PINS.data_services, PINS.pyt, PINS.deploy, "registry.example.com/mine:1"]
    assert [s.when for s in spec.workflow()] == [StepWhen.ON_SUCCESS] * 5


def test_the_pinned_step_images_are_the_releases_own_tags() -> None:
    """versions.yaml pins -deploy and -data-services next to -pyt, of the same release; a caller
    giving only the default image derives the same ones."""
    assert derived_step_images(PINS.pyt) == PINS.by_kind()
    assert image_kind("export") is ImageKind.DEPLOY
    assert image_kind("dataset_convert") is ImageKind.DATA_SERVICES
    assert image_kind("retrain") is ImageKind.PYT


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (base(), "spec.task: set exactly one of spec.task"),
        ({**OLD_SHAPE, "steps": [step("a", "train")]}, "spec.task: set exactly one of spec.task"),
        (
            base(steps=[step("a", "train"), step("a", "evaluate")]),
            "spec.steps[1].name: duplicate step name 'a'",
        ),
        (
            base(steps=[step("a", "evaluate", inputs=[{"fromStep": "b"}]), step("b", "train")]),
            "spec.steps[0].inputs[0].fromStep: 'b' is not an earlier step",
        ),
        (base(steps=[step("a", "train")], startAtStep="b"), "spec.startAtStep: must name one of spec.steps"),
        ({**OLD_SHAPE, "startAtStep": "train"}, "spec.startAtStep: must name one of spec.steps"),
        (base(steps=[step("Train", "train")]), "spec.steps[0].name: String should match pattern"),
        (
            base(steps=[step("a", "train", inputs=[{"fromStep": "a", "path": "../x"}])]),
            "spec.steps[0].inputs[0].path: must not contain '.' or '..' segments",
        ),
        (
            base(steps=[step("a", "train", specPath="/workspace/x.yaml")]),
            "spec.steps[]: set exactly one of specPath",
        ),
        (base(steps=[]), "spec.steps: List should have at least 1 item"),
    ],
)
def test_a_bad_workflow_spec_is_refused_naming_the_field(spec: dict[str, Any], says: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(spec, default_image=PINS.pyt)
    assert says in str(info.value), str(info.value)


def test_a_secret_env_name_may_not_also_be_a_steps_env_name() -> None:
    spec = base(
        steps=[step("a", "train", env=[{"name": "HF_TOKEN", "value": "x"}])],
        credentials={
            "ngcApiKey": {"name": "ngc"},
            "s3": {"name": "s3"},
            "extraEnv": [{"name": "HF_TOKEN", "secretKeyRef": {"name": "hf", "key": "token"}}],
        },
    )
    with pytest.raises(SpecError, match=r"spec\.credentials\.extraEnv: a name is also set"):
        parse_spec(spec, default_image=PINS.pyt)


def test_step_records_change_only_through_their_methods_and_round_trip() -> None:
    status = TaoBrevJobStatus()
    assert "steps" not in status.to_k8s()  # a single job's status stays as it was
    status.plan_steps([("train", "train"), ("evaluate", "evaluate")])
    status.plan_steps([("other", "train")])  # once only
    train = status.step_record("train")
    train.start(NOW, 1)
    train.exited(0, NOW)
    train.verified(ResultsSummary(uri="s3://bucket/out/train/", objects=3, bytes=300))
    train.end(NOW, StepPhase.SUCCEEDED, "exited 0")
    evaluate = status.step_record("evaluate")
    evaluate.start(NOW, 1)
    evaluate.interrupt("attempt 1 ended")
    assert evaluate.phase is StepPhase.PENDING and evaluate.exit_code is None
    wire = status.to_k8s()
    assert [s["name"] for s in wire["steps"]] == ["train", "evaluate"]
    assert wire["steps"][0]["resultsVerified"] is True
    assert TaoBrevJobStatus.from_k8s(wire) == status
    with pytest.raises(KeyError):
        status.step_record("export")
