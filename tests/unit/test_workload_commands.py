"""The shell commands `Workload` composes (what would run on a real Brev VM), checked against a
recording fake `BrevClient`: quoting, idempotency guards, where secrets go, result parsing."""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from controller.brev.client import CreateRequest, CreateResult, ExecResult, Instance, SearchResult
from controller.brev.workload import (
    ContainerNotFound,
    StageInput,
    Workload,
    WorkloadSettings,
    env_file,
    parse_listing,
    parse_state,
    s3_env_file,
    split_s3_uri,
)
from controller.errors import EntitlementError, SpecError, TransientError

AWS_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.22.35"
TAO_IMAGE = "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt"


@dataclass
class FakeClient:
    """Records every command; `answer` maps a command to its ExecResult (default: success)."""

    answer: Callable[[str], ExecResult] = lambda _cmd: ExecResult(0, "")
    commands: list[str] = field(default_factory=list)
    puts: list[tuple[str, str, bytes, int]] = field(default_factory=list)

    async def exec(self, instance: str, command: str, *, timeout: float) -> ExecResult:  # noqa: ASYNC109
        self.commands.append(command)
        return self.answer(command)

    async def put_file(
        self,
        instance: str,
        remote_path: str,
        content: bytes,
        *,
        mode: int = 0o600,
        timeout: float,  # noqa: ASYNC109
    ) -> None:
        self.puts.append((instance, remote_path, content, mode))

    async def ensure_login(self) -> None: ...
    async def version(self) -> str:
        return "v0"

    async def list_instances(self) -> Sequence[Instance]:
        return []

    async def get_instance(self, name: str) -> Instance | None:
        return None

    async def create_instance(self, request: CreateRequest) -> CreateResult:
        return CreateResult(request.name, False)

    async def delete_instance(self, name: str) -> None: ...
    async def start_instance(self, name: str) -> None: ...
    async def refresh(self) -> None: ...
    async def search(
        self, *, gpu_name: str | None = None, min_vram: float | None = None
    ) -> Sequence[SearchResult]:
        return []


def _fake(rc: int, out: str) -> FakeClient:
    return FakeClient(answer=lambda _c: ExecResult(rc, out))


def _job(client: FakeClient) -> Workload:
    return Workload(client, "tbj-inst", "job-1234abcd", settings=WorkloadSettings(aws_cli_image=AWS_IMAGE))


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def _words(command: str) -> list[str]:
    """Shell words of a command (the way the remote shell tokenises it, $HOME left unexpanded)."""
    return shlex.split(command.replace('"$HOME"', "HOME"))


def test_probe_is_a_two_word_command_and_checks_its_output() -> None:
    client = _fake(0, "ok\n")
    assert run(_job(client).probe()) is True
    assert client.commands == ["echo ok"]
    assert run(_job(_fake(0, "")).probe()) is False


def test_secrets_go_through_put_file_into_the_job_secrets_dir_with_mode_0600() -> None:
    client = FakeClient()
    run(_job(client).deliver_secrets({"ngc_api_key": b"nvapi-SECRET", "s3.env": b"A=B\n"}))
    assert [(p, m) for _i, p, _c, m in client.puts] == [
        ("~/taobrev/job-1234abcd/secrets/ngc_api_key", 0o600),
        ("~/taobrev/job-1234abcd/secrets/s3.env", 0o600),
    ]
    assert client.commands == []


@pytest.mark.parametrize("name", ["../x", "a/b", ".", "", "-x"])
def test_secret_file_names_cannot_escape_the_secrets_dir(name: str) -> None:
    with pytest.raises(SpecError):
        run(_job(FakeClient()).deliver_secrets({name: b"x"}))


