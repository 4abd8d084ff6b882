"""An exit is reported without waiting for a fresh `brev ls` (issue 30). The pass whose wait saw
the container exit is the instance answering; with a listing older than listing_max_age it used
to start (or join) a refresh first, and at 1,000 running jobs a refresh in flight delayed the
exit's status write by 1-3 s. It now uses a listing up to EXIT_LISTING_MAX_AGE old."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from controller.reconciler import EXIT_LISTING_MAX_AGE
from tests.fakes.brev import Faults
from tests.fakes.harness import Harness
from tests.status_paths import run as run_of

LIST_S = 30.0  # each `brev ls` takes this long: a pass that waits for one shows it


def test_the_exit_is_written_without_waiting_for_a_listing() -> None:
    assert LIST_S < EXIT_LISTING_MAX_AGE
    h = Harness(faults=Faults(deploy_s=30, sshd_lag_s=10, pull_s=10, run_s=300, list_s=LIST_S))
    written: list[datetime] = []
    patch = h.kube.patch_status

    async def timed(namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        ok = await patch(namespace, name, status)
        if ok and not written and run_of(h.status).get("exitCode") is not None:
            written.append(h.clock.now())
        return ok

    h.kube.patch_status = timed  # type: ignore[method-assign]
    assert asyncio.run(h.run_until(lambda h: h.finished, seconds=3600))
    exited = datetime.fromisoformat(run_of(h.status)["exitedAt"].replace("Z", "+00:00"))
    # The wait returns at the exit and the write follows in the same pass: no listing between.
    assert (written[0] - exited).total_seconds() < LIST_S, (written[0], exited, h.brev.listings)
