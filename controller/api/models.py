"""Pydantic models of the TaoBrevJob custom resource (taobrev.io/v1alpha1): spec and status.

These models are the single source of the API: `tests.devenv.crdgen` turns their JSON schema (by
alias) into the CRD, so field names, bounds, patterns, defaults and descriptions live only here.
Rules the API server checks with CEL are declared next to the fields they guard
(`x-kubernetes-validations`) and re-checked by pydantic validators, so a spec that passed the API
server parses, and a spec built in Python fails with the same message the server would give.

Attributes are snake_case with camelCase aliases. Serialize for Kubernetes with
``model_dump(by_alias=True, exclude_none=True, mode="json")``.

Pure module: no kopf, kubernetes, os or subprocess imports, even transitively (`make lint`: .importlinter).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from controller.api.container_paths import DATA_ROOT, INPUTS_ROOT, RESULTS_DIR, SPEC_MOUNT_PATH
from controller.api.vocabulary import Transition, list_map
from controller.lifecycle.phases import PHASES, Phase

# --- patterns shared by the model and the CRD (Go RE2 and Rust regex both accept them) ---------

# A TAO CLI word (`<networkArch> <action>` inside the container).
TAO_WORD_PATTERN = r"^[a-z][a-z0-9_]*$"
# brev instance names (brev-cli pkg/names/validate.go), max 63 characters.
BREV_NAME_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9._-]*$"
BREV_NAME_MAX = 63
# Instance types as `brev search` lists them (e.g. g5.xlarge, n1-highmem-4:nvidia-tesla-t4:1).
INSTANCE_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
# Container image reference: registry host[:port], lower-case path components, optional tag and
# digest. Also keeps shell metacharacters out, since the image is named in a remote shell command.
IMAGE_PATTERN = (
    r"^[a-zA-Z0-9][a-zA-Z0-9._-]*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)
# An absolute path inside the container; a conservative charset because it crosses two shells
# (brev exec's remote shell, then docker's argv).
CONTAINER_PATH_PATTERN = r"^(/[A-Za-z0-9._+=@,-]+)+/?$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
# `docker run --shm-size`.
SHM_SIZE_PATTERN = r"^[0-9]+[kmgKMG]?$"
# S3 bucket rules (3..63 chars); the results URI may carry any key prefix.
RESULTS_URI_PATTERN = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$"
# Inputs: non-empty key segments and at most one trailing "/", so "last segment" (the default
# staging path) means the same thing to the API server's CEL rule and to Python.
INPUT_URI_PATTERN = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^/\s]+)*/?$"
# Relative directory under /workspace/data; "." and ".." segments are refused separately.
INPUT_PATH_PATTERN = r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$"
HTTP_URL_PATTERN = r"^https?://[^\s]+$"
AWS_REGION_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
# Object (Secret) names are DNS-1123 subdomains; data keys are ConfigMap/Secret key names.
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DATA_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
# Opaque placement ids (seed-only brev flags).
PLACEMENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
# Free-text filters passed as single argv elements to `brev create`.
FILTER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._-]*$"

MAX_SPEC_CONTENT = 262144
# Timeout bounds (seconds) shared by every field of `Timeouts`.
TIMEOUT_MIN = 10
TIMEOUT_MAX = 604800
# spec.instance.ephemeral.retainFor: plain seconds ("3600") or units ("12h", "1d12h", "90m").
RETAIN_FOR_PATTERN = r"^([0-9]+|([0-9]+[smhd])+)$"
RETAIN_FOR_MAX = 366 * 86400
_RETAIN_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

DEFAULT_SHM_SIZE = "16g"
DEFAULT_S3_REGION = "us-east-1"


class OnCompletion(StrEnum):
    """What happens to the instance after the results are uploaded."""

    DELETE = "Delete"
    RETAIN = "Retain"


@dataclass(frozen=True)
class CelRule:
    """One `x-kubernetes-validations` entry, shared by the CRD and the pydantic validator that
    re-checks it. `field_path` makes the API server report the error at the offending field
    rather than at the object holding the rule."""

    rule: str
    message: str
    field_path: str | None = None

    def schema(self) -> JsonDict:
        entry: JsonDict = {"rule": self.rule, "message": self.message}
        if self.field_path is not None:
            entry["fieldPath"] = self.field_path
        return entry

    @property
    def reason(self) -> str:
        """The message without its leading "<field>: " (when pydantic's location names it)."""
        return self.message.split(": ", 1)[1]


def _validations(*rules: CelRule) -> JsonDict:
    return {"x-kubernetes-validations": [r.schema() for r in rules]}


class _SpecModel(BaseModel):
    # Unknown fields are errors in Python (the API server prunes them before we see the object).
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# --- spec.task -------------------------------------------------------------------------------


class EnvVar(_SpecModel):
    """A non-secret environment variable for the TAO container."""

    name: str = Field(
        pattern=ENV_NAME_PATTERN, max_length=256, description="Variable name (letters, digits, underscore)."
    )
    value: str = Field(default="", max_length=32768, description="Literal value. Never put secrets here.")


_SINGLE_SPEC_RULE = CelRule(
    "has(self.specPath) != has(self.specContent)",
    "spec.task: set exactly one of specPath (absolute path of the experiment spec inside the "
    "container) or specContent (the experiment spec YAML inline)",
)


def _task_schema(schema: JsonDict) -> None:
    schema.update(_validations(_SINGLE_SPEC_RULE))
    # The image has a default, but it is a deployment fact (versions.yaml), not a model fact: the
    # CRD generator writes it into the schema, the API server applies it, and `parse` fills it
    # for specs built in Python. The model itself stays pure (no file read at import).
    required = schema.get("required")
    if isinstance(required, list):
        schema["required"] = [r for r in required if r != "image"]


class TaskSpec(_SpecModel):
    """What to run: `<networkArch> <action> -e <spec> [args...]` in a TAO Toolkit container."""

    model_config = ConfigDict(json_schema_extra=_task_schema)

    image: str = Field(
        pattern=IMAGE_PATTERN,
        max_length=512,
        description="TAO Toolkit container image (registry/repository:tag or @sha256 digest).",
    )
    network_arch: str = Field(
        pattern=TAO_WORD_PATTERN,
        max_length=63,
        description="TAO network architecture, e.g. visual_changenet, classification_pyt.",
    )
    action: str = Field(
        pattern=TAO_WORD_PATTERN,
        max_length=63,
        description="TAO action, e.g. train, evaluate, export, inference.",
    )
    spec_path: str | None = Field(
        default=None,
        pattern=CONTAINER_PATH_PATTERN,
        max_length=1024,
        description=(
            "Absolute path of the experiment spec inside the container, e.g. a file staged from "
            f"an S3 input under {DATA_ROOT}/. Exactly one of specPath and specContent."
        ),
    )
    spec_content: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SPEC_CONTENT,
        description=(
            "The experiment spec YAML inline; the operator writes it to the job directory and "
            f"mounts it at {SPEC_MOUNT_PATH}. Exactly one of specPath and specContent."
        ),
    )
    args: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=list,
        max_length=64,
        description="Extra arguments appended after `-e <spec>` (e.g. Hydra overrides).",
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra=list_map("name"),
        description="Non-secret environment variables; secrets go in credentials.extraEnv.",
    )
    gpus: int | None = Field(
        default=None, ge=1, le=8, description="`docker run --gpus N`. Omitted: all GPUs of the instance."
    )
    shm_size: str = Field(
        default=DEFAULT_SHM_SIZE,
        pattern=SHM_SIZE_PATTERN,
        max_length=16,
        description="`docker run --shm-size` (bytes, or with a k/m/g suffix).",
    )

    @model_validator(mode="after")
    def _exactly_one_spec(self) -> Self:
        if (self.spec_path is None) == (self.spec_content is None):
            raise ValueError(_SINGLE_SPEC_RULE.message)
        return self

    @field_validator("env")
    @classmethod
    def _unique_env(cls, env: list[EnvVar]) -> list[EnvVar]:
        _refuse_duplicates("spec.task.env", [e.name for e in env], "name")
        return env


