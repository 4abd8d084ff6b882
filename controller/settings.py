"""Operator settings, read once at start-up from ``TAOBREV_*`` environment variables.

Bad values fail start-up with the variable's name and what is expected, never silently.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from controller.effects.lanes import DEFAULT_SLOTS, LANES, Lane, LaneObserver, Lanes
from controller.lifecycle.tunables import Timing, Tunables
from controller.notify.tuning import NotifyTuning

PREFIX = "TAOBREV_"
# Old names still read, with the field they now set (same meaning).
ALIASES = {"max_concurrent_waits": "lane_wait"}


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # --- brev
    brev_binary: str = Field("brev", description="brev executable (name on PATH or absolute path)")
    brev_home: Path | None = Field(
        None, description="HOME for the brev CLI (~/.brev, ~/.ssh); default: the process HOME"
    )
    brev_credentials_secret: str = Field(
        "taobrev-brev-credentials",
        description="Secret in the operator's namespace with keys api-key + org-id, or token",
    )
    operator_namespace: str = Field("taobrev-system", description="namespace of the operator and its Secret")
    # --- one pace for every call to Brev's API (controller/brev/pace.py); ssh is per instance
    brev_rate: float = Field(
        5.0,
        ge=0,
        le=1000,
        description="calls per second to Brev's API for the whole operator (`ls`, `create`, `delete`, "
        "`start`, `refresh`, `search`; ssh to instances is not counted); 0 = no limit",
    )
    brev_burst: int = Field(
        5,
        ge=1,
        le=1000,
        description="calls allowed at once after a quiet spell: any window of W seconds sees at most "
        "brev_burst + brev_rate x W calls (keep brev_burst + brev_rate under Brev's limit per second)",
    )
    brev_backoff_base: float = Field(
        1.0,
        ge=0.01,
        le=60,
        description="first cool-down after Brev answers 429 or 5xx (doubles per refusal in a row)",
    )
    brev_backoff_max: float = Field(
        60.0,
        ge=1,
        le=3600,
        description="cap of the shared cool-down after Brev answers 429 or 5xx (doubling from 1 s, with "
        "jitter; a Retry-After in the answer wins)",
    )
    # --- lanes (controller/effects/lanes.py): brev calls in flight per kind; each is one child process
    lane_create: int = Field(
        DEFAULT_SLOTS[Lane.CREATE], ge=1, le=1024, description="`brev create`/`brev start` calls in flight"
    )
    lane_start: int = Field(
        DEFAULT_SLOTS[Lane.START], ge=1, le=1024, description="`docker run` of training containers in flight"
    )
    lane_probe: int = Field(
        DEFAULT_SLOTS[Lane.PROBE],
        ge=1,
        le=4096,
        description="exec probes of new instances (first exec: 600 s+)",
    )
    lane_pull: int = Field(
        DEFAULT_SLOTS[Lane.PULL], ge=1, le=4096, description="registry login + image pull + input staging"
    )
    lane_upload: int = Field(
        DEFAULT_SLOTS[Lane.UPLOAD], ge=1, le=4096, description="results uploads (with their verification)"
    )
    lane_checkpoint: int = Field(
        DEFAULT_SLOTS[Lane.CHECKPOINT], ge=1, le=4096, description="checkpoint syncs and restores"
    )
    lane_wait: int = Field(
        DEFAULT_SLOTS[Lane.WAIT], ge=1, le=4096, description="blocking `docker wait` calls of running jobs"
    )
    lane_stop: int = Field(
        DEFAULT_SLOTS[Lane.STOP], ge=1, le=1024, description="`docker stop`, `docker rm` + job cleanup"
    )
    lane_delete: int = Field(DEFAULT_SLOTS[Lane.DELETE], ge=1, le=1024, description="`brev delete` calls")
    max_concurrent_brev_calls: int | None = Field(
        None,
        ge=1,
        le=256,
        description="DEPRECATED: one pool of this size for every call but waits (the pre-lane "
        "behaviour, head-of-line blocking included); unset = the lanes",
    )
    # --- timing (seconds)
    poll_interval: float = Field(5.0, gt=0, le=300, description="re-observe period while waiting on brev")
    # 300, not 120: over any 5 minutes a running job then costs at most 2 waits (the first after
    # a takeover or restart, and one grid point), the issue-30 bound of 3 calls per job included.
    wait_timeout: float = Field(
        300.0,
        ge=1,
        le=600,
        description="bound of the blocking `docker wait` of a running job: it returns at the exit, "
        "so this only sets the calls per running job (one per this)",
    )
    log_tail_interval: float = Field(
        600.0,
        ge=0,
        le=86400,
        description="how often a running job's log tail (status.attempts[].run.logTail) is read with its "
        "wait: at most once per this, in whole waits (the first wait after a start and an exit always read "
        "it); every changed tail is a status write",
    )
    progress_interval: float = Field(
        600.0,
        ge=0,
        le=86400,
        description="how often a running job's progress (status.progress, from TAO's status.json, read "
        "with its waits: no call of its own) may be written: only when it changed and this long after "
        "the last write, so one status write per epoch or per this, whichever is longer (equal to "
        "log_tail_interval, both change status in the same write)",
    )
    probe_interval_max: float = Field(
        10.0,
        gt=0,
        le=600,
        description="exec probes of a fresh instance back off from poll_interval to this "
        "(a first exec takes 600 s+; readiness is seen late by at most ~10% of the wait and "
        "never by more than this: that lag is billed)",
    )
    stop_grace: float = Field(
        60.0,
        ge=1,
        le=3600,
        description="how long a stopped container may take to exit before the upload starts anyway",
    )
    exit_answer_timeout: float = Field(
        300.0,
        ge=1,
        le=86400,
        description="how long a listed instance may go without answering (after a non-zero exit "
        "with attempts left, or while Running) before the run or attempt ends InstanceUnresponsive "
        "and it is deleted unreached",
    )
    listing_max_age: float = Field(10.0, ge=0, le=300, description="how stale the shared `brev ls` may be")
    secret_max_age: float = Field(
        10.0,
        ge=0,
        le=300,
        description="how long a Secret read is shared by the jobs' passes (a rotated or deleted "
        "Secret is seen within this; 0: read on every pass)",
    )
    preflight: bool = Field(
        True,
        description="check Secrets, S3 (results writable, inputs present), the instance selection "
        "and the image before `brev create`; a Pending job waits while a check fails (issue 32)",
    )
    preflight_max_age: float = Field(
        300.0, ge=0, le=3600, description="how long a passed pre-flight holds for a queued job's admission"
    )
    secret_poll_interval: float = Field(
        2.0, ge=0.1, le=300, description="how often a Secret a Pending job waits for is looked for"
    )
    create_settle: float = Field(120.0, ge=0, le=3600, description="grace for an ambiguous create to appear")
    backoff_max: float = Field(60.0, ge=1, le=3600, description="cap of the transient-error backoff")
    exec_timeout: float = Field(
        900.0, ge=60, description="timeout of an instance's first remote command (ssh may take >= 600 s)"
    )
    pull_timeout: float = Field(3600.0, ge=60, description="timeout of the registry login + pull step")
    # --- kubernetes access (the pod's token is mounted away from the default path; see deploy/)
    kube_token_path: Path | None = Field(None, description="bearer token file (projected, rotated)")
    kube_ca_path: Path | None = Field(None, description="CA bundle of the API server")
    kube_server: str | None = Field(None, description="API server URL; default from KUBERNETES_SERVICE_*")
    kube_request_timeout: float = Field(
        30.0,
        ge=1,
        le=600,
        description="timeout of one Kubernetes API call (a paused server must not hold a pass)",
    )
    require_secret_label: bool = Field(
        False, description="jobs may use only Secrets labelled taobrev.io/usable=true"
    )
    # --- observability
    metrics_host: str = Field("0.0.0.0", description="metrics bind address")  # noqa: S104 - in-pod
    metrics_port: int = Field(8000, ge=0, le=65535, description="metrics port; 0 disables")
    # --- the log API (taobrevjobs/log, an aggregated API: docs/logs.md)
    log_api_port: int = Field(
        0, ge=0, le=65535, description="HTTPS port of the log API (deploy/ sets 8443); 0 disables"
    )
    log_api_host: str = Field("0.0.0.0", description="log API bind address")  # noqa: S104 - in-pod
    log_api_cert_dir: Path | None = Field(
        None,
        description="directory with tls.crt and tls.key for the log API (e.g. a cert-manager "
        "Certificate's Secret); unset: a self-signed certificate made at start-up",
    )
    log_api_service: str = Field(
        "taobrev-log-api", description="the Service the APIService names (the self-signed certificate's name)"
    )
    log_api_max_bytes: int = Field(
        10 * 1024 * 1024, ge=1024, le=1024**3, description="most bytes one log request is served"
    )
    log_api_backlog_lines: int = Field(
        5000,
        ge=10,
        le=100000,
        description="lines of a running job's log kept per followed job (what a new viewer and "
        "a request without follow get); the whole log is archived in S3 after the run",
    )
    log_api_max_streams: int = Field(
        200,
        ge=1,
        le=10000,
        description="jobs whose logs one replica follows at once (one remote stream each)",
    )
    log_json: bool | None = Field(None, description="JSON logs (default: when stderr is not a TTY)")
    log_level: str = Field(
        "INFO", pattern="^(DEBUG|INFO|WARNING|ERROR)$", description="DEBUG, INFO, WARNING or ERROR"
    )
    liveness_endpoint: str = Field(
        "http://0.0.0.0:8080/healthz",
        description="/healthz of the progress watchdog (probes); empty disables",
    )
    liveness_grace: float = Field(
        120.0, ge=1, le=3600, description="/healthz turns red when a due reconcile pass is this late"
    )
    liveness_pass_timeout: float = Field(
        0.0,
        ge=0,
        description="/healthz turns red when one pass runs longer; 0 = pull_timeout + exec_timeout",
    )
    namespaces: tuple[str, ...] = Field((), description="namespaces to watch (comma list); empty = all")
    kube_connections: int = Field(
        32,
        ge=4,
        le=1024,
        description="kopf's pooled API connections besides one per watch (kopf's default pool is "
        "unbounded: a burst of jobs kept one idle TLS connection, ~150 KiB, per concurrent patch)",
    )
    # --- quotas and queueing (controller/fleet/admission.py, docs/queueing.md); 0 = unlimited
    max_instances: int = Field(
        0, ge=0, description="cluster-wide cap on instances the operator's jobs hold at once; 0 = unlimited"
    )
    namespace_max_instances: int = Field(
        0,
        ge=0,
        description="default per-namespace cap on instances (annotation taobrev.io/max-instances overrides)",
    )
    namespace_max_gpus: int = Field(
        0,
        ge=0,
        description="default per-namespace cap on GPUs (annotation taobrev.io/max-gpus overrides)",
    )
    kueue: bool = Field(
        False,
        description="admission of jobs labelled kueue.x-k8s.io/queue-name by a real Kueue: each gets "
        "a Workload it owns, and nothing is created before Kueue admits it (docs/kueue.md); others "
        "keep the built-in quotas",
    )
    # --- leader election (controller/fleet/leadership.py; client-go's defaults 15 s / 10 s / 2 s)
    leader_election: bool = Field(
        True, description="elect one acting replica through a Lease; false only for a lone local run"
    )
    leader_lease_name: str = Field("taobrev-operator", description="Lease in the operator's namespace")
    leader_lease_duration: int = Field(
        15, ge=2, le=3600, description="seconds a standby waits after the last renewal before taking over"
    )
    leader_renew_deadline: float = Field(
        10.0, gt=0, le=3600, description="the leader stops acting if it has not renewed for this long"
    )
    leader_retry_period: float = Field(2.0, gt=0, le=600, description="seconds between election attempts")
    takeover_rate: float = Field(
        40.0,
        ge=0,
        le=10000,
        description="first passes per second a replica starts when it begins to lead (every job's "
        "daemon waits for the Lease and wakes at once: 1,000 passes at once starved the event loop "
        "past the renew deadline, so the new leader lost the Lease again and again); 0 = no pacing",
    )
    # --- ownership and the orphan sweeper (controller/api/naming.py, controller/fleet/sweeper.py)
    cluster_id: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$",
        description=(
            "identity of this cluster in instance names (tbj-<mark>-..., the mark from this and "
            "TAOBREV_DEPLOYMENT_ID); default: the kube-system namespace uid. Never change it while "
            "instances exist"
        ),
    )
    deployment_id: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$",
        description=(
            "identity of this operator deployment in instance names, with the cluster id (two "
            "operators of one cluster sharing a Brev org tell their instances apart by it); default: "
            "<operator namespace>/<leader Lease name>. Never change it while instances exist"
        ),
    )
    orphan_policy: Literal["Delete", "Report"] = Field(
        "Delete", description="what the sweeper does with an orphaned instance: Delete or Report"
    )
    orphan_sweep_interval: float = Field(
        300.0, ge=0.1, le=86400, description="seconds between orphan sweeps (leader only)"
    )
    orphan_grace: float = Field(
        600.0,
        ge=0,
        le=7 * 86400,
        description="seconds an instance must stay unreferenced (from first seen) before it is an orphan",
    )
    node_cost_interval: float = Field(
        60.0,
        ge=0.1,
        le=3600,
        description="seconds between refreshes of the OpenCost node gauges (node_total_hourly_cost ...) "
        "from the shared `brev ls` (leader only; docs/opencost.md)",
    )

    # --- notifications (controller/notify, docs/notifications.md)
    notify: bool = Field(True, description="send notifications to TaoBrevNotifiers; false: none are sent")
    notify_concurrency: int = Field(8, ge=1, le=256, description="notification requests in flight")
    notify_per_sink: int = Field(
        2, ge=1, le=64, description="requests in flight to one notifier (a dead one holds no more slots)"
    )
    notify_max_pending: int = Field(
        10000, ge=10, le=1000000, description="deliveries kept waiting at most (past it, dropped)"
    )
    notify_backoff_base: float = Field(2.0, gt=0, le=3600, description="first retry delay of a delivery")
    notify_backoff_max: float = Field(300.0, gt=0, le=86400, description="cap of the delivery retry delay")
    notify_give_up_after: float = Field(
        86400.0, ge=60, le=30 * 86400, description="seconds after its transition an event is given up"
    )
    notify_status_interval: float = Field(
        10.0, gt=0, le=3600, description="seconds between writes of a TaoBrevNotifier's status"
    )

    def notify_tuning(self) -> NotifyTuning:
        return NotifyTuning(
            concurrency=self.notify_concurrency,
            per_sink=self.notify_per_sink,
            max_pending=self.notify_max_pending,
            backoff_base=self.notify_backoff_base,
            backoff_max=self.notify_backoff_max,
            give_up_after=self.notify_give_up_after,
            status_interval=self.notify_status_interval,
        )

    def pass_ceiling(self) -> float:
        """The longest a single reconcile pass may legitimately run (a registry pull plus an exec)."""
        return self.liveness_pass_timeout or (self.pull_timeout + self.exec_timeout)

    def tunables(self) -> Tunables:
        return Tunables(
            poll_interval=self.poll_interval,
            wait_timeout=self.wait_timeout,
            log_tail_interval=self.log_tail_interval,
            progress_interval=self.progress_interval,
            probe_interval_max=self.probe_interval_max,
            stop_grace=self.stop_grace,
            exit_answer_timeout=self.exit_answer_timeout,
            create_settle=self.create_settle,
            backoff_max=self.backoff_max,
            cluster_id=self.resolved_cluster_id(),
            deployment=self.resolved_deployment_id(),
        )

    def lanes(self, observer: LaneObserver | None = None) -> Lanes:
        sizes = {lane: (int(getattr(self, f"lane_{lane}")), f"{PREFIX}LANE_{lane.upper()}") for lane in LANES}
        shared = self.max_concurrent_brev_calls
        legacy = (shared, f"{PREFIX}MAX_CONCURRENT_BREV_CALLS") if shared is not None else None
        return Lanes(sizes, shared=legacy, observer=observer)

    def resolved_cluster_id(self) -> str:
        if not self.cluster_id:
            raise ValueError("the cluster id is not resolved yet (controller.app.resolve_cluster_id)")
        return self.cluster_id

    def resolved_deployment_id(self) -> str:
        """TAOBREV_DEPLOYMENT_ID, else <operator namespace>/<Lease name>: replicas of one deployment
        share the Lease; two deployments in one cluster cannot (they would elect one leader)."""
        return self.deployment_id or f"{self.operator_namespace}/{self.leader_lease_name}"

    def leader_timing(self) -> Timing:
        return Timing(self.leader_lease_duration, self.leader_renew_deadline, self.leader_retry_period)

    @model_validator(mode="after")
    def _check_leader_timing(self) -> Settings:
        self.leader_timing()  # raises ValueError naming the variables
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        raw: dict[str, object] = {}
        for old, name in ALIASES.items():
            value, current = env.get(PREFIX + old.upper()), env.get(PREFIX + name.upper())
            if value and current and value != current:
                raise SystemExit(
                    f"invalid operator settings: {PREFIX}{old.upper()}={value} and "
                    f"{PREFIX}{name.upper()}={current} disagree; {PREFIX}{old.upper()} is the old name "
                    f"of {PREFIX}{name.upper()}: remove it"
                )
            if value:
                raw[name] = value
        for name in cls.model_fields:
            value = env.get(PREFIX + name.upper())
            if value is None or value == "":
                continue
            raw[name] = (
                tuple(v.strip() for v in value.split(",") if v.strip()) if name == "namespaces" else value
            )
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{PREFIX}{'.'.join(str(x) for x in e['loc']).upper()}: {e['msg']}" for e in exc.errors()
            )
            raise SystemExit(f"invalid operator settings: {problems}") from None
