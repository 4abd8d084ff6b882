"""How asyncio learns that a brev/ssh child exited: a pidfd per child on the event loop, not a
thread per child.

Python 3.11's default child watcher (ThreadedChildWatcher) starts one thread per subprocess that
blocks in waitpid() until the child exits. A running job always has one long call in flight (its
`docker wait` over ssh, bounded by minutes), so 1,000 running jobs kept ~1,000 threads: each a
touched stack, a thread state and a Python data stack (measured: see docs/sizing.md). Linux
>= 5.3 has pidfds: PidfdChildWatcher polls one fd per child on the loop itself. Python 3.12 picks
it by default (and deprecates choosing), so this only acts on 3.11.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import warnings

import structlog

log = structlog.get_logger(__name__)


def pidfd_supported() -> bool:
    """pidfd_open exists and the kernel implements it (>= 5.3)."""
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        fd = os.pidfd_open(os.getpid())
    except OSError:
        return False
    os.close(fd)
    return True


def use_pidfd_watcher(loop: asyncio.AbstractEventLoop) -> bool:
    """Make asyncio watch children through pidfds on `loop` (the running loop, main thread).
    Returns whether it did; the threaded default stays where pidfds are missing. Call it before
    the first subprocess: children started earlier keep their waiting thread, which is harmless."""
    if sys.version_info >= (3, 12) or not pidfd_supported():
        return False
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(loop)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.get_event_loop_policy().set_child_watcher(watcher)
    log.debug("child_watcher", kind="pidfd")
    return True


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft open-files limit to the hard one and return (soft, hard) as in force.

    Each call in flight holds ~3 fds (two pipes and its pidfd) besides the kube connections: a
    1,024 soft limit (a common container default) fails the ~340th running job's wait with
    EMFILE, while the hard limit is usually 1,048,576."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("open_files_limit_not_raised", soft=soft, hard=hard, error=str(exc))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    log.debug("open_files_limit", soft=soft, hard=hard)
    return soft, hard
