"""Checkpoint sync and restore (issue 12) for real: the workload's commands through the real CLI
client against the brev simulator (bash, docker and the aws-cli image as it runs there) and
moto S3. The sync is detached (one short call per interval), its report comes at the next call,
the S3 keys never stay on disk, and a second instance restores the latest checkpoint."""

from __future__ import annotations

import asyncio
import json
import secrets

import pytest

from controller.brev.cli import BrevCLI
from controller.brev.envfile import S3Credentials
from controller.brev.workload import RestoreReport, SyncReport, Workload, WorkloadSettings
from controller.versions import load_versions
from tests.brevsim.harness import BrevSim
from tests.brevsim.tao import checkpoint_bytes, checkpoint_text
from tests.devenv.s3 import S3Server

pytestmark = pytest.mark.integration

TAO = load_versions().images.tao_toolkit.pyt
HANG_GUARD = 120.0  # seconds: only guards against hangs


async def _until_reported(job: Workload, sync: object) -> SyncReport:
    """Calls once per "interval" until the previous sync is reported finished."""
    deadline = asyncio.get_running_loop().time() + HANG_GUARD
    while asyncio.get_running_loop().time() < deadline:
        report = await sync()  # type: ignore[operator]
        assert isinstance(report, SyncReport)
        if report.state in ("ok", "failed"):
            return report
        await asyncio.sleep(0.5)
    raise AssertionError("the checkpoint sync never finished")


def _fresh_bucket(s3_server: S3Server, kind: str) -> tuple[str, S3Credentials, str]:
    """A tag, S3 keys named after it and a new bucket `<kind>-<tag>`, for one test."""
    tag = secrets.token_hex(5)
    keys = S3Credentials(f"AKIA{tag.upper()}".encode(), f"s3-secret-{tag}".encode())
    bucket = f"{kind}-{tag}"
    s3_server.create_bucket(bucket)
    return tag, keys, bucket


def test_sync_then_restore_on_a_new_instance(
    brev_sim: BrevSim, s3_server: S3Server, sim_client: BrevCLI
) -> None:
    tag = secrets.token_hex(5)
    keys = S3Credentials(f"AKIA{tag.upper()}".encode(), f"s3-secret-{tag}".encode())
    bucket = f"ckpt-{tag}"
    s3_server.create_bucket(bucket)
    uri = f"s3://{bucket}/runs/job-{tag}"
    first, second = f"tbj-ckpt-{tag}", f"tbj-ckpt-{tag}-a2"
    brev_sim.add_instance(first)
    brev_sim.add_instance(second)
    job_id = f"job-{tag}"
    one = Workload(sim_client, first, job_id, settings=WorkloadSettings())
    two = Workload(sim_client, second, job_id, settings=WorkloadSettings())

    async def sync() -> SyncReport:
        return await one.sync_checkpoints(uri, s3_server.endpoint_url, "us-east-1", credentials=keys)

    async def scenario() -> tuple[SyncReport, SyncReport, object]:
        await one.write_spec(json.dumps({"simulation": {"epochs": 3, "epoch_seconds": 1}}))
        await one.pull_image(TAO, ngc_api_key=b"nvapi-fake-ngc")
        assert await one.start_container(TAO, "classification_pyt", "train")
        while (await one.wait_exit_with_tail(5)).code is None:
            pass
        # Real TAO keeps `<arch>_latest.pth` as a symlink to the checkpoint it writes (the
        # simulator's TAO leaves a plain file there): neither is copied.
        train = brev_sim.instance_files(first) / "taobrev" / job_id / "results" / "train"
        (train / "model_latest.pth").unlink()
        (train / "model_latest.pth").symlink_to(train / "model_epoch_003.pth")
        started = await sync()
        finished = await _until_reported(one, sync)
        await one.clear()
        restored = await two.restore_checkpoints(uri, s3_server.endpoint_url, "us-east-1", credentials=keys)
        return started, finished, restored

    started, finished, restored = asyncio.run(scenario())
    assert started.state == "none"
    assert started.started
    assert finished.state == "ok", finished.message
    assert finished.epoch == 3
    keys_in_s3 = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert f"runs/job-{tag}/checkpoints/{job_id}/train/model_epoch_003.pth" in keys_in_s3
    assert not [k for k in keys_in_s3 if k.endswith("_latest.pth")], keys_in_s3  # the link is never copied
    assert restored.epoch == 3  # type: ignore[attr-defined]
    assert restored.latest == "results/train/model_epoch_003.pth"  # type: ignore[attr-defined]
    on_disk = (
        brev_sim.instance_files(second) / "taobrev" / job_id / "results" / "train" / "model_epoch_003.pth"
    )
    assert on_disk.exists()
    # No S3 key is left on either instance's disk, nor in a container's config once removed.
    for name in (first, second):
        home = brev_sim.instance_files(name)
        for path in home.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                assert keys.secret_access_key not in data, path
        for container in brev_sim.containers(name):
            assert keys.secret_access_key.decode() not in json.dumps(container)


