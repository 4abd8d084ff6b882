"""The TaoBrevNotifier kind (taobrev.io/v1alpha1): where a namespace's job notifications go.

A namespaced object, not an annotated Secret: the operator may only `get` Secrets by name (it
cannot list them, deploy/base/rbac.yaml), so a Secret cannot be found by a label; the non-secret
settings (format, which jobs, which transitions) belong in Git, the URL and key do not; and a
notifier has a status users read (`kubectl get taobrevnotifiers`: last delivery, failures). The
URL and the HMAC key stay in the Secret it names, read like a job's own Secrets (the same
RoleBinding and allow-list label). crds/taobrevnotifier.yaml is generated from these models.

Pure module: no kopf, kubernetes, os or subprocess imports (`make lint`: .importlinter).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from controller.api.models import OBJECT_NAME_PATTERN, _SpecModel
from controller.api.status import Timestamp
from controller.api.vocabulary import NotifyFormat, StatusModel, Transition

KIND = "TaoBrevNotifier"
PLURAL = "taobrevnotifiers"
# Keys of the Secret a notifier names.
URL_KEY = "url"
HMAC_KEY = "hmacKey"
# Per-request timeout bounds (seconds): a slow receiver costs one delivery slot this long at most.
TIMEOUT_MIN, TIMEOUT_MAX, TIMEOUT_DEFAULT = 1, 60, 10
_ERROR_CHARS = 256


class NotifierJobs(StrEnum):
    """Which jobs of the namespace a notifier serves."""

    ALL = "All"  # every job of the namespace (unless its spec.notify.namespaceNotifiers is false)
    NAMED = "Named"  # only jobs that name it in spec.notify.notifiers


class NotifierSecretRef(_SpecModel):
    """The Secret (in the notifier's namespace) with the receiver's URL (key `url`) and the
    HMAC-SHA256 signing key (key `hmacKey`; without it requests are not signed)."""

    name: str = Field(pattern=OBJECT_NAME_PATTERN, max_length=253, description="Secret name.")


class TaoBrevNotifierSpec(_SpecModel):
    """A receiver of job transitions in this namespace."""

    secret_ref: NotifierSecretRef = Field(
        description="The Secret with the URL (key url) and the signing key (key hmacKey)."
    )
    format: NotifyFormat = Field(
        default=NotifyFormat.CLOUD_EVENTS,
        description="CloudEvents (1.0, structured JSON) or Slack (incoming-webhook message).",
    )
    jobs: NotifierJobs = Field(
        default=NotifierJobs.ALL,
        description="All: every job of the namespace; Named: only jobs naming it in spec.notify.notifiers.",
    )
    events: list[Transition] = Field(
        default_factory=list,
        max_length=len(Transition),
        description="Only these transitions (empty: every one).",
    )
    timeout_seconds: int = Field(
        default=TIMEOUT_DEFAULT,
        ge=TIMEOUT_MIN,
        le=TIMEOUT_MAX,
        description="Timeout of one delivery request; a slower receiver is retried with backoff.",
    )


class TaoBrevNotifierStatus(StatusModel):
    """Delivery as the operator saw it (written at most once per TAOBREV_NOTIFY_STATUS_INTERVAL).
    Never the URL or the key."""

    last_delivered_at: Timestamp | None = Field(default=None, description="When an event was last delivered.")
    last_delivered_event: str | None = Field(
        default=None, description="Id and type of the event last delivered."
    )
    last_failed_at: Timestamp | None = Field(default=None, description="When a delivery last failed.")
    last_error: str | None = Field(
        default=None, max_length=_ERROR_CHARS, description="Why it failed (HTTP status, timeout, refused)."
    )
    consecutive_failures: int | None = Field(
        default=None, ge=0, description="Failed requests since the last delivery (each retry counts)."
    )
    pending: int | None = Field(default=None, ge=0, description="Events waiting for delivery to it.")

    def delivered(self, at: datetime, event: str) -> None:
        self.last_delivered_at, self.last_delivered_event = at, event
        self.consecutive_failures = 0

    def failed(self, at: datetime, error: str) -> None:
        self.last_failed_at, self.last_error = at, error[:_ERROR_CHARS]
        self.consecutive_failures = (self.consecutive_failures or 0) + 1

    def waiting(self, pending: int) -> None:
        self.pending = pending