# --- spec.steps (a workflow: TAO actions chained on one instance) ------------------------------

# A step's name: a DNS label (it names a container, an S3 prefix and a directory on the instance).
STEP_NAME_PATTERN = r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$"
STEP_NAME_MAX = 32
MAX_STEPS = 16
MAX_STEP_INPUTS = 16
# The image a step runs when it names none, by action: TAO ships its deployment actions in the
# `-deploy` container and its data tools in `-data-services`; everything else is `-pyt`.
DEPLOY_ACTIONS = frozenset({"export", "gen_trt_engine", "inference"})
DATA_ACTIONS = frozenset({"dataset_convert"})


class ImageKind(StrEnum):
    """Which TAO Toolkit container a step runs by default (versions.yaml images.tao_toolkit)."""

    PYT = "pyt"
    DEPLOY = "deploy"
    DATA_SERVICES = "data_services"


def image_kind(action: str) -> ImageKind:
    """The TAO container an action runs in when its step names no image."""
    if action in DEPLOY_ACTIONS:
        return ImageKind.DEPLOY
    if action in DATA_ACTIONS:
        return ImageKind.DATA_SERVICES
    return ImageKind.PYT


class StepWhen(StrEnum):
    """When a step runs: OnSuccess only if no earlier step failed; Always whatever happened."""

    ON_SUCCESS = "OnSuccess"
    ALWAYS = "Always"


_STEP_SPEC_RULE = CelRule(
    "has(self.specPath) != has(self.specContent)",
    "spec.steps[]: set exactly one of specPath (absolute path of the experiment spec inside the "
    "container) or specContent (the experiment spec YAML inline)",
)


_STEP_INPUT_DOTS_RULE = CelRule(
    "!has(self.path) || !self.path.split('/').exists(s, s == '.' || s == '..')",
    "spec.steps[].inputs[].path: must not contain '.' or '..' segments; give a path relative to "
    "the earlier step's results directory",
    ".path",
)


class StepInput(_SpecModel):
    """An earlier step's output, mounted read-only into this step's container at
    /workspace/inputs/<fromStep>/<path>."""

    model_config = ConfigDict(json_schema_extra=_validations(_STEP_INPUT_DOTS_RULE))

    from_step: str = Field(
        pattern=STEP_NAME_PATTERN,
        max_length=STEP_NAME_MAX,
        description="The earlier step (by name) whose results directory holds the input.",
    )
    path: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$",
        max_length=256,
        description=(
            "A file or directory relative to that step's results directory (e.g. "
            "train/model_latest.pth). Omitted: the whole results directory."
        ),
    )

    @field_validator("path")
    @classmethod
    def _no_dot_segments(cls, path: str | None) -> str | None:
        if path is not None and any(seg in {".", ".."} for seg in path.split("/")):
            raise ValueError(_STEP_INPUT_DOTS_RULE.reason)
        return path

    def container_path(self) -> str:
        """Where the input is in the reading step's container."""
        return f"{INPUTS_ROOT}/{self.from_step}" + (f"/{self.path}" if self.path else "")


