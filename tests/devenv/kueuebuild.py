"""Build kueue-controller-manager from the Go module proxy, cached outside the repository.

sigs.k8s.io/kueue has no replace lines in its go.mod, so a throw-away module that requires it at
the pinned version builds ``cmd/kueue`` with the module's own dependency graph (its go.sum comes
from the proxy's checksums). The manifests the e2e tier applies (CRDs, webhook configuration)
are read from the same module's ``config/`` directory in the Go module cache (``module_dir``),
so the binary and its CRDs are always the same release.

Cached in ``$TAOBREV_CACHE/kueue-<version>/``; a warm run only checks that the binary exists.
"""

from __future__ import annotations

import fcntl
import json
import sys
import time
from pathlib import Path

from controller.versions import load_versions
from tests.devenv.kubebuild import _run as _go_run
from tests.devenv.kubebuild import cache_root

MODULE = "sigs.k8s.io/kueue"


def _log(msg: str) -> None:
    print(f"[kueuebuild] {msg}", file=sys.stderr, flush=True)


def _out_dir(version: str) -> Path:
    return cache_root() / f"kueue-{version}"


def module_dir(version: str | None = None) -> Path:
    """The extracted sigs.k8s.io/kueue module (config/ holds its CRDs and webhook manifests)."""
    version = version or load_versions().kueue.version
    work = _out_dir(version) / "build-module"
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "go.mod").exists():
        (work / "go.mod").write_text("module taobrev.local/kueue\n\ngo 1.26\n")
    out = _go_run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version}"],
        work,
        f"locating {MODULE}@{version} in the module cache",
    )
    return Path(json.loads(out[out.index("{") :])["Dir"])


def build(force: bool = False) -> Path:
    version = load_versions().kueue.version
    out_dir = _out_dir(version)
    binary = out_dir / "kueue-controller-manager"
    if binary.exists() and not force:
        return binary
    out_dir.mkdir(parents=True, exist_ok=True)
    # pytest-xdist workers may all ask at once: one builds, the others wait and find the binary.
    with (out_dir.parent / f"{out_dir.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists() and not force:
            return binary
        start = time.monotonic()
        _log(
            f"first-time build of kueue-controller-manager {version} from the Go module proxy; "
            f"this takes several minutes on 2 cores and is cached in {out_dir}"
        )
        work = out_dir / "build-module"
        work.mkdir(parents=True, exist_ok=True)
        (work / "go.mod").write_text(f"module taobrev.local/kueue\n\ngo 1.26\n\nrequire {MODULE} {version}\n")
        (work / "tools.go").write_text(
            f'//go:build tools\n\npackage tools\n\nimport _ "{MODULE}/cmd/kueue"\n'
        )
        _go_run(["go", "mod", "tidy"], work, f"resolving {MODULE}@{version} (go mod tidy)")
        ldflags = f"-s -w -X {MODULE}/pkg/version.GitVersion={version}"
        tmp = binary.with_name(binary.name + ".tmp")
        _go_run(
            ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), f"{MODULE}/cmd/kueue"],
            work,
            "compiling kueue-controller-manager",
        )
        tmp.rename(binary)  # last, so an interrupted build never looks cached
        _log(f"kueue-controller-manager ready in {time.monotonic() - start:.0f}s: {binary}")
        return binary


def main() -> int:
    print(build(force="--force" in sys.argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
