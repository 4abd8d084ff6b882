"""The fork server ("zygote") behind the instances' Python programs (`docker`, `nvidia-smi`).

One single-threaded process per simulator, started by the daemon (a fresh interpreter, never a
fork of the threaded daemon): it imports the programs once and listens on an abstract unix
socket named after the state directory (no path-length limit: pytest state dirs are long). An
instance's `docker` is a tiny native client (native/zclient.c) that sends its argv, environment,
umask, ignored/blocked signals and passes fds 0/1/2 and its working directory. Per call:

    zygote --fork--> worker: close what it inherited, dup2 the fds, fchdir, environ, argv,
                     signal dispositions and mask, fresh sys.std*, run main(), flush,
                     os._exit(code) (a worker may also execve)
    zygote (one select loop over every call): relays the signals the client forwards; client
             gone (EOF) -> SIGKILL the worker; worker ended (its pidfd) -> reaps it, sends
             `exit N` / `signal N` and closes, so the client sees EOF only once the worker is
             gone (no simulator process outlives a finished call).

A call thus costs one fork of a warm interpreter instead of an interpreter start plus ~50 ms of
imports. (A handler process per call, forking the worker and relaying for it, cost another fork,
its copy-on-write faults and its exit: ~2.5 of the ~13 ms a `docker` call cost; the footprint
bench makes ~10 calls per job start and two per exit wait.) Every process here inherits the
zygote's environment block, which carries the marker (control.MARKER): the reaper finds workers
whatever the client sent. The zygote exits when the daemon stops it or goes away. Standard library only.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import io
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

# An instance's programs: name -> module whose main(state, instance_id, argv) it runs
INSTANCE_PROGRAMS = {"docker": "tests.brevsim.docker", "nvidia-smi": "tests.brevsim.gpu"}
# The local `brev` (main(state, bin_dir, argv)): an interpreter start plus the CLI's imports was
# ~85 ms CPU per call, most of a job's start in the footprint bench.
LOCAL_PROGRAMS = {"brev": "tests.brevsim.cli"}
PROGRAMS = {**INSTANCE_PROGRAMS, **LOCAL_PROGRAMS}
MAGIC = b"BZ1"
CHECK_PARENT_S = 0.5  # how often an idle zygote checks that its daemon is still there
MAX_REQUEST = 64 << 20
MAX_FD = 1 << 20  # closerange's end (close_range(2) with it costs nothing per fd)
REQUEST_TIMEOUT_S = 10.0  # a client sends its whole request right after connecting


def address(state: Path | str) -> str:
    """The abstract socket name (without its leading NUL) the clients have baked in."""
    digest = hashlib.sha256(str(Path(state).resolve()).encode()).hexdigest()[:24]
    return f"brevsim-zygote-{digest}"


class Request:
    def __init__(self, payload: bytes, fds: list[int]) -> None:
        fields = payload.split(b"\0")
        if fields[0] != MAGIC or fields[-1] != b"":
            raise ValueError("not a brevsim zygote request")
        it = iter(fields[1:-1])
        self.program = next(it).decode()
        mask = int(next(it))
        self.umask = int(next(it))
        self.ignored = {int(s) for s in next(it).split(b",") if s}
        self.blocked = {int(s) for s in next(it).split(b",") if s}
        self.baked = [os.fsdecode(next(it)) for _ in range(int(next(it)))]
        self.argv = [os.fsdecode(next(it)) for _ in range(int(next(it)))]
        self.env = [bytes(e) for e in it]
        # the fds arrive in order: 0, 1, 2 (those open in the client), then the cwd
        received = iter(fds)
        self.fds = {n: next(received) for n in range(4) if mask & (1 << n)}


def recv_request(conn: socket.socket) -> Request:
    head, fds, _, _ = socket.recv_fds(conn, 4, 4)
    while len(head) < 4:
        more = conn.recv(4 - len(head))
        if not more:
            raise EOFError("the client went away")
        head += more
    size = int.from_bytes(head, sys.byteorder)
    if size > MAX_REQUEST:
        raise ValueError(f"request of {size} bytes")
    chunks, got = [], 0
    while got < size:
        chunk = conn.recv(min(size - got, 1 << 20))
        if not chunk:
            raise EOFError("the client went away")
        chunks.append(chunk)
        got += len(chunk)
    return Request(b"".join(chunks), fds)


def stdio_errors(env: dict[str, str]) -> str:
    """What a fresh interpreter picks for stdin/stdout: surrogateescape under the C/POSIX locale
    (UTF-8 mode), else strict (every locale the simulator sets is UTF-8)."""
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = env.get(name)
        if value:
            return "surrogateescape" if value in ("C", "POSIX") else "strict"
    return "surrogateescape"


def fresh_stdio(env: dict[str, str]) -> None:
    """sys.stdin/stdout/stderr as a new interpreter builds them over the (new) fds 0/1/2."""
    errors = stdio_errors(env)

    def stream(fd: int, write: bool, errs: str) -> Any:
        try:
            os.fstat(fd)
        except OSError:
            return None
        raw = io.FileIO(fd, "wb" if write else "rb", closefd=False)
        if write:
            buffered: Any = io.BufferedWriter(raw)
            line = fd == 2 or raw.isatty()
        else:
            buffered = io.BufferedReader(raw)
            line = False
        return io.TextIOWrapper(buffered, encoding="utf-8", errors=errs, newline="\n", line_buffering=line)

    # (sys.__std*__ keep wrapping fds 0/1/2, which are now the client's)
    sys.stdin = stream(0, False, errors)
    sys.stdout = stream(1, True, errors)
    sys.stderr = stream(2, True, "backslashreplace")


def exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    with contextlib.suppress(Exception):
        sys.stderr.write(f"{e.code}\n")
    return 1


def run_worker(req: Request, conn: socket.socket) -> None:
    """In the forked worker: become the program the client would have exec'd; never returns."""
    code = 1
    try:
        # First, so no other call's connection stays open here: the zygote's listener, selector,
        # every other client's connection and worker pidfd. Then the client's fds take 0/1/2.
        for n in (0, 1, 2):
            if n in req.fds:
                os.dup2(req.fds[n], n)
            else:
                with contextlib.suppress(OSError):
                    os.close(n)
        if 3 in req.fds:
            os.fchdir(req.fds[3])
        conn.detach()  # closed below with the rest: its object must never close a reused fd
        os.closerange(3, MAX_FD)
        if req.program in LOCAL_PROGRAMS:
            # Its children (brev exec's bash, ssh-agent, ssh) were the caller's process group's,
            # which a caller's timeout kills whole; here they are this group's, which the zygote
            # kills whole when the client goes (see relay).
            os.setpgid(0, 0)
        for sig in signal.valid_signals():
            if sig in (signal.SIGKILL, signal.SIGSTOP):
                continue
            with contextlib.suppress(OSError, ValueError):
                signal.signal(sig, signal.SIG_IGN if sig in req.ignored else signal.SIG_DFL)
        # an interpreter ignores these at start-up, whatever it inherited
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        os.umask(req.umask)
        env = dict(os.fsdecode(e).split("=", 1) for e in req.env if b"=" in e)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = list(req.argv) or [req.program]
        fresh_stdio(env)
        try:
            # Caught SIGINT only from here on: a KeyboardInterrupt anywhere after it (the
            # program's imports included, as in an interpreter) ends below as death by SIGINT.
            # Installed earlier, a SIGINT in between died as exit 1 (a flake under load).
            if signal.SIGINT not in req.ignored:
                signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.pthread_sigmask(signal.SIG_SETMASK, req.blocked)
            module = importlib.import_module(PROGRAMS[req.program])
            code = int(module.main(*req.baked, sys.argv[1:])) & 0xFF
        except SystemExit as e:
            code = exit_code(e)
        except KeyboardInterrupt:
            # as an interpreter does: the traceback, then death by SIGINT (the caller's shell sees it)
            with contextlib.suppress(Exception):
                traceback.print_exc()
                sys.stdout.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            traceback.print_exc()
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads, as at exit
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                code = code or 120  # what an interpreter exits with when the final flush fails
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        os._exit(code)


