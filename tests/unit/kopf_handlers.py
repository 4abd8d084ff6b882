"""controller.handlers' kopf handlers, typed as the tests call them.

kopf's decorators retype a handler as `ChangingFn`/`DaemonFn`, whose `__call__` demands every
keyword argument kopf passes (retry, started, runtime, patch, logger, ...) and returns `object`.
The unit tests call a handler directly with only the arguments it reads, so they call it through
these signatures: the arguments named here are still type-checked, and the call is awaitable.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol, cast

import kopf

from controller import handlers


class StopFlag(Protocol):
    """What `drive` uses of `kopf.DaemonStopped`: falsy until stopped, and a wait (bounded, or
    until stopped)."""

    def __bool__(self) -> bool: ...

    async def wait(self, delay: float | None = None, /) -> object: ...


class _Daemon(Protocol):
    def __call__(
        self, *, stopped: StopFlag, body: kopf.Body, memo: kopf.Memo
    ) -> Coroutine[Any, Any, None]: ...


class _Change(Protocol):
    def __call__(self, *, body: kopf.Body, memo: kopf.Memo) -> Coroutine[Any, Any, None]: ...


drive = cast(_Daemon, handlers.drive)
teardown = cast(_Change, handlers.teardown)
