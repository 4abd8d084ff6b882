"""An operator upgrade on the real control plane: the previous release starts the jobs, this one
takes over mid-run (a rolling update: SIGTERM, then the new process), and nothing is lost. A job
the previous release finished stays finished; a running one is finished by this release on the
instance the previous one created. The status written by one release must keep working under
the next (issue 26); when the status changes shape, this test is what says the upgrade holds.

The previous release is the last one CI passed, taken from git history (`git archive`): a
shallow clone that lacks it fails here, naming the fix."""

from __future__ import annotations

import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.devenv.operator import REPO, OperatorProcess
from tests.fixtures.operator import Stack

# The last landed release (stop 35), before this one's status field and package tree.
PREVIOUS = "f53456f22971145fcea7a579baad328a8c737acf"


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's operator package and versions.yaml, unpacked from git history."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"], capture_output=True, check=False
    )
    if found.returncode != 0:
        pytest.fail(
            f"commit {PREVIOUS} (the previous release) is not in this clone's history: "
            "a shallow clone? `git fetch --unshallow` (or clone with full history) and run again"
        )
    dest = tmp_path_factory.mktemp("previous-release")
    archive = dest / "release.tar"
    subprocess.run(
        [
            "git",
            "-C",
            str(REPO),
            "archive",
            "--output",
            str(archive),
            PREVIOUS,
            "controller",
            "versions.yaml",
        ],
        check=True,
    )
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return dest


@dataclass(frozen=True)
class Releases:
    previous: OperatorProcess  # running, as the stack's operator
    this: OperatorProcess  # stopped until `upgrade`


@pytest.fixture
def releases(stack: Stack, previous_release: Path) -> Iterator[Releases]:
    """The stack's operator replaced by the previous release's, with the same settings; the test
    puts this release's back (`upgrade`)."""
    current = stack.operator
    current.stop()
    old = OperatorProcess(
        stack.cp,
        stack.sim,
        current.workdir.parent / "previous-operator",
        extra_env=current.extra_env,
        code_dir=previous_release,
    )
    stack.operator = old  # the stack's waits watch the operator that runs
    old.start()
    try:
        yield Releases(previous=old, this=current)
    finally:
        old.stop()
        stack.operator = current


def upgrade(stack: Stack, releases: Releases) -> None:
    """A rolling update: SIGTERM to the previous release, then this release's process."""
    releases.previous.stop()
    stack.operator = releases.this
    releases.this.start()
    releases.this.wait_leading()


def _phase(name: str) -> Any:
    return lambda o: ((o or {}).get("status") or {}).get("phase") == name


def test_a_job_started_by_the_previous_release_is_finished_by_this_one(
    stack: Stack, releases: Releases, previous_release: Path
) -> None:
    previous = releases.previous
    previous.wait_leading()
    stack.apply(stack.job_manifest("done-before"))
    before = stack.wait_finished("done-before")
    assert before["outcome"] == "Succeeded", before
    stack.apply(stack.job_manifest("mid-run", simulation={"epochs": 4, "epoch_seconds": 400}))
    stack.wait_for("mid-run", _phase("Running"), "the previous release to start the run")
    started = (stack.get("mid-run") or {})["status"]
    assert started["instanceName"] and started["instanceId"]
    assert previous.proc is not None
    assert Path(f"/proc/{previous.proc.pid}/cwd").resolve() == previous_release.resolve()
    assert not (previous_release / "controller" / "api").exists(), "the previous layout, not this one"

    upgrade(stack, releases)
    status = stack.wait_finished("mid-run")

    assert status["outcome"] == "Succeeded", status
    assert status["instanceName"] == started["instanceName"], "the run went on where it was"
    assert status["instanceId"] == started["instanceId"]
    assert status["results"]["objects"] > 0, "the results were uploaded"
    assert stack.sim.created_count() == 2, "one instance per job, none again after the upgrade"
    assert stack.live_instances() == []
    # The job the previous release finished is left as it was: no second run, no new status.
    assert (stack.get("done-before") or {})["status"] == before
