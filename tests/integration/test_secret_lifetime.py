"""Secrets live on the instance only while a step needs them (issue 10.2), checked on the
simulated instance's disk: after every step of a job — and after steps that fail — no file in
the instance's home holds a secret value, no secret file is left in the job's secrets/ dir, and
docker's default credential store was never written. That each step really had its secret is
shown by what it did with it (a pull that needs the login, staged and uploaded objects, the
container's environment)."""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

import pytest

from controller.api.errors import EntitlementError, SpecError, TransientError
from controller.brev.cli import BrevCLI
from controller.brev.envfile import S3Credentials
from controller.brev.workload import ImageNotPresent, StageInput, Workload, WorkloadSettings
from controller.versions import load_versions
from tests.brevsim.harness import BrevSim
from tests.devenv.s3 import S3Server

pytestmark = pytest.mark.integration

TAO = load_versions().images.tao_toolkit.pyt
HANG_GUARD = 120.0  # seconds: only guards against hangs


@dataclass(frozen=True)
class Keys:
    ngc: bytes
    s3: S3Credentials
    hf: bytes

    def values(self) -> list[bytes]:
        return [self.ngc, self.s3.access_key_id, self.s3.secret_access_key, self.hf]


@dataclass
class Instance:
    sim: BrevSim
    name: str
    job_id: str
    keys: Keys

    @property
    def home(self) -> Path:
        return self.sim.instance_files(self.name)

    def leftovers(self) -> list[str]:
        """Files on the instance's disk (its home) that hold a secret or are a secret file."""
        found: set[str] = set()
        secrets_dir = self.home / "taobrev" / self.job_id / "secrets"
        if secrets_dir.exists():
            found |= {f"{p.relative_to(self.home)}" for p in secrets_dir.rglob("*") if not p.is_dir()}
        if (self.home / ".docker" / "config.json").exists():
            found.add(".docker/config.json (docker's default credential store)")
        for path in self.home.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                found |= {
                    f"{path.relative_to(self.home)} holds a secret" for v in self.keys.values() if v in data
                }
        return sorted(found)


def _instance(sim: BrevSim, s3: S3Server) -> Instance:
    tag = secrets.token_hex(5)
    keys = Keys(
        ngc=f"nvapi-ngc-{tag}".encode(),
        s3=S3Credentials(f"AKIA{tag.upper()}".encode(), f"s3-secret-{tag}".encode()),
        hf=f"hf_{tag}".encode(),
    )
    s3.create_bucket(f"lifetime-in-{tag}")
    s3.create_bucket(f"lifetime-out-{tag}")
    s3.client().put_object(Bucket=f"lifetime-in-{tag}", Key="ds/train/images.txt", Body=b"img1\nimg2\n")
    name = f"tbj-sec-{tag}"
    sim.add_instance(name)
    return Instance(sim, name, f"job-{tag}", keys)


async def _exit_code(job: Workload) -> int:
    """Bounded `docker wait`s until the container exits (each returns within 5 s)."""
    deadline = asyncio.get_running_loop().time() + HANG_GUARD
    while asyncio.get_running_loop().time() < deadline:
        info = await job.wait_exit_with_tail(5)
        if info.code is not None:
            assert info.finished_at is not None, "an exited container reports its own FinishedAt"
            return info.code
    raise AssertionError("container did not exit")


