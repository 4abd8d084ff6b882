"""The simulator's instances speak real SSH to the real OpenSSH client; detached TAO containers
cost no OS process; stopping the harness (or losing it) leaves no process behind.
(issue 11 problem 3; tests/brevsim/SIM-CONTRACT.md sections 5, 6 and 9.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.brevsim import reaper
from tests.brevsim.harness import BrevSim
from tests.brevsim.sshd import PROGRAM_NICE
from tests.fixtures.polling import wait_until

pytestmark = pytest.mark.integration

TAO = "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt"
HANG_GUARD = 60  # seconds; only guards against hangs
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sim(bare_sim: BrevSim) -> BrevSim:
    return bare_sim


def run(sim: BrevSim, argv: Sequence[str], *, input: bytes | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        list(argv),
        env=sim.env(),
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=HANG_GUARD,
        check=False,
    )
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def ready(sim: BrevSim, *names: str) -> None:
    sim.login_api_key()
    for name in names:
        sim.add_instance(name)
    assert run(sim, ["brev", "refresh"]).returncode == 0


def remote(sim: BrevSim, inst: str, command: str, *opts: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return run(sim, ["ssh", "-T", "-o", "BatchMode=yes", *opts, inst, command], **kw)


def entry(sim: BrevSim, alias: str) -> dict[str, str]:
    """The ssh_config entry of `alias`, as keyword -> value."""
    text = (sim.home / ".brev" / "ssh_config").read_text()
    block = text.split(f"Host {alias}\n", 1)[1].split("\n\n", 1)[0]
    return dict(line.strip().split(" ", 1) for line in block.splitlines())


def test_refresh_writes_the_real_config_shape_with_a_generated_key(sim: BrevSim) -> None:
    ready(sim, "a", "b")
    a, b = entry(sim, "a"), entry(sim, "b")
    assert a["Hostname"] == "127.0.0.1"
    assert a["User"] == "ubuntu"
    assert a["ControlMaster"] == "auto"
    assert a["ControlPath"] == "~/.ssh/brev-control-%C"
    assert a["ControlPersist"] == "10m"
    assert a["RequestTTY"] == "yes"
    assert a["Port"] != b["Port"], "one port per instance"
    assert entry(sim, "a-host")["Port"] == a["Port"]
    pem = sim.home / ".brev" / "brev.pem"
    assert pem.stat().st_mode & 0o777 == 0o600
    pub = subprocess.run(["ssh-keygen", "-y", "-f", str(pem)], capture_output=True, check=False)
    assert pub.returncode == 0, pub.stderr
    assert pub.stdout.startswith(b"ssh-ed25519 ")


def test_the_server_accepts_the_brev_key_for_ubuntu_only(sim: BrevSim, tmp_path: Path) -> None:
    ready(sim, "k")
    port = entry(sim, "k")["Port"]
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    base = ["ssh", "-F", "none", "-T", "-p", port, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
    base += ["-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes"]
    wrong_key = run(sim, [*base, "-i", str(other), "ubuntu@127.0.0.1", "true"])
    assert wrong_key.returncode == 255
    assert "Permission denied (publickey)" in wrong_key.stderr
    pem = str(sim.home / ".brev" / "brev.pem")
    wrong_user = run(sim, [*base, "-i", pem, "root@127.0.0.1", "true"])
    assert wrong_user.returncode == 255
    assert "Permission denied (publickey)" in wrong_user.stderr
    right = run(sim, [*base, "-i", pem, "ubuntu@127.0.0.1", "echo in"])
    assert (right.returncode, right.stdout) == (0, "in\n")


def test_ssh_on_path_is_the_real_openssh_client(sim: BrevSim) -> None:
    version = run(sim, ["ssh", "-V"])
    assert version.stderr.startswith("OpenSSH_")
    assert not (sim.bin_dir / "ssh").read_bytes().count(b"def main"), "a wrapper, not a stand-in"


def test_operator_form_keeps_stdout_and_stderr_apart_and_propagates_the_status(sim: BrevSim) -> None:
    ready(sim, "op")
    config = str(sim.home / ".brev" / "ssh_config")
    res = run(sim, ["ssh", "-T", "-o", "BatchMode=yes", "-F", config, "op", "echo out; echo err >&2; exit 9"])
    assert (res.returncode, res.stdout) == (9, "out\n")
    assert res.stderr.endswith("err\n")


def test_the_instances_programs_run_below_the_daemon(sim: BrevSim) -> None:
    """One daemon serves every instance's sshd on the cores their programs use: the sessions and
    the zygote the programs fork from run PROGRAM_NICE below it, so a burst of sessions does not
    take the connections' CPU. The remote reads its nice after stdin's EOF, which the daemon
    forwards only once it lowered the session."""
    ready(sim, "nice")
    daemon = os.getpriority(os.PRIO_PROCESS, sim.daemon_pid or 0)
    expected = min(19, daemon + PROGRAM_NICE)
    config = str(sim.home / ".brev" / "ssh_config")
    res = remote(sim, "nice", "cat >/dev/null; nice", "-F", config, input=b"go")
    assert (res.returncode, res.stdout.strip()) == (0, str(expected)), res.stderr
    zygotes = [p for p in sim.processes() if b"tests.brevsim.zygote" in _cmdline(p)]
    assert zygotes and {os.getpriority(os.PRIO_PROCESS, p) for p in zygotes} == {expected}


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""  # gone meanwhile


def test_with_a_tty_stderr_merges_into_stdout_and_stdin_is_a_terminal(sim: BrevSim) -> None:
    ready(sim, "tty")
    res = remote(sim, "tty", "[ -t 0 ] && echo stdin-is-a-tty; echo err >&2", "-tt", "-o", "LogLevel=ERROR")
    assert res.returncode == 0
    assert "stdin-is-a-tty" in res.stdout
    assert "err" in res.stdout
    assert "err" not in res.stderr


def test_a_remote_signal_death_is_exit_255(sim: BrevSim) -> None:
    ready(sim, "sig")
    assert remote(sim, "sig", "kill -9 $$").returncode == 255


def test_a_master_persists_between_calls_and_dies_with_the_simulator(sim: BrevSim) -> None:
    ready(sim, "m")
    assert remote(sim, "m", "true").returncode == 0
    check = run(sim, ["ssh", "-O", "check", "m"])
    assert "Master running" in check.stderr
    master = int(check.stderr.split("pid=")[1].split(")")[0])
    assert master in sim.processes()
    sim.close()
    assert sim.processes() == []
    assert not Path(f"/proc/{master}").exists() or _zombie(master)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _start_tao(sim: BrevSim, inst: str, job: str) -> str:
    spec = {"simulation": {"epochs": 100000, "epoch_seconds": 1}}
    d = sim.instance_files(inst) / "taobrev" / job / "spec"
    d.mkdir(parents=True)
    (d / "spec.yaml").write_text(json.dumps(spec))
    command = (
        f"docker run -d --name {job} --gpus all -v ~/taobrev/{job}/spec:/workspace/spec:ro "
        f"-v ~/taobrev/{job}/results:/workspace/results {TAO} visual_changenet train "
        "-e /workspace/spec/spec.yaml results_dir=/workspace/results"
    )
    res = remote(sim, inst, command)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def _login_and_pull(sim: BrevSim, inst: str) -> None:
    sim.set_faults(pull_seconds=0)
    login = "docker login nvcr.io --username '$oauthtoken' --password-stdin"
    assert remote(sim, inst, login, input=b"nvapi-key").returncode == 0
    assert remote(sim, inst, f"docker pull {TAO}").returncode == 0


def test_detached_training_containers_cost_no_process(sim: BrevSim) -> None:
    ready(sim, "c")
    _login_and_pull(sim, "c")
    before = set(sim.processes())
    for i in range(6):
        _start_tao(sim, "c", f"job{i}")
    containers = sim.containers("c")
    assert [c["State"]["Status"] for c in containers] == ["running"] * 6
    assert set(sim.processes()) == before, "no process per container"
    daemon = sim.daemon_pid
    assert daemon is not None
    for c in containers:
        # State.Pid is the container's thread in the daemon: it exists exactly while it runs
        assert Path(f"/proc/{daemon}/task/{c['State']['Pid']}").exists()
    # -t 3000: 30 s of wall time at speed 0.01 (the default 10 s is 0.1 s, then SIGKILL: 137);
    # the stop returns at the exit.
    stopped = remote(sim, "c", "docker stop -t 3000 job0 && docker wait job0 && docker logs --tail 1 job0")
    assert stopped.stdout.startswith("job0\n143\n")
    assert "Received SIGTERM: stopping" in stopped.stdout
    (job1,) = [c for c in containers if c["Name"] == "/job1"]
    pid = job1["State"]["Pid"]
    assert remote(sim, "c", "docker rm -f job1").returncode == 0
    wait_until(
        lambda: not Path(f"/proc/{daemon}/task/{pid}").exists(), "the killed container's thread to end"
    )


def test_a_killed_container_prints_nothing_more(sim: BrevSim) -> None:
    ready(sim, "kk")
    _login_and_pull(sim, "kk")
    _start_tao(sim, "kk", "victim")
    (before,) = sim.containers("kk")
    assert run(sim, ["brev", "stop", "kk"]).returncode == 0  # the VM stops under it: SIGKILL
    (obj,) = sim.containers("kk")
    assert (obj["State"]["Status"], obj["State"]["ExitCode"]) == ("exited", 137)
    # the exit is recorded once the program is gone, and it had no chance to print or write
    assert not Path(f"/proc/{sim.daemon_pid}/task/{before['State']['Pid']}").exists()
    assert "stopping" not in Path(obj["LogPath"]).read_text()
    status = sim.instance_files("kk") / "taobrev" / "victim" / "results" / "train" / "status.json"
    assert "interrupted" not in status.read_text()


def test_stopping_the_harness_leaves_no_process(sim: BrevSim) -> None:
    ready(sim, "r1", "r2")
    _login_and_pull(sim, "r1")
    _start_tao(sim, "r1", "train")
    # what leaks on a real machine: brev exec's ssh-agent per call, masters, a background job
    assert run(sim, ["brev", "exec", "r2", "true"]).returncode == 0
    assert remote(sim, "r1", "nohup sleep 1000 >/dev/null 2>&1 </dev/null &").returncode == 0
    assert len(sim.processes()) >= 4, sim.processes()  # daemon, masters, agent, sleep
    sim.close()
    assert sim.processes() == []


def test_a_killed_harness_process_leaves_no_process(tmp_path: Path) -> None:
    """An interrupted run (the harness process SIGKILLed: no atexit, no finally): the daemon sees its
    parent go and reaps everything the simulator started."""
    root = tmp_path / "brevsim"
    script = textwrap.dedent(
        f"""
        import subprocess, sys, time
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from tests.brevsim.harness import BrevSim
        sim = BrevSim(Path({str(root)!r}), speed=0.01)
        sim.login_api_key()
        sim.add_instance("orphan")
        env = sim.env()
        subprocess.run(["brev", "refresh"], env=env, check=True, capture_output=True)
        subprocess.run(["brev", "exec", "orphan", "nohup sleep 1000 >/dev/null 2>&1 </dev/null &"],
                       env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)
        print("up", flush=True)
        time.sleep(3600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"up\n"
        assert len(reaper.marked(root / "state")) >= 3  # daemon, master, agent, sleep
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_until(lambda: reaper.marked(root / "state") == [], "the orphaned simulator to reap itself")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reaper.reap(root / "state")