class StepSpec(_SpecModel):
    """One TAO action of a workflow: `<networkArch> <action> -e <spec> [args...]` in its own
    container on the workflow's instance; its results directory is uploaded to
    <resultsUri>/<name>/ when it ends."""

    model_config = ConfigDict(json_schema_extra=_validations(_STEP_SPEC_RULE))

    name: str = Field(
        pattern=STEP_NAME_PATTERN,
        max_length=STEP_NAME_MAX,
        description=(
            "The step's name (lower-case letters, digits and '-'; unique): its results go to "
            "<resultsUri>/<name>/ and later steps read them with inputs[].fromStep."
        ),
    )
    network_arch: str = Field(
        pattern=TAO_WORD_PATTERN, max_length=63, description="TAO network architecture, e.g. dino."
    )
    action: str = Field(
        pattern=TAO_WORD_PATTERN,
        max_length=63,
        description="TAO action, e.g. dataset_convert, train, evaluate, prune, retrain, export, inference.",
    )
    image: str | None = Field(
        default=None,
        pattern=IMAGE_PATTERN,
        max_length=512,
        description=(
            "Container image. Omitted: the pinned TAO Toolkit image for the action (-deploy for "
            "export, gen_trt_engine and inference; -data-services for dataset_convert; -pyt "
            "otherwise). Every distinct image is pulled once, before the first step runs."
        ),
    )
    spec_path: str | None = Field(
        default=None,
        pattern=CONTAINER_PATH_PATTERN,
        max_length=1024,
        description="Absolute path of the experiment spec inside the container. Exactly one of "
        "specPath and specContent.",
    )
    spec_content: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SPEC_CONTENT,
        description=(
            f"The experiment spec YAML inline, mounted at {SPEC_MOUNT_PATH} in this step's "
            "container. Exactly one of specPath and specContent."
        ),
    )
    args: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=list, max_length=64, description="Extra arguments appended after `-e <spec>`."
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra=list_map("name"),
        description="Non-secret environment variables of this step (credentials.extraEnv go to every step).",
    )
    gpus: int | None = Field(default=None, ge=1, le=8, description="`docker run --gpus N`. Omitted: all.")
    shm_size: str = Field(
        default=DEFAULT_SHM_SIZE,
        pattern=SHM_SIZE_PATTERN,
        max_length=16,
        description="`docker run --shm-size`.",
    )
    timeout_seconds: int | None = Field(
        default=None,
        ge=TIMEOUT_MIN,
        le=TIMEOUT_MAX,
        description=(
            "Max run time of this step's container; past it the workflow fails (StepTimedOut). "
            "spec.timeouts.runningSeconds bounds all steps together."
        ),
    )
    when: StepWhen = Field(
        default=StepWhen.ON_SUCCESS,
        description="OnSuccess: run only if no earlier step failed. Always: run in any case "
        "(e.g. an evaluate after a failed prune).",
    )
    inputs: list[StepInput] = Field(
        default_factory=list,
        max_length=MAX_STEP_INPUTS,
        description=(
            f"Earlier steps' outputs mounted read-only at {INPUTS_ROOT}/<fromStep>/<path>; "
            f"this step writes its own results to {RESULTS_DIR}."
        ),
    )

    @model_validator(mode="after")
    def _exactly_one_spec(self) -> Self:
        if (self.spec_path is None) == (self.spec_content is None):
            raise ValueError(_STEP_SPEC_RULE.message)
        return self

    @field_validator("env")
    @classmethod
    def _unique_env(cls, env: list[EnvVar]) -> list[EnvVar]:
        _refuse_duplicates("spec.steps[].env", [e.name for e in env], "name")
        return env

    def image_or(self, default: str) -> str:
        return self.image if self.image is not None else default


def step_name_of(action: str) -> str:
    """The step name of the single-action form (`spec.task`): its action, as a step name."""
    return action.replace("_", "-")[:STEP_NAME_MAX].rstrip("-")


# --- spec.instance ---------------------------------------------------------------------------


class ReuseInstance(_SpecModel):
    """An existing brev instance; the operator never creates, stops or deletes it."""

    name: str = Field(
        pattern=BREV_NAME_PATTERN,
        max_length=BREV_NAME_MAX,
        description="brev instance name as `brev ls` shows it (letters, digits, . _ -; max 63).",
    )


