"""Where an operator's time goes, for benchmarks: put this directory on PYTHONPATH and set
BENCH_TIMING_PROBE to a directory; every `python -m controller` started then appends to
<dir>/t-<pid>.log (seconds since the epoch, then what):

    WAITRET <container> <code>   an exit wait returned with an exit code
    PATCH0 / PATCH1 <job>        a status patch carrying an exit code was sent / answered
    THREAD <call> pool= queued= ran=
                                 a kube call that waited or ran more than 0.5 s in its thread,
                                 and which of KubeAccess's pools (calls, lists, moves) ran it
    LAG <s> ran= runq= process=  the event loop woke more than 0.3 s late from a 0.1 s sleep; the
                                 main thread's CPU s and run-queue wait meanwhile (starvation), and
                                 the whole process's CPU s (other threads holding the GIL)
    STALL <s> <stack>            the loop has not turned for 2 s (and again at 6 s): what the
                                 main thread runs meanwhile, innermost frame last
    GC <generation> <s> <freed>  a collection over 50 ms, and every full one

Not a TAOBREV_ variable: the bench's operators get none from the caller (tests/devenv/operator.py),
so a TAOBREV_ switch would never reach them. `python -m tests.bench.scenario_failover` with it
gives the breakdown in docs/benchmarks.md.
It wraps methods at start-up and adds microseconds per call; it is never imported otherwise.
"""

from __future__ import annotations

import os
import sys

if sys.orig_argv[-2:] == ["-m", "controller"] and os.environ.get("BENCH_TIMING_PROBE"):
    import asyncio
    import functools
    import gc
    import json
    import threading
    import time
    from pathlib import Path
    from typing import Any

    _OUT = (Path(os.environ["BENCH_TIMING_PROBE"]) / f"t-{os.getpid()}.log").open("a", buffering=1)

    def _w(*what: object) -> None:
        _OUT.write(f"{time.time():.3f} " + " ".join(map(str, what)) + "\n")

    _LAGGING: list[asyncio.Task[None]] = []
    _TURNED = [time.monotonic()]  # when the lag task last ran: the loop's heartbeat

    def _sched(tid: int) -> tuple[float, float, float]:
        """(the main thread's CPU s, its s waiting on a run queue, the whole process's CPU s)."""
        ran, waited, _ = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        process = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        return int(ran) / 1e9, int(waited) / 1e9, process

    async def _lag() -> None:
        watchdog = threading.Thread(target=_watchdog, args=(threading.get_ident(),), daemon=True)
        watchdog.start()
        tid = threading.get_native_id()
        while True:
            began, before = time.monotonic(), _sched(tid)
            _TURNED[0] = began
            await asyncio.sleep(0.1)
            late = time.monotonic() - began - 0.1
            if late > 0.3:
                ran, waited, process = (b - a for a, b in zip(before, _sched(tid), strict=True))
                # ran: the loop's own work; runq: starved of a CPU; neither: waiting (the GIL, a
                # vfork child's exec); process - ran: the other threads' CPU meanwhile
                _w("LAG", f"{late:.2f}", f"ran={ran:.2f}", f"runq={waited:.2f}", f"process={process:.2f}")

    def _watchdog(main: int) -> None:
        """From another thread: the main thread's stack while the loop is stuck (a thread
        gets the GIL every switch interval unless the main thread holds it in C code)."""
        import traceback

        dumped: set[tuple[int, int]] = set()
        while True:
            time.sleep(0.5)
            stuck = time.monotonic() - _TURNED[0]
            for mark in (2, 6):
                if stuck >= mark and (round(_TURNED[0] * 10), mark) not in dumped:
                    dumped.add((round(_TURNED[0] * 10), mark))
                    frame = sys._current_frames().get(main)
                    stack = traceback.extract_stack(frame) if frame is not None else []
                    where = " | ".join(
                        f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}" for f in stack[-14:]
                    )
                    _w("STALL", f"{stuck:.1f}", where)

    def _install() -> None:
        wanted = ("controller.brev.workload", "controller.kube.access")
        while not all(m in sys.modules for m in wanted):
            time.sleep(0.05)
        time.sleep(0.2)  # the modules finish executing
        workload = sys.modules["controller.brev.workload"].Workload
        access = sys.modules["controller.kube.access"].KubeAccess
        wait, patch, thread = workload.wait_exit_with_tail, access.patch_status, access._thread

        @functools.wraps(wait)
        async def wait_exit_with_tail(self: Any, *a: Any, **k: Any) -> Any:
            info = await wait(self, *a, **k)
            if info.code is not None:
                _w("WAITRET", self.container, info.code)
            return info

        @functools.wraps(patch)
        async def patch_status(self: Any, namespace: str, name: str, status: Any) -> Any:
            exits = '"exitCode": ' in json.dumps(status, default=str)
            if exits:
                _w("PATCH0", name)
            try:
                return await patch(self, namespace, name, status)
            finally:
                if exits:
                    _w("PATCH1", name)

        @functools.wraps(thread)
        async def _thread(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
            loop = asyncio.get_running_loop()
            if not _LAGGING:
                _LAGGING.append(loop.create_task(_lag()))
            submitted, times = time.time(), {}

            def timed(*a: Any) -> Any:
                times["start"] = time.time()
                try:
                    return fn(*a)
                finally:
                    times["end"] = time.time()

            try:
                return await thread(self, timed, *args, **kwargs)
            finally:
                start, end = times.get("start", submitted), times.get("end", time.time())
                if start - submitted > 0.5 or end - start > 0.5:
                    name = getattr(fn, "__qualname__", str(fn))
                    pool = "lists" if kwargs.get("listing") else "moves" if kwargs.get("moving") else "calls"
                    _w("THREAD", name, f"pool={pool}", f"queued={start - submitted:.2f}",
                       f"ran={end - start:.2f}")  # fmt: skip

        workload.wait_exit_with_tail = wait_exit_with_tail
        access.patch_status = patch_status
        access._thread = _thread
        _install_gc()
        _w("installed")

    def _install_gc() -> None:
        began: dict[str, float] = {}

        def collected(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                began["t"] = time.perf_counter()
                return
            took = time.perf_counter() - began.get("t", time.perf_counter())
            if took > 0.05 or info.get("generation") == 2:
                _w("GC", info.get("generation"), f"{took:.3f}", info.get("collected"))

        gc.callbacks.append(collected)

    threading.Thread(target=_install, daemon=True, name="timing-probe").start()
