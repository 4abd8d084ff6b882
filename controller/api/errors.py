"""One error hierarchy for the operator, translated to kopf's errors only in `handlers.py`.

    TaoBrevError
    ├── TransientError                 retry with backoff; the job keeps its phase
    │   ├── BrevTransientError         CLI timeout, network, capacity, ssh not ready yet
    │   │   └── BrevAuthError          auth EOF / unauthorized: re-login once, then retry once
    │   └── KubeUnavailable            API server timeout, connection error, 429, 5xx (kube.py)
    │       ├── KubeAccessDenied       401/403: normal for ~1 s after an API server restart
    │       │   └── SecretAccessDenied 403 reading a job's Secret: RBAC (or a restart) - names the fix
    │       └── StatusRejected         the status patch was refused even trimmed to a minimum
    └── PermanentError                 fail the job now with a reason the user can act on
        ├── SpecError                  bad or unsupported spec (e.g. a seed-only brev flag)
        ├── MissingSecretError         a referenced Secret or key does not exist
        ├── SecretNotAllowed           TAOBREV_REQUIRE_SECRET_LABEL is on and the Secret lacks the label
        ├── EntitlementError           NGC login/manifest check failed: stop before billing on
        ├── BrevConfigError            the operator's own brev setup is broken (not a job's fault)
        └── BrevPermanentError         the CLI refused the request (validation, FAILURE status)
            ├── InstanceNotFound       this login has no instance of that name/id
            ├── InstanceAmbiguous      a name matches several live instances: use the id
            └── InstanceFailedWorkspace  a name matches only FAILURE instances: use the id

Every error keeps the CLI's own message (``cli_message``) so the user sees what brev said.
"""

from __future__ import annotations

from controller.api import reasons


class NotLeading(Exception):
    """This replica does not hold the leader Lease (a standby, or its term just ended). Not a
    TaoBrevError: no action turns it into a failure; a pass that meets it ends as one cancelled
    by the end of its term does."""


class TaoBrevError(Exception):
    """Base class. `reason` is a CamelCase constant used for conditions and Events."""

    reason = reasons.ERROR

    def __init__(self, message: str, *, reason: str | None = None, cli_message: str = "") -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        self.cli_message = cli_message

    def __str__(self) -> str:
        if self.cli_message and self.cli_message not in self.message:
            return f"{self.message} (brev said: {self.cli_message})"
        return self.message


class TransientError(TaoBrevError):
    reason = reasons.TRANSIENT_ERROR


class PermanentError(TaoBrevError):
    reason = reasons.PERMANENT_ERROR


class BrevTransientError(TransientError):
    reason = reasons.BREV_UNAVAILABLE


class BrevAuthError(BrevTransientError):
    reason = reasons.BREV_AUTH_FAILED


class SpecError(PermanentError):
    reason = reasons.INVALID_SPEC


class MissingSecretError(PermanentError):
    reason = reasons.SECRET_NOT_FOUND


class EntitlementError(PermanentError):
    reason = reasons.REGISTRY_ENTITLEMENT_FAILED


class BrevConfigError(PermanentError):
    """The operator's own environment or configuration keeps brev from working (not a job's fault)."""

    reason = reasons.BREV_MISCONFIGURED


class BrevPermanentError(PermanentError):
    reason = reasons.BREV_REQUEST_REJECTED


class InstanceNotFound(BrevPermanentError):
    reason = reasons.INSTANCE_NOT_FOUND


class InstanceAmbiguous(BrevPermanentError):
    """`multiple instances found with id/name X`: the CLI refuses to pick; address it by id."""

    reason = reasons.INSTANCE_AMBIGUOUS


class InstanceFailedWorkspace(BrevPermanentError):
    """`instance with id/name X is a failed workspace`: only FAILURE instances carry that name."""

    reason = reasons.INSTANCE_FAILED_WORKSPACE


class KubeUnavailable(TransientError):
    """The Kubernetes API did not answer usefully (timeout, connection, 429, 5xx): retry later."""

    reason = reasons.KUBERNETES_UNAVAILABLE


class KubeAccessDenied(KubeUnavailable):
    """401/403. A restarted API server answers 403 until its RBAC cache loads, so this is retried;
    if it persists, the message names the grant the operator lacks."""

    reason = reasons.KUBERNETES_ACCESS_DENIED


class SecretAccessDenied(KubeAccessDenied):
    reason = reasons.SECRET_ACCESS_DENIED


class StatusRejected(KubeUnavailable):
    """The API server refused the status patch (422/409/413) even trimmed to its essential fields."""

    reason = reasons.STATUS_REJECTED


class SecretNotAllowed(PermanentError):
    """The Secret exists but is not labelled usable while the operator enforces the allow-list."""

    reason = reasons.SECRET_NOT_ALLOWED
