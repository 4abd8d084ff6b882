"""The log hub with real processes standing in for `ssh <instance> 'docker logs ...'`: a shell
script that prints what docker would (stamped lines, the hub's markers) at the pace it is told.
One stream per job whatever the viewers, backlog then live lines, the follow part's repeat of the
last backlog line skipped, secrets masked, and a viewer that stops reading cut off alone."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
from collections.abc import AsyncIterator
from typing import Any

from controller.brev.spawn import Child, spawn
from controller.logapi.hub import SLOW_VIEWER, LogHub, LogTarget
from controller.logapi.protocol import LogQuery
from controller.observability.logs import MASK, register_secret

TARGET = LogTarget("ml", "t7", 1, "inst-1", "job-1")
SECRET = "s3cr3t-value-0123456789"


def stamped(second: int, text: str) -> str:
    return f"2026-12-05T10:00:{second:02d}.{second:09d}Z {text}"


class Instance:
    """Each stream prints the backlog, the marker, the follow part (one repeat, then `live` lines
    as `release` allows), and the marker again: what the hub's remote command prints."""

    def __init__(self, backlog: list[str], live: list[str]) -> None:
        self.backlog, self.live = backlog, live
        self.opened: list[str] = []
        self.release = asyncio.Event()

    async def open(self, instance: str, command: str) -> Child:
        self.opened.append(instance)
        marker = re.search(r"__taobrev_log_[0-9a-f]+__", command)
        assert marker is not None and "docker logs -t --tail" in command and "-f -t --since" in command
        lines = [*self.backlog, marker.group(0), self.backlog[-1]]
        script = "".join(f"printf '%s\\n' {shlex.quote(line)}; " for line in lines)
        script += "read -r _; " + "".join(f"printf '%s\\n' {shlex.quote(line)}; " for line in self.live)
        script += f"printf '%s\\n' {marker.group(0)}"
        proc = await spawn(
            ["bash", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=None
        )

        async def go_on() -> None:
            await self.release.wait()
            assert proc.stdin is not None
            proc.stdin.write(b"\n")
            await proc.stdin.drain()

        self._task = asyncio.create_task(go_on())
        return proc


async def refresh(_: float) -> None:
    raise AssertionError("no refresh: the alias is known")


async def joined(hub: LogHub, viewers: int) -> None:
    """Until `viewers` viewers are attached (they join at their first step)."""
    for _ in range(1000):
        if hub.viewers >= viewers:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{viewers} viewers never joined")


async def collect(lines: AsyncIterator[bytes]) -> list[bytes]:
    return [line async for line in lines]


def test_two_viewers_share_one_stream_and_see_the_backlog_then_live_lines_once() -> None:
    async def scenario() -> None:
        register_secret(SECRET)
        backlog = [
            stamped(1, "Starting train"),
            stamped(2, f"environment TOKEN={SECRET}"),
            stamped(3, "Epoch 1/3"),
        ]
        live = [stamped(4, "Epoch 2/3"), stamped(5, "Epoch 3/3")]
        inst = Instance(backlog, live)
        hub = LogHub(inst.open, refresh, linger_s=0.1)
        first = asyncio.create_task(collect(hub.follow(TARGET, LogQuery(follow=True))))
        second = asyncio.create_task(collect(hub.follow(TARGET, LogQuery(follow=True, tail_lines=1))))
        await joined(hub, 2)  # both, before the live part is released
        inst.release.set()
        a, b = await asyncio.gather(first, second)
        assert inst.opened == ["inst-1"] and hub.streams_opened == 1
        masked = f"environment TOKEN={MASK}\n".encode()
        assert a == [b"Starting train\n", masked, b"Epoch 1/3\n", b"Epoch 2/3\n", b"Epoch 3/3\n"], a
        assert b == [b"Epoch 1/3\n", b"Epoch 2/3\n", b"Epoch 3/3\n"]
        await hub.close()

    asyncio.run(scenario())


def test_without_follow_a_viewer_gets_the_log_so_far_and_ends() -> None:
    async def scenario() -> None:
        inst = Instance([stamped(1, "a"), stamped(2, "b")], [stamped(3, "c")])
        hub = LogHub(inst.open, refresh, linger_s=0.1)
        got = await collect(hub.follow(TARGET, LogQuery(timestamps=True)))
        assert got == [f"{stamped(1, 'a')}\n".encode(), f"{stamped(2, 'b')}\n".encode()]
        inst.release.set()
        await hub.close()

    asyncio.run(scenario())


def test_a_viewer_that_stops_reading_is_cut_off_and_the_others_get_every_line() -> None:
    async def scenario() -> None:
        live = [stamped(10 + i, f"line {i}") for i in range(40)]
        inst = Instance([stamped(1, "start")], live)
        hub = LogHub(inst.open, refresh, viewer_queue_lines=4, linger_s=0.1)
        slow = hub.follow(TARGET, LogQuery(follow=True))
        first = await anext(slow)  # joined, then never reads on while the live part arrives
        assert first == b"start\n"
        fast = asyncio.create_task(collect(hub.follow(TARGET, LogQuery(follow=True))))
        await joined(hub, 2)
        inst.release.set()
        got = await fast
        assert len(got) == 41 and got[-1] == b"line 39\n"
        rest = await collect(slow)
        assert rest[-1] == SLOW_VIEWER and len(rest) <= 5
        await hub.close()

    asyncio.run(scenario())


class BufferedStream:
    """A remote stream whose whole output is already in its pipe: the hub reads it all without
    the viewer's task running in between (the order a loaded machine produced in a full run)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.returncode: int | None = 0
        self.pid = -1

    async def open(self, instance: str, command: str) -> Any:
        marker = re.search(r"__taobrev_log_[0-9a-f]+__", command)
        assert marker is not None
        reader = asyncio.StreamReader()
        text = "".join(f"{line}\n" for line in self.lines).replace("MARK", marker.group(0))
        reader.feed_data(text.encode())
        reader.feed_eof()
        self.stdout = reader
        return self

    async def wait(self) -> int:
        return 0


def test_lines_that_arrive_before_a_primed_viewer_resumes_are_served_once() -> None:
    async def scenario() -> None:
        stream = BufferedStream(
            [
                stamped(1, "a"),
                stamped(2, "b"),
                "MARK",
                stamped(2, "b"),
                stamped(3, "c"),
                stamped(4, "d"),
                "MARK",
            ]
        )
        hub = LogHub(stream.open, refresh, linger_s=0.1)
        got = await collect(hub.follow(TARGET, LogQuery(follow=True)))
        assert got == [b"a\n", b"b\n", b"c\n", b"d\n"]
        await hub.close()

    asyncio.run(scenario())
