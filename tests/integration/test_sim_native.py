"""The simulator's native programs behave as the Python programs they front (issue 11: a simulated
call must cost about what the real program costs, not a Python start).

- An instance's `docker`/`nvidia-smi` is a native client of the zygote (tests/brevsim/zygote.py):
  exit codes, stdout/stderr, stdin, signals (forwarded, re-raised, inherited as ignored) and
  cleanup must be those of the Python program run directly.
- The local `brev` is a zygote client as well: the same answers as the CLI run as a script, and
  a caller that kills its process group kills what the call started (brev exec's ssh).
- `ssh`/`ssh-agent` are a native recorder + exec of the real OpenSSH: the call log line must be
  what record.record_call writes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.brevsim import container, launch, native
from tests.brevsim.control import MARKER
from tests.brevsim.harness import BrevSim
from tests.fixtures.polling import wait_until

pytestmark = pytest.mark.integration

HANG_GUARD = 60  # seconds; only guards against hangs
LOGIN = ["login", "nvcr.io", "--username", "$oauthtoken", "--password-stdin"]


@pytest.fixture
def sim(bare_sim: BrevSim) -> BrevSim:
    return bare_sim


class Instance:
    def __init__(self, sim: BrevSim, name: str) -> None:
        sim.login_api_key()
        self.sim = sim
        self.id = sim.add_instance(name)
        self.sandbox = sim.store.instance_dir(self.id)
        self.env = {
            "HOME": str(self.sandbox / "home"),
            "PATH": f"{self.sandbox / 'bin'}:/usr/bin:/bin",
            "USER": "ubuntu",
            "LANG": "C.UTF-8",
            MARKER: str(sim.state_dir.resolve()),
        }

    def run(self, argv: list[str], *, input: bytes = b"") -> tuple[int, bytes, bytes]:
        proc = subprocess.run(
            argv,
            check=False,
            env=self.env,
            cwd=self.sandbox / "home",
            input=input,
            capture_output=True,
            timeout=HANG_GUARD,
        )
        return proc.returncode, proc.stdout, proc.stderr

    def direct(self, program: str, args: list[str], *, input: bytes = b"") -> tuple[int, bytes, bytes]:
        """The Python program itself, started as the scripts before the zygote did."""
        module = {"docker": "tests.brevsim.docker", "nvidia-smi": "tests.brevsim.gpu"}[program]
        argv = container.bootstrap(sys.executable, module, str(self.sim.state_dir), self.id)
        return self.run([*argv, *args], input=input)

    def popen(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        # A command on an instance starts as sshd starts it: SIGINT and SIGQUIT at their defaults.
        # A test runner started as a background job of a non-interactive shell (`make test &`)
        # ignores both, an ignored disposition survives exec, and the program then never catches
        # SIGINT: the signal tests failed that way in a fresh clone run in the background.
        # coreutils' env execs the program (same pid) after resetting them.
        sshd_like = ["env", "--default-signal=INT,QUIT"]
        return subprocess.Popen([*sshd_like, *argv], env=self.env, cwd=self.sandbox / "home", **kw)


def ppid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    raise AssertionError(f"no PPid for {pid}")


def signal_set(pid: int, field: str) -> set[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            mask = int(line.split()[1], 16)
            return {n for n in range(1, 65) if mask & (1 << (n - 1))}
    raise AssertionError(f"no {field} for {pid}")


def worker_of(sim: BrevSim, client: int, before: set[int]) -> int:
    """The worker serving `client`: the one new simulator process, a child of the zygote."""
    found: list[int] = []

    def started() -> bool:
        new = set(sim.processes()) - before - {client}
        found[:] = [p for p in new if ppid(p) not in new and ppid(p) in before]
        return len(found) == 1

    wait_until(started, "the worker to start")
    return found[0]


@pytest.mark.parametrize(
    ("program", "args", "stdin"),
    [
        ("docker", ["ps"], b""),
        ("docker", ["--version"], b""),  # not a docker command: exit 1, stderr only
        ("docker", ["inspect", "nosuch"], b""),
        ("docker", ["run", "--rm", "busybox", "true"], b""),  # pull access denied: exit 125
        ("docker", LOGIN, b"nvapi-key\n"),
        ("docker", ["login", "nvcr.io", "--username", "bob", "--password-stdin"], b"nvapi-key\n"),
        ("nvidia-smi", ["-L"], b""),
        ("nvidia-smi", [], b""),
    ],
)
def test_the_client_answers_exactly_as_the_python_program(
    sim: BrevSim, program: str, args: list[str], stdin: bytes
) -> None:
    inst = Instance(sim, "same")
    via_client = inst.run([program, *args], input=stdin)
    direct = inst.direct(program, args, input=stdin)
    assert via_client == direct


def test_exit_codes_streams_and_stdin_pass_through(sim: BrevSim) -> None:
    inst = Instance(sim, "io")
    code, out, err = inst.run(["docker", "inspect", "nosuch"])
    assert (code, out) == (1, b"[]\n")
    assert b"No such object: nosuch" in err
    code, out, err = inst.run(["docker", "run", "--rm", "busybox", "true"])
    assert code == 125
    assert out == b""
    assert b"pull access denied" in err
    code, out, _ = inst.run(["docker", *LOGIN], input=b"nvapi-0123456789\n")
    assert (code, out) == (0, b"Login Succeeded\n")
    (login,) = [c for c in sim.calls() if c.argv == LOGIN]
    assert login.stdin_bytes == len(b"nvapi-0123456789\n")  # read by the worker, through the passed fd 0
    code, out, err = inst.run(["bash", "-c", "cd /tmp && docker ps >/dev/null; echo $?; pwd"])
    assert (code, out) == (0, b"0\n/tmp\n")


def test_a_sigterm_from_timeout_ends_the_worker_and_the_client_dies_of_it(sim: BrevSim) -> None:
    inst = Instance(sim, "term")
    before = set(sim.processes())
    # `docker login --password-stdin` blocks on a stdin that stays open, as a waiting `docker wait`
    proc = inst.popen(
        ["timeout", "--preserve-status", "1", "docker", *LOGIN],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        code = proc.wait(timeout=HANG_GUARD)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
    assert code == 128 + signal.SIGTERM  # the client re-raised the worker's death by SIGTERM
    assert set(sim.processes()) == before  # the worker gone before the client returned


def test_sigint_is_forwarded_to_the_program(sim: BrevSim) -> None:
    inst = Instance(sim, "int")
    before = set(sim.processes())
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    proc = inst.popen(["docker", *LOGIN], **pipes)
    try:
        # The SIGINT goes once the program can take it, not after a fixed 1 s (`timeout -s INT 1`):
        # a worker still setting its dispositions ignores it (the zygote's SIG_IGN) or dies of it
        # without a traceback, and a loaded machine can take longer than 1 s to get there.
        worker = worker_of(sim, proc.pid, before)
        wait_until(lambda: signal.SIGINT in signal_set(worker, "SigCgt"), "the worker's SIGINT handler")
        os.kill(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=HANG_GUARD)
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
    assert code == -signal.SIGINT  # the client re-raised the worker's death by SIGINT
    assert b"KeyboardInterrupt" in err  # the Python program itself got the SIGINT


def test_ignored_signals_are_inherited_by_the_program(sim: BrevSim) -> None:
    inst = Instance(sim, "ign")
    before = set(sim.processes())
    # bash ignores SIGINT/SIGQUIT for a background job; `trap '' HUP` is how nohup works
    proc = inst.popen(
        ["bash", "-c", "trap '' HUP; exec docker " + " ".join(f"'{a}'" for a in LOGIN)], stdin=subprocess.PIPE
    )
    try:
        worker = worker_of(sim, proc.pid, before)
        # The worker sets its dispositions as it starts: look once it caught SIGINT again
        # (Python's KeyboardInterrupt handler), the last of them; a loaded machine shows the gap.
        wait_until(lambda: signal.SIGINT in signal_set(worker, "SigCgt"), "the worker's SIGINT handler")
        assert signal.SIGHUP in signal_set(worker, "SigIgn")
        assert signal.SIGHUP in signal_set(proc.pid, "SigIgn")  # the client neither forwards it
        os.kill(proc.pid, signal.SIGHUP)
        assert proc.stdin is not None
        proc.stdin.write(b"nvapi-key\n")
        proc.stdin.close()
        assert proc.wait(timeout=HANG_GUARD) == 0
    finally:
        proc.kill()
        proc.wait()


def _gone_or_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_killed_client_takes_its_worker_along(sim: BrevSim) -> None:
    inst = Instance(sim, "kill")
    before = set(sim.processes())
    proc = inst.popen(["docker", *LOGIN], stdin=subprocess.PIPE)
    try:
        worker = worker_of(sim, proc.pid, before)
        proc.kill()
        proc.wait()
        wait_until(lambda: set(sim.processes()) == before, "the worker to go")
        # Out of sim.processes() once its memory is gone; a dying task still reads R until its
        # exit completes, then Z until the zygote reaps it.
        wait_until(lambda: _gone_or_zombie(worker), "the killed worker to end")
    finally:
        assert proc.stdin is not None
        proc.stdin.close()


def test_an_unreachable_zygote_fails_loudly(sim: BrevSim, tmp_path: Path) -> None:
    inst = Instance(sim, "lost")
    lost = tmp_path / "docker"
    template = sim.state_dir / "native" / "zclient"
    native.install(template, lost, ["brevsim-zygote-nobody-listens", "docker", str(sim.state_dir), inst.id])
    code, out, err = inst.run([str(lost), "ps"])
    assert code == 127
    assert out == b""
    assert b"is not reachable" in err


def test_the_ssh_wrapper_records_argv_as_record_call_does(sim: BrevSim) -> None:
    odd = [
        b"-V",
        b'q"uote\\back',
        "h\u00e9 \u2603 \U0001f600".encode(),
        b"\x01\x7f\ttab\nnl",
        b"bad\xff\xfeutf8",
    ]
    proc = subprocess.run([b"ssh", *odd], check=False, env=sim.env(), capture_output=True, timeout=HANG_GUARD)
    assert proc.stderr.startswith(b"OpenSSH_")  # the real program ran
    line = [json.loads(x) for x in sim.store.calls_path.read_text().splitlines()][-1]
    assert list(line) == ["id", "program", "argv", "where", "instance", "ts"]
    assert line["argv"] == [os.fsdecode(a) for a in odd]
    assert (line["program"], line["where"], line["instance"]) == ("ssh", "local", None)
    expected = {**line, "argv": [os.fsdecode(a) for a in odd]}
    raw = sim.store.calls_path.read_text().splitlines()[-1]
    assert raw == json.dumps(expected, separators=(",", ":"))  # byte for byte what Python writes


def test_concurrent_ssh_records_never_interleave(sim: BrevSim) -> None:
    long_arg = "x" * 20000
    procs = [
        subprocess.Popen(["ssh", "-V", long_arg, str(i)], env=sim.env(), stderr=subprocess.DEVNULL)
        for i in range(20)
    ]
    for p in procs:
        p.wait(timeout=HANG_GUARD)
    calls = [c for c in sim.calls() if c.program == "ssh"]
    assert sorted(c.argv[2] for c in calls) == sorted(str(i) for i in range(20))
    assert all(c.argv[1] == long_arg for c in calls)


def test_the_build_is_cached_atomically_under_parallel_first_use(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    code = "from tests.brevsim import native; print(native.build())"
    env = {**os.environ, "TAOBREV_CACHE": str(cache)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            cwd=Path(__file__).resolve().parents[2],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(3)
    ]
    results = [p.communicate(timeout=HANG_GUARD) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in results]
    dirs = {out.decode().strip() for out, _ in results}
    assert len(dirs) == 1  # every racer ends with the same directory
    (built,) = dirs
    assert Path(built).parent == cache / "brevsim-native"
    assert sorted(p.name for p in Path(built).iterdir()) == sorted(native.PROGRAMS)
    assert [p.name for p in Path(built).parent.iterdir()] == [Path(built).name]  # no temporary left
    assert any(b"compiling" in err for _, err in results)  # one progress line from whoever compiled


def test_a_missing_gcc_is_a_clear_error(tmp_path: Path) -> None:
    code = "from tests.brevsim import native; native.build()"
    env = {**os.environ, "PATH": str(tmp_path), "TAOBREV_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        timeout=HANG_GUARD,
    )
    assert proc.returncode == 1
    assert b"apt-get install gcc" in proc.stderr


# -- the local `brev`: a zygote client too ---------------------------------------------------------


def _brev_script(sim: BrevSim, tmp_path: Path) -> Path:
    """The same CLI as the Python script `brev` was before it became a zygote client."""
    path = tmp_path / "brev-script"
    text = launch.script(sys.executable, "tests.brevsim.cli", "main", str(sim.state_dir), str(sim.bin_dir))
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["ls"], b""),  # not logged in: the CLI's error and exit code
        (["--version", "--no-check-latest"], b""),
        (["nosuchverb"], b""),
        (["login", "--token"], b""),  # stdin at EOF at once: the login EOF quirk
        (["create", "--help"], b""),
    ],
)
def test_local_brev_answers_as_the_python_cli(
    sim: BrevSim, tmp_path: Path, args: list[str], stdin: bytes
) -> None:
    assert (sim.bin_dir / "brev").read_bytes()[:4] == b"\x7fELF"  # the native client
    env = sim.env()

    def run(program: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [program, *args], check=False, env=env, input=stdin, capture_output=True, timeout=HANG_GUARD
        )

    got, want = run("brev"), run(str(_brev_script(sim, tmp_path)))
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)


def _ssh_with(token: str) -> list[int]:
    """Live local ssh clients whose command line carries `token`."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes()
            stat = (p / "stat").read_text()
        except OSError:
            continue
        comm, state = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rpartition(")")[2].split()[0]
        if comm == "ssh" and token.encode() in cmd and state != "Z":
            out.append(int(p.name))
    return out


def test_killing_a_brev_calls_process_group_kills_what_the_call_started(sim: BrevSim) -> None:
    # The operator runs brev in a session of its own and kills the whole group at a timeout; the
    # ssh that `brev exec` started must die with it, as it did when the CLI was a local process.
    sim.login_api_key()
    sim.add_instance("grp")
    env = sim.env()
    refresh = subprocess.run(
        ["brev", "refresh"], check=False, env=env, capture_output=True, timeout=HANG_GUARD
    )
    assert refresh.returncode == 0, refresh.stderr
    token = "taobrev-killpg-probe"
    proc = subprocess.Popen(
        ["brev", "exec", "grp", f"sleep 300; echo {token}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(lambda: _ssh_with(token), "brev exec's ssh to start")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(HANG_GUARD)
        wait_until(lambda: not _ssh_with(token), "the killed brev call's ssh to end")
    finally:
        if proc.poll() is None:
            proc.kill()
