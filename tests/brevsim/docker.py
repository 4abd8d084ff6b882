"""The `docker` CLI stand-in on a simulated instance (the forms listed in SIM-CONTRACT.md)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.brevsim import container as ct
from tests.brevsim import control
from tests.brevsim import faults as knobs
from tests.brevsim.gotemplate import TemplateError, render, strip_table
from tests.brevsim.model import NOMINAL, instance_delays
from tests.brevsim.record import record_call, record_stdin
from tests.brevsim.store import Store, read_json, write_json
from tests.brevsim.wakeup import Wakeup

WAIT_FULL_EVERY = 5  # `docker wait` without its FIFO: a full check (state, liveness) every 5th poll
WAIT_NAP_S = 0.5  # `docker wait`'s poll while its container's processes live (it wakes on their exit)
WAIT_SAFETY_S = 10.0  # with its FIFO: a full check this often anyway (a missed event is not fatal)
DAEMON_DOWN = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
)


class DockerError(Exception):
    def __init__(self, text: str, code: int = 1) -> None:
        super().__init__(text)
        self.text = text
        self.code = code


def out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def err(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


# -- option parsing (docker uses pflag with SetInterspersed(false) for run) ---------------------
def parse(
    argv: list[str], spec: dict[str, str], *, interspersed: bool = True, cmd: str = ""
) -> tuple[dict[str, Any], list[str]]:
    """spec maps every accepted spelling (`-d`, `--detach`) to a key + kind (`key:bool|str|list`)."""
    opts: dict[str, Any] = {}
    args: list[str] = []
    i = 0

    def put(key_kind: str, value: Any) -> None:
        key, kind = key_kind.split(":")
        if kind == "list":
            opts.setdefault(key, []).append(value)
        else:
            opts[key] = value

    def bad(flag: str) -> DockerError:
        return DockerError(f"unknown flag: {flag}\nSee 'docker {cmd} --help'.", 125 if cmd == "run" else 1)

    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "--":
            args += argv[i:]
            break
        if a.startswith("--"):
            name, eq, val = a.partition("=")
            kk = spec.get(name)
            if kk is None:
                raise bad(name)
            if kk.endswith(":bool"):
                put(kk, val.lower() != "false" if eq else True)
            elif eq:
                put(kk, val)
            elif i < len(argv):
                put(kk, argv[i])
                i += 1
            else:
                raise DockerError(f"flag needs an argument: {name}\nSee 'docker {cmd} --help'.", 125)
        elif a.startswith("-") and len(a) > 1:
            j = 1
            while j < len(a):
                flag = "-" + a[j]
                kk = spec.get(flag)
                if kk is None:
                    raise DockerError(
                        f"unknown shorthand flag: '{a[j]}' in {a}\nSee 'docker {cmd} --help'.", 125
                    )
                if kk.endswith(":bool"):
                    put(kk, True)
                    j += 1
                    continue
                rest = a[j + 1 :].removeprefix("=")
                if rest:
                    put(kk, rest)
                elif i < len(argv):
                    put(kk, argv[i])
                    i += 1
                else:
                    raise DockerError(
                        f"flag needs an argument: '{a[j]}' in {a}\nSee 'docker {cmd} --help'.", 125
                    )
                break
        else:
            args.append(a)
            if not interspersed:
                args += argv[i:]
                break
    return opts, args


RUN_SPEC = {
    "-d": "detach:bool",
    "--detach": "detach:bool",
    "--name": "name:str",
    "-l": "label:list",
    "--label": "label:list",
    "--gpus": "gpus:str",
    "-v": "volume:list",
    "--volume": "volume:list",
    "-e": "env:list",
    "--env": "env:list",
    "--env-file": "env_file:list",
    "-w": "workdir:str",
    "--workdir": "workdir:str",
    "--shm-size": "shm_size:str",
    "--rm": "rm:bool",
    "-i": "interactive:bool",
    "--interactive": "interactive:bool",
    "-t": "tty:bool",
    "--tty": "tty:bool",
    "--ipc": "ipc:str",
    "--ulimit": "ulimit:list",
    "--network": "network:str",
    "--net": "network:str",
    "-u": "user:str",
    "--user": "user:str",
    "--init": "init:bool",
    "--runtime": "runtime:str",
    "-p": "publish:list",
    "--publish": "publish:list",
    "--entrypoint": "entrypoint:str",
    "--pull": "pull:str",
}


# -- images ---------------------------------------------------------------------------------------
def normalize(image: str) -> str:
    last = image.rsplit("/", maxsplit=1)[-1]
    return image if (":" in last or "@" in image) else image + ":latest"


def registry_of(image: str) -> str:
    first = image.split("/", maxsplit=1)[0]
    return first if ("." in first or ":" in first) and "/" in image else "docker.io"


def config_dir(home: Path) -> Path:
    """Like the docker CLI: $DOCKER_CONFIG, else ~/.docker."""
    return Path(os.environ["DOCKER_CONFIG"]) if os.environ.get("DOCKER_CONFIG") else home / ".docker"


def logged_in(home: Path, registry: str) -> bool:
    auths = read_json(config_dir(home) / "config.json", {}).get("auths", {})
    return registry in auths


def check_access(store: Store, home: Path, image: str) -> None:
    """Registry side of manifest/pull: nvcr.io needs a login and (fault) an entitlement."""
    if ct.image_kind(image) is None:
        repo = image.rsplit(":", 1)[0]
        raise DockerError(
            f"Error response from daemon: pull access denied for {repo}, repository does not exist or may "
            "require 'docker login': denied: requested access to the resource is denied"
        )
    if registry_of(image) == "nvcr.io":
        if not logged_in(home, "nvcr.io"):
            raise DockerError("Error response from daemon: unauthorized: authentication required")
        if store.fault("ngc_entitlement"):
            raise DockerError(
                "Error response from daemon: unauthorized: access to the requested resource is not authorized"
            )


def do_pull(store: Store, docker: ct.Docker, image: str, *, stream: Any) -> None:
    image = normalize(image)
    if image in docker.images():
        stream(f"{image.rsplit(':', 1)[1]}: Pulling from {image.split('/', 1)[-1].rsplit(':', 1)[0]}\n")
        stream(f"Digest: sha256:{hashlib.sha256(image.encode()).hexdigest()}\n")
        stream(f"Status: Image is up to date for {image}\n")
        return
    check_access(store, docker.home, image)
    tag = image.rsplit(":", 1)[1]
    repo = image.split("/", 1)[-1].rsplit(":", 1)[0]
    stream(f"{tag}: Pulling from {repo}\n")
    layers = [hashlib.sha256(f"{image}{i}".encode()).hexdigest()[:12] for i in range(4)]
    for layer in layers:
        stream(f"{layer}: Pulling fs layer\n")
    total = 0.0
    if ct.image_kind(image) == "tao":
        inst = store.read()["instances"].get(docker.instance_id) or {}
        total = instance_delays(inst, {"pull_seconds": store.delay("pull_seconds", NOMINAL["pull_seconds"])})[
            "pull_seconds"
        ]
    fails = store.fault("pull_fails")
    for n, layer in enumerate(layers):
        time.sleep(total / len(layers))
        if fails and n == len(layers) // 2:
            raise DockerError(f"Error response from daemon: {fails if isinstance(fails, str) else 'EOF'}")
        stream(f"{layer}: Pull complete\n")
    digest = hashlib.sha256(image.encode()).hexdigest()
    stream(f"Digest: sha256:{digest}\nStatus: Downloaded newer image for {image}\n")
    with docker.lock():
        imgs = docker.images()
        imgs[image] = {
            "Id": "sha256:" + hashlib.sha256(digest.encode()).hexdigest(),
            "Created": ct.iso(),
            "Size": 18_000_000_000 if ct.image_kind(image) == "tao" else 400_000_000,
            "Digest": "sha256:" + digest,
        }
        write_json(docker.images_path, imgs)


def cmd_pull(store: Store, docker: ct.Docker, argv: list[str]) -> int:
    _, args = parse(argv, {"-q": "quiet:bool", "--quiet": "quiet:bool"}, cmd="pull")
    if len(args) != 1:
        raise DockerError("\"docker pull\" requires exactly 1 argument.\nSee 'docker pull --help'.")
    do_pull(store, docker, args[0], stream=out)
    out(normalize(args[0]) + "\n")
    return 0


def cmd_image(store: Store, docker: ct.Docker, argv: list[str]) -> int:
    if not argv or argv[0] not in ("inspect", "ls", "pull"):
        raise DockerError(f"docker: 'image {argv[0] if argv else ''}' is not a docker command.")
    if argv[0] == "pull":
        return cmd_pull(store, docker, argv[1:])
    if argv[0] == "ls":
        return cmd_images(docker, argv[1:])
    opts, args = parse(argv[1:], {"-f": "format:str", "--format": "format:str"}, cmd="image inspect")
    imgs = docker.images()
    found, code = [], 0
    for ref in args:
        img = imgs.get(normalize(ref))
        if img is None:
            err(f"Error: No such image: {ref}\n")
            code = 1
            continue
        found.append(
            {
                "Id": img["Id"],
                "RepoTags": [normalize(ref)],
                "RepoDigests": [f"{normalize(ref).rsplit(':', 1)[0]}@{img['Digest']}"],
                "Created": img["Created"],
                "Size": img["Size"],
                "Architecture": "amd64",
                "Os": "linux",
            }
        )
    if opts.get("format"):
        for obj in found:
            out(render(opts["format"], obj) + "\n")
    else:
        out(json.dumps(found, indent=4) + "\n")
    return code


def cmd_images(docker: ct.Docker, argv: list[str]) -> int:
    out("REPOSITORY                        TAG       IMAGE ID       CREATED         SIZE\n")
    for ref, img in sorted(docker.images().items()):
        repo, tag = ref.rsplit(":", 1)
        out(f"{repo}  {tag}  {img['Id'][7:19]}  About a minute ago  {img['Size'] // 1_000_000}MB\n")
    return 0


def cmd_manifest(store: Store, docker: ct.Docker, argv: list[str]) -> int:
    if not argv or argv[0] != "inspect" or len(argv) < 2:
        raise DockerError("Usage:  docker manifest inspect [OPTIONS] [MANIFEST_LIST] MANIFEST")
    image = normalize(argv[-1])
    check_access(store, docker.home, image)
    digest = hashlib.sha256(image.encode()).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.list.v2+json",
        "manifests": [
            {
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "size": 4712,
                "digest": f"sha256:{digest}",
                "platform": {"architecture": "amd64", "os": "linux"},
            }
        ],
    }
    out(json.dumps(manifest, indent=3) + "\n")
    return 0


def cmd_login(store: Store, docker: ct.Docker, argv: list[str], counter: list[int]) -> int:
    spec = {
        "-u": "username:str",
        "--username": "username:str",
        "-p": "password:str",
        "--password": "password:str",
        "--password-stdin": "stdin:bool",
    }
    opts, args = parse(argv, spec, cmd="login")
    server = args[0] if args else "https://index.docker.io/v1/"
    password = opts.get("password", "")
    if password:
        err("WARNING! Using --password via the CLI is insecure. Use --password-stdin.\n")
    if opts.get("stdin"):
        if password:
            raise DockerError("--password and --password-stdin are mutually exclusive")
        if not opts.get("username"):
            raise DockerError("Must provide --username with --password-stdin")
        data = sys.stdin.buffer.read()
        counter[0] += len(data)
        password = data.decode(errors="replace").removesuffix("\n").removesuffix("\r")
    if not password:
        raise DockerError("Error: Cannot perform an interactive login from a non TTY device")
    if server == "nvcr.io" and opts.get("username") != "$oauthtoken":
        raise DockerError(
            'Error response from daemon: Get "https://nvcr.io/v2/": unauthorized: authentication required'
        )
    cfg_path = config_dir(docker.home) / "config.json"
    cfg_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    cfg = read_json(cfg_path, {})
    token = base64.b64encode(f"{opts.get('username')}:{password}".encode()).decode()
    cfg.setdefault("auths", {})[server] = {"auth": token}
    write_json(cfg_path, cfg)
    cfg_path.chmod(0o600)
    err(
        f"WARNING! Your password will be stored unencrypted in {cfg_path}.\n"
        "Configure a credential helper to remove this warning. See\n"
        "https://docs.docker.com/engine/reference/commandline/login/#credential-stores\n\n"
    )
    out("Login Succeeded\n")
    return 0


# -- containers -----------------------------------------------------------------------------------
def _env_file(path: str, counter: list[int]) -> list[str]:
    try:
        text = Path(path).read_text()
    except OSError:
        raise DockerError(
            f"docker: open {path}: no such file or directory.\nSee 'docker run --help'.", 125
        ) from None
    env = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" in line:
            env.append(line)
        elif line in os.environ:
            env.append(f"{line}={os.environ[line]}")
    return env


def _run_options(opts: dict[str, Any], counter: list[int]) -> dict[str, Any]:
    env: list[str] = []
    for f in opts.get("env_file", []):
        env += _env_file(f, counter)
    for e in opts.get("env", []):
        if "=" in e:
            env.append(e)
        elif e in os.environ:
            env.append(f"{e}={os.environ[e]}")
    labels: dict[str, str] = {}
    for lab in opts.get("label", []):
        k, _, v = lab.partition("=")
        labels[k] = v
    mounts = []
    for vol in opts.get("volume", []):
        parts = vol.split(":")
        if len(parts) < 2 or not parts[0].startswith("/"):
            raise DockerError(
                f'docker: Error response from daemon: create {parts[0]}: "{parts[0]}" '
                "includes invalid characters for a local volume name, "
                'only "[a-zA-Z0-9][a-zA-Z0-9_.-]" are allowed. If you intended to pass a '
                "host directory, use absolute path.\nSee 'docker run --help'.",
                125,
            )
        src, dst = parts[0], parts[1]
        if not Path(src).exists():  # a file mounts as itself (a workflow step's input)
            Path(src).mkdir(parents=True, exist_ok=True)  # dockerd creates a missing bind source
        mounts.append({"Source": src, "Destination": dst, "RW": not (len(parts) > 2 and "ro" in parts[2])})
    gpus = opts.get("gpus", "")
    if gpus:
        env.append(f"NVIDIA_VISIBLE_DEVICES={'all' if gpus == 'all' else gpus}")
    return {
        "env": env,
        "labels": labels,
        "mounts": mounts,
        "workdir": opts.get("workdir", ""),
        "shm_size": opts.get("shm_size", ""),
        "gpus": gpus,
        "rm": bool(opts.get("rm")),
    }


def cmd_run(store: Store, docker: ct.Docker, argv: list[str], counter: list[int]) -> int:
    opts, args = parse(argv, RUN_SPEC, interspersed=False, cmd="run")
    if not args:
        raise DockerError(
            "docker: \"docker run\" requires at least 1 argument.\nSee 'docker run --help'.", 125
        )
    image, cargs = normalize(args[0]), args[1:]
    ro = _run_options(opts, counter)
    if image not in docker.images():
        err(f"Unable to find image '{image}' locally\n")
        try:
            do_pull(store, docker, image, stream=err)
        except DockerError as e:
            raise DockerError("docker: " + e.text + "\nSee 'docker run --help'.", 125) from None
    cid = secrets.token_hex(32)
    name = opts.get("name") or f"sim_{cid[:8]}"
    with docker.lock():
        existing = docker.resolve(name) if opts.get("name") else None
        if existing is not None and (docker.config(existing) or {}).get("Name") == "/" + name:
            raise DockerError(
                "docker: Error response from daemon: Conflict. "
                f'The container name "/{name}" is already in use by container "{existing}". '
                "You have to remove (or rename) that container to be able to reuse that "
                "name.\nSee 'docker run --help'.",
                125,
            )
        d = docker.containers_dir / cid
        d.mkdir(parents=True)
        write_json(d / "config.json", ct.new_config(cid, name, image, cargs, ro))
        write_json(d / "state.json", ct.initial_state())
    python = str(store.config().get("python") or sys.executable)
    log = docker.log_path(cid)
    if opts.get("detach") and ct.image_kind(image) == "tao":
        # A training container mostly sleeps: it runs in the daemon, no OS process of its own.
        try:
            control.request(store.root, "run", instance=docker.instance_id, cid=cid, remove=ro["rm"])
        except control.DaemonDown:
            ct.remove_dir(docker.containers_dir / cid)
            raise DockerError(DAEMON_DOWN, 125) from None
        out(cid + "\n")
        return 0
    if opts.get("detach"):
        shim = ct.bootstrap(
            python,
            "tests.brevsim.container",
            str(store.root),
            docker.instance_id,
            cid,
            "1" if ro["rm"] else "0",
            func="shim_main",
        )
        with log.open("ab") as logf:
            subprocess.Popen(
                shim,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=logf,
                start_new_session=True,
                close_fds=True,
                cwd="/",
            )
        deadline = time.time() + 10
        while time.time() < deadline:
            st = docker.state(cid)
            if st is None or st.get("Status") != "created":
                break
            time.sleep(0.005)
        out(cid + "\n")
        return 0
    # Foreground: this process is the shim; output goes to the terminal and to the log.
    logf = log.open("ab")
    proc = ct.spawn(store, docker.instance_id, cid, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def forward(signum: int, frame: object) -> None:  # --sig-proxy=true
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    lock = threading.Lock()

    def tee(src: Any, dst: Any) -> None:
        while True:
            chunk = os.read(src.fileno(), 65536)
            if not chunk:
                return
            with lock:
                logf.write(chunk)
                logf.flush()
            dst.write(chunk)
            dst.flush()

    threads = [
        threading.Thread(target=tee, args=(proc.stdout, sys.stdout.buffer), daemon=True),
        threading.Thread(target=tee, args=(proc.stderr, sys.stderr.buffer), daemon=True),
    ]
    for t in threads:
        t.start()
    code = ct.supervise(store, docker.instance_id, cid, proc, remove=ro["rm"])
    for t in threads:
        t.join(timeout=5)
    logf.close()
    return code


def _need(docker: ct.Docker, ref: str) -> str:
    cid = docker.resolve(ref)
    if cid is None:
        raise DockerError(f"Error response from daemon: No such container: {ref}")
    return cid


def cmd_inspect(docker: ct.Docker, argv: list[str]) -> int:
    opts, args = parse(
        argv,
        {
            "-f": "format:str",
            "--format": "format:str",
            "--type": "type:str",
            "-s": "size:bool",
            "--size": "size:bool",
        },
        cmd="inspect",
    )
    if not args:
        raise DockerError("\"docker inspect\" requires at least 1 argument.\nSee 'docker inspect --help'.")
    objs, code = [], 0
    for ref in args:
        cid = docker.resolve(ref)
        obj = ct.inspect_object(docker, cid) if cid else None
        if obj is None:
            err(f"Error: No such object: {ref}\n")
            code = 1
            continue
        objs.append(obj)
    if opts.get("format"):
        try:
            for obj in objs:
                out(render(opts["format"], obj) + "\n")
        except TemplateError as e:
            raise DockerError(str(e)) from None
    else:
        out(json.dumps(objs, indent=4) + "\n")
    return code


def _exit_fds(st: dict[str, Any]) -> list[int]:
    """pidfds of the container's live shim and main process: readable the moment either exits."""
    fds = []
    for pid_key, start_key in (("ShimPid", "ShimStart"), ("Pid", "PidStart")):
        pid = int(st.get(pid_key) or 0)
        if ct.alive(pid, st.get(start_key)):
            with contextlib.suppress(OSError):  # gone meanwhile: the state file says the rest
                fds.append(os.pidfd_open(pid))
    return fds


