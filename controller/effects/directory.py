"""One shared `brev ls --json` for all jobs (single-flight, bounded staleness).

Twenty jobs polling their instances must not mean twenty listings: every reconcile pass asks the
directory, which serves a listing no older than the caller allows and coalesces concurrent
refreshes into one CLI call. The identity the CLI is logged in as is read with each listing, so a
job can tell "not listed" from "not listed *to this identity*" (a token login lists only its own
instances; a job must never trust an absence seen through someone else's eyes).

Matching: by Brev's instance id once a job has recorded it; before that, by name, resolving
duplicates the way the CLI does (tests/brevsim/SIM-CONTRACT.md section 3): FAILURE
entries are dropped first when healthy ones exist, several left is ambiguous, only failed ones
means the instance failed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from controller.api.errors import TransientError
from controller.brev.client import FAILURE, BrevClient, Instance


@runtime_checkable
class _KnowsIdentity(Protocol):
    # `BrevClient.identity()` (who the CLI is logged in as); optional until every client has it.
    async def identity(self) -> str: ...


@dataclass(frozen=True)
class Sighting:
    """What one listing says about one job's instance."""

    known: bool  # False: brev could not be listed right now (say nothing about the instance)
    instance: Instance | None = None
    # Several healthy instances carry the name and no id is recorded yet: not absent, not ours.
    ambiguous: bool = False
    # Who listed: None when the client cannot tell.
    identity: str | None = None
    # Seconds since the listing this sighting comes from was taken (None: not known). The same
    # listing is served to every pass for up to max_age: absence counts once per listing, so
    # callers need to tell a new listing from a cached one (issue 25, scenario 4).
    age: float | None = None


def resolve_by_name(listing: Sequence[Instance], name: str) -> tuple[Instance | None, bool]:
    """(instance, ambiguous) for `name`, resolving duplicates like the CLI's exec/delete."""
    matches = [i for i in listing if i.name == name]
    healthy = [i for i in matches if i.status != FAILURE]
    if len(healthy) > 1:
        return None, True
    if healthy:
        return healthy[0], False
    if matches:
        return matches[0], False
    return None, False


class InstanceDirectory:
    def __init__(self, brev: BrevClient, clock: Callable[[], float] = time.monotonic) -> None:
        self._brev = brev
        self._clock = clock
        self._listing: tuple[Instance, ...] | None = None
        self._identity: str | None = None
        self._taken_at = float("-inf")
        # When the listing held was taken (invalidate() only makes it stale, this stays true).
        self._listed_at = float("-inf")
        self._inflight: asyncio.Task[bool] | None = None
        self.listings = 0

    def invalidate(self) -> None:
        """After we changed something (create/delete), the next lookup must list again."""
        self._taken_at = float("-inf")

    async def lookup(self, name: str, *, max_age: float) -> tuple[bool, Instance | None]:
        """(known, instance) by name: known is False when brev could not be listed right now."""
        seen = await self.find(name, None, max_age=max_age)
        return seen.known, seen.instance

    async def find(self, name: str, instance_id: str | None, *, max_age: float) -> Sighting:
        """The job's instance: by id once known, else by name (duplicates resolved)."""
        if not await self._fresh(max_age):
            return Sighting(known=False)
        assert self._listing is not None
        age = max(0.0, self._clock() - self._listed_at)
        if instance_id:
            by_id = next((i for i in self._listing if i.id == instance_id), None)
            return Sighting(known=True, instance=by_id, identity=self._identity, age=age)
        inst, ambiguous = resolve_by_name(self._listing, name)
        return Sighting(known=True, instance=inst, ambiguous=ambiguous, identity=self._identity, age=age)

    async def listing(self, *, max_age: float) -> tuple[Instance, ...] | None:
        """The whole shared listing (the orphan sweeper's view), or None when brev could not be
        listed right now (unknown, never "no instances")."""
        if not await self._fresh(max_age):
            return None
        return self._listing

    async def _fresh(self, max_age: float) -> bool:
        if self._listing is None or self._clock() - self._taken_at > max_age:
            if self._inflight is None or self._inflight.done():
                self._inflight = asyncio.create_task(self._refresh())
            if not await asyncio.shield(self._inflight):
                return False
        return True

    async def _refresh(self) -> bool:
        started = self._clock()
        try:
            listing: Sequence[Instance] = await self._brev.list_instances()
            identity = await self._brev.identity() if isinstance(self._brev, _KnowsIdentity) else None
        except TransientError:
            return False
        self._listing = tuple(listing)
        self._identity = identity
        self._taken_at = started
        self._listed_at = started
        self.listings += 1
        return True
