"""An operator upgrade on the real control plane: the previous release starts the jobs, this one
takes over mid-run (a rolling update: SIGTERM, then the new process), and nothing is lost. A job
the previous release finished stays finished; a running one is finished by this release on the
instance the previous one created. The status written by one release must keep working under
the next (issue 26): the previous release writes the flat status, this one reads it into
sub-records. The CRD is upgraded with the operator, as a real upgrade does it.

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

from controller.api.status import TaoBrevJobStatus
from tests import status_paths as paths
from tests.devenv.operator import REPO, OperatorProcess
from tests.fixtures.operator import Stack

# The last landed release (stop 36): the flat status, before its sub-records.
PREVIOUS = "f73585a42028f4b4e76cd203ec18422c198f1f8b"


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
            "crds",
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
    """The stack's operator and CRD replaced by the previous release's, with the same settings;
    the test puts this release's back (`upgrade`), and so does the end of the test."""
    current = stack.operator
    current.stop()
    stack.cp.apply_crds(previous_release / "crds")
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
        stack.cp.apply_crds(REPO / "crds")
        stack.operator = current


def upgrade(stack: Stack, releases: Releases) -> None:
    """A rolling update: SIGTERM to the previous release, this release's CRD, then its process."""
    releases.previous.stop()
    stack.cp.apply_crds(REPO / "crds")
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
    # The previous release writes the flat status.
    assert started["instanceName"] and started["instanceId"] and started["containerStartedAt"]
    assert previous.proc is not None
    assert Path(f"/proc/{previous.proc.pid}/cwd").resolve() == previous_release.resolve()
    assert not (previous_release / "controller" / "api" / "status.py").exists(), "the previous release"

    upgrade(stack, releases)
    status = stack.wait_finished("mid-run")

    assert status["outcome"] == "Succeeded", status
    assert "instanceName" not in status, "this release stores the sub-records"
    inst, run = paths.instance(status), paths.run(status)
    assert inst["name"] == started["instanceName"], "the run went on where it was"
    assert inst["id"] == started["instanceId"]
    assert run["startedAt"] == started["containerStartedAt"], "the same run, not a second one"
    assert inst["billedFrom"] == started["attempts"][0]["createRequestedAt"], "billing from the first create"
    assert paths.upload(status)["results"]["objects"] > 0, "the results were uploaded"
    assert stack.sim.created_count() == 2, "one instance per job, none again after the upgrade"
    assert stack.live_instances() == []
    # The job the previous release finished means the same as before: no second run, and its
    # record (billing included) read by this release is the one the previous release wrote.
    after = (stack.get("done-before") or {})["status"]
    assert TaoBrevJobStatus.from_k8s(after).to_k8s() == TaoBrevJobStatus.from_k8s(before).to_k8s()
