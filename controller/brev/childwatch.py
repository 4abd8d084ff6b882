"""How the loop learns that a brev/ssh child exited: a pidfd per child (spawn.Child), not a
thread per child, and the open-files limit that needs.

Python 3.11's default child watcher (ThreadedChildWatcher) starts one thread per subprocess that
blocks in waitpid() until the child exits. A running job always has one long call in flight (its
`docker wait` over ssh, bounded by minutes), so 1,000 running jobs kept ~1,000 threads: each a
touched stack, a thread state and a Python data stack (measured: see docs/sizing.md). Linux
>= 5.3 has pidfds, which the loop polls like any fd.
"""

from __future__ import annotations

import os
import resource

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