def test_registry_login_reads_the_key_from_the_file_on_stdin() -> None:
    client = FakeClient()
    run(_job(client).registry_login())
    [command] = client.commands
    words = _words(command)
    assert words[:2] == ["DOCKER_CONFIG=HOME/taobrev/job-1234abcd/secrets/docker", "docker"]
    assert words[2:8] == ["login", "nvcr.io", "--username", "$oauthtoken", "--password-stdin", "<"]
    assert words[8] == "HOME/taobrev/job-1234abcd/secrets/ngc_api_key"
    assert "'$oauthtoken'" in command, "the literal user name must not be expanded by the remote shell"


def test_registry_refusal_is_an_entitlement_error_with_the_registry_message() -> None:
    msg = "Error response from daemon: Get https://nvcr.io/v2/: unauthorized: authentication required"
    client = _fake(1, msg)
    with pytest.raises(EntitlementError) as info:
        run(_job(client).verify_entitlement(TAO_IMAGE))
    assert "unauthorized" in info.value.cli_message
    assert "manifest inspect" in client.commands[0]


def test_unknown_image_is_a_spec_error_and_network_trouble_is_transient() -> None:
    with pytest.raises(SpecError):
        run(_job(_fake(1, "manifest unknown: manifest unknown")).pull(TAO_IMAGE))
    with pytest.raises(TransientError):
        run(_job(_fake(1, "dial tcp: i/o timeout")).pull(TAO_IMAGE))


def test_pull_skips_an_image_already_present() -> None:
    client = FakeClient()
    run(_job(client).pull(TAO_IMAGE))
    [command] = client.commands
    assert command.startswith(f"docker image inspect {TAO_IMAGE} >/dev/null 2>&1 || ")
    assert f"docker pull {TAO_IMAGE}" in command


def test_start_container_is_guarded_and_quotes_every_element() -> None:
    client = _fake(0, "0123abcd\n")
    started = run(
        _job(client).start_container(
            TAO_IMAGE,
            "classification_pyt",
            "train",
            gpus=2,
            env={"PLAIN": "a b 'c' $d"},
            args=["train.num_epochs=3", "x=$(rm -rf /)"],
        )
    )
    assert started is True
    [command] = client.commands
    assert "if docker inspect job-1234abcd >/dev/null 2>&1; then" in command
    run_part = command[command.index("docker run -d") :].rsplit(" 2>&1; fi", 1)[0]
    words = _words(run_part)
    assert words[:9] == [
        "docker", "run", "-d", "--name", "job-1234abcd", "--label", "tao-job=job-1234abcd", "--gpus", "2",
    ]  # fmt: skip
    assert "--env-file" in words and words[words.index("--env-file") + 1].endswith("secrets/container.env")
    assert "PLAIN=a b 'c' $d" in words
    image_at = words.index(TAO_IMAGE)
    assert words[image_at:] == [
        TAO_IMAGE,
        "classification_pyt",
        "train",
        "-e",
        "/workspace/spec/spec.yaml",
        "results_dir=/workspace/results",
        "train.num_epochs=3",
        "x=$(rm -rf /)",
    ]
    assert "HOME/taobrev/job-1234abcd/results:/workspace/results" in words


def test_start_container_reports_an_existing_container_as_not_started() -> None:
    client = _fake(0, "TAOBREV_CONTAINER_EXISTS\n")
    assert run(_job(client).start_container(TAO_IMAGE, "a", "train")) is False
    conflict = (
        'docker: Error response from daemon: Conflict. The container name "/job-1234abcd" is already in use'
    )
    assert run(_job(_fake(125, conflict)).start_container(TAO_IMAGE, "a", "b")) is False


def test_wait_exit_is_bounded_and_maps_timeout_to_still_running() -> None:
    client = _fake(124, "")
    assert run(_job(client).wait_exit(30)) is None
    assert client.commands == ["timeout 30 docker wait job-1234abcd 2>&1"]
    assert run(_job(_fake(0, "3\n")).wait_exit(30)) == 3
    with pytest.raises(ContainerNotFound):
        run(
            _job(
                FakeClient(
                    answer=lambda _c: ExecResult(1, "Error response from daemon: No such container: x")
                )
            ).wait_exit(5)
        )


