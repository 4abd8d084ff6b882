"""The log tail that reaches status is bounded at the source (issue 9.3), through the real sim_client
and the simulator's docker: a tqdm progress bar (one `\\n`-line of `\\r` redraws, as real docker's
`--tail` counts it) collapses to what a terminal shows, and a 5 MB line crosses ssh capped and
lands in status cut to one marked line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from controller.brev.cli import BrevCLI
from controller.brev.logtail import LINE_CUT, TAIL_LINE_CHARS, TAIL_LINES
from controller.brev.workload import Workload, WorkloadSettings
from controller.versions import load_versions
from tests.brevsim.harness import BrevSim

pytestmark = pytest.mark.integration

TAO = load_versions().images.tao_toolkit.pyt
HANG_GUARD_WAITS = 24  # bounded 5 s waits: only guards against hangs


def test_a_progress_bar_and_a_five_megabyte_line_reach_status_bounded(
    brev_sim: BrevSim, sim_client: BrevCLI
) -> None:
    name = "tbj-tail"
    brev_sim.add_instance(name)
    job = Workload(sim_client, name, "job-tail", settings=WorkloadSettings())

    async def exited() -> None:
        await job.write_spec(json.dumps({"simulation": {"epochs": 1, "epoch_seconds": 1}}))
        await job.pull_image(TAO, ngc_api_key=b"nvapi-k")
        assert await job.start_container(TAO, "visual_changenet", "train")
        for _ in range(HANG_GUARD_WAITS):
            if (await job.wait_exit_with_tail(5)).code is not None:
                return
        raise AssertionError("container did not exit")

    asyncio.run(exited())
    # What the training printed last: a bar redrawn with \r, then one 5 MB line of output.
    bar = "".join(f"\r{pct:3d}%|{'#' * (pct // 10):<10}| {pct}/100" for pct in range(101))
    huge = "".join(f"{i:07d} " for i in range(700_000))
    assert len(huge) > 5_000_000
    [container] = brev_sim.containers(name)
    with Path(container["LogPath"]).open("a") as log:
        log.write(f"{bar}\n{huge}\n")

    info = asyncio.run(job.wait_exit_with_tail(5))
    assert info.code == 0
    assert len(info.tail) <= TAIL_LINES
    assert all(len(line) <= TAIL_LINE_CHARS for line in info.tail)
    # Only the last 64 KiB of the 5 MB line crossed: its start is gone and marked, its end cut.
    last = info.tail[-1]
    assert last.startswith("…[cut] ")
    assert last.endswith(LINE_CUT)
    assert "0000000" not in last
    # The bar came before the huge line: the byte cap left it out, so nothing else crossed.
    assert info.tail == (last,)
    # logs() reads through the same cap.
    assert asyncio.run(job.logs(3)) == [last]


def test_a_progress_bar_collapses_to_its_last_redraw(brev_sim: BrevSim, sim_client: BrevCLI) -> None:
    name = "tbj-bar"
    brev_sim.add_instance(name)
    job = Workload(sim_client, name, "job-bar", settings=WorkloadSettings())

    async def exited() -> None:
        await job.write_spec(json.dumps({"simulation": {"epochs": 1, "epoch_seconds": 1}}))
        await job.pull_image(TAO, ngc_api_key=b"nvapi-k")
        assert await job.start_container(TAO, "visual_changenet", "train")
        for _ in range(HANG_GUARD_WAITS):
            if (await job.wait_exit_with_tail(5)).code is not None:
                return
        raise AssertionError("container did not exit")

    asyncio.run(exited())
    bar = "".join(f"\r{pct:3d}%|{'#' * (pct // 10):<10}| {pct}/100" for pct in range(101))
    [container] = brev_sim.containers(name)
    with Path(container["LogPath"]).open("a") as log:
        log.write(f"Epoch 1/1\n{bar}\nvalidation loss 0.12\n")

    info = asyncio.run(job.wait_exit_with_tail(5))
    assert info.tail[-3:] == ("Epoch 1/1", "100%|##########| 100/100", "validation loss 0.12")
    assert len(info.tail) <= TAIL_LINES


def test_a_wait_reads_the_tail_of_a_running_container_only_when_asked(
    brev_sim: BrevSim, sim_client: BrevCLI
) -> None:
    """TAOBREV_LOG_TAIL_INTERVAL: most waits of a running job skip `docker logs` on the instance
    (each changed tail is a status write); an exit always brings the tail."""
    name = "tbj-skip"
    brev_sim.add_instance(name)
    job = Workload(sim_client, name, "job-skip", settings=WorkloadSettings())

    def logs_calls() -> int:
        return sum(1 for c in brev_sim.calls() if c.program == "docker" and c.argv[:1] == ["logs"])

    async def scenario() -> None:
        # 10 s per epoch at the fixture's speed: it runs through both 1 s waits below.
        await job.write_spec(json.dumps({"simulation": {"epochs": 2, "epoch_seconds": 1000}}))
        await job.pull_image(TAO, ngc_api_key=b"nvapi-k")
        assert await job.start_container(TAO, "visual_changenet", "train")
        before = logs_calls()
        quiet = await job.wait_exit_with_tail(1, tail_while_running=False)
        assert quiet.code is None
        assert quiet.tail == ()
        assert logs_calls() == before  # not even run on the instance
        asked = await job.wait_exit_with_tail(1)
        assert asked.code is None
        assert asked.tail  # TAO's first lines
        assert logs_calls() == before + 1
        # A grace TAO can use on a loaded machine (30 s at the fixture's speed; the stop returns
        # at the exit): with `-t 0` docker sends SIGKILL right after SIGTERM, as real docker
        # does, and TAO may die before it logs the stop; 1 s was still a bound a loaded machine
        # can overrun.
        await job.stop_container(3000)
        info = await job.wait_exit_with_tail(5, tail_while_running=False)
        assert info.code == 143  # SIGTERM handled, not killed
        assert info.tail[: len(asked.tail)] == asked.tail  # at an exit the tail comes back all the same
        assert "SIGTERM" in info.tail[-1]
        assert logs_calls() == before + 2

    asyncio.run(scenario())
