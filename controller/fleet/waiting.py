"""Waiting for the first of several asyncio Events, with a deadline (the fleet's queued jobs, the
pre-flight's missing Secrets)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence


async def first_event(events: Sequence[asyncio.Event], timeout: float) -> None:  # noqa: ASYNC109 - a deadline, not a cancel scope
    """Until any of `events` is set, or `timeout` seconds passed; leaves no waiter behind."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
