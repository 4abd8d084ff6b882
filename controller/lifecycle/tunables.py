"""The operator settings `decide()` needs (PURE)."""

from __future__ import annotations

from dataclasses import dataclass

from controller.api import naming

MIN_ABSENT_LISTINGS = 3


@dataclass(frozen=True)
class Tunables:
    """Operator settings decide() needs (seconds)."""

    poll_interval: float = 5.0
    # The blocking `docker wait` of a running job returns at the exit; its bound only sets how
    # often a running job costs a call: one per this many seconds.
    wait_timeout: float = 120.0
    # A running job's log tail (status.attempts[].run.logTail) is read with its wait at most once per this
    # (whole waits; the first wait after a start and an exit always read it). A training job's
    # log changes all the time, so every read is a status write and a watch event: one per wait
    # was 8 writes/s at 1,000 running jobs, and one more docker call per wait on the instance.
    log_tail_interval: float = 600.0
    # A running job's progress (status.progress, from TAO's status.json) is read with its waits
    # on the same kind of grid, and written only when it changed and this long after the last
    # write: one write per epoch or per this, whichever is longer. Equal to log_tail_interval,
    # both fall on the same waits, so the two changes go out in one status write.
    progress_interval: float = 600.0
    # Exec probes of a fresh instance back off from poll_interval to this: a first exec takes
    # 600 s and more, and probing it every poll interval cost a process per job per 5 s. The
    # interval stays below a tenth of the time already waited, so readiness is seen late by
    # at most ~10% of the wait and never by more than this cap: every second of that lag is
    # billed GPU time, while a refused probe costs one short local process.
    probe_interval_max: float = 10.0
    # How long after a create call returned an absent instance still counts as "maybe being
    # created"; keep it above the CLI's create timeout.
    create_settle: float = 120.0
    # The longest a create can be in flight after its marker (status.createRequestedAt): its wait
    # for a create-lane slot (controller.effects.actions.CREATE_LANE_WAIT, 60 s; never started after) plus
    # the CLI's create timeout (BrevTimeouts: create_default_wait 300 s + create_margin 120 s).
    # Until then a create whose return this status never saw may still land, whichever process
    # sent it: absence counts only after this plus create_settle (issue 25, scenario 1).
    create_in_flight_max: float = 480.0
    backoff_base: float = 2.0
    backoff_max: float = 60.0
    # Consecutive listings (spaced by poll_interval) without the instance before it is suspected
    # lost enough to ask `brev delete`, or, after an accepted delete, counted as released.
    absent_listings: int = MIN_ABSENT_LISTINGS
    # How long a stopped container may take to exit before results are uploaded anyway
    # (None: 2 x wait_timeout).
    stop_grace: float | None = None
    # After a non-zero exit with attempts left, how long (past the settle listings) a listed
    # instance may go without answering a probe before the run ends InstanceUnresponsive and it
    # is deleted unreached: without this bound only the Running timeout (24 h) ended the wait.
    exit_answer_timeout: float = 300.0
    # The least time a probe of an instance that answered before gets (its limit is otherwise
    # what is left of exit_answer_timeout): one ssh round trip with a new master.
    answer_probe_min: float = 30.0
    # Failed cleanups of a reused instance before the job says secrets may remain on it.
    cleanup_attempts: int = 3
    # Names every instance this operator creates (controller/api/naming.py ownership mark). The
    # composition root passes the resolved TAOBREV_CLUSTER_ID; this default serves pure tests.
    cluster_id: str = "local"
    # With cluster_id, the operator deployment's mark in those names (TAOBREV_DEPLOYMENT_ID,
    # default <operator namespace>/<Lease name>); this default is Settings' default.
    deployment: str = naming.DEFAULT_DEPLOYMENT

    def __post_init__(self) -> None:
        if self.absent_listings < MIN_ABSENT_LISTINGS:
            raise ValueError(
                f"Tunables.absent_listings={self.absent_listings}: one listing glitch must never end a "
                f"job; use at least {MIN_ABSENT_LISTINGS}"
            )

    def probe_interval(self, waited: float) -> float:
        """Seconds to the next exec probe after `waited` seconds of failed probes."""
        cap = max(self.poll_interval, self.probe_interval_max)
        return min(cap, max(self.poll_interval, waited / 10.0))

    @property
    def grace(self) -> float:
        return self.stop_grace if self.stop_grace is not None else 2 * self.wait_timeout


@dataclass(frozen=True)
class Timing:
    """client-go's defaults (controller-runtime's manager.Options): 15 s / 10 s / 2 s."""

    lease_duration: int = 15
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        # The same invariants client-go's NewLeaderElector enforces (JitterFactor 1.2).
        if not self.lease_duration > self.renew_deadline:
            raise ValueError(
                f"TAOBREV_LEADER_LEASE_DURATION ({self.lease_duration}) must be greater than "
                f"TAOBREV_LEADER_RENEW_DEADLINE ({self.renew_deadline:g})"
            )
        if not self.renew_deadline > 1.2 * self.retry_period:
            raise ValueError(
                f"TAOBREV_LEADER_RENEW_DEADLINE ({self.renew_deadline:g}) must be greater than 1.2 x "
                f"TAOBREV_LEADER_RETRY_PERIOD ({self.retry_period:g})"
            )

    @property
    def request_timeout(self) -> float:
        # One hung API call must not eat the whole renew budget: at least two tries fit in it.
        return self.renew_deadline / 2
