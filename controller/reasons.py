"""Every Condition and Event reason the state machine writes, in one place (PURE).

Reasons are CamelCase constants (kstatus convention); metrics, conditions and Events use these
names, and users match on them, so a reason is named for what it says. Reasons raised by the
Brev side (`controller.errors` subclasses, e.g. `BrevUnavailable`) keep living on their error
classes and reach status through `ActionFailure.reason`.
"""

from __future__ import annotations

from controller.models import Phase

# --- how a run ended (status.reason with status.outcome) -----------------------------------------
SUCCEEDED = "Succeeded"
TRAINING_FAILED = "TrainingFailed"
CANCELED = "Canceled"
INSTANCE_FAILED = "InstanceFailed"
INSTANCE_LOST = "InstanceLost"
REUSE_INSTANCE_NOT_FOUND = "ReuseInstanceNotFound"
UPLOAD_FAILED = "UploadFailed"
INVALID_SPEC = "InvalidSpec"


def timeout(phase: Phase) -> str:
    """`<Phase>Timeout`, e.g. RunningTimeout: the phase outlived its spec.timeouts deadline."""
    return f"{phase}Timeout"


# --- Events about Brev side effects and teardown -------------------------------------------------
INSTANCE_CREATE_REQUESTED = "InstanceCreateRequested"
INSTANCE_DELETE_REQUESTED = "InstanceDeleteRequested"
INSTANCE_NOT_RELEASED = "InstanceNotReleased"
FINISHED = "Finished"

# --- condition reasons that are not outcomes ----------------------------------------------------
RUN_NOT_FINISHED = "RunNotFinished"
NOT_STALLED = "NotStalled"
INSTANCE_IN_USE = "InstanceInUse"
RELEASED = "Released"
