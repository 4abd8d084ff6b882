"""When a running job's progress is read and when it is written to status (PURE).

TAO appends a line to status.json at every epoch; the operator reads its tail in the same remote
call as the running job's exit wait (no call of its own), so reading costs bytes, not calls. A
status write is what costs (an API write and a watch event per job), so progress is written at
most once per epoch or per `progress_interval`, whichever is longer: only when what TAO says
changed, and only `progress_interval` after the last write (counted in whole waits). An exit's
reading is always written: that pass writes the status anyway.
"""

from __future__ import annotations

import math
import zlib

from controller.lifecycle.decision_pass import Pass


def progress_due(p: Pass) -> bool:
    """Does this wait read status.json while the container still runs? Not before the interval
    since the last write has passed (nothing read could be written), then on the job's wait grid
    once per `progress_interval` (waits every `wait_timeout`, the grid hashed from the job id like
    the log tail's), so with equal intervals progress and log tail are read by the same waits and
    change status in the same write. Until a first epoch line was read, every wait looks."""
    period, every = p.tun.wait_timeout, p.tun.progress_interval
    read_at = p.s.progress.read_at
    if read_at is None or every <= period:
        return True
    if p.since(read_at) < every - period:
        return False
    if p.since(read_at) >= every + period:
        return True  # the grid's wait was missed (downtime, a failed wait): any wait now
    offset = zlib.crc32((p.s.job_id or "").encode()) / 2**32 * period
    return math.floor((p.now.timestamp() - offset) / period) % round(every / period) == 0


def fold_progress(p: Pass) -> None:
    """Record what this pass's wait read from status.json, if it changed and may be written: the
    interval since the last write has passed (half a wait early counts: reads fall on whole
    waits), or the container exited."""
    got = p.obs.progress
    record = p.s.progress
    if got is None or record.shows(got):
        return
    exited = p.obs.exit_code is not None
    read_at = record.read_at
    if (
        not exited
        and read_at is not None
        and p.since(read_at) < p.tun.progress_interval - p.tun.wait_timeout / 2
    ):
        return
    record.read(p.now, got)
