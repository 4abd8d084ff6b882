"""Whose fault a failure is (PURE): `status.failureClass` from the reason the run ended with.

One table, so a new reason is classified where it is defined (`tests/unit/test_failure_class.py`
fails on a reason in controller/api/reasons.py that is neither here nor listed as no failure).
A reason this release does not know (written by another release, or an action failure's reason
from a newer effect) counts as Infrastructure: the operator's side, worth a retry, never a
claim that the user's program or spec is wrong.
"""

from __future__ import annotations

from controller.api import reasons
from controller.api.vocabulary import FailureClass
from controller.lifecycle.phases import Phase

_I, _P, _C = FailureClass.INFRASTRUCTURE, FailureClass.PROGRAM, FailureClass.CONFIGURATION

CLASS_OF: dict[str, FailureClass] = {
    # the training itself
    reasons.TRAINING_FAILED: _P,
    reasons.STEP_FAILED: _P,  # a workflow step exited non-zero (status.failedStep)
    reasons.STEP_TIMED_OUT: _P,  # ran past spec.steps[].timeoutSeconds
    reasons.STEP_UPLOAD_FAILED: FailureClass.INFRASTRUCTURE,  # a step's results did not reach S3
    reasons.timeout(Phase.RUNNING): _P,  # ran past spec.timeouts.runningSeconds
    # the job's own limits
    reasons.BUDGET_EXCEEDED: FailureClass.BUDGET,
    reasons.QUOTA_ANNOTATION_INVALID: FailureClass.QUOTA,
    reasons.QUEUE_TIMEOUT: FailureClass.QUOTA,  # spec.timeouts.queuedSeconds in the quota queue
    # what the user (or the platform team) must fix before applying again
    reasons.INVALID_SPEC: _C,
    reasons.REUSE_INSTANCE_NOT_FOUND: _C,
    reasons.SECRET_NOT_FOUND: _C,
    reasons.SECRET_NOT_READABLE: _C,
    reasons.SECRET_ACCESS_DENIED: _C,
    reasons.SECRET_NOT_ALLOWED: _C,
    reasons.RESULTS_BUCKET_NOT_FOUND: _C,
    reasons.RESULTS_NOT_WRITABLE: _C,
    reasons.S3_CREDENTIALS_INVALID: _C,
    reasons.S3_ACCESS_DENIED: _C,
    reasons.INPUT_NOT_FOUND: _C,
    reasons.INPUT_NOT_READABLE: _C,
    reasons.INSTANCE_TYPE_UNKNOWN: _C,
    reasons.GPU_NAME_UNKNOWN: _C,
    reasons.NO_INSTANCE_TYPE_MATCHES: _C,
    reasons.NO_MATCHING_INSTANCE_TYPE: _C,
    reasons.PRICE_UNKNOWN: _C,
    reasons.UNKNOWN_INSTANCE_TYPE: _C,
    reasons.IMAGE_REFERENCE_INVALID: _C,
    reasons.REGISTRY_ENTITLEMENT_FAILED: _C,
    reasons.REGISTRY_LOGIN_FAILED: _C,
    reasons.BREV_AUTH_FAILED: _C,
    reasons.BREV_MISCONFIGURED: _C,
    reasons.BREV_REQUEST_REJECTED: _C,
    reasons.INSTANCE_NOT_ACCESSIBLE: _C,
    reasons.KUBERNETES_ACCESS_DENIED: _C,
    reasons.timeout(Phase.PENDING): _C,  # pre-flight problems outlived spec.timeouts.pendingSeconds
    # Brev, the instance, the network, the registry: not the user's doing
    reasons.INSTANCE_FAILED: _I,
    reasons.INSTANCE_LOST: _I,
    reasons.INSTANCE_STOPPED: _I,
    reasons.INSTANCE_UNRESPONSIVE: _I,
    reasons.INSTANCE_NOT_LISTED: _I,
    reasons.INSTANCE_FAILED_WORKSPACE: _I,
    reasons.INSTANCE_NOT_FOUND: _I,
    reasons.INSUFFICIENT_CAPACITY: _I,
    reasons.UPLOAD_FAILED: _I,
    reasons.S3_UNREACHABLE: _I,
    reasons.CATALOG_UNAVAILABLE: _I,
    reasons.BREV_TIMEOUT: _I,
    reasons.BREV_UNAVAILABLE: _I,
    reasons.REGISTRY_UNAVAILABLE: _I,
    reasons.KUBERNETES_UNAVAILABLE: _I,
    reasons.CHECKPOINT_RESTORE_FAILED: _I,
    reasons.IMAGE_NOT_PRESENT: _I,
    reasons.STAGING_FAILED: _I,
    reasons.SSH_CONNECTION_FAILED: _I,
    reasons.SSH_SESSION_LOST: _I,
    reasons.SECRET_CLEANUP_FAILED: _I,
    reasons.SECRETS_NOT_LOADED: _I,
    reasons.PHASE_BUDGET_SPENT: _I,
    reasons.UPLOAD_INCOMPLETE: _I,
    reasons.STATUS_REJECTED: _I,
    reasons.TRANSIENT_ERROR: _I,
    reasons.LANE_BUSY: _I,
    reasons.PERMANENT_ERROR: _I,
    reasons.ERROR: _I,
    **{
        reasons.timeout(phase): _I
        for phase in (Phase.PROVISIONING, Phase.WAITING_EXEC, Phase.PULLING, Phase.UPLOADING)
    },
    **{
        reason: _I
        for reason in (
            reasons.CONTAINER_INSPECT_FAILED,
            reasons.CONTAINER_LOGS_FAILED,
            reasons.CONTAINER_NOT_FOUND,
            reasons.CONTAINER_REMOVE_FAILED,
            reasons.CONTAINER_START_FAILED,
            reasons.CONTAINER_STOP_FAILED,
            reasons.CONTAINER_WAIT_FAILED,
        )
    },
}


def failure_class(reason: str | None) -> FailureClass:
    """The class of a failed job's reason (unknown reasons: Infrastructure, see the module doc)."""
    return CLASS_OF.get(reason or "", FailureClass.INFRASTRUCTURE)
