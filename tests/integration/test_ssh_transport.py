"""The operator's own ssh transport (`BrevCLI.ssh_exec`, `put_file`, the master's exit at delete)
against the simulator: statuses come back exactly, connection failures are transient, an alias
brev's config does not list yet costs one shared `brev refresh`, the workload sends everything but
the readiness probe over ssh, and with the real OpenSSH client every call to one instance shares
one ControlMaster that exits when the instance is deleted."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from controller.api.errors import BrevTransientError
from controller.brev.cli import BrevCLI, BrevCLISettings
from controller.brev.client import BrevCredentials
from controller.brev.runner import CommandTimeout
from controller.brev.sshmux import control_dir, exit_master_argv, ssh_argv
from controller.brev.workload import ContainerNotFound, Workload, WorkloadSettings
from controller.versions import load_versions
from tests.brevsim.harness import BrevSim
from tests.fixtures.polling import until
from tests.footprint import processes, ssh_masters

pytestmark = pytest.mark.integration
T = TypeVar("T")


class Verbs:
    """The client's own record of each call (verb, result): independent of how the sim records.
    A call is recorded when it finishes; `spans` keeps when each one ran (monotonic start, end)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.spans: list[tuple[str, float, float]] = []

    def brev_call(self, verb: str, result: str, seconds: float) -> None:
        end = time.monotonic()
        self.calls.append((verb, result))
        self.spans.append((verb, end - seconds, end))

    def count(self) -> Counter[str]:
        return Counter(v for v, _r in self.calls)


@pytest.fixture
def make_client(brev_sim: BrevSim, tmp_path: Path) -> Iterator[Callable[[Verbs], BrevCLI]]:
    made: list[BrevCLI] = []

    def make(verbs: Verbs) -> BrevCLI:
        client = BrevCLI(
            BrevCLISettings(
                home=brev_sim.home,
                expected_version=load_versions().brev.cli_version,
                sa_token_path=tmp_path / "no-service-account-token",
            ),
            BrevCredentials(api_key=BrevSim.API_KEY, org_id=BrevSim.ORG_ID),
            recorder=verbs,
            env=brev_sim.env(),
        )
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
    # No master of this test may outlive it (they would hold their sockets for 10 minutes).
    for pid in ssh_masters(brev_sim.home):
        os.kill(pid, signal.SIGTERM)


def test_argv_has_no_tty_shares_the_master_and_names_the_config(tmp_path: Path) -> None:
    home = tmp_path / "h"
    argv = ssh_argv("ssh", home / ".ssh/config", home, "inst", "echo hi", persist_s=600, connect_timeout_s=10)
    assert argv[:2] == ["ssh", "-T"]
    options = [argv[i + 1] for i, word in enumerate(argv) if word == "-o"]
    assert "ControlMaster=auto" in options
    assert "ControlPersist=600" in options
    assert "BatchMode=yes" in options
    assert f"ControlPath={control_dir(home)}/brev-control-%C" in options
    assert argv[-4:] == ["-F", str(home / ".ssh/config"), "inst", "echo hi"]
    closing = exit_master_argv("ssh", home / ".ssh/config", home, "inst")
    assert closing[-3:] == ["-O", "exit", "inst"]
    assert f"ControlPath={control_dir(home)}/brev-control-%C" in closing


def test_control_path_fits_a_unix_socket_however_deep_the_home(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120) / "home"
    # ssh binds `<path>.<16 chars>` first; sun_path holds 107 bytes plus the NUL.
    assert len(f"{control_dir(deep)}/brev-control-{'0' * 40}.{'x' * 16}") <= 107
    assert control_dir(Path("/home/operator")) == Path("/home/operator/.ssh")


