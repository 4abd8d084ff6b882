"""Recent Secret reads, shared by every job's pass.

A job re-reads its Secrets on each pass before the run (a Secret deleted or made unusable is found
before GPU time is spent). Jobs probing a fresh instance pass every few seconds for ten minutes
and more, and jobs usually share one NGC and one S3 Secret: 100 probing jobs read the same two
Secrets ~130 times a second, each a GET through the API server plus the client's (slow) object
decoding. Keeping a Secret that was found for `max_age` seconds bounds that to two reads per
`max_age` per namespace, whatever the number of jobs. Only found Secrets are kept: a missing,
forbidden or not-allowed one is read again on the next pass, so creating, labelling or granting
it is seen at once; a rotated or deleted one is seen within `max_age`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping

SecretData = Mapping[str, bytes]


class SecretCache:
    def __init__(
        self,
        read: Callable[[str, str], Awaitable[SecretData | None]],
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._max_age = max_age
        self._clock = clock
        self._kept: dict[tuple[str, str], tuple[float, SecretData]] = {}
        # One read in flight per Secret: a burst's jobs (or all of them when an entry expires)
        # wait for it instead of each sending its own GET.
        self._reading: dict[tuple[str, str], asyncio.Future[SecretData | None]] = {}

    async def get(self, namespace: str, name: str) -> SecretData | None:
        key = (namespace, name)
        self._expire(self._clock())
        kept = self._kept.get(key)
        if kept is not None:
            return kept[1]
        reading = self._reading.get(key)
        if reading is not None:
            return await asyncio.shield(reading)  # its failure is raised to every waiter
        reading = asyncio.get_running_loop().create_future()
        self._reading[key] = reading
        try:
            data = await self._read(namespace, name)
        except BaseException as exc:
            reading.set_exception(exc)
            reading.exception()  # retrieved: a read nobody else waited for is not "never retrieved"
            raise
        finally:
            del self._reading[key]
        if data is not None and self._max_age > 0:
            self._kept[key] = (self._clock(), data)
        reading.set_result(data)
        return data

    def _expire(self, now: float) -> None:
        # On every get, so no value outlives max_age by more than the next pass of any job.
        for key in [k for k, (at, _) in self._kept.items() if now - at > self._max_age]:
            del self._kept[key]