def _close(fds: list[int]) -> list[int]:
    for fd in fds:
        os.close(fd)
    return []


def cmd_wait(docker: ct.Docker, argv: list[str]) -> int:
    _, args = parse(argv, {}, cmd="wait")
    code = 0
    for ref in args:
        cid = _need(docker, ref)
        path = docker.containers_dir / cid / "state.json"
        seen: tuple[int, int, int] | None = None
        polls = 0
        fds: list[int] | None = None  # None: not opened yet; []: a process exited (or none)
        # A waiting `docker wait` must cost next to nothing (one per running job, 1,000 in the
        # footprint bench): it sleeps on the container processes' pidfds and on a FIFO that every
        # state write pokes (wakeup.py); the state file is re-read only when it changed (every
        # write is a rename), polled every 20 ms only once a process exited.
        watch = Wakeup.open(path.parent)
        try:
            while True:
                try:
                    info = path.stat()
                    stamp: tuple[int, int, int] | None = (info.st_ino, info.st_mtime_ns, info.st_size)
                except FileNotFoundError:
                    stamp = None
                polls += 1
                # Sleeping on pidfds + the FIFO needs no periodic full check (bar the safety net);
                # without either, every WAIT_FULL_EVERY-th poll is one (liveness, state).
                periodic = not fds or watch is None
                if stamp == seen and not (periodic and polls % WAIT_FULL_EVERY == 0):
                    if not fds:
                        if watch is not None:
                            _drain_if_ready(watch, 0.02)
                        else:
                            time.sleep(0.02)
                        continue
                    waitables = fds + ([watch.fd] if watch is not None else [])
                    nap = WAIT_NAP_S if watch is None else WAIT_SAFETY_S
                    ready = select.select(waitables, [], [], nap)[0]
                    if set(ready) & set(fds):
                        fds = _close(fds)  # an exit: the state changes within milliseconds now
                    if watch is not None and watch.fd in ready:
                        watch.drain()
                    if watch is not None and not ready:
                        seen = None  # the safety net: a full check now
                    continue
                seen = stamp
                st = docker.state(cid)
                if st is None:
                    out("0\n")  # an --rm container removed itself
                    break
                if st.get("Status") == "exited":
                    out(f"{st.get('ExitCode', 0)}\n")
                    break
                if (
                    st.get("Running")
                    and not ct.alive(int(st.get("ShimPid") or 0), st.get("ShimStart"))
                    and not ct.alive(int(st.get("Pid") or 0), st.get("PidStart"))
                ):
                    docker.set_state(
                        cid, Status="exited", Running=False, ExitCode=137, FinishedAt=ct.iso(), Pid=0
                    )
                    continue
                if fds is None and st.get("Running"):
                    fds = _exit_fds(st)
                    continue
                time.sleep(0.02)
        finally:
            _close(fds or [])
            if watch is not None:
                watch.close()
    return code