class Call:
    """One client's call: its connection and worker (pidfd), while either is open."""

    def __init__(self, conn: socket.socket, program: str, pid: int) -> None:
        self.conn = conn
        self.program = program
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)
        self.client_gone = False


def start_call(conn: socket.socket) -> Call | None:
    """Read the request and fork its worker (None: answered already, nothing runs)."""
    conn.settimeout(REQUEST_TIMEOUT_S)
    req = recv_request(conn)
    try:
        if req.program not in PROGRAMS:
            if 2 in req.fds:
                os.write(req.fds[2], f"brevsim zygote: no program {req.program!r}\n".encode())
            conn.sendall(b"exit 127\n")
            return None
        pid = os.fork()
        if pid == 0:
            run_worker(req, conn)
        return Call(conn, req.program, pid)
    finally:
        for fd in req.fds.values():
            os.close(fd)


def relay(call: Call) -> bool:
    """The client sent signal numbers, or went away (False: stop listening to it)."""
    try:
        data = call.conn.recv(64)
    except BlockingIOError:
        return True
    except OSError:
        data = b""
    if not data:
        call.client_gone = True  # as the program would die with its killed process
        with contextlib.suppress(ProcessLookupError):
            os.kill(call.pid, signal.SIGKILL)
        if call.program in LOCAL_PROGRAMS:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(call.pid, signal.SIGKILL)  # and what it started, as a killpg would
        return False
    for sig in data:
        with contextlib.suppress(ProcessLookupError):
            os.kill(call.pid, sig)
    return True


