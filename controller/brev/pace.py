"""One pace for every call the operator makes to Brev's API (issue 30): `ls`, `create`,
`delete`, `start`, `refresh` and `search` share one token bucket, whichever job, lane or sweeper
makes them. ssh to an instance talks to that instance, not to Brev's API, and is not paced.

A rate-limit (429) or server-error (5xx) answer slows every caller, not only the one that got
it: the next slot waits out a cool-down that doubles with each such answer in a row (equal
jitter, so replicas and callers that were refused together do not return together), or the
server's own Retry-After when the CLI prints it. The first answer that is neither ends the
streak. Whether a refused call is tried again is the caller's choice: a read is (BrevCLI), a
create or delete is not (its ambiguity belongs to the state machine).
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

ThrottleKind = Literal["rate_limited", "server_error"]

# How the CLI prints an HTTP error (pkg/store/http.go HTTPResponseError.Error): `<url> <status>
# <body>` (resty's Status(), e.g. `429 Too Many Requests`), or only the body's messages when it is
# a JSON error list, so the words count as much as the code.
_RATE_LIMITED = re.compile(r"\b429 Too Many Requests\b|\btoo many requests\b|\brate[ -]?limit", re.IGNORECASE)
_SERVER_ERROR = re.compile(
    r"\b5\d\d (Internal Server Error|Bad Gateway|Service Unavailable|Gateway Timeout)\b", re.IGNORECASE
)
# Retry-After is a header the CLI never prints; a body may carry it (`"retryAfter": 2`,
# `retry after 2s`).
_RETRY_AFTER = re.compile(r"retry[-_ ]?after\W{0,4}(\d+(?:\.\d+)?)", re.IGNORECASE)


_EPSILON = 1e-6


@dataclass(frozen=True)
class Throttle:
    kind: ThrottleKind
    retry_after: float | None = None


def throttle_of(text: str) -> Throttle | None:
    """What a failed call's output says about Brev's load, if anything."""
    kind: ThrottleKind
    if _RATE_LIMITED.search(text):
        kind = "rate_limited"
    elif _SERVER_ERROR.search(text):
        kind = "server_error"
    else:
        return None
    match = _RETRY_AFTER.search(text)
    return Throttle(kind, float(match.group(1)) if match else None)


@dataclass(frozen=True)
class PacePolicy:
    rate: float = 5.0  # calls per second; 0: no limit
    burst: int = 5  # any window of W seconds sees at most burst + rate x W calls
    backoff_base: float = 1.0
    backoff_max: float = 60.0


class BrevPace:
    """The token bucket and the shared cool-down. Waiters are served in arrival order (one lock),
    so a burst of creates cannot starve a teardown's delete for longer than the queue ahead."""

    def __init__(
        self,
        policy: PacePolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        on_wait: Callable[[float], None] | None = None,
        on_throttle: Callable[[str, ThrottleKind, float], None] | None = None,
    ) -> None:
        self.policy = policy
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not a secret
        self._on_wait = on_wait
        self._on_throttle = on_throttle
        self._tokens = float(policy.burst)
        self._stamp = clock()
        self._quiet_until = 0.0
        self._streak = 0
        self._last_throttle = float("-inf")
        self._lock = asyncio.Lock()
        self.throttles = 0

    async def slot(self) -> float:
        """Wait for this call's turn; when it was granted (hand it to `throttled`)."""
        start = self._clock()
        async with self._lock:
            while True:
                now = self._clock()
                if now < self._quiet_until:
                    await self._sleep(self._quiet_until - now)
                    continue
                if self.policy.rate <= 0:
                    break
                self._refill(now)
                if self._tokens >= 1.0 - _EPSILON:  # float refills land a hair under 1
                    self._tokens = max(0.0, self._tokens - 1.0)
                    break
                await self._sleep(max(_EPSILON, (1.0 - self._tokens) / self.policy.rate))
        granted = self._clock()
        if self._on_wait is not None:
            self._on_wait(granted - start)
        return granted

    def _refill(self, now: float) -> None:
        self._tokens = min(float(self.policy.burst), self._tokens + (now - self._stamp) * self.policy.rate)
        self._stamp = now

    def throttled(self, verb: str, throttle: Throttle, granted: float) -> float:
        """Brev refused or failed under load: every caller waits the cool-down; its length. The
        streak grows once per wave: calls granted before the last throttle were sent into the
        same load and say nothing new (six refusals of one burst are one, not 2**5 s)."""
        if granted > self._last_throttle:
            self._streak += 1
            self._last_throttle = self._clock()
        self.throttles += 1
        p = self.policy
        if throttle.retry_after is not None:
            delay = min(throttle.retry_after, p.backoff_max)
        else:
            ceiling = min(p.backoff_max, p.backoff_base * 2 ** (self._streak - 1))
            delay = ceiling / 2 + self._rng.uniform(0, ceiling / 2)
        self._quiet_until = max(self._quiet_until, self._clock() + delay)
        self._tokens = 0.0  # the bucket starts empty after a cool-down: no burst into a busy API
        self._stamp = self._quiet_until
        if self._on_throttle is not None:
            self._on_throttle(verb, throttle.kind, delay)
        return delay

    def answered(self) -> None:
        """An answer that was not a throttle: the streak ends."""
        self._streak = 0