def test_wait_with_tail_returns_code_and_log_lines_from_one_bounded_call() -> None:
    """One brev call: the bounded wait, then the log tail — while running and after the exit."""
    client = _fake(124, "__taobrev_log_tail__\nEpoch 2/5 loss 0.4\n")
    assert run(_job(client).wait_exit_with_tail(30, 20)) == (None, ["Epoch 2/5 loss 0.4"])
    (cmd,) = client.commands
    assert cmd.startswith("timeout 30 docker wait job-1234abcd 2>&1; rc=$?;")
    assert "docker logs --tail 20 job-1234abcd" in cmd and cmd.endswith("exit $rc")
    done = _fake(0, "3\n__taobrev_log_tail__\nEpoch 1/5\nExecution failed with exit code 3\n")
    assert run(_job(done).wait_exit_with_tail(30, 20)) == (
        3,
        ["Epoch 1/5", "Execution failed with exit code 3"],
    )
    missing = _fake(1, "Error response from daemon: No such container: job-1234abcd\n__taobrev_log_tail__\n")
    with pytest.raises(ContainerNotFound):
        run(_job(missing).wait_exit_with_tail(5, 20))


def test_container_state_parses_docker_state_json() -> None:
    state = {
        "Status": "exited",
        "Running": False,
        "ExitCode": 0,
        "StartedAt": "2026-01-01T00:00:00Z",
        "FinishedAt": "2026-01-01T00:10:00Z",
        "OOMKilled": False,
        "Error": "",
        "Pid": 0,
    }
    client = FakeClient(answer=lambda _c: ExecResult(0, json.dumps(state) + "\n"))
    parsed = run(_job(client).container_state())
    assert parsed == parse_state(json.dumps(state))
    assert client.commands == ["docker inspect --format '{{json .State}}' job-1234abcd 2>&1"]
    gone = _fake(1, "Error: No such object: job-1234abcd")
    assert run(_job(gone).container_state()) is None


def test_stage_inputs_copies_each_prefix_with_the_aws_cli_image_and_counts_files() -> None:
    client = _fake(0, "TAOBREV_STAGED 4\n")
    count = run(
        _job(client).stage_inputs(
            [StageInput("s3://bkt/data/train/", "train")], "http://127.0.0.1:9000", "us-east-1"
        )
    )
    assert count == 4
    [command] = client.commands
    words = _words(command)
    at = words.index("run")
    assert words[at - 1 : at + 4] == [
        "docker",
        "run",
        "--rm",
        "--env-file",
        "HOME/taobrev/job-1234abcd/secrets/s3.env",
    ]
    tail = words[words.index(AWS_IMAGE) :]
    assert tail[:5] == [AWS_IMAGE, "--endpoint-url", "http://127.0.0.1:9000", "--region", "us-east-1"]
    assert tail[5:10] == ["s3", "cp", "s3://bkt/data/train/", "/job/data/train", "--recursive"]


def test_stage_inputs_rejects_empty_prefixes_and_escaping_paths() -> None:
    with pytest.raises(SpecError, match="holds no objects"):
        run(_job(_fake(0, "TAOBREV_STAGED 0\n")).stage_inputs([StageInput("s3://b/x", "x")]))
    for bad in ("../x", "/abs", "a/../b", "a b"):
        with pytest.raises(SpecError, match="inputs"):
            run(_job(FakeClient()).stage_inputs([StageInput("s3://b/x", bad)]))
    with pytest.raises(SpecError, match="s3://"):
        run(_job(FakeClient()).stage_inputs([StageInput("http://b/x", "x")]))


