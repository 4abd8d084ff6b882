"""`BrevCLI` + `Workload` against the Brev simulator's executables (real subprocesses) and a
loopback S3 server: the client must work unchanged against the real CLI, so every behaviour here
is one the real `brev`/`ssh`/`docker` have (tests/brevsim/SIM-CONTRACT.md)."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import shlex
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import structlog

from controller.api.errors import (
    BrevAuthError,
    BrevPermanentError,
    BrevTransientError,
    EntitlementError,
    InstanceAmbiguous,
    InstanceFailedWorkspace,
    InstanceNotFound,
    SpecError,
    TransientError,
)
from controller.brev.cli import BrevCLI, BrevCLISettings, BrevConfigError
from controller.brev.client import BrevCredentials, CreateRequest, Instance
from controller.brev.envfile import S3Credentials
from controller.brev.workload import StageInput, Workload, WorkloadSettings
from controller.versions import load_versions
from tests.brevsim.harness import BrevSim
from tests.devenv.s3 import S3Server
from tests.fixtures.polling import until_async

pytestmark = pytest.mark.integration

TAO = load_versions().images.tao_toolkit.pyt
HANG_GUARD = 120.0  # seconds: only guards against hangs
T = TypeVar("T")
MakeClient = Callable[..., BrevCLI]
LogCapture = pytest.LogCaptureFixture


class CallCounter:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []

    def brev_call(self, verb: str, result: str, seconds: float) -> None:
        self.calls.append((verb, result, seconds))

    def by_verb(self) -> dict[str, int]:
        return dict(sorted(Counter(v for v, _r, _s in self.calls).items()))


@pytest.fixture
def make_client(brev_sim: BrevSim, tmp_path: Path) -> Iterator[Callable[..., BrevCLI]]:
    made: list[BrevCLI] = []

    def make(
        credentials: BrevCredentials | Callable[[], Awaitable[BrevCredentials]] | None = None,
        *,
        recorder: CallCounter | None = None,
        sa_token_path: Path | None = None,
    ) -> BrevCLI:
        client = BrevCLI(
            BrevCLISettings(
                home=brev_sim.home,
                expected_version=load_versions().brev.cli_version,
                sa_token_path=sa_token_path or tmp_path / "no-service-account-token",
            ),
            credentials or BrevCredentials(api_key=BrevSim.API_KEY, org_id=BrevSim.ORG_ID),
            recorder=recorder,
            env=brev_sim.env(),
        )
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


async def running(client: BrevCLI, name: str) -> Instance:
    async def probe() -> Instance | None:
        inst = await client.get_instance(name)
        assert inst is None or inst.status in ("DEPLOYING", "RUNNING"), inst
        return inst if inst is not None and inst.status == "RUNNING" else None

    return await until_async(probe, f"{name} RUNNING")


async def exec_ready(job: Workload) -> bool:
    return await until_async(lambda: job.probe(60), f"exec on {job.instance}")


def brev_argvs(sim: BrevSim, verb: str) -> list[list[str]]:
    return [c.argv for c in sim.calls() if c.program == "brev" and c.argv[:1] == [verb]]


# ---- login ---------------------------------------------------------------------------------------


def test_headless_api_key_login_writes_the_credentials_file_and_never_uses_argv(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    """ensure_login writes ~/.brev/credentials.json (0600) as `brev login --api-key` would, then
    verifies with `brev ls --json`; `brev login` is never run, so the key is in no process table."""
    client = make_client()
    asyncio.run(client.ensure_login())
    creds_path = brev_sim.home / ".brev" / "credentials.json"
    assert json.loads(creds_path.read_text())["api_key"] == BrevSim.API_KEY
    assert creds_path.stat().st_mode & 0o777 == 0o600
    assert brev_argvs(brev_sim, "ls") == [["ls", "--json", "--all"]]
    assert brev_argvs(brev_sim, "login") == []
    assert all(BrevSim.API_KEY not in " ".join(c.argv) for c in brev_sim.calls())
    assert asyncio.run(client.list_instances()) == []  # {"workspaces": null}


def test_auth_eof_leads_to_one_relogin_then_success(brev_sim: BrevSim, make_client: MakeClient) -> None:
    """The seed's rule: an auth EOF (logged-out prompt on /dev/null) -> log in again once, retry once."""
    client = make_client()
    asyncio.run(client.ensure_login())
    brev_sim.set_faults(auth_eof_once=1)
    assert asyncio.run(client.list_instances()) == []
    assert client.relogins == 1
    assert len(brev_argvs(brev_sim, "ls")) == 3  # verify, the EOF, the retry


