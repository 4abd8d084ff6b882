"""`ActionRunner` in-process over a recording fake Brev client: which secret each action delivers,
that the command reading it removes it, the container restart that re-pulls with a fresh login,
and that secret values never show in a repr."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from controller.api.models import TaoBrevJobSpec
from controller.api.spec_parse import parse_spec
from controller.brev.envfile import JobSecrets
from controller.effects.actions import ActionRunner, JobContext
from controller.effects.directory import InstanceDirectory
from controller.effects.lanes import Lanes
from controller.lifecycle.steps import (
    Action,
    Observation,
    PrepareWorkload,
    StartContainer,
    UploadResults,
    WaitForExit,
)
from tests.unit.fake_exec import FakeClient

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
JOB_DIR = "~/taobrev/job-1234abcd"
# spec.task.image has no model default (the CRD and the reconciler supply it): parse() fills it.
TAO_IMAGE = "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt"
SECRETS = JobSecrets(
    ngc_api_key=b"nvapi-NGCSECRET",
    s3_access_key_id=b"AKIAKEYID",
    s3_secret_access_key=b"S3SECRETKEY",
    extra_env={"HF_TOKEN": b"hf_SECRETTOKEN"},
)


def _spec() -> TaoBrevJobSpec:
    doc: dict[str, Any] = {
        "task": {"networkArch": "classification_pyt", "action": "train", "specContent": "train: {}\n"},
        "instance": {"ephemeral": {"gpuName": "L40S"}},
        "data": {"inputs": [{"uri": "s3://tao-data/cats/", "path": "cats"}], "resultsUri": "s3://out/run-1"},
        "credentials": {
            "ngcApiKey": {"name": "ngc"},
            "s3": {"name": "s3"},
            "extraEnv": [{"name": "HF_TOKEN", "secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}}],
        },
    }
    return parse_spec(doc, default_image=TAO_IMAGE)


def _job(secrets: JobSecrets | None = SECRETS) -> JobContext:
    return JobContext("ns", "job", "job-1234abcd", _spec(), secrets)


def _run(client: FakeClient, action: Action, job: JobContext | None = None) -> Observation:
    runner = ActionRunner(client, InstanceDirectory(client), lanes=Lanes.uniform(2))
    return asyncio.run(runner.run([action], job or _job(), Observation(now=NOW)))


def _flow(client: FakeClient) -> list[str]:
    """The call sequence as `put <file>` / `exec <first word after the trap prefix>`."""
    flow = []
    for kind, what in client.events:
        if kind == "put":
            flow.append(f"put {what.removeprefix(JOB_DIR + '/')}")
        else:
            body = what.rsplit("trap 'exit 130' INT; ", 1)[-1]
            flow.append(f"exec {body.split(';')[0].split(' &&')[0]}")
    return flow


def test_secret_values_never_show_in_a_repr() -> None:
    for text in (repr(SECRETS), repr(_job()), str(_job())):
        for value in SECRETS.values():
            assert value.decode() not in text
    assert "extra_env" not in repr(SECRETS)


def test_prepare_delivers_the_key_for_the_pull_and_the_s3_keys_for_staging_each_removed_after() -> None:
    client = FakeClient(answer=lambda c: (0, "TAOBREV_STAGED 0 3\n" if "TAOBREV_STAGED" in c else ""))
    obs = _run(client, PrepareWorkload("tbj-inst"))
    assert obs.failure is None
    assert obs.prepared
    assert _flow(client) == [
        "put spec/spec.yaml",
        "put secrets/ngc_api_key",
        'exec export DOCKER_CONFIG="$HOME"/taobrev/job-1234abcd/secrets/docker',
        "put secrets/s3.env",
        "exec echo TAOBREV_STEP 0",
    ]
    pull, stage = client.commands
    assert "secrets/ngc_api_key" in pull.split(" EXIT;")[0]
    assert "secrets/docker" in pull.split(" EXIT;")[0]
    assert "secrets/s3.env" in stage.split(" EXIT;")[0]
    assert "container.env" not in " ".join(path for _i, path, _c, _m in client.puts)


def test_start_delivers_the_secret_env_only_for_docker_run() -> None:
    client = FakeClient(answer=lambda _c: (0, "0123abcd\n"))
    obs = _run(client, StartContainer("tbj-inst"))
    assert obs.container_started
    assert _flow(client)[0] == "put secrets/container.env"
    assert client.puts[0][2] == b"HF_TOKEN=hf_SECRETTOKEN\n"
    assert "secrets/container.env" in client.commands[0].split(" EXIT;")[0]


def test_a_restart_after_a_crash_re_pulls_with_a_fresh_login_when_the_image_is_gone() -> None:
    """Crash between containerStartedAt and `docker run`, on a disk that lost the image: the
    registry key is delivered again for that pull only, then the container starts."""
    pulled: list[bool] = []

    def answer(command: str) -> tuple[int, str]:
        if command.startswith("timeout "):
            return 1, "Error response from daemon: No such container: job-1234abcd\n"
        if "docker login" in command:
            pulled.append(True)
            return 0, "TAOBREV_STEP login\nLogin Succeeded\nTAOBREV_STEP manifest\nTAOBREV_STEP pull\n"
        if "docker run -d" in command and not pulled:
            return 3, "TAOBREV_IMAGE_MISSING\n"
        return 0, "0123abcd\n"

    client = FakeClient(answer=answer)
    obs = _run(client, WaitForExit("tbj-inst", timeout_seconds=30))
    assert obs.failure is None
    assert obs.container_started
    assert [step.split(" ")[0] + " " + step.split(" ")[1] for step in _flow(client)] == [
        "exec timeout",
        "put secrets/container.env",
        "exec umask",
        "put secrets/ngc_api_key",
        "exec export",
        "put secrets/container.env",
        "exec umask",
    ]


def test_upload_delivers_the_s3_keys_and_a_pass_without_secrets_fails_naming_the_cause() -> None:
    def answer(_command: str) -> tuple[int, str]:
        return (
            0,
            "TAOBREV_STEP upload\nTAOBREV_STEP verify\n"
            'F\t3\tresults/a\nTAOBREV_LISTING\n[["run-1/results/a", 3]]\n',
        )

    client = FakeClient(answer=answer)
    obs = _run(client, UploadResults("tbj-inst"))
    assert obs.upload is not None
    assert obs.upload.objects == 1
    assert _flow(client)[0] == "put secrets/s3.env"
    without = FakeClient(answer=answer)
    failed = _run(without, UploadResults("tbj-inst"), _job(secrets=None)).failure
    assert failed is not None
    assert failed.reason == "SecretsNotLoaded"
    assert "UploadResults needs the job's secrets" in failed.message
    assert without.events == []


def test_the_wait_folds_the_exit_code_and_a_cleaned_tail_into_the_observation() -> None:
    out = (
        '0\n__taobrev_state__\n{"FinishedAt": "2026-11-30T11:59:00Z"}\n__taobrev_log_tail__\n1%\r99%\rdone\n'
    )
    obs = _run(FakeClient(answer=lambda _c: (0, out)), WaitForExit("tbj-inst", timeout_seconds=30))
    assert obs.exit_code == 0
    assert obs.log_tail == ("done",)
