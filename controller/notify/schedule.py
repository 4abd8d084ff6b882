"""When a failed delivery is tried again (PURE): exponential backoff with jitter, and the age
past which an event is given up.

Equal jitter: after the n-th consecutive failure the wait is drawn from [d/2, d], d = base x 2^(n-1)
capped at `cap`. Half of it is fixed, so a receiver that is down is not hammered; half is random,
so the events of a burst of jobs (and the operators of several clusters) that failed together do
not come back together.
"""

from __future__ import annotations

from datetime import datetime

from controller.lifecycle.backoff import exponential


def retry_delay(failures: int, *, base: float, cap: float, rand: float) -> float:
    """Seconds before the next try after `failures` consecutive failures; `rand` in [0, 1)."""
    ceiling = exponential(failures, base=base, cap=cap)
    return ceiling / 2 + ceiling / 2 * min(max(rand, 0.0), 1.0)


def expired(event_time: datetime, now: datetime, give_up_after: float) -> bool:
    """An event older than `give_up_after` seconds is not sent (any more): counted from the
    transition itself (status holds it), so an operator restart does not start the clock again."""
    return (now - event_time).total_seconds() > give_up_after