def test_a_reused_results_uri_never_resumes_another_jobs_run(
    brev_sim: BrevSim, s3_server: S3Server, sim_client: BrevCLI
) -> None:
    """Issue 25 scenario 11: checkpoints live under the job's own id, and results/ an earlier
    attempt uploaded is restored only when its owner mark names this job."""
    tag, keys, bucket = _fresh_bucket(s3_server, "reuse")
    uri = f"s3://{bucket}/shared-results"
    names = {who: f"tbj-reuse-{tag}-{who}" for who in ("old", "new", "again")}
    for name in names.values():
        brev_sim.add_instance(name)
    old_job, new_job = f"old-{tag}", f"new-{tag}"
    old = Workload(sim_client, names["old"], old_job, settings=WorkloadSettings())
    new = Workload(sim_client, names["new"], new_job, settings=WorkloadSettings())
    again = Workload(sim_client, names["again"], old_job, settings=WorkloadSettings())
    train = brev_sim.instance_files(names["old"]) / "taobrev" / old_job / "results" / "train"
    train.mkdir(parents=True)
    (train / "model_epoch_007.pth").write_bytes(checkpoint_bytes(7))
    s3_server.client().put_object(
        Bucket=bucket, Key="shared-results/checkpoints/train/model_epoch_009.pth", Body=checkpoint_bytes(9)
    )  # where every job's checkpoints went before they were scoped

    async def scenario() -> tuple[RestoreReport, RestoreReport]:
        await old.upload_results(uri, s3_server.endpoint_url, "us-east-1", credentials=keys)
        other = await new.restore_checkpoints(uri, s3_server.endpoint_url, "us-east-1", credentials=keys)
        own = await again.restore_checkpoints(uri, s3_server.endpoint_url, "us-east-1", credentials=keys)
        return other, own

    other, own = asyncio.run(scenario())
    marks = s3_server.client().get_object(Bucket=bucket, Key="shared-results/logs/taobrev-job")
    assert marks["Body"].read().decode().strip() == old_job
    assert other.epoch is None and other.latest is None, other
    assert not (brev_sim.instance_files(names["new"]) / "taobrev" / new_job / "results" / "train").exists()
    assert own.epoch == 7, own
    assert own.latest == "results/train/model_epoch_007.pth"


def test_the_parts_a_killed_sync_left_are_aborted_by_the_next_restore_and_the_final_upload(
    brev_sim: BrevSim, s3_server: S3Server, sim_client: BrevCLI
) -> None:
    """Issue 25 scenario 11: a sync killed mid-copy leaves an incomplete multipart upload (stored
    and billed by S3, in no listing). The next attempt's restore and the final upload abort every
    one under the job's checkpoints/; another job's are left alone."""
    tag, keys, bucket = _fresh_bucket(s3_server, "parts")
    uri = f"s3://{bucket}/runs/job-{tag}"
    job_id = f"job-{tag}"
    s3 = s3_server.client()

    def leave_parts(key: str) -> None:
        upload = s3.create_multipart_upload(Bucket=bucket, Key=key)
        s3.upload_part(Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 1024)

    def pending() -> list[str]:
        return sorted(u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []))

    mine = f"runs/job-{tag}/checkpoints/{job_id}/train/model_epoch_004.pth"
    theirs = f"runs/job-{tag}/checkpoints/other-{tag}/train/model_epoch_009.pth"
    leave_parts(mine)
    leave_parts(theirs)
    name = f"tbj-parts-{tag}"
    brev_sim.add_instance(name)
    job = Workload(sim_client, name, job_id, settings=WorkloadSettings())
    asyncio.run(job.restore_checkpoints(uri, s3_server.endpoint_url, "us-east-1", credentials=keys))
    assert pending() == [theirs]
    leave_parts(mine)
    asyncio.run(job.upload_results(uri, s3_server.endpoint_url, "us-east-1", credentials=keys))
    assert pending() == [theirs]