def _upload_answer(local: dict[str, int], remote: list[list[object]] | None) -> Callable[[str], ExecResult]:
    def answer(command: str) -> ExecResult:
        if "list-objects-v2" in command:
            lines = "".join(f"F\t{size}\t{path}\n" for path, size in local.items())
            return ExecResult(0, lines + "TAOBREV_LISTING\n" + json.dumps(remote) + "\n")
        return ExecResult(0, "")

    return answer


def test_upload_saves_logs_copies_both_dirs_and_verifies_sizes() -> None:
    local = {"results/model.pth": 100, "results/status.json": 20, "logs/container.log": 7}
    remote = [["p/r/results/model.pth", 100], ["p/r/results/status.json", 20], ["p/r/logs/container.log", 7]]
    client = FakeClient(answer=_upload_answer(local, remote))
    assert run(_job(client).upload_results("s3://bkt/p/r/", "http://127.0.0.1:1", None)) == (3, 127)
    upload, verify = client.commands
    assert "docker logs job-1234abcd >" in upload and "logs/container.log" in upload
    assert "s3 cp /job/results s3://bkt/p/r/results --recursive" in upload
    assert "s3 cp /job/logs s3://bkt/p/r/logs --recursive" in upload
    assert "--bucket bkt --prefix p/r/" in verify


def test_upload_verification_fails_on_a_missing_or_short_object() -> None:
    local = {"results/model.pth": 100}
    for remote in ([["p/results/model.pth", 99]], [], None):
        with pytest.raises(TransientError, match="verification"):
            run(_job(FakeClient(answer=_upload_answer(local, remote))).upload_results("s3://bkt/p"))


def test_cleanup_and_remove_verify_the_result() -> None:
    client = FakeClient()
    run(_job(client).remove_container())
    run(_job(client).cleanup())
    remove, cleanup = client.commands
    assert (
        remove == "docker rm -f job-1234abcd >/dev/null 2>&1; ! docker inspect job-1234abcd >/dev/null 2>&1"
    )
    assert cleanup.endswith('test ! -e "$HOME"/taobrev/job-1234abcd')


def test_no_secret_value_reaches_any_command_string() -> None:
    secrets = {"ngc_api_key": b"nvapi-NGCSECRET", "s3.env": s3_env_file("AKIAKEY", "S3SECRET", region="r")}
    secrets["container.env"] = env_file({"HF_TOKEN": "hf_SECRET"})
    client = FakeClient(answer=_upload_answer({}, []))
    job = _job(client)

    async def everything() -> None:
        await job.deliver_secrets(secrets)
        await job.write_spec("a: 1\n")
        await job.registry_login()
        await job.verify_entitlement(TAO_IMAGE)
        await job.pull(TAO_IMAGE)
        await job.start_container(TAO_IMAGE, "arch", "train", env={"PUBLIC": "1"})
        await job.upload_results("s3://b/p", "http://127.0.0.1:1", "r")
        await job.cleanup()

    run(everything())
    joined = "\n".join(client.commands)
    for value in ("NGCSECRET", "S3SECRET", "AKIAKEY", "hf_SECRET"):
        assert value not in joined


def test_env_files_refuse_values_docker_cannot_carry() -> None:
    assert env_file({"A": "x y=z"}) == b"A=x y=z\n"
    with pytest.raises(SpecError, match="multi-line"):
        env_file({"A": "x\ny"})
    with pytest.raises(SpecError, match="invalid"):
        env_file({"A-B": "x"})


def test_s3_uri_split_and_listing_parse() -> None:
    assert split_s3_uri("s3://b/a/b/") == ("b", "a/b")
    assert split_s3_uri("s3://b") == ("b", "")
    local, remote = parse_listing("F\t3\tresults/a b\nTAOBREV_LISTING\nnull\n")
    assert local == {"results/a b": 3}
    assert remote == {}


def test_job_ids_must_be_container_names() -> None:
    with pytest.raises(SpecError):
        Workload(FakeClient(), "i", "bad name", settings=WorkloadSettings(aws_cli_image=AWS_IMAGE))
