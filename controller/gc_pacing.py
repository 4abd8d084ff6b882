"""Python's cyclic garbage collector, paced for a process holding millions of long-lived objects.

A full (generation 2) collection walks every tracked object: with 10,000 TaoBrevJobs kopf's
memory of them alone is millions. CPython starts one after every 70,000 net container
allocations (thresholds 700, 10, 10) once the heap grew by a quarter: a takeover of 1,000
running jobs, allocating as it re-arms them, ran 53 full collections in three minutes, up to
4.9 s each on a loaded 2-core machine, collecting next to nothing (tens of objects). Each one
stops the event loop: exit waits' answers, status writes and Lease renewals wait behind it.
Reference counting frees almost everything; the collector is there for cycles, which die young
here (a pass's exception and traceback, a cancelled task). So the young generation is
collected in batches ten times larger, and full collections come 40 times more rarely (every
2.8 million net allocations instead of 70,000).
"""

from __future__ import annotations

import gc

# generation 0 after this many net allocations; 1 after that many gen-0 runs; 2 after that
# many gen-1 runs (and a heap grown by a quarter since the last, CPython's own rule).
THRESHOLDS = (7_000, 20, 20)


def pace_gc() -> None:
    gc.set_threshold(*THRESHOLDS)