def test_remote_status_and_streams_come_back_exactly_even_255(
    brev_sim: BrevSim, make_client: Callable[[Verbs], BrevCLI]
) -> None:
    brev_sim.add_instance("box")
    verbs = Verbs()
    client = make_client(verbs)
    result = asyncio.run(client.ssh_exec("box", "echo out; echo err >&2; exit 3", timeout=60))
    assert result.exit_code == 3
    assert result.stdout == "out\n"
    assert "err" in result.stderr
    assert "err" not in result.stdout  # -T: no TTY merging stderr into stdout
    # 255 from the remote command is its status, not ssh's connection failure.
    assert asyncio.run(client.ssh_exec("box", "exit 255", timeout=60)).exit_code == 255
    assert verbs.count()["exec"] == 0  # no brev exec anywhere


def test_a_connection_failure_is_transient_and_named(
    brev_sim: BrevSim, make_client: Callable[[Verbs], BrevCLI]
) -> None:
    brev_sim.add_instance("box")
    brev_sim.set_faults(sshd_dead=["box"])
    client = make_client(Verbs())
    with pytest.raises(BrevTransientError) as caught:
        asyncio.run(client.ssh_exec("box", "echo hi", timeout=60))
    assert caught.value.reason == "SshConnectionFailed"
    assert "255" in str(caught.value)


def test_an_alias_brev_has_not_written_yet_costs_one_shared_refresh(
    brev_sim: BrevSim, make_client: Callable[[Verbs], BrevCLI]
) -> None:
    """brev refresh writes only instances RUNNING at the time: four calls to a new instance
    that all find its alias missing share one refresh, then all run."""
    brev_sim.add_instance("old")
    verbs = Verbs()
    client = make_client(verbs)
    asyncio.run(client.ssh_exec("old", "true", timeout=60))  # the config now exists, without "new"
    assert verbs.count()["refresh"] == 1
    brev_sim.add_instance("new")

    async def four() -> list[int]:
        results = await asyncio.gather(*(client.ssh_exec("new", f"echo {i}", timeout=60) for i in range(4)))
        return [r.exit_code for r in results]

    assert asyncio.run(four()) == [0, 0, 0, 0]
    assert verbs.count()["refresh"] == 2


def test_the_workload_sends_every_step_over_ssh_and_never_runs_brev_exec(
    brev_sim: BrevSim, make_client: Callable[[Verbs], BrevCLI]
) -> None:
    brev_sim.add_instance("box")
    verbs = Verbs()
    job = Workload(make_client(verbs), "box", "job-1", settings=WorkloadSettings())
    assert asyncio.run(job.probe(60)) is True
    asyncio.run(job.write_spec("train: {}\n"))
    with pytest.raises(ContainerNotFound):
        asyncio.run(job.wait_exit_with_tail(1))
    asyncio.run(job.stop_container(1))
    asyncio.run(job.clear())
    counts = verbs.count()
    assert counts["exec"] == 0
    assert counts["ssh_put"] == 1
    assert counts["ssh_exec"] == 4  # probe, wait, stop, cleanup
    assert not [c for c in brev_sim.calls() if c.program == "brev" and c.argv[:1] == ["exec"]]


def test_the_probe_is_false_while_ssh_is_refused_and_true_once_it_answers(
    brev_sim: BrevSim, make_client: Callable[[Verbs], BrevCLI]
) -> None:
    brev_sim.add_instance("box")
    brev_sim.set_faults(exec_never_ready=["box"])
    job = Workload(make_client(Verbs()), "box", "job-1", settings=WorkloadSettings())
    assert asyncio.run(job.probe(60)) is False
    brev_sim.clear_faults()
    assert asyncio.run(job.probe(60)) is True


def test_a_timeout_kills_the_call_but_not_the_shared_master(
    brev_sim: BrevSim, make_client: Callable[[Verbs], BrevCLI]
) -> None:
    """The runner kills the call's process group on timeout; the master daemonised into its own
    session, so it survives and the next call reuses it."""
    brev_sim.add_instance("box")
    client = make_client(Verbs())
    asyncio.run(client.ssh_exec("box", "true", timeout=60))
    [master] = ssh_masters(brev_sim.home)
    with pytest.raises(CommandTimeout):
        asyncio.run(client.ssh_exec("box", "sleep 30", timeout=1))
    assert asyncio.run(client.ssh_exec("box", "echo again", timeout=60)).stdout == "again\n"
    assert ssh_masters(brev_sim.home) == [master]


