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

    async def get(self, namespace: str, name: str) -> SecretData | None:
        key = (namespace, name)
        now = self._clock()
        kept = self._kept.get(key)
        if kept is not None and now - kept[0] <= self._max_age:
            return kept[1]
        data = await self._read(namespace, name)
        if data is None or self._max_age <= 0:
            self._kept.pop(key, None)
        else:
            self._kept[key] = (now, data)
        self._expire(now)
        return data

    def _expire(self, now: float) -> None:
        # Bounded by the Secrets jobs name; dropping stale entries keeps no value longer than needed.
        for key in [k for k, (at, _) in self._kept.items() if now - at > self._max_age]:
            del self._kept[key]