def finish(call: Call) -> None:
    """The worker ended: reap it, then tell the client how (unless it is gone)."""
    ended = os.waitid(os.P_PIDFD, call.pidfd, os.WEXITED)
    os.close(call.pidfd)
    if call.client_gone or ended is None:
        return
    how = "exit" if ended.si_code == os.CLD_EXITED else "signal"  # killed or dumped: the signal
    reply = f"{how} {ended.si_status}\n"
    with contextlib.suppress(OSError):
        call.conn.setblocking(True)
        call.conn.sendall(reply.encode())


def serve(state: str) -> None:
    for module in PROGRAMS.values():
        importlib.import_module(module)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + address(state))
    listener.listen(1024)
    listener.setblocking(False)
    parent = os.getppid()
    # Workers are reaped through their pidfds (waitid): SIGCHLD stays at its default.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the daemon's stop: at once, nothing to save
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()  # what is imported now stays shared with every fork (no collector writes to it)
    sys.stdout.write(f"ready {os.getpid()}\n")
    sys.stdout.flush()
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the daemon stopped reading
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    while True:
        events = sel.select(CHECK_PARENT_S)
        if os.getppid() != parent:
            return  # the daemon died without stopping us
        for key, _ in events:
            try:
                if key.data == "accept":
                    accept_all(listener, sel)
                    continue
                what, call = key.data
                if what == "client" and call.pidfd < 0:
                    continue  # finished in this same round: its pid may be reused already
                if what == "client" and not relay(call):
                    sel.unregister(call.conn)  # closed once its worker is reaped
                elif what == "worker":
                    sel.unregister(call.pidfd)
                    finish(call)
                    call.pidfd = -1
                    if not call.client_gone:
                        sel.unregister(call.conn)
                    call.conn.close()
            except Exception:  # one broken call must not end every other one
                traceback.print_exc()


def accept_all(listener: socket.socket, sel: selectors.BaseSelector) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        try:
            call = start_call(conn)
        except Exception:
            traceback.print_exc()
            conn.close()
            continue
        if call is None:
            conn.close()
            continue
        call.conn.setblocking(False)
        sel.register(call.conn, selectors.EVENT_READ, ("client", call))
        sel.register(call.pidfd, selectors.EVENT_READ, ("worker", call))


def main(state: str, argv: list[str]) -> int:
    serve(state)
    return 0


def start(python: str, state: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the zygote (from the daemon, as a fresh interpreter: never a fork of its threads)."""
    repo = str(Path(__file__).resolve().parents[2])
    code = (
        f"import sys; sys.path.insert(0, {repo!r}); "
        f"from tests.brevsim.zygote import main; sys.exit(main({str(state)!r}, []))"
    )
    return subprocess.Popen(
        [python, "-IS", "-c", code],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,
        cwd="/",
    )


def wait_ready(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.stdout.close()
    if not line.startswith(b"ready"):
        raise RuntimeError(f"the simulator's program zygote failed to start (exit {proc.wait()})")
