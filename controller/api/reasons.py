"""Every Condition and Event reason the state machine writes, in one place (PURE).

Reasons are CamelCase constants (kstatus convention); metrics, conditions and Events use these
names, and users match on them, so a reason is named for what it says. The reasons the effects
raise (`controller.api.errors` subclasses, the Brev client and the remote workload) are here too, at
the end; they reach status through `ActionFailure.reason`. This module imports nothing of the
operator, so every layer may use it.
"""

from __future__ import annotations

# --- how a run ended (status.reason with status.outcome) -----------------------------------------
# Only with the results verified in S3; until then a run that exited 0 says RUN_COMPLETED.
SUCCEEDED = "Succeeded"
RUN_COMPLETED = "RunCompleted"
TRAINING_FAILED = "TrainingFailed"
# Workflows (spec.steps): a step failed (failedStep names it), ran past its timeoutSeconds, or its
# results could not be uploaded; per-step Events.
STEP_FAILED = "StepFailed"
STEP_TIMED_OUT = "StepTimedOut"
STEP_UPLOAD_FAILED = "StepUploadFailed"
STEP_STARTED = "StepStarted"
STEP_SUCCEEDED = "StepSucceeded"
STEP_SKIPPED = "StepSkipped"
STEP_REUSED = "StepReused"
STEP_INTERRUPTED = "StepInterrupted"
CANCELED = "Canceled"
# Canceled through the annotation taobrev.io/cancel (`kubectl taobrev cancel`): the object stays.
CANCELED_BY_USER = "CanceledByUser"
INSTANCE_FAILED = "InstanceFailed"
INSTANCE_LOST = "InstanceLost"
REUSE_INSTANCE_NOT_FOUND = "ReuseInstanceNotFound"
UPLOAD_FAILED = "UploadFailed"
INVALID_SPEC = "InvalidSpec"
# A non-zero exit, then the instance, still listed, did not answer within
# Tunables.exit_answer_timeout: nothing on it is reached (no upload, no cleanup); it is deleted.
INSTANCE_UNRESPONSIVE = "InstanceUnresponsive"


def timeout(phase: str) -> str:
    """`<Phase>Timeout`, e.g. RunningTimeout: the phase outlived its spec.timeouts deadline.
    (A `Phase` is a str: reasons stays at the bottom of the import graph.)"""
    return f"{phase}Timeout"


# --- Events about Brev side effects and teardown -------------------------------------------------
INSTANCE_CREATE_REQUESTED = "InstanceCreateRequested"
INSTANCE_START_REQUESTED = "InstanceStartRequested"
INSTANCE_DELETE_REQUESTED = "InstanceDeleteRequested"
INSTANCE_NOT_RELEASED = "InstanceNotReleased"
# Not in a listing: suspected lost, confirmed only by `brev delete` answering not-found.
INSTANCE_NOT_LISTED = "InstanceNotListed"
# The container did not exit within the stop grace: results are uploaded from what is there.
STOP_GRACE_EXPIRED = "StopGraceExpired"
CLEANUP_FAILED = "CleanupFailed"
# A cancel gave up the results: the upload from the instance failed (it may never answer).
UPLOAD_SKIPPED = "UploadSkipped"
FINISHED = "Finished"
# spec.debug.keepInstanceOnFailure: the instance stays (secrets removed) for a person to look at;
# the Event and the InstanceReleased condition say how to connect and until when.
KEPT_FOR_DEBUGGING = "KeptForDebugging"
# The time to keep it is over (or deletion, a cancel or the budget ended it early): deleting it.
KEEP_ENDED = "KeepEnded"

# --- Stalled (needs a human) while the job is not finished ----------------------------------------
# The instance was asked for under another Brev identity than the one logged in now.
INSTANCE_NOT_ACCESSIBLE = "InstanceNotAccessible"
# Several healthy instances carry the job's instance name: which one is ours is unknown.
INSTANCE_AMBIGUOUS = "InstanceAmbiguous"
# A reused instance still holds the job's container or secret files after repeated cleanups.
SECRETS_MAY_REMAIN = "SecretsMayRemain"

# --- condition reasons that are not outcomes ----------------------------------------------------
RUN_NOT_FINISHED = "RunNotFinished"
# The run succeeded; Succeeded turns True only once its results are verified in S3.
RESULTS_NOT_UPLOADED = "ResultsNotUploaded"
NOT_STALLED = "NotStalled"
INSTANCE_IN_USE = "InstanceInUse"
RELEASED = "Released"

# Recovery and budgets (issue 12).
BUDGET_EXCEEDED = "BudgetExceeded"
INSTANCE_STOPPED = "InstanceStopped"
EXIT_CODE_RETRIED = "RetriedExitCode"
RECOVERING = "Recovering"
ATTEMPT_STARTED = "AttemptStarted"
CHECKPOINT_SYNC_FAILED = "CheckpointSyncFailed"
CHECKPOINT_RESTORED = "CheckpointRestored"
# Kueue evicted the admitted job (preemption, a stopped or deleted queue; docs/kueue.md): the
# attempt stops through teardown and the job waits, nothing created, until Kueue admits it again.
KUEUE_EVICTED = "EvictedByKueue"