def test_after_every_step_of_a_job_no_secret_is_left_on_the_instance(
    brev_sim: BrevSim, s3_server: S3Server, sim_client: BrevCLI
) -> None:
    inst = _instance(brev_sim, s3_server)
    tag = inst.job_id.removeprefix("job-")
    keys = inst.keys
    job = Workload(sim_client, inst.name, inst.job_id, settings=WorkloadSettings())
    after: dict[str, list[str]] = {}

    async def scenario() -> tuple[int, int, tuple[int, int]]:
        await job.write_spec(json.dumps({"simulation": {"epochs": 1, "epoch_seconds": 1}}))
        after["write_spec"] = inst.leftovers()
        # A delivery of the key cut short earlier left put_file's temporary file behind.
        cut_short = inst.home / "taobrev" / inst.job_id / "secrets" / "ngc_api_key.tmp-0badc0de"
        cut_short.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        cut_short.write_bytes(keys.ngc[:7])
        # nvcr.io refuses the pull without the login: success shows the key was there.
        await job.pull_image(TAO, ngc_api_key=keys.ngc)
        after["pull_image"] = inst.leftovers()
        staged = await job.stage_inputs(
            [StageInput(f"s3://lifetime-in-{tag}/ds/train", "train")],
            s3_server.endpoint_url,
            credentials=keys.s3,
        )
        after["stage_inputs"] = inst.leftovers()
        assert await job.start_container(TAO, "visual_changenet", "train", secret_env={"HF_TOKEN": keys.hf})
        after["start_container"] = inst.leftovers()
        code = await _exit_code(job)
        after["wait"] = inst.leftovers()
        upload = await job.upload_results(
            f"s3://lifetime-out-{tag}/runs/{inst.job_id}",
            s3_server.endpoint_url,
            "us-east-1",
            credentials=keys.s3,
        )
        after["upload_results"] = inst.leftovers()
        return staged, code, upload

    staged, code, (objects, _size) = asyncio.run(scenario())
    assert after == {step: [] for step in after}
    assert list(after) == [
        "write_spec",
        "pull_image",
        "stage_inputs",
        "start_container",
        "wait",
        "upload_results",
    ]
    # Each step had its secret while it ran: staged and uploaded objects, the container's env.
    assert staged == 1
    assert code == 0
    assert objects > 0
    [container] = brev_sim.containers(inst.name)
    assert f"HF_TOKEN={keys.hf.decode()}" in container["Config"]["Env"]


def test_steps_that_fail_remove_their_secrets_too(
    brev_sim: BrevSim, s3_server: S3Server, sim_client: BrevCLI
) -> None:
    inst = _instance(brev_sim, s3_server)
    keys = inst.keys
    job = Workload(sim_client, inst.name, inst.job_id, settings=WorkloadSettings())
    after: dict[str, list[str]] = {}

    brev_sim.set_faults(ngc_entitlement=True)
    with pytest.raises(EntitlementError):
        asyncio.run(job.pull_image(TAO, ngc_api_key=keys.ngc))
    after["not entitled"] = inst.leftovers()

    brev_sim.set_faults(ngc_entitlement=False, pull_fails="net/http: TLS handshake timeout")
    with pytest.raises(TransientError):
        asyncio.run(job.pull_image(TAO, ngc_api_key=keys.ngc))
    after["pull failed"] = inst.leftovers()

    brev_sim.clear_faults()
    with pytest.raises(SpecError, match="bucket does not exist"):
        asyncio.run(
            job.stage_inputs(
                [StageInput("s3://no-such-bucket/x", "x")], s3_server.endpoint_url, credentials=keys.s3
            )
        )
    after["staging failed"] = inst.leftovers()

    s3_server.create_bucket("up-fails")
    brev_sim.set_faults(upload_fails="simulated outage")
    with pytest.raises(TransientError, match="uploading results"):
        asyncio.run(job.upload_results("s3://up-fails/x", s3_server.endpoint_url, credentials=keys.s3))
    after["upload failed"] = inst.leftovers()

    brev_sim.clear_faults()
    with pytest.raises(ImageNotPresent):
        # The image was never pulled: docker run is not attempted, the env file goes anyway.
        asyncio.run(job.start_container(TAO, "visual_changenet", "train", secret_env={"HF_TOKEN": keys.hf}))
    after["image missing"] = inst.leftovers()

    assert after == {step: [] for step in after}


def test_a_stop_on_an_unreachable_instance_fails_with_a_transient_error_instead_of_hanging(
    brev_sim: BrevSim, s3_server: S3Server, sim_client: BrevCLI
) -> None:
    """Every exec hangs (ssh never answers): the stop gives up after grace + stop_margin."""
    inst = _instance(brev_sim, s3_server)
    job = Workload(sim_client, inst.name, inst.job_id, settings=WorkloadSettings(stop_margin=3))
    brev_sim.set_faults(slow_exec_s=HANG_GUARD * 1000)  # far beyond any timeout at this speed
    with pytest.raises(TransientError) as info:
        asyncio.run(job.stop_container(1))
    # The call was bounded by grace (1 s) + stop_margin (3 s), and the process group killed.
    assert "did not finish within 4 s" in str(info.value)
