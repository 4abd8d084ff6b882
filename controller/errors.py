"""One error hierarchy for the operator, translated to kopf's errors only in `handlers.py`.

    TaoBrevError
    ├── TransientError                 retry with backoff; the job keeps its phase
    │   └── BrevTransientError         CLI timeout, network, capacity, ssh not ready yet
    │       └── BrevAuthError          auth EOF / unauthorized: re-login once, then retry once
    └── PermanentError                 fail the job now with a reason the user can act on
        ├── SpecError                  bad or unsupported spec (e.g. a seed-only brev flag)
        ├── MissingSecretError         a referenced Secret or key does not exist
        ├── EntitlementError           NGC login/manifest check failed: stop before billing on
        ├── BrevConfigError            the operator's own brev setup is broken (not a job's fault)
        └── BrevPermanentError         the CLI refused the request (validation, FAILURE status)
            ├── InstanceNotFound       this login has no instance of that name/id
            ├── InstanceAmbiguous      a name matches several live instances: use the id
            └── InstanceFailedWorkspace  a name matches only FAILURE instances: use the id

Every error keeps the CLI's own message (``cli_message``) so the user sees what brev said.
"""

from __future__ import annotations


class TaoBrevError(Exception):
    """Base class. `reason` is a CamelCase constant used for conditions and Events."""

    reason = "Error"

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
    reason = "TransientError"


class PermanentError(TaoBrevError):
    reason = "PermanentError"


class BrevTransientError(TransientError):
    reason = "BrevUnavailable"


class BrevAuthError(BrevTransientError):
    reason = "BrevAuthFailed"


class SpecError(PermanentError):
    reason = "InvalidSpec"


class MissingSecretError(PermanentError):
    reason = "SecretNotFound"


class EntitlementError(PermanentError):
    reason = "RegistryEntitlementFailed"


class BrevConfigError(PermanentError):
    """The operator's own environment or configuration keeps brev from working (not a job's fault)."""

    reason = "BrevMisconfigured"


class BrevPermanentError(PermanentError):
    reason = "BrevRequestRejected"


class InstanceNotFound(BrevPermanentError):
    reason = "InstanceNotFound"


class InstanceAmbiguous(BrevPermanentError):
    """`multiple instances found with id/name X`: the CLI refuses to pick; address it by id."""

    reason = "InstanceAmbiguous"


class InstanceFailedWorkspace(BrevPermanentError):
    """`instance with id/name X is a failed workspace`: only FAILURE instances carry that name."""

    reason = "InstanceFailedWorkspace"
