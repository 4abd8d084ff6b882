"""Where things are inside the TAO container (PURE, data only): the one home of these paths.

The API (`models`) documents them to users (specPath, inputs' paths) and the workload mounts the
job's directories on them; both import from here so they cannot drift apart.
"""

from __future__ import annotations

from typing import Final

WORKSPACE: Final = "/workspace"
# spec/ is mounted read-only; the operator writes spec.yaml there from spec.task.specContent.
SPEC_DIR: Final = f"{WORKSPACE}/spec"
SPEC_MOUNT_PATH: Final = f"{SPEC_DIR}/spec.yaml"
# Inputs staged from S3 land under data/<path>.
DATA_ROOT: Final = f"{WORKSPACE}/data"
# A workflow step reads earlier steps' outputs here, read-only: inputs/<fromStep>/<path>.
INPUTS_ROOT: Final = f"{WORKSPACE}/inputs"
# TAO's results_dir: everything written here is uploaded to spec.data.resultsUri/results.
RESULTS_DIR: Final = f"{WORKSPACE}/results"
# The TAO spec override that resumes training from a checkpoint (a container path).
RESUME_KEY: Final = "train.resume_training_checkpoint_path"


def resume_arg(path: str) -> str:
    return f"{RESUME_KEY}={path}"


def step_container(job: str, step: str) -> str:
    """A workflow step's container on the instance: ``<job id>.<step>`` (the `.` keeps it apart
    from the job's own container and its ``<job id>-ckpt`` checkpoint sync, whatever the step is
    named). Here because the workload runs it and the log API follows it."""
    return f"{job}.{step}"


def container_path(results_relative: str) -> str:
    """`results/train/x.pth` (relative to the job directory) -> `/workspace/results/train/x.pth`."""
    rel = results_relative.removeprefix("./").removeprefix("results/")
    return f"{RESULTS_DIR}/{rel}"