class EphemeralInstance(_SpecModel):
    """A new instance created for this job with `brev create`. Every field maps to a flag;
    omitted fields use brev's own defaults (cheapest type with >= 20 GB total VRAM)."""

    types: list[Annotated[str, StringConstraints(pattern=INSTANCE_TYPE_PATTERN, max_length=128)]] = Field(
        default_factory=list,
        max_length=16,
        description="Instance types in fallback order (`--type a,b`), as `brev search` lists them.",
    )
    gpu_name: str | None = Field(
        default=None,
        pattern=FILTER_PATTERN,
        max_length=64,
        description="`--gpu-name`: GPU model filter (case-insensitive substring), e.g. L40S, A100, H100.",
    )
    provider: str | None = Field(
        default=None,
        pattern=FILTER_PATTERN,
        max_length=64,
        description="`--provider`: cloud provider filter.",
    )
    min_vram: float | None = Field(default=None, ge=1, le=1024, description="`--min-vram`: GB per GPU.")
    min_total_vram: float | None = Field(
        default=None, ge=1, le=8192, description="`--min-total-vram`: GB over all GPUs."
    )
    min_capability: float | None = Field(
        default=None, ge=1, le=20, description="`--min-capability`: CUDA compute capability, e.g. 8.0."
    )
    min_disk: int | None = Field(default=None, ge=1, le=65536, description="`--min-disk`: GB of disk.")
    max_boot_time_minutes: int | None = Field(
        default=None, ge=1, le=120, description="`--max-boot-time`: only types that boot within N minutes."
    )
    startup_script: str | None = Field(
        default=None, max_length=16384, description="`--startup-script`: inline script run at first boot."
    )
    cloud_cred_id: str | None = Field(
        default=None,
        pattern=PLACEMENT_ID_PATTERN,
        max_length=128,
        description=(
            "Placement: cloud credential id (from the TAO skill docs). brev CLI v0.6.327 has no such "
            "flag; the operator fails the job with an InvalidSpec condition unless the installed "
            "CLI supports it."
        ),
    )
    workspace_group_id: str | None = Field(
        default=None,
        pattern=PLACEMENT_ID_PATTERN,
        max_length=128,
        description=(
            "Placement: workspace group id (from the TAO skill docs). brev CLI v0.6.327 has no such "
            "flag; the operator fails the job with an InvalidSpec condition unless the installed "
            "CLI supports it."
        ),
    )
    retain_for: str | None = Field(
        default=None,
        pattern=RETAIN_FOR_PATTERN,
        max_length=32,
        description=(
            "With onCompletion: Retain, how long the operator keeps the instance after the job "
            "finished before it deletes it (seconds, or units s/m/h/d such as 12h or 1d12h; max "
            "366d). Unset: a retained instance is kept until you delete it. The deadline is "
            "recorded when the job finishes and holds after the TaoBrevJob is deleted."
        ),
    )

    @field_validator("retain_for")
    @classmethod
    def _retain_for_bounded(cls, value: str | None) -> str | None:
        if value is not None:
            seconds = retain_for_seconds(value)
            if not 1 <= seconds <= RETAIN_FOR_MAX:
                raise ValueError(
                    f"spec.instance.ephemeral.retainFor: {value!r} is {seconds} s; give 1 s .. 366d "
                    "(e.g. 12h), or omit it to keep the instance until you delete it"
                )
        return value

    def retain_for_seconds(self) -> int | None:
        return retain_for_seconds(self.retain_for) if self.retain_for is not None else None


def retain_for_seconds(value: str) -> int:
    """ "3600" -> 3600, "1d12h" -> 129600 (the pattern has been checked)."""
    if value.isdigit():
        return int(value)
    return sum(int(n) * _RETAIN_UNITS[u] for n, u in re.findall(r"([0-9]+)([smhd])", value))


_ONE_INSTANCE_RULE = CelRule(
    "has(self.reuse) != has(self.ephemeral)",
    "spec.instance: set exactly one of reuse (an existing brev instance, by name) or "
    "ephemeral (a new instance created for this job)",
)


_REUSE_NEVER_DELETED_RULE = CelRule(
    "!has(self.reuse) || !has(self.onCompletion) || self.onCompletion != 'Delete'",
    "spec.instance.onCompletion: Delete is not allowed with reuse: the operator never deletes "
    "an instance it did not create; remove onCompletion or use an ephemeral instance",
    ".onCompletion",
)


_RETAIN_FOR_NEEDS_RETAIN_RULE = CelRule(
    "!has(self.ephemeral) || !has(self.ephemeral.retainFor) || "
    "(has(self.onCompletion) && self.onCompletion == 'Retain')",
    "spec.instance.ephemeral.retainFor: only meaningful with onCompletion: Retain (an ephemeral "
    "instance is deleted at the end by default); set onCompletion: Retain or remove retainFor",
    ".ephemeral.retainFor",
)


