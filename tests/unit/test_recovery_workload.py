"""The checkpoint sync and restore commands (issue 12): one short call that reports the previous
detached sync and starts the next, the S3 keys only in a file the command's EXIT trap removes,
and the latest checkpoint found by epoch number."""

from __future__ import annotations

import asyncio

import pytest

from controller.api.container_paths import container_path, resume_arg
from controller.api.errors import TransientError
from controller.brev.client import ExecResult
from controller.brev.workload import parse_restore_report, parse_sync_report
from tests.unit.fake_exec import FakeClient
from tests.unit.test_workload_commands import CREDS, _job, _trap_removes

URI = "s3://bucket/out"


def _sync(out: str, rc: int = 0) -> tuple[FakeClient, object]:
    client = FakeClient(answer=lambda _c: (rc, out))
    report = asyncio.run(
        _job(client).sync_checkpoints(URI, "http://s3.local:9000", "us-east-1", credentials=CREDS)
    )
    return client, report


def test_sync_starts_a_detached_named_copy_of_results_to_checkpoints_with_keys_only_in_a_trapped_file() -> (
    None
):
    client, report = _sync("TAOBREV_SYNC_NONE\nTAOBREV_SYNC_STARTED\n")
    (command,) = client.commands
    assert "docker run -d --name job-1234abcd-ckpt" in command
    assert "s3 sync /job/results s3://bucket/out/checkpoints/job-1234abcd --only-show-errors" in command
    # No .pth but the whole ones the shell names in "$@" (never *_latest.pth, never a link).
    assert "--no-follow-symlinks --exclude '*.pth' \"$@\"" in command
    assert ":/job/results:ro" in command
    assert _trap_removes(command) == ["HOME/taobrev/job-1234abcd/secrets/s3.env"]
    for secret in (b"AKIAKEY", b"S3SECRET"):
        assert secret.decode() not in command
    (put,) = client.puts
    assert put[1].endswith("/secrets/s3.env")
    assert report == parse_sync_report(ExecResult(0, "TAOBREV_SYNC_NONE\nTAOBREV_SYNC_STARTED\n"))


def test_a_finished_sync_reports_what_it_copied_and_a_failed_one_its_log() -> None:
    ok = parse_sync_report(
        ExecResult(0, "TAOBREV_SYNC_PREV exited 0\nTAOBREV_SYNC_PENDING 12 3\nTAOBREV_SYNC_STARTED\n")
    )
    assert ok.state == "ok"
    assert ok.epoch == 3
    assert ok.objects == 12
    assert ok.started
    failed = parse_sync_report(
        ExecResult(
            0,
            "TAOBREV_SYNC_PREV exited 1\nTAOBREV_SYNC_LOG upload failed: SlowDown\n"
            "TAOBREV_SYNC_PENDING 4 -\nTAOBREV_SYNC_STARTED\n",
        )
    )
    assert failed.state == "failed"
    assert "SlowDown" in failed.message
    assert failed.epoch is None


def test_a_sync_still_copying_is_left_alone() -> None:
    report = parse_sync_report(ExecResult(0, "TAOBREV_SYNC_RUNNING\n"))
    assert report.state == "running"
    assert not report.started


def test_a_sync_that_could_not_start_is_a_transient_failure() -> None:
    with pytest.raises(TransientError, match="checkpoint sync"):
        parse_sync_report(ExecResult(1, "TAOBREV_SYNC_NONE\ndocker: Error response from daemon\n"))


def test_restore_copies_its_own_results_and_checkpoints_then_names_the_latest_epoch() -> None:
    out = "TAOBREV_RESTORED 9\nTAOBREV_LATEST 010 results/train/model_epoch_010.pth\n"
    client = FakeClient(answer=lambda _c: (0, out))
    got = asyncio.run(_job(client).restore_checkpoints(URI, None, "us-east-1", credentials=CREDS))
    (command,) = client.commands
    assert "s3 sync s3://bucket/out/results /job/results" in command
    assert "s3 sync s3://bucket/out/checkpoints/job-1234abcd /job/results" in command
    assert command.index("out/results /job") < command.index("out/checkpoints/job-1234abcd /job")
    # results/ only when the owner mark an upload left names this job (scenario 11).
    assert "s3 cp s3://bucket/out/logs/taobrev-job /job/owner/job" in command
    owner_check = command.index("= job-1234abcd ]; then")
    assert command.index("logs/taobrev-job") < owner_check < command.index("out/results /job")
    assert _trap_removes(command) == ["HOME/taobrev/job-1234abcd/secrets/s3.env"]
    assert got.epoch == 10
    assert got.objects == 9
    assert got.latest == "results/train/model_epoch_010.pth"
    assert container_path(got.latest) == "/workspace/results/train/model_epoch_010.pth"


def test_a_restore_report_names_the_newer_checkpoints_it_passed_over() -> None:
    got = parse_restore_report(
        "TAOBREV_RESTORED 4\nTAOBREV_UNREADABLE results/train/model_epoch_004.pth\n"
        "TAOBREV_LATEST 3 results/train/model_epoch_003.pth\n"
    )
    assert (got.epoch, got.latest) == (3, "results/train/model_epoch_003.pth")
    assert got.unreadable == ("results/train/model_epoch_004.pth",)


def test_a_restore_that_finds_nothing_names_no_checkpoint() -> None:
    got = parse_restore_report("TAOBREV_RESTORED 0\nTAOBREV_LATEST\n")
    assert got.latest is None
    assert got.epoch is None
    assert got.objects == 0


def test_a_failed_restore_is_transient() -> None:
    client = FakeClient(answer=lambda _c: (1, "fatal error: Could not connect to the endpoint URL"))
    with pytest.raises(TransientError, match="restoring checkpoints"):
        asyncio.run(_job(client).restore_checkpoints(URI, None, None, credentials=CREDS))


def test_the_resume_override_is_taos_key_value_form() -> None:
    assert (
        resume_arg("/workspace/results/train/model_epoch_003.pth")
        == "train.resume_training_checkpoint_path=/workspace/results/train/model_epoch_003.pth"
    )