# --- pre-flight (controller/preflight/checker.py): why a Pending job waits instead of creating --------
# In status.reason, the Ready condition and a Warning Event while the job waits; the outcome's
# reason if the problem outlives spec.timeouts.pendingSeconds.
SECRET_NOT_FOUND = "SecretNotFound"  # noqa: S105 - a reason, not a password
SECRET_NOT_READABLE = "SecretNotReadable"  # noqa: S105 - a reason, not a password
S3_CREDENTIALS_INVALID = "S3CredentialsInvalid"
S3_UNREACHABLE = "S3Unreachable"
RESULTS_BUCKET_NOT_FOUND = "ResultsBucketNotFound"
RESULTS_NOT_WRITABLE = "ResultsNotWritable"
INPUT_NOT_FOUND = "InputNotFound"
INPUT_NOT_READABLE = "InputNotReadable"
INSTANCE_TYPE_UNKNOWN = "InstanceTypeUnknown"
GPU_NAME_UNKNOWN = "GPUNameUnknown"
NO_INSTANCE_TYPE_MATCHES = "NoInstanceTypeMatches"
PRICE_UNKNOWN = "PriceUnknown"
CATALOG_UNAVAILABLE = "CatalogUnavailable"
IMAGE_REFERENCE_INVALID = "ImageReferenceInvalid"
# Events: the pre-flight found nothing wrong (after problems).
PREFLIGHT_PASSED = "PreflightPassed"
# spec.dryRun: the plan is in status.plan; nothing is created.
DRY_RUN = "DryRun"


# The run ended because nothing on the instance can be reached any more: no stop, no upload.
UNREACHABLE = frozenset({INSTANCE_LOST, INSTANCE_FAILED, INSTANCE_STOPPED, INSTANCE_UNRESPONSIVE})

# --- reasons raised by the operator's effects and by the Brev side (errors, actions, the
# remote workload), reaching status through ActionFailure.reason and Events -----------------
BREV_AUTH_FAILED = "BrevAuthFailed"
BREV_MISCONFIGURED = "BrevMisconfigured"
BREV_REQUEST_REJECTED = "BrevRequestRejected"
BREV_TIMEOUT = "BrevTimeout"
BREV_UNAVAILABLE = "BrevUnavailable"
CHECKPOINT_RESTORE_FAILED = "CheckpointRestoreFailed"
CONTAINER_INSPECT_FAILED = "ContainerInspectFailed"
CONTAINER_LOGS_FAILED = "ContainerLogsFailed"
CONTAINER_NOT_FOUND = "ContainerNotFound"
CONTAINER_REMOVE_FAILED = "ContainerRemoveFailed"
CONTAINER_START_FAILED = "ContainerStartFailed"
CONTAINER_STOP_FAILED = "ContainerStopFailed"
CONTAINER_WAIT_FAILED = "ContainerWaitFailed"
ERROR = "Error"
IMAGE_NOT_PRESENT = "ImageNotPresent"
INSTANCE_FAILED_WORKSPACE = "InstanceFailedWorkspace"
INSTANCE_NOT_FOUND = "InstanceNotFound"
INSUFFICIENT_CAPACITY = "InsufficientCapacity"
KUBERNETES_ACCESS_DENIED = "KubernetesAccessDenied"
KUBERNETES_UNAVAILABLE = "KubernetesUnavailable"
LANE_BUSY = "LaneBusy"
NO_MATCHING_INSTANCE_TYPE = "NoMatchingInstanceType"
PERMANENT_ERROR = "PermanentError"
PHASE_BUDGET_SPENT = "PhaseBudgetSpent"
QUOTA_ANNOTATION_INVALID = "QuotaAnnotationInvalid"
# Held by a quota limit longer than spec.timeouts.queuedSeconds (failureClass Quota).
QUEUE_TIMEOUT = "QueueTimeout"
REGISTRY_ENTITLEMENT_FAILED = "RegistryEntitlementFailed"
REGISTRY_LOGIN_FAILED = "RegistryLoginFailed"
REGISTRY_UNAVAILABLE = "RegistryUnavailable"
# S3 refused the job's keys while staging inputs on the instance (after the pre-flight passed).
S3_ACCESS_DENIED = "S3AccessDenied"
SECRETS_NOT_LOADED = "SecretsNotLoaded"
SECRET_ACCESS_DENIED = "SecretAccessDenied"  # noqa: S105 - a reason, not a password
SECRET_CLEANUP_FAILED = "SecretCleanupFailed"  # noqa: S105 - a reason, not a password
SECRET_NOT_ALLOWED = "SecretNotAllowed"  # noqa: S105 - a reason, not a password
SSH_CONNECTION_FAILED = "SshConnectionFailed"
SSH_SESSION_LOST = "SshSessionLost"
STAGING_FAILED = "StagingFailed"
STATUS_REJECTED = "StatusRejected"
TRANSIENT_ERROR = "TransientError"
UNKNOWN_INSTANCE_TYPE = "UnknownInstanceType"
UPLOAD_INCOMPLETE = "UploadIncomplete"

# A wait on the instance failed because it did not answer (not because of the operator).
SILENCE = frozenset({BREV_UNAVAILABLE, SSH_CONNECTION_FAILED, SSH_SESSION_LOST, BREV_TIMEOUT})
