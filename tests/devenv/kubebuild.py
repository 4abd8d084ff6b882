"""Build kube-apiserver and etcd from the Go module proxy, cached outside the repository.

`go install k8s.io/kubernetes/cmd/kube-apiserver@vX` cannot work (the module points its staging
modules at ./staging with replace lines), so we write a throw-away module that requires
k8s.io/kubernetes and replaces every staging module with its published v0.X.Y tag. The staging
list is read from k8s.io/kubernetes's own go.mod, never hard-coded: a new release adds modules.

The binaries land in ``$TAOBREV_CACHE`` (default ``~/.cache/taobrev-operator``) under a directory
keyed by version; a warm run only checks that they exist.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from controller.versions import load_versions


@dataclass(frozen=True)
class ControlPlaneBinaries:
    kube_apiserver: Path
    etcd: Path
    # Run with only its clusterrole-aggregation controller: the built-in view/edit/admin roles
    # are filled from the aggregate-to-* ClusterRoles by it, as in a real cluster.
    kube_controller_manager: Path

    def all(self) -> tuple[Path, ...]:
        return (self.kube_apiserver, self.etcd, self.kube_controller_manager)


def cache_root() -> Path:
    return Path(os.environ.get("TAOBREV_CACHE", Path.home() / ".cache" / "taobrev-operator"))


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # Nothing but the module proxy is reachable; never let go fetch another toolchain.
    env.setdefault("GOTOOLCHAIN", "local")
    env["CGO_ENABLED"] = "0"
    env["GOFLAGS"] = "-mod=mod"
    return env


def _log(msg: str) -> None:
    print(f"[kubebuild] {msg}", file=sys.stderr, flush=True)


def _heartbeat(what: str, start: float, done: threading.Event, every: float = 20.0) -> None:
    # `go build` prints nothing for minutes; a timer (not go's output) tells a newcomer we are not stuck.
    while not done.wait(every):
        _log(f"  ... {what}: {time.monotonic() - start:.0f}s elapsed")


def _run(cmd: list[str], cwd: Path, what: str) -> str:
    start = time.monotonic()
    _log(f"{what} ...")
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=_go_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    done = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(what, start, done), daemon=True)
    beat.start()
    try:
        output = proc.stdout.read()
        rc = proc.wait()
    except BaseException:
        # Ctrl-C must not leave a go build running in the background.
        proc.kill()
        proc.wait()
        raise
    finally:
        done.set()
        beat.join()
    if rc != 0:
        raise RuntimeError(f"{what} failed (exit {rc}):\n{output[-4000:]}")
    _log(f"{what}: done in {time.monotonic() - start:.0f}s")
    return output


def staging_modules(k8s_version: str, workdir: Path) -> list[str]:
    """Module paths that k8s.io/kubernetes requires at v0.0.0 / replaces with ./staging."""
    out = _run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{k8s_version}"],
        workdir,
        f"downloading k8s.io/kubernetes@{k8s_version} go.mod",
    )
    gomod = Path(json.loads(out[out.index("{") :])["GoMod"]).read_text()
    mods = set(re.findall(r"^\s*(k8s\.io/[\w.\-/]+)\s+v0\.0\.0\s*$", gomod, re.M))
    mods |= set(re.findall(r"^\s*(k8s\.io/[\w.\-/]+)\s+=>\s+\./staging/", gomod, re.M))
    if not mods:
        raise RuntimeError(f"no staging modules found in k8s.io/kubernetes@{k8s_version} go.mod")
    return sorted(mods)


def build(force: bool = False) -> ControlPlaneBinaries:
    versions = load_versions()
    k8s = versions.kubernetes.version
    etcd = versions.kubernetes.etcd_version
    out_dir = cache_root() / f"k8s-{k8s}-etcd-{etcd}"
    bins = ControlPlaneBinaries(
        out_dir / "kube-apiserver", out_dir / "etcd", out_dir / "kube-controller-manager"
    )
    if not force and all(b.exists() for b in bins.all()):
        return bins
    out_dir.mkdir(parents=True, exist_ok=True)
    # Test workers (pytest-xdist) start their control planes at once: one builds, the others wait
    # for it and find the binaries; two `go build -o` into one .tmp file would corrupt it.
    with (out_dir.parent / f"{out_dir.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not force and all(b.exists() for b in bins.all()):
            return bins
        return _build(k8s, etcd, out_dir, bins, force=force)


def _build(
    k8s: str, etcd: str, out_dir: Path, bins: ControlPlaneBinaries, *, force: bool
) -> ControlPlaneBinaries:
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain is required to build kube-apiserver; install Go >= 1.26")

    total = time.monotonic()
    _log(
        f"first-time build of kube-apiserver, kube-controller-manager {k8s} and etcd {etcd} from the "
        "Go module proxy; "
        "this takes several minutes on 2 cores and is cached in " + str(out_dir)
    )
    mod_dir = out_dir / "build-module"
    mod_dir.mkdir(parents=True, exist_ok=True)
    (mod_dir / "go.mod").write_text("module taobrev.local/controlplane\n\ngo 1.26\n")
    staging = staging_modules(k8s, mod_dir)
    staging_ver = "v0." + k8s.removeprefix("v1.")
    lines = [
        "module taobrev.local/controlplane",
        "",
        "go 1.26",
        "",
        "require (",
        f"\tk8s.io/kubernetes {k8s}",
        f"\tgo.etcd.io/etcd/server/v3 {etcd}",
        ")",
        "",
        "replace (",
        *[f"\t{m} => {m} {staging_ver}" for m in staging],
        ")",
        "",
    ]
    (mod_dir / "go.mod").write_text("\n".join(lines))
    (mod_dir / "tools.go").write_text(
        "//go:build tools\n\npackage tools\n\nimport (\n"
        '\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n'
        '\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n'
        '\t_ "go.etcd.io/etcd/server/v3"\n)\n'
    )
    _run(["go", "mod", "tidy"], mod_dir, f"resolving {len(staging)} staging modules (go mod tidy)")
    major, minor = k8s.removeprefix("v").split(".")[:2]
    stamp = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamp += [f"-X {pkg}.gitVersion={k8s}", f"-X {pkg}.gitMajor={major}", f"-X {pkg}.gitMinor={minor}"]
    ldflags = "-s -w " + " ".join(stamp)
    # Each binary only when missing (a cache from before kube-controller-manager keeps the rest);
    # renamed last so an interrupted build never leaves a half-written binary that looks cached.
    commands = {
        bins.kube_apiserver: ("k8s.io/kubernetes/cmd/kube-apiserver", ldflags),
        bins.kube_controller_manager: ("k8s.io/kubernetes/cmd/kube-controller-manager", ldflags),
        bins.etcd: ("go.etcd.io/etcd/server/v3", "-s -w"),
    }
    for binary, (package, flags) in commands.items():
        if binary.exists() and not force:
            continue
        tmp = binary.with_name(binary.name + ".tmp")
        _run(
            ["go", "build", "-trimpath", "-ldflags", flags, "-o", str(tmp), package],
            mod_dir,
            f"compiling {binary.name}",
        )
        tmp.rename(binary)
    _log(f"control plane binaries ready in {time.monotonic() - total:.0f}s: {out_dir}")
    return bins


def main() -> int:
    bins = build(force="--force" in sys.argv)
    for binary in bins.all():
        print(binary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
