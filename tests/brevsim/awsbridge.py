"""The aws-cli image: runs the REAL `aws` (awscli from the venv) with container paths mapped.

Arguments that are container paths under a bind mount are rewritten to the sandbox path behind it,
so `aws s3 cp /job/results s3://b/p --recursive` really uploads the instance's files to the
(loopback) S3 endpoint given with --endpoint-url.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from tests.brevsim import faults as knobs
from tests.brevsim.container import host_path
from tests.brevsim.record import record_call
from tests.brevsim.store import Store, read_json


def _is_upload(args: list[str]) -> bool:
    if "s3" not in args:
        return False
    rest = args[args.index("s3") + 1 :]
    positional = [a for a in rest if not a.startswith("-")]
    return bool(positional) and positional[0] in ("cp", "sync", "mv") and positional[-1].startswith("s3://")


# `aws s3 sync` options that take a value (so the value is not a path).
_VALUED = frozenset(
    {
        "--exclude",
        "--include",
        "--endpoint-url",
        "--region",
        "--profile",
        "--storage-class",
        "--acl",
        "--sse",
        "--sse-kms-key-id",
        "--content-type",
        "--cache-control",
        "--page-size",
        "--metadata",
        "--expires",
        "--grants",
        "--output",
        "--query",
        "--color",
    }
)


def checkpoint_sync(args: list[str]) -> str | None:
    """`to` for `aws s3 sync <local> s3://.../checkpoints[/<job>]/`, `from` for the reverse, else None."""
    if "s3" not in args:
        return None
    rest = args[args.index("s3") + 1 :]
    if "sync" not in rest:
        return None
    paths: list[str] = []
    after = rest[rest.index("sync") + 1 :]
    skip = False
    for a in after:
        if skip:
            skip = False
        elif a.startswith("-"):
            skip = a in _VALUED
        else:
            paths.append(a)
    if len(paths) != 2:
        return None
    src, dst = paths
    if dst.startswith("s3://") and _CHECKPOINTS.search(dst):
        return "to"
    if src.startswith("s3://") and _CHECKPOINTS.search(src):
        return "from"
    return None


# `.../checkpoints/` or a job's own `.../checkpoints/<job id>/`.
_CHECKPOINTS = re.compile(r"/checkpoints(/[^/]+)?/?$")


def main(state: str, instance_id: str, mounts: list[dict[str, Any]], rootfs: str, argv: list[str]) -> int:
    store = Store(state)
    meta = read_json(store.instance_dir(instance_id) / "meta.json", {})
    record_call(store.calls_path, "aws", argv, where="remote", instance=meta.get("name"))
    if not argv:
        sys.stderr.write("usage: aws [options] <command> <subcommand> [<subcommand> ...] [parameters]\n")
        return 252
    fault = store.fault("upload_fails")
    if fault and _is_upload(argv):
        positional = [a for a in argv if not a.startswith("-")]
        sys.stderr.write(
            f"upload failed: {positional[-2]} to {positional[-1]} An error occurred (InternalError) "
            "when calling the PutObject operation (reached max retries: 4): "
            f"{fault if isinstance(fault, str) else 'internal error'}\n"
        )
        return 1
    direction = checkpoint_sync(argv)
    if direction == "to" and store.consume_fault_counter("checkpoint_sync_fails"):
        positional = [a for a in argv if not a.startswith("-")]
        sys.stderr.write(
            f"upload failed: {positional[-2]} to {positional[-1]} "
            "An error occurred (SlowDown) when calling the PutObject operation (reached max retries: "
            "4): Please reduce your request rate.\n"
        )
        return 1
    if direction == "from" and knobs.targets(
        store.fault("restore_finds_nothing"), str(meta.get("name")), instance_id
    ):
        return 0  # what `aws s3 sync` of an empty prefix does: nothing printed, exit 0
    if _is_upload(argv):
        # A large checkpoint takes a while to upload; nominal 0 unless a test stretches it.
        time.sleep(store.delay("upload_s", 0.0))
    mapped = [host_path(mounts, rootfs, a) if a.startswith("/") else a for a in argv]
    env = dict(os.environ)
    # The container has no ~/.aws of its own; never read the host's.
    env["AWS_CONFIG_FILE"] = str(Path(rootfs) / "root" / ".aws" / "config")
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(Path(rootfs) / "root" / ".aws" / "credentials")
    env.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    python = str(store.config().get("python") or sys.executable)
    sys.stdout.flush()
    os.execve(python, [python, "-m", "awscli", *mapped], env)  # noqa: S606 - the container program
    return 127  # unreachable
