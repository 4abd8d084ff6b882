"""Words shared by the spec and the status models: outcomes, condition statuses, and the pydantic
base and schema helper of status records. Below both `models` (spec) and `status`, so neither
imports the other (a status record must not make the house one level taller).

Pure module: no kopf, kubernetes, os or subprocess imports (`make lint`: .importlinter).
"""

from __future__ import annotations

import copy
from datetime import datetime
from enum import Enum, StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Outcome(StrEnum):
    """How the run ended; set once, when it ends."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELED = "Canceled"


class FailureClass(StrEnum):
    """Whose move it is after a failure (TAO's ERR_INFRA / ERR_PROGRAM, and the two the operator
    adds): what a person should do next, not how the run ended."""

    INFRASTRUCTURE = "Infrastructure"  # Brev, the instance, the network: retried by recovery
    PROGRAM = "Program"  # the training exited non-zero (or ran out of its time): fix the code/data
    CONFIGURATION = "Configuration"  # spec, Secrets, entitlement: fix it and apply again
    QUOTA = "Quota"  # the namespace's instance quota (its annotation) kept it from running
    BUDGET = "Budget"  # spec.budget was spent


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


def list_map(*keys: str) -> dict[str, Any]:
    """List semantics for the API server: items are merged by these keys and must be unique."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


class StatusModel(BaseModel):
    # Tolerant on read: other writers (kubectl, kopf) may leave fields we do not model.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def clone(self) -> Self:
        """A deep copy, as `model_copy(deep=True)` makes, at a quarter of its cost: every pass
        copies the status it starts from, and copy.deepcopy's memo and reduce protocol were 5%
        of a simulated operator's CPU. No validator runs (nor does one for model_copy)."""
        cloned: Self = _clone(self)
        return cloned


_SHARED = (str, int, float, bool, type(None), datetime, bytes, Enum)  # immutable: shared, not copied


def _clone(value: Any) -> Any:
    if isinstance(value, _SHARED):
        return value
    if isinstance(value, BaseModel):
        kind = type(value)
        out = kind.__new__(kind)
        extra, private = value.__pydantic_extra__, value.__pydantic_private__
        object.__setattr__(out, "__dict__", {k: _clone(v) for k, v in value.__dict__.items()})
        object.__setattr__(out, "__pydantic_fields_set__", set(value.__pydantic_fields_set__))
        object.__setattr__(out, "__pydantic_extra__", None if extra is None else _clone(extra))
        object.__setattr__(out, "__pydantic_private__", None if private is None else _clone(private))
        return out
    if type(value) is list:
        return [_clone(v) for v in value]
    if type(value) is dict:
        return {k: _clone(v) for k, v in value.items()}
    return copy.deepcopy(value)  # anything else (a set, a tuple of lists, ...): the general way


class Transition(StrEnum):
    """A job transition that notifications report (spec.notify.events, TaoBrevNotifier
    spec.events; the CloudEvents type is io.taobrev.job.<lower-case name>)."""

    ADMITTED = "Admitted"  # admitted under the quotas: it holds a slot, an instance comes next
    RUNNING = "Running"  # an attempt's training container started
    SUCCEEDED = "Succeeded"  # results verified in S3
    FAILED = "Failed"
    CANCELED = "Canceled"
    RECOVERING = "Recovering"  # an attempt ended; the next one resumes on a new instance
    BUDGET_EXCEEDED = "BudgetExceeded"  # spec.budget was spent (a Failed follows)
    STALLED = "Stalled"  # needs a human (status.stalledReason says why)
    STEP_SUCCEEDED = "StepSucceeded"  # a workflow step exited 0, its results verified in S3
    STEP_FAILED = "StepFailed"  # a workflow step failed (or the run ended while it ran)


class NotifyFormat(StrEnum):
    """What a TaoBrevNotifier posts."""

    CLOUD_EVENTS = "CloudEvents"  # CloudEvents 1.0, structured JSON (application/cloudevents+json)
    SLACK = "Slack"  # a Slack incoming-webhook message ({"text", "blocks"})