class InstanceSpec(_SpecModel):
    """Where to run: exactly one of reuse or ephemeral."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _ONE_INSTANCE_RULE, _REUSE_NEVER_DELETED_RULE, _RETAIN_FOR_NEEDS_RETAIN_RULE
        )
    )

    reuse: ReuseInstance | None = Field(default=None, description="Run on an existing brev instance.")
    ephemeral: EphemeralInstance | None = Field(
        default=None, description="Create a new instance for this job (`brev create`)."
    )
    on_completion: OnCompletion | None = Field(
        default=None,
        description=(
            "What to do with the instance after the results are uploaded. Default: Delete for "
            "ephemeral, Retain for reuse (Delete is refused for reuse)."
        ),
    )

    @model_validator(mode="after")
    def _exactly_one_instance(self) -> Self:
        if (self.reuse is None) == (self.ephemeral is None):
            raise ValueError(_ONE_INSTANCE_RULE.message)
        if self.reuse is not None and self.on_completion is OnCompletion.DELETE:
            raise ValueError(_REUSE_NEVER_DELETED_RULE.message)
        if (
            self.ephemeral is not None
            and self.ephemeral.retain_for is not None
            and self.on_completion is not OnCompletion.RETAIN
        ):
            raise ValueError(_RETAIN_FOR_NEEDS_RETAIN_RULE.message)
        return self

    def effective_on_completion(self) -> OnCompletion:
        """onCompletion, or its default: delete what this job created, keep what it borrowed."""
        if self.on_completion is not None:
            return self.on_completion
        return OnCompletion.DELETE if self.ephemeral is not None else OnCompletion.RETAIN


# --- spec.data -------------------------------------------------------------------------------


def default_input_path(uri: str) -> str:
    """The staging directory of an input without `path`: the last segment of its URI
    (s3://bucket/datasets/cats/ -> cats; s3://bucket -> bucket)."""
    return uri.removeprefix("s3://").rstrip("/").rsplit("/", 1)[-1]


_NO_DOT_SEGMENTS_RULE = CelRule(
    "!has(self.path) || !self.path.split('/').exists(s, s == '.' || s == '..')",
    "spec.data.inputs[].path: must not contain '.' or '..' segments; give a plain relative "
    f"directory under {DATA_ROOT}",
    ".path",
)


def _s3_input_schema(schema: dict[str, Any]) -> None:
    # `path` is always set on the Python model (defaulted from the URI before validation), but
    # the API server must accept an input without it.
    schema["required"] = [r for r in schema.get("required", []) if r != "path"]
    schema["x-kubernetes-validations"] = [_NO_DOT_SEGMENTS_RULE.schema()]


class S3Input(_SpecModel):
    """An S3 object or prefix copied onto the instance before the run."""

    model_config = ConfigDict(json_schema_extra=_s3_input_schema)

    uri: str = Field(
        pattern=INPUT_URI_PATTERN,
        max_length=1024,
        description="s3://bucket[/key...]: an object or a prefix (copied recursively).",
    )
    path: str = Field(
        pattern=INPUT_PATH_PATTERN,
        max_length=256,
        description=(
            f"Directory under {DATA_ROOT} to stage into (relative, no '..'). Default: the last "
            "segment of uri. Must be unique among inputs."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _default_path(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("path") is None and isinstance(data.get("uri"), str):
            return {**data, "path": default_input_path(data["uri"])}
        return data

    @field_validator("path")
    @classmethod
    def _no_dot_segments(cls, path: str) -> str:
        if any(seg in {".", ".."} for seg in path.split("/")):
            # pydantic's location already names the item (inputs[i].path); keep only the why.
            raise ValueError(_NO_DOT_SEGMENTS_RULE.reason)
        return path


def _effective_input_path_cel(i: str) -> str:
    """CEL twin of default_input_path() for list item `i` (no cel.bind in CRD rules): the path,
    or the URI's last segment, ignoring one trailing "/" (the URI pattern allows only one)."""
    return (
        f"(has({i}.path) ? {i}.path : {i}.uri.endsWith('/') ? "
        f"{i}.uri.substring({i}.uri.lastIndexOf('/', size({i}.uri) - 2) + 1, size({i}.uri) - 1) : "
        f"{i}.uri.substring({i}.uri.lastIndexOf('/') + 1))"
    )


# Not `x-kubernetes-list-type: map` keyed by path: the API server requires map keys to be
# required or defaulted, and path's default depends on uri. Quadratic, but bounded by maxItems.
_UNIQUE_INPUT_PATHS_RULE = CelRule(
    f"self.all(x, self.exists_one(y, {_effective_input_path_cel('y')} == {_effective_input_path_cel('x')}))",
    "spec.data.inputs: two inputs stage into the same path (path defaults to the last segment "
    "of uri): give each input a distinct path",
)


class DataSpec(_SpecModel):
    """Data in and out: everything flows through S3 (Brev has no shared storage)."""

    inputs: list[S3Input] = Field(
        default_factory=list,
        max_length=32,
        json_schema_extra=_validations(_UNIQUE_INPUT_PATHS_RULE),
        description=f"S3 objects/prefixes staged under {DATA_ROOT}/<path> before the run.",
    )
    results_uri: str = Field(
        pattern=RESULTS_URI_PATTERN,
        max_length=1024,
        description="s3://bucket/prefix: results/ and logs/ are uploaded beneath it before teardown.",
    )
    s3_endpoint_url: str | None = Field(
        default=None,
        pattern=HTTP_URL_PATTERN,
        max_length=2048,
        description="S3 endpoint for non-AWS stores (MinIO, Ceph, ...), http(s)://host[:port].",
    )
    s3_region: str = Field(
        default=DEFAULT_S3_REGION, pattern=AWS_REGION_PATTERN, max_length=64, description="S3 region."
    )

    @field_validator("inputs")
    @classmethod
    def _unique_paths(cls, inputs: list[S3Input]) -> list[S3Input]:
        if len({i.path for i in inputs}) != len(inputs):
            raise ValueError(_UNIQUE_INPUT_PATHS_RULE.message)
        return inputs


# --- spec.credentials ------------------------------------------------------------------------


class SecretKeyRef(_SpecModel):
    """A key of a Secret in the job's namespace."""

    name: str = Field(pattern=OBJECT_NAME_PATTERN, max_length=253, description="Secret name.")
    key: str = Field(pattern=DATA_KEY_PATTERN, max_length=253, description="Key within the Secret.")


class NgcApiKeyRef(SecretKeyRef):
    """The Secret key holding the NGC API key used for `docker login nvcr.io` on the instance."""

    key: str = Field(
        default="NGC_API_KEY",
        pattern=DATA_KEY_PATTERN,
        max_length=253,
        description="Key within the Secret.",
    )


class S3CredentialsRef(_SpecModel):
    """A Secret holding S3 credentials, used to stage inputs and upload results."""

    name: str = Field(pattern=OBJECT_NAME_PATTERN, max_length=253, description="Secret name.")
    access_key_id_key: str = Field(
        default="AWS_ACCESS_KEY_ID",
        pattern=DATA_KEY_PATTERN,
        max_length=253,
        description="Key holding the access key id.",
    )
    secret_access_key_key: str = Field(
        default="AWS_SECRET_ACCESS_KEY",
        pattern=DATA_KEY_PATTERN,
        max_length=253,
        description="Key holding the secret access key.",
    )


class SecretEnvVar(_SpecModel):
    """An environment variable for the TAO container whose value comes from a Secret."""

    name: str = Field(pattern=ENV_NAME_PATTERN, max_length=256, description="Variable name, e.g. HF_TOKEN.")
    secret_key_ref: SecretKeyRef = Field(description="Where the value is.")


class CredentialsSpec(_SpecModel):
    """Secret references only: values never appear in the spec, argv, logs, Events or status."""

    ngc_api_key: NgcApiKeyRef = Field(description="NGC API key, to pull TAO images from nvcr.io.")
    s3: S3CredentialsRef = Field(description="S3 credentials for inputs and results.")
    extra_env: list[SecretEnvVar] = Field(
        default_factory=list,
        max_length=32,
        json_schema_extra=list_map("name"),
        description="Secret environment variables for the container (e.g. HF_TOKEN).",
    )

    @field_validator("extra_env")
    @classmethod
    def _unique_extra_env(cls, extra_env: list[SecretEnvVar]) -> list[SecretEnvVar]:
        _refuse_duplicates("spec.credentials.extraEnv", [e.name for e in extra_env], "name")
        return extra_env


# --- spec.timeouts ---------------------------------------------------------------------------


def _timeout(default: int, what: str) -> Any:
    return Field(default=default, ge=TIMEOUT_MIN, le=TIMEOUT_MAX, description=f"{what} (seconds).")


class Timeouts(_SpecModel):
    """Per-phase deadlines in seconds (10..604800): a phase that lasts longer fails the job.
    Unlike the rest of the spec, these may be changed while the job runs."""

    provisioning_seconds: int = _timeout(1800, "Max time from `brev create` to the instance RUNNING")
    waiting_exec_seconds: int = _timeout(
        900,
        "Max time until the first `brev exec` succeeds; a fresh instance reports RUNNING before "
        "sshd is up, and the first exec can take 600 s or more, so keep this >= 600",
    )
    pulling_seconds: int = _timeout(3600, "Max time for NGC login and the image pull")
    running_seconds: int = _timeout(86400, "Max run time of the TAO container")
    uploading_seconds: int = _timeout(1800, "Max time to upload results and logs to S3")
    deleting_seconds: int = _timeout(900, "Max time for `brev delete` to be confirmed")
    pending_seconds: int = _timeout(
        3600,
        "Max time the pre-flight may keep failing before the job fails (a Secret, bucket or input "
        "that is not there yet); counted from its first failure, not from creation, so time in "
        "the quota queue never counts. The default is one External Secrets refresh interval",
    )
    queued_seconds: int | None = Field(
        default=None,
        ge=TIMEOUT_MIN,
        le=TIMEOUT_MAX,
        description=(
            "Max time the job may wait in the quota queue (held by a namespace or cluster instance "
            "or GPU limit; suspended time does not count) before it fails with QueueTimeout and "
            "failureClass Quota, nothing created (seconds). Unset: it waits until admitted, as a "
            "Kubernetes Job waits for Kueue"
        ),
    )


# --- spec.recovery / spec.budget -------------------------------------------------------------

# Checkpoint sync interval bounds (seconds). 10 lets tests run fast; every interval costs one
# `brev exec` and one S3 listing, so production jobs want minutes (default 600).
CHECKPOINT_INTERVAL_MIN = 10
CHECKPOINT_INTERVAL_MAX = 86400
MAX_ATTEMPTS_LIMIT = 10


class RecoverySpec(_SpecModel):
    """Resume on a new instance when the instance is lost, goes to FAILURE, stops unexpectedly or
    never accepts commands. Checkpoints under the results directory are synced to
    `<resultsUri>/checkpoints/<job id>/` while the job runs and restored on the next attempt's
    instance (the job id, name plus a digest of the uid, keeps a reused resultsUri from resuming
    another job's run).
    A job on a reused instance (spec.instance.reuse) is never moved to a new instance."""

    max_attempts: int = Field(
        default=2,
        ge=1,
        le=MAX_ATTEMPTS_LIMIT,
        description="Instances (attempts) the job may use in total; 1 disables recovery.",
    )
    checkpoint_interval_seconds: int = Field(
        default=600,
        ge=CHECKPOINT_INTERVAL_MIN,
        le=CHECKPOINT_INTERVAL_MAX,
        description=(
            "How often the results directory is synced (only new or changed files) to "
            "<resultsUri>/checkpoints/<job id>/ while the container runs; each sync is one brev call."
        ),
    )
    retry_on_exit_codes: list[Annotated[int, Field(ge=1, le=255)]] = Field(
        default_factory=list,
        max_length=32,
        description=(
            "Container exit codes that start a new attempt (e.g. 137 for an OOM kill). Any other "
            "non-zero exit code fails the job."
        ),
    )


class BudgetSpec(_SpecModel):
    """Limits across all attempts; when one is reached the container is stopped, what exists is
    uploaded, the instance is deleted and the job fails with reason BudgetExceeded."""

    max_billed_seconds: int | None = Field(
        default=None,
        ge=60,
        le=31536000,
        description="Billed instance time (create request to confirmed deletion, all attempts).",
    )
    max_cost_dollars: float | None = Field(
        default=None,
        ge=0.01,
        le=1000000,
        description=(
            "Estimated cost in dollars (billed time x the instance type's hourly price from "
            "`brev search`). While a price is unknown only maxBilledSeconds can stop the job."
        ),
    )


MAX_NOTIFIERS_PER_JOB = 8


class NotifySpec(_SpecModel):
    """Who is told about this job's transitions (docs/notifications.md). Sinks are
    TaoBrevNotifier objects in the job's namespace; their Secret holds the URL and signing key."""

    notifiers: list[Annotated[str, StringConstraints(pattern=OBJECT_NAME_PATTERN, max_length=253)]] = Field(
        default_factory=list,
        max_length=MAX_NOTIFIERS_PER_JOB,
        description=(
            "TaoBrevNotifiers (in the job's namespace) to notify besides the namespace's own "
            "(those with spec.jobs: All); a notifier with spec.jobs: Named is used only when named here."
        ),
    )
    namespace_notifiers: bool = Field(
        default=True,
        description="Also notify the namespace's notifiers with spec.jobs: All (false: only those named).",
    )
    events: list[Transition] = Field(
        default_factory=list,
        max_length=len(Transition),
        description="Only these transitions for this job (empty: every one the notifier asks for).",
    )


# --- spec.debug -------------------------------------------------------------------------------

# spec.debug.keepInstanceOnFailure: the retainFor convention (seconds, or units such as 30m, 2h).
KEEP_ON_FAILURE_MAX = 86400


class DebugSpec(_SpecModel):
    """Help for a person investigating a failed run. Everything here is off by default."""

    keep_instance_on_failure: str | None = Field(
        default=None,
        pattern=RETAIN_FOR_PATTERN,
        max_length=32,
        description=(
            "After a Program failure (the training exited non-zero or ran past "
            "spec.timeouts.runningSeconds), keep the instance this long so a person can "
            "`brev shell` in (seconds, or units s/m/h/d such as 30m or 2h; max 24h), then delete "
            "it. Results and logs are uploaded first; the job's secrets are removed from the "
            "instance, the stopped container stays unless it carries spec.credentials.extraEnv. "
            "The time is billed and counts against spec.budget; `kubectl delete` or `kubectl "
            "taobrev cancel` deletes it at once. Only for an instance the job deletes "
            "(spec.instance.ephemeral with onCompletion Delete)."
        ),
    )

    @field_validator("keep_instance_on_failure")
    @classmethod
    def _keep_bounded(cls, value: str | None) -> str | None:
        if value is not None:
            seconds = retain_for_seconds(value)
            if not 1 <= seconds <= KEEP_ON_FAILURE_MAX:
                raise ValueError(
                    f"spec.debug.keepInstanceOnFailure: {value!r} is {seconds} s; give 1 s .. 24h "
                    "(e.g. 30m or 2h), or omit it to delete the instance at once after a failure"
                )
        return value

    def keep_seconds(self) -> int | None:
        value = self.keep_instance_on_failure
        return retain_for_seconds(value) if value is not None else None


_KEEP_NEEDS_DELETE_RULE = CelRule(
    "!has(self.debug) || !has(self.debug.keepInstanceOnFailure) || (has(self.instance.ephemeral) && "
    "(!has(self.instance.onCompletion) || self.instance.onCompletion == 'Delete'))",
    "spec.debug.keepInstanceOnFailure: only for an instance the job deletes (spec.instance.ephemeral "
    "with onCompletion Delete); a reused or retained instance stays after the job anyway: remove "
    "keepInstanceOnFailure",
    ".debug.keepInstanceOnFailure",
)


# --- spec ------------------------------------------------------------------------------------


_EXTRA_ENV_COLLISION_RULE = CelRule(
    "!has(self.credentials.extraEnv) || !has(self.task) || !has(self.task.env) || "
    "self.credentials.extraEnv.all(s, !self.task.env.exists(e, e.name == s.name))",
    "spec.credentials.extraEnv: a name is also set in spec.task.env; remove it from one of the two",
    ".credentials.extraEnv",
)


_TASK_OR_STEPS_RULE = CelRule(
    "has(self.task) != has(self.steps)",
    "spec.task: set exactly one of spec.task (one TAO action) or spec.steps (TAO actions chained "
    "on one instance, docs/workflows.md)",
)

_START_AT_STEP_RULE = CelRule(
    "!has(self.startAtStep) || (has(self.steps) && self.steps.exists(s, s.name == self.startAtStep))",
    "spec.startAtStep: must name one of spec.steps; give a step's name (the steps before it are "
    "not run, their results are read from <resultsUri>/<step>/)",
    ".startAtStep",
)

_STEP_INPUTS_RULE = CelRule(
    "!has(self.steps) || self.steps.all(s, !has(s.inputs) || "
    "s.inputs.all(i, self.steps.exists(t, t.name == i.fromStep)))",
    "spec.steps[].inputs[].fromStep: must name an earlier step of spec.steps; give that step's name",
    ".steps",
)


class TaoBrevJobSpec(_SpecModel):
    """A TAO Toolkit job on an NVIDIA Brev GPU instance: the instance is reached (or created),
    inputs are staged from S3, the container runs, results are uploaded, the instance is
    released."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _EXTRA_ENV_COLLISION_RULE,
            _KEEP_NEEDS_DELETE_RULE,
            _TASK_OR_STEPS_RULE,
            _START_AT_STEP_RULE,
            _STEP_INPUTS_RULE,
        )
    )

    task: TaskSpec | None = Field(
        default=None, description="What to run: one TAO action. Exactly one of task and steps."
    )
    steps: list[StepSpec] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_STEPS,
        json_schema_extra=list_map("name"),
        description=(
            "A workflow: TAO actions run one after another on ONE instance (one boot, each image "
            "pulled once), each step's results uploaded to <resultsUri>/<name>/ when it ends "
            "(docs/workflows.md). Exactly one of task and steps."
        ),
    )
    start_at_step: str | None = Field(
        default=None,
        pattern=STEP_NAME_PATTERN,
        max_length=STEP_NAME_MAX,
        description=(
            "Rerun a workflow from this step: the steps before it are not run; their results are "
            "restored from <resultsUri>/<step>/ (where an earlier run uploaded them)."
        ),
    )
    instance: InstanceSpec = Field(description="Where to run it.")
    data: DataSpec = Field(description="S3 inputs and the results location.")
    credentials: CredentialsSpec = Field(description="Secret references (never values).")
    timeouts: Timeouts = Field(
        default_factory=Timeouts,
        json_schema_extra={"default": {}},
        description="Per-phase deadlines; may be changed at any time.",
    )
    recovery: RecoverySpec = Field(
        default_factory=RecoverySpec,
        json_schema_extra={"default": {}},
        description="Resume on a new instance after a lost instance (checkpoint sync and restore).",
    )
    budget: BudgetSpec = Field(
        default_factory=BudgetSpec,
        json_schema_extra={"default": {}},
        description="Billed-time and cost limits across all attempts.",
    )
    priority: int = Field(
        default=0,
        ge=-1000000,
        le=1000000,
        description=(
            "Admission order among queued jobs (higher first; then creation time, then name). "
            "Matters only while the job waits for a quota (docs/queueing.md)."
        ),
    )
    suspend: bool = Field(
        default=False,
        description=(
            "While true, a Pending job is not admitted (nothing is created); set it to false to "
            "admit the job in its turn. It only holds back admission: a job already admitted runs "
            "on (delete the job to stop it). Kueue's spec.suspend vocabulary."
        ),
    )
    dry_run: bool = Field(
        default=False,
        description=(
            "Plan only: the operator runs the pre-flight and writes status.plan (the instance types "
            "it would ask Brev for with their prices, the images, the cost ceiling, what goes where "
            "in S3) and creates nothing. Set it to false to run the job as planned. "
            "`kubectl taobrev plan -f job.yaml` does this for you."
        ),
    )

    notify: NotifySpec | None = Field(
        default=None,
        description=(
            "Notifications of this job's transitions (CloudEvents or Slack, signed with HMAC-SHA256) "
            "to TaoBrevNotifiers of its namespace; unset: the namespace's notifiers with spec.jobs: All."
        ),
    )
    debug: DebugSpec | None = Field(
        default=None, description="Help for investigating a failed run (off by default)."
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        le=31_536_000,
        description=(
            "Delete the TaoBrevJob this many seconds after it finished (status.finishedAt), as the "
            "Kubernetes Job field does; unset: kept until deleted. Leave it unset under Argo CD or "
            "Flux: they re-create an object deleted from under them, and the new object is a new run. "
            "An instance a Retain job keeps stays in its retained record."
        ),
    )

    @model_validator(mode="after")
    def _no_env_collision(self) -> Self:
        if (self.task is None) == (self.steps is None):
            raise ValueError(_TASK_OR_STEPS_RULE.message)
        _check_steps(self.steps or [], self.start_at_step)
        secret = {e.name for e in self.credentials.extra_env}
        if any(secret & {e.name for e in step.env} for step in self.workflow()):
            raise ValueError(_EXTRA_ENV_COLLISION_RULE.message)
        keeps = self.debug is not None and self.debug.keep_instance_on_failure is not None
        if keeps and self.instance.effective_on_completion() != OnCompletion.DELETE:
            raise ValueError(_KEEP_NEEDS_DELETE_RULE.message)
        return self

    def workflow(self) -> list[StepSpec]:
        """The steps to run: spec.steps, or the single-action form as a one-step workflow (named
        for its action). Every step's image is set (parse_spec fills omitted ones)."""
        if self.steps is not None:
            return self.steps
        task = self.task
        assert task is not None  # the validator requires one of the two
        return [
            StepSpec(
                name=step_name_of(task.action),
                network_arch=task.network_arch,
                action=task.action,
                image=task.image,
                spec_path=task.spec_path,
                spec_content=task.spec_content,
                args=task.args,
                env=task.env,
                gpus=task.gpus,
                shm_size=task.shm_size,
            )
        ]

    @property
    def is_workflow(self) -> bool:
        """spec.steps was given: per-step containers, uploads and status (a spec.task job keeps
        the single-job layout it always had)."""
        return self.steps is not None

    def images(self) -> list[str]:
        """Every distinct image the job runs, in step order (each pulled once)."""
        seen: dict[str, None] = {}
        for step in self.workflow():
            if step.image is not None:
                seen.setdefault(step.image, None)
        return list(seen)


def _check_steps(steps: list[StepSpec], start_at: str | None) -> None:
    """Names unique, inputs from EARLIER steps only, startAtStep naming a step."""
    names: list[str] = []
    for i, step in enumerate(steps):
        if step.name in names:
            raise ValueError(
                f"spec.steps[{i}].name: duplicate step name {step.name!r}; each name may appear once"
            )
        for j, inp in enumerate(step.inputs):
            if inp.from_step not in names:
                raise ValueError(
                    f"spec.steps[{i}].inputs[{j}].fromStep: {inp.from_step!r} is not an earlier step of "
                    f"spec.steps (earlier: {', '.join(names) or 'none'}); a step reads only what ran "
                    "before it"
                )
        names.append(step.name)
    if start_at is not None and start_at not in names:
        raise ValueError(_START_AT_STEP_RULE.message)


def _refuse_duplicates(where: str, values: list[str], key: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{where}: duplicate {key} {value!r}; each {key} may appear once")
        seen.add(value)


def phase_timeout(spec: TaoBrevJobSpec | None, phase: Phase) -> int | None:
    """The seconds `spec.timeouts` allows in `phase` (the field named in its PHASES row)."""
    field_name = PHASES[phase].timeout
    if field_name is None:
        return None
    return int(getattr(spec.timeouts if spec is not None else Timeouts(), field_name))
