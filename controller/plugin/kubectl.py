"""How every `kubectl taobrev` command reaches the cluster: through kubectl itself, with the
user's `--kubeconfig`, `--context` and `-n`, so authentication plugins, proxies and RBAC behave
exactly as for `kubectl get` (the plugin holds no client library and no credentials of its own).

Errors: `PluginError` is said to the user as `error: <message>` and exits 1; kubectl's own text
(`Error from server (NotFound): ...`) is passed through as kubectl printed it. The process runner
is injected (`Runner`), so the unit tests see the exact argv a command sends without running it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

RESOURCE = "taobrevjobs.taobrev.io"


class PluginError(Exception):
    """Said to the user as `error: <message>` (or kubectl's own `Error from server ...`), exit 1."""


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str


# argv, stdin, timeout in seconds -> what the program did.
Runner = Callable[[Sequence[str], str | None, float], Completed]


def run_process(argv: Sequence[str], stdin: str | None, timeout: float) -> Completed:
    try:
        done = subprocess.run(  # noqa: S603 - kubectl from PATH, as kubectl runs its plugins
            list(argv), input=stdin, capture_output=True, text=True, check=False, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PluginError(f"kubectl failed: {exc}") from exc
    return Completed(done.returncode, done.stdout, done.stderr)


def add_connection_flags(parser: argparse.ArgumentParser, *, all_namespaces: bool = False) -> None:
    """kubectl's own flags, with kubectl's meaning (kubectl hands a plugin every argument)."""
    parser.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    if all_namespaces:
        parser.add_argument(
            "-A", "--all-namespaces", action="store_true", help="every namespace you may list"
        )
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--kubeconfig", help="kubeconfig file")


@dataclass
class Kubectl:
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    runner: Runner = run_process

    @classmethod
    def from_args(cls, args: argparse.Namespace, runner: Runner | None = None) -> Kubectl:
        return cls(
            kubeconfig=getattr(args, "kubeconfig", None),
            context=getattr(args, "context", None),
            namespace=getattr(args, "namespace", None),
            runner=runner or run_process,
        )

    def argv(self, *rest: str, namespaced: bool = True) -> list[str]:
        argv = ["kubectl"]
        if self.kubeconfig:
            argv.append(f"--kubeconfig={self.kubeconfig}")
        if self.context:
            argv.append(f"--context={self.context}")
        if namespaced and self.namespace:
            argv.append(f"--namespace={self.namespace}")
        return [*argv, *rest]

    def __call__(
        self, *rest: str, stdin: str | None = None, namespaced: bool = True, timeout: float = 60
    ) -> str:
        done = self.runner(self.argv(*rest, namespaced=namespaced), stdin, timeout)
        if done.returncode != 0:
            raise PluginError(done.stderr.strip() or f"kubectl {' '.join(rest)} exited {done.returncode}")
        return done.stdout

    def json(self, *rest: str, namespaced: bool = True) -> dict[str, Any]:
        out = self(*rest, "-o", "json", namespaced=namespaced)
        try:
            value = json.loads(out)
        except json.JSONDecodeError as exc:
            raise PluginError(f"kubectl {' '.join(rest)} printed no JSON: {out[:200]!r}") from exc
        if not isinstance(value, dict):
            raise PluginError(f"kubectl {' '.join(rest)} printed {type(value).__name__}, not an object")
        return value

    def job(self, name: str) -> dict[str, Any]:
        """One TaoBrevJob (kubectl's NotFound text when there is none)."""
        return self.json("get", RESOURCE, name)

    def jobs(self, *, all_namespaces: bool = False) -> list[dict[str, Any]]:
        """Every TaoBrevJob in the namespace (or in all of them)."""
        if all_namespaces:
            listed = self.json("get", RESOURCE, "--all-namespaces", namespaced=False)
        else:
            listed = self.json("get", RESOURCE)
        return [item for item in listed.get("items") or [] if isinstance(item, dict)]

    def merge_patch(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the object (spec, metadata), as `kubectl patch --type=merge`."""
        return self.json("patch", RESOURCE, name, "--type=merge", "-p", json.dumps(patch, sort_keys=True))
