"""The local dev environment: ``python -m tests.devenv {up,down,status,demo}``.

``up`` starts each component in the background (they outlive this command) under
``$TAOBREV_DEVENV_DIR`` (default ``~/.cache/taobrev-operator/devenv``); ``status`` and ``down``
find them again through the state each component writes there. New components (e.g. an S3
server for the demo) implement ``Component`` and join ``COMPONENTS``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tests.devenv.controlplane import ControlPlane, ControlPlaneError, proc_memory_kib

REPO_ROOT = Path(__file__).resolve().parents[2]


def default_devenv_dir() -> Path:
    override = os.environ.get("TAOBREV_DEVENV_DIR")
    if override:
        return Path(override)
    return Path.home() / ".cache" / "taobrev-operator" / "devenv"


@dataclass(frozen=True)
class Status:
    running: bool
    detail: str


class Component(Protocol):
    name: str

    def up(self, devenv_dir: Path) -> list[str]:
        """Start (or keep) the component; return lines for the user (stdout)."""
        ...

    def status(self, devenv_dir: Path) -> Status: ...

    def down(self, devenv_dir: Path) -> None: ...


class ControlPlaneComponent:
    """etcd + kube-apiserver, with the repository's CRDs installed."""

    name = "controlplane"

    def _workdir(self, devenv_dir: Path) -> Path:
        return devenv_dir / self.name

    def _load(self, devenv_dir: Path) -> ControlPlane | None:
        try:
            return ControlPlane.load(self._workdir(devenv_dir))
        except ControlPlaneError:
            return None

    def up(self, devenv_dir: Path) -> list[str]:
        cp = self._load(devenv_dir)
        if cp is not None and all(cp.processes_running().values()) and cp.healthy():
            note = f"already running at {cp.server}"
        else:
            if cp is not None:  # half-dead leftovers: clear them before starting fresh
                cp.stop()
            cp = ControlPlane.start(self._workdir(devenv_dir), detach=True)
            note = f"started at {cp.server} (ready in {cp.start_seconds:.1f}s)"
        crds = sorted((REPO_ROOT / "crds").glob("*.yaml"))
        for crd in crds:
            cp.apply_crds(crd)
        installed = ", ".join(p.name for p in crds) if crds else "none found in crds/"
        return [
            f"control plane {note}",
            f"CRDs installed: {installed}",
            f"kubeconfig: {cp.kubeconfig} (contexts: admin [default], operator [no RBAC bindings])",
            f"export KUBECONFIG={cp.kubeconfig}",
        ]

    def status(self, devenv_dir: Path) -> Status:
        cp = self._load(devenv_dir)
        if cp is None:
            return Status(False, f"not running (no state in {self._workdir(devenv_dir)})")
        running = cp.processes_running()
        parts = []
        for proc, pid in cp.pids.items():
            if running[proc]:
                mem = proc_memory_kib(pid)
                parts.append(f"{proc} pid {pid} rss {mem.get('VmRSS', 0) // 1024} MiB")
            else:
                parts.append(f"{proc} pid {pid} NOT RUNNING")
        healthy = all(running.values()) and cp.healthy()
        health = "healthy (/readyz ok)" if healthy else "UNHEALTHY (/readyz not ok)"
        return Status(healthy, f"{health} at {cp.server}; {'; '.join(parts)}; kubeconfig {cp.kubeconfig}")

    def down(self, devenv_dir: Path) -> None:
        cp = self._load(devenv_dir)
        if cp is not None:
            cp.stop()


class KeptDemoComponent:
    """What ``demo --keep`` left running: its operator, S3 server and own control plane.

    Only ``demo`` starts it; ``status`` and ``down`` find it through the ``demo.json`` the demo
    writes, in ``<dir>/demo`` (the demo's default) or in ``<dir>`` itself (``demo --dir <dir>``).
    """

    name = "demo"

    def _dirs(self, devenv_dir: Path) -> list[Path]:
        return [d for d in (devenv_dir, devenv_dir / "demo") if (d / "demo.json").is_file()]

    def up(self, devenv_dir: Path) -> list[str]:
        return []  # `python -m tests.devenv demo --keep` starts it, with a job to run

    def status(self, devenv_dir: Path) -> Status:
        dirs = self._dirs(devenv_dir)
        if not dirs:
            # Nothing kept is the normal case, not a failure of the environment.
            return Status(True, "none kept (`python -m tests.devenv demo --keep` keeps one)")
        demo = _demo_module()
        results = [demo.kept_status(d) for d in dirs]
        return Status(
            all(ok for ok, _ in results),
            "; ".join(f"{d}: {text}" for d, (_, text) in zip(dirs, results, strict=True)),
        )

    def down(self, devenv_dir: Path) -> None:
        for d in self._dirs(devenv_dir):
            _demo_module().stop_kept(d)


# Started in this order, stopped in reverse (the kept demo's operator before any control plane).
COMPONENTS: list[Component] = [ControlPlaneComponent(), KeptDemoComponent()]


def _up(devenv_dir: Path) -> int:
    devenv_dir.mkdir(parents=True, exist_ok=True)
    for comp in COMPONENTS:
        for line in comp.up(devenv_dir):
            print(f"{comp.name}: {line}" if not line.startswith("export ") else line)
    print(f"stop everything with: python -m tests.devenv down   (state in {devenv_dir})")
    return 0


def _status(devenv_dir: Path) -> int:
    ok = True
    for comp in COMPONENTS:
        st = comp.status(devenv_dir)
        ok = ok and st.running
        print(f"{comp.name}: {st.detail}")
    return 0 if ok else 1


def _down(devenv_dir: Path) -> int:
    for comp in reversed(COMPONENTS):
        comp.down(devenv_dir)
        print(f"{comp.name}: stopped")
    return 0


def _demo_module() -> Any:
    # The demo pulls in the simulator, the operator launcher and boto3: import it only when needed.
    return importlib.import_module("tests.devenv.demo")


def _demo(argv: list[str]) -> int:
    return int(_demo_module().main(argv))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["demo"]:
        return _demo(args[1:])
    parser = argparse.ArgumentParser(
        prog="python -m tests.devenv",
        description="Local dev environment: a real kube-apiserver + etcd (and demo services) on loopback.",
    )
    parser.add_argument(
        "command",
        choices=["up", "status", "down", "demo"],
        help="up: start in the background; status: show what runs; down: stop; demo: run the sample job",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="state directory (default: $TAOBREV_DEVENV_DIR or ~/.cache/taobrev-operator/devenv)",
    )
    ns, rest = parser.parse_known_args(args)
    if ns.command == "demo":
        return _demo(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    devenv_dir = (ns.dir or default_devenv_dir()).resolve()
    try:
        if ns.command == "up":
            return _up(devenv_dir)
        if ns.command == "status":
            return _status(devenv_dir)
        return _down(devenv_dir)
    except ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
