"""`kubectl taobrev`: the kubectl plugin for TaoBrevJobs (installed as `kubectl-taobrev`, the
package's entry point; kubectl runs any `kubectl-<name>` on PATH and hands it every argument).

    kubectl taobrev get|describe|logs|cost|cancel|suspend|resume|plan ... [-n NS] [--context C]
                    [--kubeconfig F]

Each command is a module here with `register(subparsers)`, which adds its parser(s) and sets
`run(args, kubectl, now) -> exit code`; `COMMANDS` lists them, so a new command is one module and
one line. Every command reaches the cluster through kubectl itself (`kubectl.py`), as the user.

Exit codes: 0 done; 1 error (kubectl's own message when it failed, e.g. a job that does not
exist: `Error from server (NotFound)`; a bad flag). `plan` adds 2: the pre-flight found problems.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import NoReturn

from controller.plugin import cancel, cost, describe, get, logs, plan, suspend
from controller.plugin.kubectl import Kubectl, PluginError, Runner

COMMANDS = (get, describe, logs, cost, cancel, suspend, plan)
EXAMPLES = """examples:
  kubectl taobrev get -A                       # every job: phase, progress, ETA, attempt, cost
  kubectl taobrev describe train-7             # attempts, Events, failure class, results, cost
  kubectl taobrev cost -A --by namespace --since 30d
  kubectl taobrev cancel train-7 --wait        # stop the run, keep the object
  kubectl taobrev plan -f job.yaml             # what a job would do, before it does anything

Every command takes kubectl's -n/--namespace, --context and --kubeconfig; `kubectl taobrev
COMMAND --help` shows its flags, examples and exit codes. Exit codes: 0 ok, 1 error (plan: 2 when
the pre-flight found problems).
"""


class Parser(argparse.ArgumentParser):
    """Usage errors exit 1 with kubectl's wording (argparse's own exit 2 means something else here:
    `plan` found problems)."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"error: {message}\nSee '{self.prog} --help' for usage.\n")


def parser() -> argparse.ArgumentParser:
    top = Parser(
        prog="kubectl taobrev",
        description="TaoBrevJob tools for kubectl.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return top


# kubectl's global flags, which users also put before the command (`kubectl taobrev -n ml get`).
GLOBAL_FLAGS = {"-n": True, "--namespace": True, "--context": True, "--kubeconfig": True, "-A": False,
                "--all-namespaces": False}  # fmt: skip


def command_first(argv: Sequence[str]) -> list[str]:
    """kubectl's flags given before the command, moved after it (each command parses them)."""
    before: list[str] = []
    rest = list(argv)
    while rest and rest[0].startswith("-") and rest[0] not in ("-h", "--help"):
        flag = rest.pop(0)
        before.append(flag)
        if GLOBAL_FLAGS.get(flag) and rest:  # takes a value: `-n ml` (not `--namespace=ml`)
            before.append(rest.pop(0))
        elif flag.split("=", 1)[0] not in GLOBAL_FLAGS:
            return list(argv)  # not one of kubectl's: let argparse say so
    return [*rest[:1], *before, *rest[1:]]


def main(
    argv: Sequence[str] | None = None,
    *,
    runner: Runner | None = None,
    clock: Callable[[], datetime] | None = None,
) -> int:
    """Run one command; `runner` and `clock` stand in for kubectl and the time in tests."""
    args = parser().parse_args(command_first(sys.argv[1:] if argv is None else argv))
    kubectl = Kubectl.from_args(args, runner)
    now = (clock or (lambda: datetime.now(UTC)))()
    try:
        code: int = args.run(args, kubectl, now)
    except PluginError as exc:
        message = str(exc)
        print(message if message.startswith(("Error", "error:")) else f"error: {message}", file=sys.stderr)
        return 1
    return code