def test_a_restore_passes_over_a_newest_checkpoint_cut_short_and_resumes_from_the_one_before(
    brev_sim: BrevSim, s3_server: S3Server, sim_client: BrevCLI
) -> None:
    """Issue 25 scenario 11: TAO writes a `.pth` in place, so a sync may copy one cut short (and
    a killed copy leaves one). The restore resumes from the newest whole archive and says which
    newer ones it passed over; resuming from the cut one would fail the run at its first step."""
    tag, keys, bucket = _fresh_bucket(s3_server, "cut")
    uri = f"s3://{bucket}/runs/job-{tag}"
    job_id = f"job-{tag}"
    prefix = f"runs/job-{tag}/checkpoints/{job_id}/train"
    s3 = s3_server.client()
    for epoch in (1, 2):
        key = f"{prefix}/model_epoch_{epoch:03d}.pth"
        s3.put_object(Bucket=bucket, Key=key, Body=checkpoint_bytes(epoch))
    s3.put_object(Bucket=bucket, Key=f"{prefix}/model_epoch_003.pth", Body=checkpoint_bytes(3)[:-40])
    name = f"tbj-cut-{tag}"
    brev_sim.add_instance(name)
    job = Workload(sim_client, name, job_id, settings=WorkloadSettings())
    got = asyncio.run(job.restore_checkpoints(uri, s3_server.endpoint_url, "us-east-1", credentials=keys))
    assert got.latest == "results/train/model_epoch_002.pth", got
    assert got.epoch == 2
    assert got.unreadable == ("results/train/model_epoch_003.pth",)


def test_a_sync_never_copies_a_checkpoint_tao_is_still_writing(
    brev_sim: BrevSim, s3_server: S3Server, sim_client: BrevCLI
) -> None:
    """Issue 25 scenario 11: TAO writes a `.pth` in place (the simulator takes 20 s for it here).
    A sync that looks meanwhile leaves it out (and reports no synced epoch); the next sync, once
    TAO finished it, copies it whole. Before, the sync copied it cut short."""
    tag, keys, bucket = _fresh_bucket(s3_server, "writing")
    uri = f"s3://{bucket}/runs/job-{tag}"
    job_id = f"job-{tag}"
    name = f"tbj-writing-{tag}"
    brev_sim.add_instance(name)
    brev_sim.set_faults(checkpoint_write_s=2000)  # 20 s of real time at the simulator's speed
    job = Workload(sim_client, name, job_id, settings=WorkloadSettings())
    checkpoint = (
        brev_sim.instance_files(name) / "taobrev" / job_id / "results" / "train" / "model_epoch_001.pth"
    )
    s3 = s3_server.client()

    def in_s3() -> dict[str, bytes]:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"runs/job-{tag}/checkpoints/").get("Contents", [])
        return {o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}

    async def sync() -> SyncReport:
        return await job.sync_checkpoints(uri, s3_server.endpoint_url, "us-east-1", credentials=keys)

    async def scenario() -> tuple[SyncReport, dict[str, bytes], SyncReport, dict[str, bytes]]:
        await job.write_spec(json.dumps({"simulation": {"epochs": 1, "epoch_seconds": 1}}))
        await job.pull_image(TAO, ngc_api_key=b"nvapi-fake-ngc")
        assert await job.start_container(TAO, "classification_pyt", "train")
        deadline = asyncio.get_running_loop().time() + HANG_GUARD
        while not checkpoint.exists():  # TAO has begun writing it
            assert asyncio.get_running_loop().time() < deadline, "TAO never began its checkpoint"
            await asyncio.sleep(0.05)
        assert checkpoint_text(checkpoint.read_bytes()) == ""  # cut short while TAO writes it
        await sync()
        during = await _until_reported(job, sync)
        seen_during = in_s3()
        while (await job.wait_exit_with_tail(5)).code is None:
            pass
        await _until_reported(job, sync)
        after = await _until_reported(job, sync)
        await job.clear()
        return during, seen_during, after, in_s3()

    during, seen_during, after, seen_after = asyncio.run(scenario())
    key = f"runs/job-{tag}/checkpoints/{job_id}/train/model_epoch_001.pth"
    cut = {k: len(v) for k, v in seen_during.items() if k.endswith(".pth") and not checkpoint_text(v)}
    assert not cut, f"the sync copied a checkpoint TAO was still writing: {cut}"
    assert during.state == "ok" and during.epoch is None, during
    assert key not in seen_during
    assert after.state == "ok" and after.epoch == 1, after
    assert checkpoint_text(seen_after[key]) == "checkpoint 1\n"
