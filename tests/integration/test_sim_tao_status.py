"""TAO's status.json as the simulator's TAO stand-in writes it (TAO 6's shape, SIM-CONTRACT.md),
and the running job's progress read from it by the real wait program over ssh: the tail crosses
in the wait's own call, byte-capped, and parses to the epoch, ETA and loss (issue 27, part 3)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from controller.brev.cli import BrevCLI
from controller.brev.progress_parse import STATUS_TAIL_BYTES, parse_status_tail
from controller.brev.workload import Workload, WorkloadSettings
from controller.versions import load_versions
from tests.brevsim.harness import BrevSim
from tests.integration.test_sim_contract import docker_login, ready_instance, remote, run_tao, write_spec

pytestmark = pytest.mark.integration

TAO = load_versions().images.tao_toolkit.pyt
TIMEDELTA = re.compile(r"^\d+:\d{2}:\d{2}(\.\d{6})?$")  # str(timedelta) under a day
HANG_GUARD_WAITS = 40  # bounded waits: only guards against hangs


def entries_of(sim: BrevSim, inst: str, job: str) -> list[dict[str, Any]]:
    path = sim.instance_files(inst) / "taobrev" / job / "results" / "train" / "status.json"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_stand_in_writes_status_json_as_tao_6_does(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    docker_login(brev_sim, inst)
    write_spec(brev_sim, inst, "shape", epochs=3)
    assert remote(brev_sim, inst, run_tao("shape")).returncode == 0
    assert remote(brev_sim, inst, "docker wait shape").stdout == "0\n"
    entries = entries_of(brev_sim, inst, "shape")
    for e in entries:
        # StatusLogger.write: the data first, then these, in this order; date and time unpadded.
        generic = [k for k in e if k in ("date", "time", "status", "verbosity", "message")]
        assert generic == ["date", "time", "status", "verbosity", "message"], e
        assert re.fullmatch(r"\d{1,2}/\d{1,2}/\d{4}", e["date"]), e
        assert re.fullmatch(r"\d{1,2}:\d{1,2}:\d{1,2}", e["time"]), e
        assert e["status"] in ("STARTED", "RUNNING", "SUCCESS", "FAILURE", "SKIPPED"), e
    assert [(e["status"], e["message"]) for e in entries[:2]] == [
        ("STARTED", "Starting visual_changenet train."),
        ("STARTED", "Starting Training Loop."),
    ]
    epochs = [e for e in entries if "epoch" in e]
    # Lightning's 0-based current_epoch, max_epoch = max_epochs - 1, the callback's keys first.
    assert [(e["epoch"], e["max_epoch"]) for e in epochs] == [(0, 2), (1, 2), (2, 2)]
    for e in epochs:
        assert list(e)[:7] == [
            "epoch",
            "step",
            "max_epoch",
            "max_step",
            "time_per_epoch",
            "time_per_step",
            "eta",
        ]
        assert e["message"] == "Training loop in progress"
        assert TIMEDELTA.match(e["time_per_epoch"]) and TIMEDELTA.match(e["eta"]), e
        assert e["kpi"]["val_loss"] > 0 and isinstance(e["kpi"]["val_mAP"], str)  # the eval KPIs before it
    assert epochs[-1]["eta"].startswith("0:00:00")
    # The epoch line is never the last: the model's own train metrics follow it.
    after = entries[entries.index(epochs[0]) + 1]
    assert (after["message"], list(after["kpi"])) == ("Train metrics generated.", ["train_loss"])
    assert [(e["status"], e["message"]) for e in entries[-2:]] == [
        ("RUNNING", "Training loop complete."),
        ("RUNNING", "Train finished successfully."),  # TAO 6 writes no SUCCESS
    ]
    # The operator's parser reads the whole file as it stands: 3 of 3 epochs, the last loss.
    got = parse_status_tail("".join(json.dumps(e) + "\n" for e in entries))
    assert got is not None
    assert (got.epoch, got.max_epoch, got.percent, got.eta_seconds) == (3, 3, 100, 0)
    assert got.loss == round(1 / 3**0.5, 4)
    assert set(dict(got.metrics)) == {"train_loss", "val_loss", "val_mAP"}


def test_the_running_jobs_wait_brings_the_progress_as_epochs_end(
    brev_sim: BrevSim, sim_client: BrevCLI
) -> None:
    """Over the real ssh transport and the simulator's docker: each wait's own call returns the
    status.json tail with the State; the progress moves while the container runs, and the exit
    brings the last epoch even when the waits do not read it while it runs."""
    name = "tbj-progress"
    brev_sim.add_instance(name)
    job = Workload(sim_client, name, "job-progress", settings=WorkloadSettings())
    seen: list[int] = []
    waited = ssh_before = 0

    def ssh_calls() -> int:
        return sum(1 for c in brev_sim.calls() if c.program == "ssh")

    async def follow() -> int | None:
        nonlocal waited, ssh_before
        spec = {"simulation": {"epochs": 6, "epoch_seconds": 100}}  # x speed 0.01: 1 s each
        await job.write_spec(json.dumps(spec))
        await job.pull_image(TAO, ngc_api_key=b"nvapi-k")
        assert await job.start_container(TAO, "visual_changenet", "train")
        ssh_before = ssh_calls()
        for _ in range(HANG_GUARD_WAITS):
            waited += 1
            info = await job.wait_exit_with_tail(1, progress_of="train")
            if info.progress is not None and (not seen or seen[-1] != info.progress.epoch):
                seen.append(info.progress.epoch)
            if info.code is not None:
                return info.code
        return None

    assert asyncio.run(follow()) == 0
    assert seen[-1] == 6 and len(seen) >= 2, seen  # read while running, and at the exit
    assert seen == sorted(seen)
    # One ssh call per wait: the progress costs none of its own.
    assert ssh_calls() - ssh_before == waited

    async def at_exit_only() -> tuple[int | None, int | None]:
        info = await job.wait_exit_with_tail(1, progress_of="train", progress_while_running=False)
        return info.code, None if info.progress is None else info.progress.epoch

    assert asyncio.run(at_exit_only()) == (0, 6)


def test_a_status_json_longer_than_the_cap_crosses_capped(brev_sim: BrevSim, sim_client: BrevCLI) -> None:
    name = "tbj-bigstatus"
    brev_sim.add_instance(name)
    job = Workload(sim_client, name, "job-big", settings=WorkloadSettings())

    async def done() -> None:
        await job.write_spec(json.dumps({"simulation": {"epochs": 2, "epoch_seconds": 1}}))
        await job.pull_image(TAO, ngc_api_key=b"nvapi-k")
        assert await job.start_container(TAO, "visual_changenet", "train")
        for _ in range(HANG_GUARD_WAITS):
            if (await job.wait_exit_with_tail(5)).code is not None:
                return
        raise AssertionError("container did not exit")

    asyncio.run(done())
    path = brev_sim.instance_files(name) / "taobrev" / "job-big" / "results" / "train" / "status.json"
    assert asyncio.run(job.wait_exit_with_tail(5, progress_of="train")).progress is not None
    # A KPI map of a megabyte on one line after the epoch lines (per-class APs, say): only the cap
    # of its end crosses, which holds no whole line, so this read brings no progress (the status
    # keeps what it has) instead of a megabyte over ssh.
    huge = json.dumps({"status": "RUNNING", "kpi": {f"ap_{i}": i for i in range(60_000)}}) + "\n"
    with path.open("a") as f:
        f.write(huge)
    assert path.stat().st_size > 1_000_000 > STATUS_TAIL_BYTES
    assert asyncio.run(job.wait_exit_with_tail(5, progress_of="train")).progress is None