def test_an_exit_wait_takes_its_own_connection_beside_the_master(
    brev_sim: BrevSim, make_client: Callable[[Verbs], BrevCLI]
) -> None:
    """A running job's exit wait is a long session: on a connection of its own it costs one ssh
    process, not a master plus a mux client (issue 30: 2.5 MiB PSS per running job, 1.4 alone).
    It neither starts a master nor joins one; short calls still share theirs."""
    brev_sim.add_instance("box")
    client = make_client(Verbs())
    job = Workload(client, "box", "job-1", settings=WorkloadSettings())
    wait = asyncio.run(client.ssh_exec("box", "echo waited", timeout=60, own_connection=True))
    assert (wait.exit_code, wait.stdout) == (0, "waited\n")
    assert ssh_masters(brev_sim.home) == []
    asyncio.run(client.ssh_exec("box", "true", timeout=60))
    [master] = ssh_masters(brev_sim.home)
    # The workload's wait (no container yet) goes past the master: the real ssh argv says so.
    with pytest.raises(ContainerNotFound):
        asyncio.run(job.wait_exit(5))
    waits = [
        c
        for c in brev_sim.calls()
        if c.where == "local" and c.program == "ssh" and "docker wait" in c.argv[-1]
    ]
    assert waits and all("ControlPath=none" in c.argv and "ControlMaster=no" in c.argv for c in waits)
    assert ssh_masters(brev_sim.home) == [master]


def test_calls_to_one_instance_share_one_master_and_delete_makes_it_exit(
    brev_sim: BrevSim, make_client: Callable[[Verbs], BrevCLI]
) -> None:
    """Real OpenSSH: the first ssh to an instance leaves ONE background master (ControlPersist);
    concurrent and later calls are mux clients over it; `delete_instance` sends `ssh -O exit`
    beside `brev delete`, so the master is gone with the instance instead of lingering for 10
    minutes, and the delete (billing stops with it) never waits for the close."""
    brev_sim.add_instance("a")
    brev_sim.add_instance("b")
    verbs = Verbs()
    client = make_client(verbs)

    async def calls() -> None:
        await client.ssh_exec("a", "true", timeout=60)  # the first call becomes the master
        await client.ssh_exec("b", "true", timeout=60)
        await asyncio.gather(*(client.ssh_exec(n, "sleep 0.2", timeout=60) for n in ("a", "b") * 4))

    asyncio.run(calls())
    masters = ssh_masters(brev_sim.home)
    assert len(masters) == 2
    by_pid = {p.pid: p for p in processes()}
    assert all(by_pid[pid].ppid != os.getpid() for pid in masters)  # daemonised, not our children
    asyncio.run(client.delete_instance("a"))
    remaining = until(lambda: m if len(m := ssh_masters(brev_sim.home)) == 1 else None, "a's master to exit")
    assert remaining[0] in masters
    # Both calls run side by side: which one *finishes* first is the scheduler's choice, so the
    # promise is that both were made once and the delete started before the close had ended.
    spans = {verb: (start, end) for verb, start, end in verbs.spans if verb in ("ssh_close", "delete")}
    assert Counter(v for v, _s, _e in verbs.spans if v in spans) == {"ssh_close": 1, "delete": 1}
    assert spans["delete"][0] < spans["ssh_close"][1], spans


def test_closing_the_client_asks_every_master_it_opened_to_exit(
    brev_sim: BrevSim, make_client: Callable[[Verbs], BrevCLI]
) -> None:
    """Outside a pod nothing kills the masters with the container: the operator's shutdown
    (BrevCLI.close) does, instead of leaving them for ControlPersist."""
    for name in ("a", "b", "c"):
        brev_sim.add_instance(name)
    client = make_client(Verbs())

    async def calls() -> None:
        await asyncio.gather(*(client.ssh_exec(n, "true", timeout=60) for n in ("a", "b", "c")))

    asyncio.run(calls())
    assert len(ssh_masters(brev_sim.home)) == 3
    client.close()
    until(lambda: not ssh_masters(brev_sim.home), "every master to exit")