def _drain_if_ready(watch: Wakeup, timeout: float) -> None:
    if select.select([watch.fd], [], [], timeout)[0]:
        watch.drain()


def tail_lines(data: bytes, n: int) -> bytes:
    r"""The last n lines as docker counts them: split on `\n` ONLY, so a tqdm run of `\r`-separated
    redraws is one (possibly huge) line; bytes.splitlines would also split on `\r`."""
    if n <= 0:
        return b""
    complete = data.endswith(b"\n")
    lines = data.split(b"\n")
    if complete:
        lines.pop()
    text = b"\n".join(lines[-n:])
    return text + b"\n" if complete else text


def _since_cutoff(text: str, now: float) -> float:
    """docker's --since: a Go duration (`90s`, `10m`, `1h30m`), a Unix time, or an RFC3339 time."""
    text = text.strip()
    if re.fullmatch(r"(\d+(\.\d+)?(ns|us|ms|s|m|h))+", text):
        unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
        total = sum(float(n) * unit[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)(ns|us|ms|s|m|h)", text))
        return now - total
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    try:
        return ct.parse_iso(text)
    except ValueError:
        raise DockerError(
            f'invalid value for "since": failed to parse value as time or duration: "{text}"'
        ) from None


def _stamped_lines(docker: ct.Docker, cid: str, data: bytes) -> list[tuple[str, bytes]]:
    """Each complete-or-partial line with the time docker would print for it (the times file;
    a line written by a process that does not stamp gets the log's modification time)."""
    times_path = docker.log_times_path(cid)
    times = times_path.read_text().split() if times_path.exists() else []
    log = docker.log_path(cid)
    fallback = ct.iso(log.stat().st_mtime) if log.exists() else ct.iso()
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
        ends = [b"\n"] * len(lines)
    else:
        ends = [b"\n"] * (len(lines) - 1) + [b""]
    return [
        (times[i] if i < len(times) else fallback, line + end)
        for i, (line, end) in enumerate(zip(lines, ends, strict=True))
    ]


def cmd_logs(docker: ct.Docker, argv: list[str]) -> int:
    opts, args = parse(
        argv,
        {
            "-n": "tail:str",
            "--tail": "tail:str",
            "-f": "follow:bool",
            "--follow": "follow:bool",
            "-t": "ts:bool",
            "--timestamps": "ts:bool",
            "--since": "since:str",
        },
        cmd="logs",
    )
    if len(args) != 1:
        raise DockerError("\"docker logs\" requires exactly 1 argument.\nSee 'docker logs --help'.")
    cid = _need(docker, args[0])
    path = docker.log_path(cid)
    cutoff = _since_cutoff(str(opts["since"]), time.time()) if opts.get("since") else None
    stamps = bool(opts.get("ts"))

    def shown(data: bytes, first_line: int) -> tuple[bytes, int]:
        """`data` (the log from line `first_line` on) as docker prints it; and the lines used."""
        if not stamps and cutoff is None:
            return data, data.count(b"\n")
        lines = _stamped_lines(docker, cid, data)
        times_path = docker.log_times_path(cid)
        if first_line and times_path.exists():
            times = times_path.read_text().split()[first_line:]
            lines = [(times[i] if i < len(times) else t, line) for i, (t, line) in enumerate(lines)]
        out = [
            ((t.encode() + b" ") if stamps else b"") + line
            for t, line in lines
            if cutoff is None or ct.parse_iso(t) >= cutoff
        ]
        return b"".join(out), data.count(b"\n")

    data = path.read_bytes() if path.exists() else b""
    complete = data[: data.rfind(b"\n") + 1] if opts.get("follow") else data
    text, used = shown(complete, 0)
    tail = str(opts.get("tail", "all"))
    if tail != "all":
        text = tail_lines(text, int(tail))
    sys.stdout.buffer.write(text)
    sys.stdout.flush()
    if opts.get("follow"):
        pos, line_no = len(complete), used
        while True:
            st = docker.state(cid)
            size = path.stat().st_size if path.exists() else 0
            running = st is not None and bool(st.get("Running"))
            if size > pos:
                with path.open("rb") as f:
                    f.seek(pos)
                    chunk = f.read()
                if running:  # whole lines only while it runs: a line is stamped when complete
                    chunk = chunk[: chunk.rfind(b"\n") + 1]
                if chunk:
                    text, used = shown(chunk, line_no)
                    pos, line_no = pos + len(chunk), line_no + used
                    sys.stdout.buffer.write(text)
                    sys.stdout.flush()
                    continue
            if not running:
                break
            time.sleep(0.05)
    return 0


def cmd_stop(store: Store, docker: ct.Docker, argv: list[str]) -> int:
    opts, args = parse(
        argv,
        {"-t": "time:str", "--time": "time:str", "-s": "signal:str", "--signal": "signal:str"},
        cmd="stop",
    )
    grace = float(opts.get("time", 10)) * store.speed
    code = 0
    for ref in args:
        cid = docker.resolve(ref)
        if cid is None:
            err(f"Error response from daemon: No such container: {ref}\n")
            code = 1
            continue
        st = docker.state(cid) or {}
        if st.get("Running"):
            ct.signal_container(
                store,
                docker.instance_id,
                cid,
                {"Pid": st.get("Pid"), "PidStart": st.get("PidStart"), "InProcess": st.get("InProcess")},
                signal.SIGTERM,
            )
            deadline = time.time() + grace
            while time.time() < deadline:
                cur = docker.state(cid)
                if cur is None or not cur.get("Running"):
                    break
                time.sleep(0.02)
            cur = docker.state(cid)
            if cur is not None and cur.get("Running"):
                ct.signal_container(store, docker.instance_id, cid, cur, signal.SIGKILL)
                _wait_exit(docker, cid)
        out(ref + "\n")
    return code


def _wait_exit(docker: ct.Docker, cid: str) -> None:
    deadline = time.time() + 5
    while time.time() < deadline:
        st = docker.state(cid)
        if st is None or not st.get("Running"):
            return
        if not ct.alive(int(st.get("ShimPid") or 0), st.get("ShimStart")):
            docker.set_state(cid, Status="exited", Running=False, ExitCode=137, FinishedAt=ct.iso(), Pid=0)
            return
        time.sleep(0.02)


def cmd_rm(docker: ct.Docker, argv: list[str]) -> int:
    opts, args = parse(
        argv,
        {"-f": "force:bool", "--force": "force:bool", "-v": "volumes:bool", "--volumes": "volumes:bool"},
        cmd="rm",
    )
    code = 0
    for ref in args:
        cid = docker.resolve(ref)
        if cid is None:
            err(f"Error response from daemon: No such container: {ref}\n")
            code = 1
            continue
        st = docker.state(cid) or {}
        if st.get("Running"):
            if not opts.get("force"):
                err(
                    "Error response from daemon: You cannot remove a running container "
                    f"{cid}. Stop the container before attempting removal or force remove\n"
                )
                code = 1
                continue
            ct.signal_container(docker.store, docker.instance_id, cid, st, signal.SIGKILL)
        ct.remove_dir(docker.containers_dir / cid)
        out(ref + "\n")
    return code


def _age(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return "Less than a second" if s < 1 else f"{s} seconds"
    if s < 3600:
        return "About a minute" if s < 120 else f"{s // 60} minutes"
    return f"{s // 3600} hours"


def ps_row(docker: ct.Docker, cid: str) -> dict[str, Any] | None:
    cfg, st = docker.config(cid), docker.state(cid)
    if cfg is None or st is None:
        return None
    now = time.time()
    if st.get("Status") == "running":
        status = f"Up {_age(now - ct.parse_iso(st['StartedAt']))}"
    elif st.get("Status") == "exited":
        status = f"Exited ({st.get('ExitCode')}) {_age(now - ct.parse_iso(st['FinishedAt']))} ago"
    else:
        status = "Created"
    command = " ".join(cfg["Args"])
    return {
        "ID": cid[:12],
        "Names": cfg["Name"].lstrip("/"),
        "Image": cfg["Image"],
        "Status": status,
        "State": st.get("Status"),
        "Command": f'"{command[:20]}…"' if len(command) > 20 else f'"{command}"',
        "CreatedAt": cfg["Created"],
        "Labels": ",".join(f"{k}={v}" for k, v in sorted(cfg["Labels"].items())),
        "Ports": "",
        "_labels": cfg["Labels"],
    }


def _matches(row: dict[str, Any], filters: list[str]) -> bool:
    for f in filters:
        key, _, value = f.partition("=")
        if key == "label":
            k, eq, v = value.partition("=")
            if k not in row["_labels"] or (eq and row["_labels"][k] != v):
                return False
        elif (
            (key == "name" and value not in row["Names"])
            or (key == "status" and row["State"] != value)
            or (key == "id" and not row["ID"].startswith(value[:12]))
        ):
            return False
    return True


def cmd_ps(docker: ct.Docker, argv: list[str]) -> int:
    opts, _ = parse(
        argv,
        {
            "-a": "all:bool",
            "--all": "all:bool",
            "-q": "quiet:bool",
            "--quiet": "quiet:bool",
            "-f": "filter:list",
            "--filter": "filter:list",
            "--format": "format:str",
            "--no-trunc": "notrunc:bool",
        },
        cmd="ps",
    )
    rows = []
    for cid in docker.ids():
        row = ps_row(docker, cid)
        if row is None or (not opts.get("all") and row["State"] != "running"):
            continue
        if _matches(row, opts.get("filter", [])):
            rows.append(row)
    if opts.get("quiet"):
        for r in rows:
            out(r["ID"] + "\n")
        return 0
    fmt = opts.get("format")
    if fmt:
        tmpl, table = strip_table(fmt)
        try:
            for r in rows:
                out(render(tmpl, r) + "\n")
        except TemplateError as e:
            raise DockerError(str(e)) from None
        _ = table
        return 0
    out("CONTAINER ID   IMAGE     COMMAND   CREATED   STATUS    PORTS     NAMES\n")
    for r in rows:
        out(
            f"{r['ID']}   {r['Image']}   {r['Command']}   {r['CreatedAt']}   "
            f"{r['Status']}             {r['Names']}\n"
        )
    return 0


def main(state: str, instance_id: str, argv: list[str]) -> int:
    store = Store(state)
    docker = ct.Docker(store, instance_id)
    meta = read_json(store.instance_dir(instance_id) / "meta.json", {})
    call_id = record_call(store.calls_path, "docker", argv, where="remote", instance=meta.get("name"))
    counter = [0]
    try:
        if not argv:
            out("Usage:  docker [OPTIONS] COMMAND\n")
            return 0
        if knobs.targets(store.fault("docker_dead"), str(meta.get("name")), instance_id):
            # dockerd is dead while sshd and `brev ls` still look fine
            raise DockerError(DAEMON_DOWN)
        verb, rest = argv[0], argv[1:]
        if verb == "container" and rest:
            verb, rest = rest[0], rest[1:]
        handlers = {
            "run": lambda: cmd_run(store, docker, rest, counter),
            "pull": lambda: cmd_pull(store, docker, rest),
            "image": lambda: cmd_image(store, docker, rest),
            "images": lambda: cmd_images(docker, rest),
            "manifest": lambda: cmd_manifest(store, docker, rest),
            "login": lambda: cmd_login(store, docker, rest, counter),
            "inspect": lambda: cmd_inspect(docker, rest),
            "wait": lambda: cmd_wait(docker, rest),
            "logs": lambda: cmd_logs(docker, rest),
            "stop": lambda: cmd_stop(store, docker, rest),
            "kill": lambda: cmd_stop(store, docker, ["-t", "0", *rest]),
            "rm": lambda: cmd_rm(docker, rest),
            "ps": lambda: cmd_ps(docker, rest),
            "ls": lambda: cmd_ps(docker, rest),
        }
        handler = handlers.get(verb)
        if handler is None:
            err(f"docker: '{verb}' is not a docker command.\nSee 'docker --help'\n")
            return 1
        return handler()
    except DockerError as e:
        err(e.text + "\n")
        return e.code
    except BrokenPipeError:
        return 1
    finally:
        record_stdin(store.calls_path, call_id, counter[0])
