"""One pace for every call to Brev's API (controller/brev/pace.py): the bucket never lets more
through than burst + rate x window, a 429/5xx slows every caller with a doubling, jittered
cool-down (or the server's Retry-After), and the CLI's ways of printing those answers are read."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.brev.pace import BrevPace, PacePolicy, Throttle, throttle_of
from tests.fakes.clock import FakeClock


class VirtualTime(FakeClock):
    """The fakes' clock with the async sleep the pace takes: sleeping moves it. The pace sleeps
    only while holding its lock, so one sleeper at a time moves the clock."""

    async def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)


def pace(policy: PacePolicy, t: VirtualTime, seed: int = 0) -> BrevPace:
    return BrevPace(policy, clock=t.monotonic, sleep=t.sleep, rng=random.Random(seed))  # noqa: S311 - jitter


def grants(p: BrevPace, t: VirtualTime, n: int) -> list[float]:
    async def main() -> list[float]:
        out: list[float] = []

        async def one() -> None:
            await p.slot()
            out.append(t.elapsed)

        await asyncio.gather(*(one() for _ in range(n)))
        return out

    return asyncio.run(main())


def test_a_burst_goes_at_once_then_the_rate_paces_the_rest() -> None:
    t = VirtualTime()
    times = grants(pace(PacePolicy(rate=2.0, burst=3), t), t, 7)
    assert times == pytest.approx([0, 0, 0, 0.5, 1.0, 1.5, 2.0])


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(0.5, 50),
    burst=st.integers(1, 20),
    gaps=st.lists(st.floats(0, 3), min_size=1, max_size=60),
)
def test_no_window_ever_sees_more_than_burst_plus_rate_times_its_length(
    rate: float, burst: int, gaps: list[float]
) -> None:
    t = VirtualTime()
    p = pace(PacePolicy(rate=rate, burst=burst), t)

    async def main() -> list[float]:
        out: list[float] = []

        async def one(delay: float) -> None:
            await asyncio.sleep(0)
            await p.slot()
            out.append(t.elapsed)

        for gap in gaps:  # arrivals spread over time, some at once
            t.elapsed += gap
            await asyncio.gather(one(0), one(0))
        return out

    times = sorted(asyncio.run(main()))
    for i, start in enumerate(times):
        for j in range(i, len(times)):
            window = times[j] - start
            assert j - i + 1 <= burst + rate * window + 1e-6


def test_a_429_makes_every_caller_wait_a_doubling_jittered_cool_down_until_an_answer() -> None:
    t = VirtualTime()
    p = pace(PacePolicy(rate=100.0, burst=100, backoff_base=1.0, backoff_max=8.0), t)

    def later() -> float:  # each call sent after the last refusal: a new wave
        t.elapsed += 0.001
        return t.elapsed

    first = p.throttled("ls", Throttle("rate_limited"), later())
    second = p.throttled("create", Throttle("server_error"), later())
    third = p.throttled("ls", Throttle("rate_limited"), later())
    assert 0.5 <= first <= 1.0 and 1.0 <= second <= 2.0 and 2.0 <= third <= 4.0
    delays = [first, second, third]
    for _ in range(5):
        delays.append(p.throttled("ls", Throttle("rate_limited"), later()))
    assert 4.0 <= delays[-1] <= 8.0
    # Anyone's next call waits the longest out, then one token at the rate (the bucket restarts empty).
    assert grants(p, t, 1) == [pytest.approx(max(delays) + 0.01, abs=0.01)]
    p.answered()
    assert 0.5 <= p.throttled("ls", Throttle("rate_limited"), later()) <= 1.0  # the streak ended


def test_refusals_of_one_wave_grow_the_cool_down_once() -> None:
    t = VirtualTime()
    p = pace(PacePolicy(rate=0.0, burst=1, backoff_base=1.0, backoff_max=60.0), t)
    sent = t.elapsed  # six calls granted together, all refused
    delays = [p.throttled("ls", Throttle("rate_limited"), sent) for _ in range(6)]
    assert all(0.5 <= d <= 1.0 for d in delays)
    t.elapsed += 1.0
    assert 1.0 <= p.throttled("ls", Throttle("rate_limited"), t.elapsed) <= 2.0  # the next wave doubles


def test_retry_after_wins_and_the_bucket_restarts_empty() -> None:
    t = VirtualTime()
    p = pace(PacePolicy(rate=1.0, burst=10), t)
    assert p.throttled("ls", Throttle("rate_limited", retry_after=3.0), t.elapsed) == 3.0
    # No burst into an API that just refused: the first call at 3 s, then one per second.
    assert grants(p, t, 3) == pytest.approx([4.0, 5.0, 6.0])


def test_no_limit_still_honours_a_cool_down() -> None:
    t = VirtualTime()
    p = pace(PacePolicy(rate=0.0, burst=1), t)
    assert grants(p, t, 50) == [0.0] * 50
    p.throttled("delete", Throttle("server_error", retry_after=2.0), t.elapsed)
    assert grants(p, t, 2) == [2.0, 2.0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # pkg/store/http.go: `<url> <resty Status()> <body>` when the body is no JSON error list.
        (
            "https://brevapi.us-west-2-prod.control-plane.brev.dev/api/organizations/o/workspaces "
            '429 Too Many Requests {"message":"slow down"}',
            Throttle("rate_limited"),
        ),
        # Only the messages when it is one: the words, not the code.
        (
            "[error] \nstore.CreateWorkspace\nworkspace.go:80\n: rate limit exceeded\n",
            Throttle("rate_limited"),
        ),
        ("502 Bad Gateway: reply lost", Throttle("server_error")),
        ("https://x/api 503 Service Unavailable retry after 7s", Throttle("server_error", 7.0)),
        ('https://x/api 429 Too Many Requests {"retryAfter": 2.5}', Throttle("rate_limited", 2.5)),
        ("instance with id/name x not found", None),
        ("exit status 502", None),
    ],
)
def test_the_cli_s_words_for_load(text: str, expected: Throttle | None) -> None:
    assert throttle_of(text) == expected
