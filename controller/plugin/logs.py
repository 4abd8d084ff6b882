"""`kubectl taobrev logs JOB`: the training container's log, live or archived, for anyone who may
`get taobrevjobs/log` in the job's namespace (the built-in view role grants it).

It asks the operator's log API through kube-apiserver (`kubectl get --raw
/apis/logs.taobrev.io/v1alpha1/namespaces/NS/taobrevjobs/JOB/log?...`), so the user needs only
their kubeconfig: no Brev or S3 credentials, no port-forward. A running job's log comes from its
instance (with -f: until the container exits); a finished job's from the archive the upload
saved in S3. The bytes are written as they arrive.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from controller.plugin.kubectl import Kubectl, PluginError, add_connection_flags

LOG_API = "/apis/logs.taobrev.io/v1alpha1"
# After a followed log ends, how long to wait for the operator to record the exit code (it notices
# an exit within seconds).
EXIT_CODE_WAIT_S = 60.0
EXAMPLES = """examples:
  kubectl taobrev logs train-7                  # the log so far (running: from the instance; done: from S3)
  kubectl taobrev logs train-7 -f               # follow until the container exits; exit with its code
  kubectl taobrev logs train-7 --tail 50 --timestamps
  kubectl taobrev logs train-7 --since 10m
  kubectl taobrev logs train-7 --attempt 1      # an earlier attempt's log (if it was archived)
  kubectl taobrev logs chain --step evaluate    # a workflow step's log (running or archived)
  kubectl get --raw '/apis/logs.taobrev.io/v1alpha1/namespaces/ml/taobrevjobs/train-7/log?tailLines=20'

exit codes: 0 the log was served (with -f: the container exited 0); with -f, the container's exit
code when it exited non-zero (1 if it is above 255); 1 an error (kubectl's message: Forbidden,
NotFound, no log yet)."""
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "logs",
        help="print (or follow) a job's training log, live or archived",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", metavar="JOB", help="the TaoBrevJob")
    parser.add_argument(
        "-f", "--follow", action="store_true", help="stream new lines until the container exits"
    )
    parser.add_argument("--attempt", type=int, help="attempt number (default: the latest)")
    parser.add_argument(
        "--step", help="a workflow's step (spec.steps[].name; default: the one running, or the last that ran)"
    )
    parser.add_argument("--tail", type=int, default=-1, help="lines from the end (default: all kept)")
    parser.add_argument("--since", help="only lines newer than this duration (e.g. 30s, 10m, 2h)")
    parser.add_argument("--timestamps", action="store_true", help="prefix each line with its time")
    parser.add_argument("--limit-bytes", type=int, help="stop after this many bytes (the server caps it too)")
    add_connection_flags(parser)
    parser.set_defaults(run=run)


def since_seconds(text: str) -> int:
    """`--since` as kubectl takes it (`90s`, `10m`, `1h30m`) in whole seconds."""
    match = _DURATION.match(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise PluginError(f"--since {text!r} is not a duration: use e.g. 30s, 10m or 1h30m")
    h, m, s = (int(g or 0) for g in match.groups())
    seconds = h * 3600 + m * 60 + s
    if seconds < 1:
        raise PluginError("--since must be at least 1s")
    return seconds


def log_path(namespace: str, name: str, args: argparse.Namespace) -> str:
    query: dict[str, str] = {}
    if args.follow:
        query["follow"] = "true"
    if args.attempt is not None:
        if args.attempt < 1:
            raise PluginError("--attempt must be 1 or more")
        query["attempt"] = str(args.attempt)
    if args.step:
        query["step"] = args.step
    if args.tail is not None and args.tail >= 0:
        query["tailLines"] = str(args.tail)
    if args.since:
        query["sinceSeconds"] = str(since_seconds(args.since))
    if args.timestamps:
        query["timestamps"] = "true"
    if args.limit_bytes is not None:
        if args.limit_bytes < 1:
            raise PluginError("--limit-bytes must be 1 or more")
        query["limitBytes"] = str(args.limit_bytes)
    path = f"{LOG_API}/namespaces/{namespace}/taobrevjobs/{name}/log"
    return f"{path}?{urlencode(query)}" if query else path


def namespace_of(kubectl: Kubectl) -> str:
    if kubectl.namespace:
        return kubectl.namespace
    out = kubectl("config", "view", "--minify", "-o", "jsonpath={..namespace}", namespaced=False).strip()
    return out or "default"


def run(args: argparse.Namespace, kubectl: Kubectl, now: datetime) -> int:
    namespace = namespace_of(kubectl)
    argv = kubectl.argv("get", "--raw", log_path(namespace, args.name, args), namespaced=False)
    sys.stdout.flush()
    # stdout straight through: each line shows as it arrives, whatever its size.
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, check=False)  # noqa: S603 - kubectl, as the user
    except OSError as exc:
        raise PluginError(f"kubectl failed: {exc}") from exc
    except KeyboardInterrupt:
        return 130
    if done.returncode != 0:
        return 1  # kubectl said why on stderr (Forbidden, NotFound, ...)
    if not args.follow:
        return 0
    code = _exit_code(kubectl, args.name, args.attempt, args.step)
    if code is None:
        print("the log ended; the container's exit code is not recorded yet", file=sys.stderr)
        return 0
    print(f"container exited with code {code}", file=sys.stderr)
    return code if 0 <= code <= 255 else 1


def _exit_code(kubectl: Kubectl, name: str, attempt: int | None, step: str | None = None) -> int | None:
    """The attempt's (or workflow step's) exit code from the job's status, once the operator has
    recorded it."""
    deadline = time.monotonic() + EXIT_CODE_WAIT_S
    while True:
        status = kubectl.job(name).get("status") or {}
        if step is not None:
            steps = [s for s in status.get("steps") or [] if isinstance(s, dict) and s.get("name") == step]
            if steps and isinstance(steps[0].get("exitCode"), int):
                return int(steps[0]["exitCode"])
            if status.get("finishedAt") or time.monotonic() > deadline:
                return None
            time.sleep(1.0)
            continue
        attempts = [a for a in status.get("attempts") or [] if isinstance(a, dict)]
        record = next((a for a in attempts if a.get("attempt") == attempt), None) if attempt else None
        record = record or (attempts[-1] if attempts else None)
        run_record = (record or {}).get("run") or {}
        if isinstance(run_record.get("exitCode"), int):
            return int(run_record["exitCode"])
        if status.get("finishedAt") or time.monotonic() > deadline:
            return None
        time.sleep(1.0)