def test_persistent_auth_failure_raises_brev_auth_error_after_one_retry(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    client = make_client()
    asyncio.run(client.ensure_login())
    brev_sim.set_faults(auth_eof_once=5)
    with pytest.raises(BrevAuthError):
        asyncio.run(client.list_instances())
    assert client.relogins == 1


def test_expired_token_fails_with_a_message_saying_it_expired(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    """An expired JWT is stored as a refresh token (like `brev login --token`), the CLI logs out
    (`malformed refresh token`), one re-login does not help: BrevAuthError naming the expiry."""
    token = brev_sim.mint_access_token(ttl_s=-60)
    client = make_client(BrevCredentials(token=token))
    with pytest.raises(BrevAuthError, match="expired") as info:
        asyncio.run(client.ensure_login())
    assert client.relogins == 1
    assert "EOF" in info.value.cli_message
    assert token not in str(info.value)


def test_token_session_that_expires_mid_run_is_renewed_from_the_secret(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    """Token sessions die with their JWT; the credentials source is read again on re-login, so a
    rotated token in the Secret keeps the operator working."""
    minted: list[str] = []

    async def source() -> BrevCredentials:
        minted.append(brev_sim.mint_access_token(ttl_s=3600))
        return BrevCredentials(token=minted[-1])

    client = make_client(source)
    asyncio.run(client.ensure_login())
    assert len(minted) == 1
    # The simulated clock expires the token (a 0.5 s wall-clock token could expire during a
    # loaded login's own `brev ls`, and a relogin there leaves the count at 2 by luck only).
    brev_sim.advance(3601)
    assert asyncio.run(client.list_instances()) == []
    assert client.relogins == 1
    assert len(minted) == 2


def test_a_mounted_service_account_token_is_refused_with_a_fix(
    brev_sim: BrevSim, make_client: MakeClient, tmp_path: Path
) -> None:
    """The CLI would silently use the pod's SA token as its Brev token: refuse before any call."""
    sa_token = tmp_path / "sa-token"
    sa_token.write_text("eyJhbGciOi.k8s.token")
    client = make_client(sa_token_path=sa_token)
    with pytest.raises(BrevConfigError, match="automountServiceAccountToken"):
        asyncio.run(client.ensure_login())
    assert brev_sim.calls() == []


def test_version_matches_the_pinned_release(make_client: MakeClient) -> None:
    client = make_client()
    assert asyncio.run(client.version()) == load_versions().brev.cli_version
    assert asyncio.run(client.check_version()) is None


# ---- lifecycle -----------------------------------------------------------------------------------


def test_create_uses_long_flags_detached_and_adopts_a_duplicate(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    client = make_client()
    request = CreateRequest(name="tbj-dup", gpu_name="L40S", min_vram=24)
    assert not asyncio.run(client.create_instance(request)).adopted
    assert asyncio.run(client.create_instance(request)).adopted  # a crashed operator's retry
    assert brev_sim.created_count("tbj-dup") == 1
    argv = next(a for a in brev_argvs(brev_sim, "create") if "--help" not in a)
    assert argv == ["create", "tbj-dup", "--detached", "--gpu-name", "L40S", "--min-vram", "24"]


def test_seed_only_create_fields_are_refused_without_calling_create(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    """The installed CLI has no --cloud-cred-id: detected from `brev create --help`, never passed."""
    client = make_client()
    with pytest.raises(SpecError, match="cloudCredId"):
        asyncio.run(client.create_instance(CreateRequest(name="tbj-x", cloud_cred_id="cc-1")))
    assert [a for a in brev_argvs(brev_sim, "create") if "--help" not in a] == []


def test_a_burst_of_first_creates_reads_create_help_once(brev_sim: BrevSim, make_client: MakeClient) -> None:
    """The flags of the installed `brev create` are read once, also when 8 creates start together
    (a burst used to run one `brev create --help` process per create slot)."""
    client = make_client()

    async def burst() -> None:
        await asyncio.gather(
            *(
                client.create_instance(CreateRequest(name=f"tbj-b{i}", types=("g6e.xlarge",)))
                for i in range(8)
            )
        )

    asyncio.run(burst())
    creates = brev_argvs(brev_sim, "create")
    assert sum(1 for a in creates if "--help" in a) == 1
    assert sum(1 for a in creates if "--help" not in a) == 8


def test_capacity_and_server_failures_keep_the_cli_message(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    client = make_client()
    brev_sim.set_faults(capacity=["g6e.xlarge"])
    with pytest.raises(BrevTransientError) as info:
        asyncio.run(client.create_instance(CreateRequest(name="tbj-cap", types=("g6e.xlarge",))))
    assert info.value.reason == "InsufficientCapacity"
    assert "no capacity" in info.value.cli_message
    brev_sim.clear_faults()
    with pytest.raises(BrevPermanentError) as nomatch:
        asyncio.run(client.create_instance(CreateRequest(name="tbj-none", gpu_name="NoSuchGPU")))
    assert "no GPU instances match" in nomatch.value.cli_message
    brev_sim.set_faults(create_fails="internal server error: boom")
    with pytest.raises(BrevTransientError) as failed:
        asyncio.run(client.create_instance(CreateRequest(name="tbj-fail", types=("g6e.xlarge",))))
    assert "boom" in failed.value.cli_message
    assert brev_sim.created_count() == 0


def test_failure_status_is_observed_through_ls(brev_sim: BrevSim, make_client: MakeClient) -> None:
    client = make_client()
    brev_sim.set_faults(failure_status=True)
    asyncio.run(client.create_instance(CreateRequest(name="tbj-f", types=("g6e.xlarge",))))

    async def failed() -> Instance | None:
        inst = await client.get_instance("tbj-f")
        return inst if inst is not None and inst.status == "FAILURE" else None

    assert asyncio.run(until_async(failed, "FAILURE")).name == "tbj-f"


def test_missing_instances_are_instance_not_found_for_delete_and_start(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    """delete is not idempotent; start of a missing name exits 0 with a 'local path' message."""
    client = make_client()
    with pytest.raises(InstanceNotFound):
        asyncio.run(client.delete_instance("tbj-nope"))
    with pytest.raises(InstanceNotFound):
        asyncio.run(client.start_instance("tbj-nope"))
    assert brev_argvs(brev_sim, "delete") == [["delete", "tbj-nope"]]
    assert brev_argvs(brev_sim, "start") == [["start", "tbj-nope", "--detached"]]


def test_start_of_a_running_instance_is_accepted(brev_sim: BrevSim, make_client: MakeClient) -> None:
    brev_sim.add_instance("tbj-up")
    asyncio.run(make_client().start_instance("tbj-up"))


# ---- identities, listings with --all, deletion by id ----------------------------------------------

TEAMMATE = "user-teammate"


def test_a_token_login_lists_teammates_instances_too(brev_sim: BrevSim, make_client: MakeClient) -> None:
    """`ls --json` of a token login shows only its own instances; the client lists with `--all`,
    so an instance created under another identity is never mistaken for gone."""
    theirs = brev_sim.add_instance("tbj-theirs", owner=TEAMMATE)
    client = make_client(BrevCredentials(token=brev_sim.mint_access_token(3600)))
    listed = asyncio.run(client.list_instances())
    assert [(i.name, i.id) for i in listed] == [("tbj-theirs", theirs)]
    assert all(argv == ["ls", "--json", "--all"] for argv in brev_argvs(brev_sim, "ls"))


def test_identity_is_stable_per_login_and_never_holds_the_secret(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    api = asyncio.run(make_client().identity())
    assert api.startswith(f"org-key:{BrevSim.ORG_ID}:")
    assert BrevSim.API_KEY not in api
    assert asyncio.run(make_client().identity()) == api
    mine = make_client(BrevCredentials(token=brev_sim.mint_access_token(3600)))
    assert asyncio.run(mine.identity()) == f"user:{BrevSim.USER_ID}"
    teammate = make_client(BrevCredentials(token=brev_sim.mint_access_token(3600, user_id=TEAMMATE)))
    assert asyncio.run(teammate.identity()) == f"user:{TEAMMATE}"


def test_identity_of_an_opaque_refresh_token_is_the_user_the_cli_refreshed_into(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    refresh = brev_sim.mint_refresh_token(user_id=TEAMMATE)
    client = make_client(BrevCredentials(token=refresh))
    ident = asyncio.run(client.identity())
    assert ident == f"user:{TEAMMATE}"
    assert refresh not in ident


def test_delete_by_id_and_under_the_wrong_identity(brev_sim: BrevSim, make_client: MakeClient) -> None:
    """Deletion addresses the id; a teammate's instance is not found for a token login although
    `ls --all` lists it (only the creating identity can prove an instance gone)."""
    brev_sim.set_speed(1.0)  # DELETING then lasts 30 s of clock: asserted inside that window
    mine = brev_sim.add_instance("tbj-mine")
    theirs = brev_sim.add_instance("tbj-theirs", owner=TEAMMATE)
    client = make_client(BrevCredentials(token=brev_sim.mint_access_token(3600)))
    with pytest.raises(InstanceNotFound):
        asyncio.run(client.delete_instance(theirs))
    asyncio.run(client.delete_instance(mine))
    status = {i.id: i.status for i in asyncio.run(client.list_instances())}
    assert status == {mine: "DELETING", theirs: "RUNNING"}


def test_duplicate_names_are_ambiguous_or_failed_and_ids_still_work(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    first = brev_sim.add_instance("tbj-dup")
    second = brev_sim.add_instance("tbj-dup")
    brev_sim.add_instance("tbj-bad", status="FAILURE")
    brev_sim.add_instance("tbj-bad", status="FAILURE")
    client = make_client()
    with pytest.raises(InstanceAmbiguous):
        asyncio.run(client.delete_instance("tbj-dup"))
    with pytest.raises(InstanceFailedWorkspace):
        asyncio.run(client.delete_instance("tbj-bad"))
    asyncio.run(client.delete_instance(first))
    asyncio.run(client.delete_instance(second))


# ---- ssh_exec and put_file ---------------------------------------------------------------------------

TRICKY = [
    ("printf '%s|' \"a b\" '$HOME' \"it's\" \\$x", "a b|$HOME|it's|$x|"),
    ('echo "$((6*7))" `echo tick` -la --', "42 tick -la --\n"),
    ("printf 'line1\\n'\nprintf '%s\\n' 'line 2'", "line1\nline 2\n"),
    ("echo ok", "ok\n"),
]


def test_ssh_exec_sends_the_command_whole_returns_its_real_status_and_runs_it_once(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    """Quotes, substitutions, newlines and leading dashes reach the remote bash as written; the
    real exit status comes back; a failing command runs once (no `brev exec`, whose recovery
    path runs a failing command a second time)."""
    brev_sim.add_instance("tbj-x")
    client = make_client()

    async def scenario() -> None:
        for command, expected in TRICKY:
            result = await client.ssh_exec("tbj-x", command, timeout=60)
            assert (result.exit_code, result.stdout) == (0, expected), command
        failing = await client.ssh_exec("tbj-x", "echo before; touch ~/ran-$RANDOM; exit 7", timeout=60)
        assert (failing.exit_code, failing.stdout) == (7, "before\n")

    asyncio.run(scenario())
    assert brev_argvs(brev_sim, "exec") == []
    assert len(list(brev_sim.instance_files("tbj-x").glob("ran-*"))) == 1


def test_put_file_delivers_content_on_ssh_stdin_after_refreshing_the_ssh_config(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    """Content never appears in an argv; an alias missing from ~/.brev/ssh_config triggers one
    `brev refresh` and a retry."""
    client = make_client()
    brev_sim.add_instance("tbj-other")
    asyncio.run(client.refresh())  # the ssh config exists, but without the next instance
    brev_sim.add_instance("tbj-put")
    content = b"nvapi-" + secrets.token_hex(12).encode() + b"\n'quotes' $x \x00 end"
    asyncio.run(client.put_file("tbj-put", "~/taobrev/j/secrets/ngc_api_key", content, timeout=60))
    target = brev_sim.instance_files("tbj-put") / "taobrev" / "j" / "secrets" / "ngc_api_key"
    assert target.read_bytes() == content
    assert target.stat().st_mode & 0o777 == 0o600
    assert target.parent.stat().st_mode & 0o777 == 0o700
    assert len(brev_argvs(brev_sim, "refresh")) == 2
    ssh_calls = [c for c in brev_sim.calls() if c.program == "ssh" and "tbj-put" in c.argv]
    assert len(ssh_calls) == 2  # "Could not resolve hostname", then after the refresh
    assert ssh_calls[-1].stdin_bytes == len(content)
    assert all(content[:20].decode() not in " ".join(c.argv) for c in brev_sim.calls())


def test_an_instance_that_vanishes_mid_run_disappears_from_the_listing(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    client = make_client()
    brev_sim.set_speed(1.0)  # the RUNNING window is then 300 s of clock, moved only by advance()
    brev_sim.set_faults(disappear_after_s=300)
    asyncio.run(client.create_instance(CreateRequest(name="tbj-flaky", types=("g6e.xlarge",))))
    brev_sim.advance(120 + 60)
    assert asyncio.run(client.get_instance("tbj-flaky")) is not None
    brev_sim.advance(300)
    assert asyncio.run(client.get_instance("tbj-flaky")) is None


def _prepared_job(sim: BrevSim, client: BrevCLI, name: str, **simulation: Any) -> Workload:
    sim.add_instance(name)
    job = Workload(client, name, f"job-{name}", settings=WorkloadSettings())
    spec = {"simulation": {"epochs": 1, "epoch_seconds": 1, **simulation}}

    asyncio.run(job.write_spec(json.dumps(spec)))
    return job


def test_registry_and_pull_faults_map_onto_the_hierarchy(brev_sim: BrevSim, make_client: MakeClient) -> None:
    """Not entitled -> EntitlementError (stop before GPU time is spent); a network failure while
    pulling -> transient, with docker's own words."""
    job = _prepared_job(brev_sim, make_client(), "tbj-reg")
    brev_sim.set_faults(ngc_entitlement=True)
    with pytest.raises(EntitlementError) as denied:
        asyncio.run(job.pull_image(TAO, ngc_api_key=b"nvapi-k"))
    assert "unauthorized" in denied.value.cli_message
    brev_sim.set_faults(ngc_entitlement=False, pull_fails="net/http: TLS handshake timeout")
    with pytest.raises(TransientError) as pull:
        asyncio.run(job.pull_image(TAO, ngc_api_key=b"nvapi-k"))
    assert "TLS handshake timeout" in pull.value.cli_message


def test_exit_codes_reach_the_caller_training_failure_and_stop(
    brev_sim: BrevSim, make_client: MakeClient
) -> None:
    client = make_client()
    failing = _prepared_job(brev_sim, client, "tbj-fail", exit_code=3)
    long = _prepared_job(brev_sim, client, "tbj-long", epochs=100000)

    async def scenario() -> tuple[int, int | None, int]:
        for job in (failing, long):
            await job.pull_image(TAO, ngc_api_key=b"nvapi-k")
            assert await job.start_container(TAO, "visual_changenet", "train")
        (failed,) = await until_async(lambda: _exited(failing), "failing container exit")
        still = await long.wait_exit(1)
        # A grace the sim's TAO can use on a loaded machine (30 s; the stop returns at the exit):
        # the default 30 nominal s is 0.3 s of wall time, after which SIGKILL makes it 137.
        await long.stop_container(3000)
        (stopped,) = await until_async(lambda: _exited(long), "stopped container exit")
        state = await long.container_state()
        assert state is not None
        assert state.status == "exited"
        assert not state.running
        return failed, still, stopped

    assert asyncio.run(scenario()) == (3, None, 143)


def test_a_failed_upload_is_transient_and_keeps_the_message(
    brev_sim: BrevSim, s3_server: S3Server, make_client: MakeClient
) -> None:
    job = _prepared_job(brev_sim, make_client(), "tbj-up")
    s3_server.create_bucket("h4-upload-fail")
    brev_sim.set_faults(upload_fails="simulated outage")
    with pytest.raises(TransientError) as info:
        asyncio.run(
            job.upload_results(
                "s3://h4-upload-fail/x", s3_server.endpoint_url, credentials=S3Credentials(b"AKIAX", b"sx")
            )
        )
    assert "simulated outage" in info.value.cli_message


# ---- a full job ----------------------------------------------------------------------------------


@dataclass
class FullRun:
    seconds: float
    counts: dict[str, int]
    upload: tuple[int, int]
    results_bucket: str
    secrets: list[str]
    logs: list[str] = field(default_factory=list)


def full_run(sim: BrevSim, s3: S3Server, make_client: MakeClient, caplog: LogCapture) -> FullRun:
    """Create -> exec-ready -> secrets -> registry -> pull -> stage -> run -> exit -> logs ->
    upload (verified) -> remove -> cleanup -> delete -> gone, exactly as the operator sequences it."""
    tag = secrets.token_hex(6)
    ngc_key = f"nvapi-ngc-{tag}"
    s3_key_id, s3_secret = f"AKIA{tag.upper()}", f"s3-secret-{tag}"
    hf_token = f"hf_{tag}"
    s3.create_bucket(f"in-{tag}")
    s3.create_bucket(f"out-{tag}")
    s3.client().put_object(Bucket=f"in-{tag}", Key="ds/train/images.txt", Body=b"img1\nimg2\n")
    counter = CallCounter()
    client = make_client(recorder=counter)
    name, job_id = f"tbj-e2e-{tag}", f"job-{tag}"
    spec = {"simulation": {"epochs": 2, "epoch_seconds": 1}, "train": {"num_epochs": 2}}
    caplog.set_level(logging.DEBUG)

    async def scenario() -> tuple[int, int]:
        assert await client.check_version() is None
        await client.ensure_login()
        created = await client.create_instance(CreateRequest(name=name, gpu_name="L40S"))
        assert not created.adopted
        await running(client, name)
        job = Workload(client, name, job_id, settings=WorkloadSettings())
        await exec_ready(job)
        s3_creds = S3Credentials(s3_key_id.encode(), s3_secret.encode())
        await job.write_spec(json.dumps(spec))
        await job.pull_image(TAO, ngc_api_key=ngc_key.encode())
        staged = await job.stage_inputs(
            [StageInput(f"s3://in-{tag}/ds/train", "train")], s3.endpoint_url, credentials=s3_creds
        )
        assert staged == 1
        assert await job.start_container(
            TAO, "visual_changenet", "train", env={"PUBLIC_FLAG": "1"}, secret_env={"HF_TOKEN": hf_token}
        )
        assert not await job.start_container(TAO, "visual_changenet", "train")  # idempotent
        (code,) = await until_async(lambda: _exited(job), "container exit")
        assert code == 0
        tail = await job.logs(5)
        assert tail[-1].endswith("train finished successfully")
        upload = await job.upload_results(
            f"s3://out-{tag}/runs/{job_id}", s3.endpoint_url, "us-east-1", credentials=s3_creds
        )
        await job.clear()
        assert await job.container_state() is None
        assert not (sim.instance_files(name) / "taobrev" / job_id).exists()
        await client.delete_instance(name)

        async def gone() -> bool:
            return await client.get_instance(name) is None

        await until_async(gone, f"{name} gone")
        return upload

    with structlog.testing.capture_logs() as captured:
        started = time.monotonic()
        upload = asyncio.run(scenario())
        seconds = time.monotonic() - started
    logs = [json.dumps(entry, default=str) for entry in captured] + [r.getMessage() for r in caplog.records]
    values = [ngc_key, s3_secret, s3_key_id, hf_token]
    return FullRun(seconds, counter.by_verb(), upload, f"out-{tag}", values, logs)


async def _exited(job: Workload) -> tuple[int] | None:
    """One bounded `docker wait` (as the operator does); a 1-tuple because exit code 0 is falsy."""
    code = await job.wait_exit(5)
    return None if code is None else (code,)


def test_end_to_end_job_through_the_client(
    brev_sim: BrevSim,
    s3_server: S3Server,
    make_client: MakeClient,
    caplog: LogCapture,
) -> None:
    run = full_run(brev_sim, s3_server, make_client, caplog)
    objects, size = run.upload
    bucket = next(
        b["Name"] for b in s3_server.client().list_buckets()["Buckets"] if b["Name"].startswith("out-")
    )
    listed = s3_server.client().list_objects_v2(Bucket=bucket)["Contents"]
    keys = {o["Key"]: o["Size"] for o in listed}
    assert len(keys) == objects
    assert sum(keys.values()) == size
    assert any(k.endswith("/results/train/status.json") for k in keys)
    log_key = next(k for k in keys if k.endswith("/logs/container.log"))
    log_text = s3_server.client().get_object(Bucket=bucket, Key=log_key)["Body"].read().decode()
    assert "train finished successfully" in log_text
    assert brev_sim.instances() == []
    print(f"\nend-to-end client run: {run.seconds:.2f} s wall, brev/ssh calls by verb: {run.counts}")


def test_no_secret_value_in_any_argv_or_log_line_of_a_full_run(
    brev_sim: BrevSim,
    s3_server: S3Server,
    make_client: MakeClient,
    caplog: LogCapture,
) -> None:
    """Local and remote argv (brev, bash, ssh, docker, aws, tao) and every log line of a full job:
    none holds the NGC key, the S3 keys, the HF token or the Brev API key."""
    run = full_run(brev_sim, s3_server, make_client, caplog)
    values = [*run.secrets, BrevSim.API_KEY]
    calls = brev_sim.calls()
    assert {c.where for c in calls} == {"local", "remote"}
    haystack = [shlex.join(c.argv) for c in calls] + run.logs
    # The scan covers what matters: the remote docker/aws argv and the client's own log lines.
    assert any("--password-stdin" in h for h in haystack)
    assert any(c.program == "aws" for c in calls)
    assert any("brev_call" in line for line in run.logs)
    leaks = [(v, h[:120]) for v in values for h in haystack if v in h]
    assert leaks == []
