"""A clock the test advances: wall time (datetime) and monotonic time from one counter.

Nothing in the fakes sleeps. Time moves when the test says so, or when a fake call stands for
time really spent on Brev (a create that runs long, a bounded `docker wait`, an exec that hangs
until its timeout): those advance this clock by exactly the simulated duration.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self, start: datetime = T0) -> None:
        self._start = start
        self.elapsed = 0.0  # seconds since start

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self.elapsed)

    def monotonic(self) -> float:
        return self.elapsed

    def unix(self) -> float:
        return self._start.timestamp() + self.elapsed

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"time only moves forward (advance({seconds}))")
        self.elapsed += seconds
