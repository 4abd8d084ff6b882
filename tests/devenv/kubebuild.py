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
    bins = ControlPlaneBinaries(out_dir / "kube-apiserver", out_dir / "etcd")
    if not force and bins.kube_apiserver.exists() and bins.etcd.exists():
        return bins
    out_dir.mkdir(parents=True, exist_ok=True)
    # Test workers (pytest-xdist) start their control planes at once: one builds, the others wait
    # for it and find the binaries; two `go build -o` into one .tmp file would corrupt it.
    with (out_dir.parent / f"{out_dir.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not force and bins.kube_apiserver.exists() and bins.etcd.exists():
            return bins
        return _build(k8s, etcd, out_dir, bins)


def _build(k8s: str, etcd: str, out_dir: Path, bins: ControlPlaneBinaries) -> ControlPlaneBinaries:
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain is required to build kube-apiserver; install Go >= 1.26")

    total = time.monotonic()
    _log(
        f"first-time build of kube-apiserver {k8s} and etcd {etcd} from the Go module proxy; "
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
        '\t_ "go.etcd.io/etcd/server/v3"\n)\n'
    )
    _run(["go", "mod", "tidy"], mod_dir, f"resolving {len(staging)} staging modules (go mod tidy)")
    major, minor = k8s.removeprefix("v").split(".")[:2]
    stamp = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamp += [f"-X {pkg}.gitVersion={k8s}", f"-X {pkg}.gitMajor={major}", f"-X {pkg}.gitMinor={minor}"]
    ldflags = "-s -w " + " ".join(stamp)
    tmp_api = out_dir / "kube-apiserver.tmp"
    _run(
        [
            "go",
            "build",
            "-trimpath",
            "-ldflags",
            ldflags,
            "-o",
            str(tmp_api),
            "k8s.io/kubernetes/cmd/kube-apiserver",
        ],
        mod_dir,
        "compiling kube-apiserver",
    )
    tmp_etcd = out_dir / "etcd.tmp"
    _run(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp_etcd), "go.etcd.io/etcd/server/v3"],
        mod_dir,
        "compiling etcd",
    )
    # Rename last so an interrupted build never leaves a half-written binary that looks cached.
    tmp_api.rename(bins.kube_apiserver)
    tmp_etcd.rename(bins.etcd)
    _log(f"control plane binaries ready in {time.monotonic() - total:.0f}s: {out_dir}")
    return bins


def main() -> int:
    bins = build(force="--force" in sys.argv)
    print(bins.kube_apiserver)
    print(bins.etcd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
