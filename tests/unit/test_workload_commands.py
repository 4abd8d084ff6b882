"""The shell commands `Workload` composes (what would run on a real Brev VM), checked against a
recording fake `BrevClient`: quoting, idempotency guards, where secrets go and for how long,
result parsing, per-call timeouts. No I/O: the fake answers instead of a shell."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from controller.api.errors import EntitlementError, PermanentError, SpecError, TransientError
from controller.brev.envfile import S3Credentials, env_file, s3_env_file
from controller.brev.logtail import LINE_CUT, TAIL_LINE_CHARS, TAIL_LINES, TAIL_MAX_BYTES, clean_log_tail
from controller.brev.progress_parse import STATUS_TAIL_BYTES
from controller.brev.workload import (
    ContainerNotFound,
    ExitInfo,
    ImageNotPresent,
    StageInput,
    Workload,
    WorkloadSettings,
    parse_docker_time,
    parse_listing,
    parse_state,
    split_s3_uri,
)
from tests.unit.fake_exec import FakeClient

AWS_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.22.35"
TAO_IMAGE = "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt"
JOB_DIR = "~/taobrev/job-1234abcd"
CREDS = S3Credentials(b"AKIAKEY", b"S3SECRET")
NGC = b"nvapi-NGCSECRET"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _fake(rc: int, out: str) -> FakeClient:
    return FakeClient(answer=lambda _c: (rc, out))


def _job(client: FakeClient, **settings: object) -> Workload:
    return Workload(
        client,
        "tbj-inst",
        "job-1234abcd",
        settings=WorkloadSettings(aws_cli_image=AWS_IMAGE, **settings),  # type: ignore[arg-type]
        clock=lambda: NOW,
    )


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def _words(command: str) -> list[str]:
    """Shell words of a command (the way the remote shell tokenises it, $HOME left unexpanded)."""
    lexer = shlex.shlex(command.replace('"$HOME"', "HOME"), posix=True, punctuation_chars=";")
    lexer.whitespace_split = True
    return list(lexer)


def _trap_removes(command: str) -> list[str]:
    """The paths the command's EXIT trap removes (as shell words, $HOME left unexpanded)."""
    words = _words(command)
    assert words[0] == "trap", command
    removal = _words(words[1].split(";", 1)[0])
    assert removal[:3] == ["rm", "-rf", "--"], removal
    paths = removal[3::2]
    # Each path's leftovers of a delivery cut short (put_file's temporary names) go too.
    assert removal[4::2] == [f"{path}.tmp-*" for path in paths], removal
    return paths


def _steps(rc: int, **outputs: str) -> Callable[[str], tuple[int, str]]:
    """An answer printing each step's marker and output, as the multi-step commands do."""
    text = "".join(f"TAOBREV_STEP {step}\n{out}" for step, out in outputs.items())
    return lambda _c: (rc, text)


# ---- probe -------------------------------------------------------------------------------------


def test_probe_is_a_two_word_command_and_checks_its_output() -> None:
    client = _fake(0, "ok\n")
    assert run(_job(client).probe()) is True
    assert client.commands == ["echo ok"]
    assert run(_job(_fake(0, "")).probe()) is False


# ---- registry: the key and the login exist only during pull_image ------------------------------


def test_pull_image_delivers_the_key_then_logs_in_pulls_and_removes_key_and_login_in_one_command() -> None:
    client = FakeClient()
    run(_job(client).pull_image(TAO_IMAGE, ngc_api_key=NGC))
    assert client.puts == [("tbj-inst", f"{JOB_DIR}/secrets/ngc_api_key", NGC, 0o600)]
    [command] = client.commands
    assert [kind for kind, _ in client.events] == ["put", "exec"]
    assert _trap_removes(command) == [
        "HOME/taobrev/job-1234abcd/secrets/ngc_api_key",
        "HOME/taobrev/job-1234abcd/secrets/docker",
    ]
    words = _words(command)
    assert "DOCKER_CONFIG=HOME/taobrev/job-1234abcd/secrets/docker" in words
    login = next(i for i in range(len(words) - 1) if words[i : i + 2] == ["docker", "login"])
    assert words[login : login + 9] == [
        "docker", "login", "nvcr.io", "--username", "$oauthtoken", "--password-stdin", "<",
        "HOME/taobrev/job-1234abcd/secrets/ngc_api_key", "2>&1",
    ]  # fmt: skip
    assert "'$oauthtoken'" in command, "the literal user name must not be expanded by the remote shell"
    assert f"set -- {TAO_IMAGE};" in command
    assert 'docker manifest inspect "$image"' in command
    assert 'docker image inspect "$image" >/dev/null 2>&1 || docker pull "$image"' in command
    assert command.index("login") < command.index("manifest inspect") < command.index("docker pull")


def test_the_removal_trap_also_runs_on_hang_up_and_termination() -> None:
    """ssh dropping the session (HUP) or `timeout` (TERM) must still run the EXIT trap."""
    client = FakeClient()
    run(_job(client).pull_image(TAO_IMAGE, ngc_api_key=NGC))
    [command] = client.commands
    for sig in ("HUP", "TERM", "INT"):
        assert re.search(rf"trap 'exit \d+' {sig};", command), sig


def test_login_refusal_is_an_entitlement_error_with_the_registry_message() -> None:
    msg = 'Error response from daemon: Get "https://nvcr.io/v2/": unauthorized: authentication required'
    with pytest.raises(EntitlementError, match="docker login") as info:
        run(_job(FakeClient(answer=_steps(1, login=msg))).pull_image(TAO_IMAGE, ngc_api_key=NGC))
    assert "unauthorized" in info.value.cli_message


def test_a_login_that_fails_for_other_reasons_is_transient() -> None:
    answer = _steps(1, login="Error response from daemon: Get https://nvcr.io/v2/: dial tcp: i/o timeout")
    with pytest.raises(TransientError) as info:
        run(_job(FakeClient(answer=answer)).pull_image(TAO_IMAGE, ngc_api_key=NGC))
    assert info.value.reason == "RegistryLoginFailed"


def test_manifest_refusal_is_an_entitlement_error_naming_the_image() -> None:
    denied = "unauthorized: access to the requested resource is not authorized"
    answer = _steps(1, login="Login Succeeded\n", manifest=denied)
    with pytest.raises(EntitlementError, match="refused") as info:
        run(_job(FakeClient(answer=answer)).pull_image(TAO_IMAGE, ngc_api_key=NGC))
    assert info.value.cli_message == denied


def test_unknown_image_is_a_spec_error_and_network_trouble_while_pulling_is_transient() -> None:
    unknown = _steps(1, login="Login Succeeded\n", manifest="manifest unknown: manifest unknown")
    with pytest.raises(SpecError, match="does not exist"):
        run(_job(FakeClient(answer=unknown)).pull_image(TAO_IMAGE, ngc_api_key=NGC))
    net = _steps(1, login="Login Succeeded\n", manifest="", pull="net/http: TLS handshake timeout")
    with pytest.raises(TransientError) as info:
        run(_job(FakeClient(answer=net)).pull_image(TAO_IMAGE, ngc_api_key=NGC))
    assert info.value.reason == "RegistryUnavailable"
    assert "TLS handshake timeout" in info.value.cli_message


def test_a_step_whose_secret_removal_is_not_confirmed_fails_transiently_even_when_it_succeeded() -> None:
    """No marker (the trap did not run) or the LEFT marker: retry the step, which removes again."""
    no_marker = FakeClient(answer=lambda _c: (0, "Login Succeeded\n"), trap_runs=False)
    with pytest.raises(TransientError) as missing:
        run(_job(no_marker).pull_image(TAO_IMAGE, ngc_api_key=NGC))
    assert missing.value.reason == "SecretCleanupFailed"
    left = FakeClient(answer=lambda _c: (0, "Login Succeeded\nTAOBREV_SECRETS_LEFT\n"), trap_runs=False)
    with pytest.raises(TransientError) as remains:
        run(_job(left).pull_image(TAO_IMAGE, ngc_api_key=NGC))
    assert remains.value.reason == "SecretCleanupFailed"


# ---- container start: the env file exists only until docker run has read it ------------------


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
    assert f"elif ! docker image inspect {TAO_IMAGE} >/dev/null 2>&1; then" in command
    run_part = command[command.index("docker run -d") :].rsplit(" 2>&1; fi", 1)[0]
    words = _words(run_part)
    assert words[:11] == [
        "docker", "run", "-d", "--pull", "never", "--name", "job-1234abcd", "--label",
        "tao-job=job-1234abcd", "--gpus", "2",
    ]  # fmt: skip
    assert "--env-file" not in words, "no secret env: no env file at all"
    assert client.puts == []
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
    assert "HOME/taobrev/job-1234abcd/spec:/workspace/spec:ro" in words
    assert "HOME/taobrev/job-1234abcd/data:/workspace/data" in words


def test_secret_env_goes_through_an_env_file_delivered_before_and_removed_by_the_run_command() -> None:
    client = _fake(0, "0123abcd\n")
    run(_job(client).start_container(TAO_IMAGE, "a", "train", secret_env={"HF_TOKEN": b"hf_SECRET"}))
    assert client.puts == [("tbj-inst", f"{JOB_DIR}/secrets/container.env", b"HF_TOKEN=hf_SECRET\n", 0o600)]
    assert [kind for kind, _ in client.events] == ["put", "exec"]
    [command] = client.commands
    assert _trap_removes(command) == ["HOME/taobrev/job-1234abcd/secrets/container.env"]
    words = _words(command)
    assert words[words.index("--env-file") + 1] == "HOME/taobrev/job-1234abcd/secrets/container.env"
    assert "hf_SECRET" not in command


def test_a_stale_container_env_file_is_removed_even_without_secret_env() -> None:
    client = _fake(0, "0123abcd\n")
    run(_job(client).start_container(TAO_IMAGE, "a", "train"))
    [command] = client.commands
    assert _trap_removes(command) == ["HOME/taobrev/job-1234abcd/secrets/container.env"]


def test_start_container_reports_an_existing_container_as_not_started() -> None:
    client = _fake(0, "TAOBREV_CONTAINER_EXISTS\n")
    assert run(_job(client).start_container(TAO_IMAGE, "a", "train")) is False
    conflict = (
        'docker: Error response from daemon: Conflict. The container name "/job-1234abcd" is already in use'
    )
    assert run(_job(_fake(125, conflict)).start_container(TAO_IMAGE, "a", "b")) is False


def test_a_missing_image_is_reported_instead_of_letting_docker_run_pull_without_credentials() -> None:
    with pytest.raises(ImageNotPresent):
        run(_job(_fake(3, "TAOBREV_IMAGE_MISSING\n")).start_container(TAO_IMAGE, "a", "train"))


def test_a_failing_docker_run_is_transient_with_dockers_words() -> None:
    msg = "docker: Error response from daemon: could not select device driver"
    with pytest.raises(TransientError) as info:
        run(_job(_fake(125, msg)).start_container(TAO_IMAGE, "a", "train", secret_env={"K": "v"}))
    assert info.value.reason == "ContainerStartFailed"
    assert msg in info.value.cli_message


# ---- waiting, exit time and the log tail -------------------------------------------------------


def test_wait_exit_is_bounded_and_maps_timeout_to_still_running() -> None:
    client = _fake(124, "")
    assert run(_job(client).wait_exit(30)) is None
    assert client.commands == ["timeout 30 docker wait job-1234abcd 2>&1"]
    assert run(_job(_fake(0, "3\n")).wait_exit(30)) == 3
    with pytest.raises(ContainerNotFound):
        run(_job(_fake(1, "Error response from daemon: No such container: x")).wait_exit(5))


STATE = {"Status": "exited", "Running": False, "ExitCode": 3, "FinishedAt": "2026-11-30T11:58:01.123456789Z"}


def test_wait_with_tail_returns_code_finish_time_and_log_lines_from_one_bounded_call() -> None:
    """One brev call: the bounded wait, the container's State, then the byte-capped log tail."""
    client = _fake(124, "__taobrev_state__\n__taobrev_log_tail__\nEpoch 2/5 loss 0.4\n")
    assert run(_job(client).wait_exit_with_tail(30, 20)) == ExitInfo(None, None, ("Epoch 2/5 loss 0.4",))
    (cmd,) = client.commands
    assert cmd.startswith("timeout 30 docker wait job-1234abcd 2>&1; rc=$?;")
    assert "docker inspect --format '{{json .State}}' job-1234abcd" in cmd
    assert f"docker logs --tail 20 job-1234abcd 2>&1 | tail -c {TAIL_MAX_BYTES}" in cmd
    assert cmd.endswith("exit $rc")
    out = f"3\n__taobrev_state__\n{json.dumps(STATE)}\n__taobrev_log_tail__\nEpoch 1/5\nfailed: exit 3\n"
    info = run(_job(_fake(0, out)).wait_exit_with_tail(30, 20))
    assert info == ExitInfo(
        3, datetime(2026, 11, 30, 11, 58, 1, 123456, tzinfo=UTC), ("Epoch 1/5", "failed: exit 3")
    )
    missing = _fake(1, "Error response from daemon: No such container: job-1234abcd\n__taobrev_state__\n")
    with pytest.raises(ContainerNotFound):
        run(_job(missing).wait_exit_with_tail(5, 20))


EPOCH_LINE = (
    '{"epoch": 2, "step": 150, "max_epoch": 9, "max_step": 500, "time_per_epoch": "0:00:12.5", '
    '"time_per_step": "0:00:00.25", "eta": "0:01:27.5", "date": "12/5/2026", "time": "9:4:7", '
    '"status": "RUNNING", "verbosity": "INFO", "message": "Training loop in progress"}\n'
    '{"date": "12/5/2026", "time": "9:4:7", "status": "RUNNING", "verbosity": "INFO", '
    '"message": "Train metrics generated.", "kpi": {"train_loss": 0.42}}\n'
)


def test_the_wait_reads_tao_status_json_in_the_same_call_and_bounded() -> None:
    """The tail of results/<action>/status.json, byte-capped, comes back in the wait's own call
    (no ssh call of its own), between the State and the log tail."""
    out = f"__taobrev_state__\n__taobrev_progress__\n{EPOCH_LINE}__taobrev_log_tail__\nEpoch 3/10\n"
    client = _fake(124, out)
    info = run(_job(client).wait_exit_with_tail(30, 20, progress_of="train"))
    (cmd,) = client.commands
    assert f"echo __taobrev_progress__; tail -c {STATUS_TAIL_BYTES} " in cmd
    assert '"$HOME"/taobrev/job-1234abcd/results/train/status.json 2>/dev/null' in cmd
    assert cmd.index("__taobrev_progress__") < cmd.index("__taobrev_log_tail__")
    assert info.tail == ("Epoch 3/10",)  # type: ignore[attr-defined]
    got = info.progress  # type: ignore[attr-defined]
    assert (got.epoch, got.max_epoch, got.percent, got.eta, got.loss) == (3, 10, 30, "0:01:28", 0.42)


def test_the_progress_is_read_at_the_exit_only_unless_asked_while_running() -> None:
    quiet = _fake(124, "__taobrev_state__\n")
    info = run(_job(quiet).wait_exit_with_tail(30, progress_of="train", progress_while_running=False))
    assert "if [ $rc -ne 124 ]; then echo __taobrev_progress__;" in quiet.commands[0]
    assert info.progress is None  # type: ignore[attr-defined]
    none = _fake(124, "__taobrev_state__\n__taobrev_log_tail__\n")
    run(_job(none).wait_exit_with_tail(30))
    assert "__taobrev_progress__" not in none.commands[0]
    assert "fi; :; echo __taobrev_log_tail__" in none.commands[0]


def test_a_half_written_or_cut_status_json_never_breaks_the_wait() -> None:
    half = EPOCH_LINE + '{"epoch": 3, "max_ep'
    out = (
        f"0\n__taobrev_state__\n{json.dumps(STATE)}\n__taobrev_progress__\n{half}__taobrev_log_tail__\nbye\n"
    )
    info = run(_job(_fake(0, out)).wait_exit_with_tail(30, progress_of="train"))
    assert info.code == 0  # type: ignore[attr-defined]
    assert info.progress.epoch == 3  # type: ignore[attr-defined]
    assert info.finished_at is not None  # type: ignore[attr-defined]
    assert info.tail == ("bye",)  # type: ignore[attr-defined]
    # A tail as long as the cap lost its head: its first line is dropped, not misread.
    capped = "x" * (STATUS_TAIL_BYTES - len(EPOCH_LINE) - 1) + "\n" + EPOCH_LINE
    out = f"__taobrev_state__\n__taobrev_progress__\n{capped}"
    info = run(_job(_fake(124, out)).wait_exit_with_tail(30, progress_of="train"))
    assert info.progress.epoch == 3  # type: ignore[attr-defined]


def test_an_unreadable_state_still_reports_the_exit_code_without_a_finish_time() -> None:
    info = run(_job(_fake(0, "0\n__taobrev_state__\n__taobrev_log_tail__\n")).wait_exit_with_tail(5))
    assert info == ExitInfo(0, None, ())


def test_docker_times_parse_to_aware_datetimes_and_the_zero_time_to_none() -> None:
    assert parse_docker_time("2026-11-30T11:58:01.123456789Z") == datetime(
        2026, 11, 30, 11, 58, 1, 123456, tzinfo=UTC
    )
    assert parse_docker_time("2026-11-30T11:58:01+02:00") == datetime(2026, 11, 30, 9, 58, 1, tzinfo=UTC)
    assert parse_docker_time("0001-01-01T00:00:00Z") is None
    assert parse_docker_time("") is None
    assert parse_docker_time("yesterday") is None


def test_a_tqdm_progress_bar_collapses_to_what_a_terminal_shows() -> None:
    """Real docker's --tail counts \\n only: one bar redrawn with \\r is ONE line of the tail."""
    bar = "".join(f"\r{pct:3d}%|{'#' * (pct // 10):<10}| {pct}/100" for pct in range(0, 101))
    text = f"Epoch 1/3\n{bar}\nval loss 0.2\r\n{bar}\r\n"
    assert clean_log_tail(text) == [
        "Epoch 1/3",
        "100%|##########| 100/100",
        "val loss 0.2",
        "100%|##########| 100/100",
    ]


def test_tail_keeps_the_last_lines_and_caps_each_with_a_visible_cut() -> None:
    text = "".join(f"line {i}\n" for i in range(50)) + "x" * 2000 + "\n"
    lines = clean_log_tail(text)
    assert len(lines) == TAIL_LINES
    assert lines[0] == "line 31"
    assert len(lines[-1]) == TAIL_LINE_CHARS
    assert lines[-1].endswith(LINE_CUT)
    assert clean_log_tail("a\n\n\rb\n") == ["a", "", "b"]


def test_a_five_megabyte_line_crosses_ssh_capped_and_lands_in_status_capped() -> None:
    """The remote command caps the bytes (`tail -c`); this fake applies that cap to a 5 MB line the
    way the remote shell would, so what crosses is at most TAIL_MAX_BYTES."""
    huge = "".join(f"\r{i:07d} it/s" for i in range(400_000)) + "\n"  # ~5.2 MB, one \n-line
    assert len(huge) > 5_000_000
    crossed: list[int] = []

    def answer(command: str) -> tuple[int, str]:
        cap = int(re.search(r"\| tail -c (\d+)", command).group(1))  # type: ignore[union-attr]
        tail = huge.encode()[-cap:].decode()
        crossed.append(len(tail.encode()))
        return 124, f"__taobrev_state__\n__taobrev_log_tail__\n{tail}"

    info = run(_job(FakeClient(answer=answer)).wait_exit_with_tail(30))
    assert crossed == [TAIL_MAX_BYTES]
    assert info.tail == ("0399999 it/s",)  # type: ignore[attr-defined]
    # Without the remote cap (a sim or a docker that ignores it) status is still bounded.
    no_bars = "y" * 5_000_000 + "\n"
    [line] = clean_log_tail(no_bars, head_cut=True)
    assert len(line) == TAIL_LINE_CHARS
    assert line.startswith("…[cut] y")
    assert line.endswith(LINE_CUT)


def test_logs_are_byte_capped_and_cleaned_too() -> None:
    client = _fake(0, "a\rb\nc\n")
    assert run(_job(client).logs(5)) == ["b", "c"]
    assert client.commands == [
        f"set -o pipefail; docker logs --tail 5 job-1234abcd 2>&1 | tail -c {TAIL_MAX_BYTES}"
    ]


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
    client = _fake(0, json.dumps(state) + "\n")
    parsed = run(_job(client).container_state())
    assert parsed == parse_state(json.dumps(state))
    assert client.commands == ["docker inspect --format '{{json .State}}' job-1234abcd 2>&1"]
    gone = _fake(1, "Error: No such object: job-1234abcd")
    assert run(_job(gone).container_state()) is None


# ---- stop: bounded on both sides ---------------------------------------------------------------


def test_stop_uses_the_given_grace_and_a_call_timeout_of_grace_plus_margin() -> None:
    client = _fake(0, "job-1234abcd\n")
    run(_job(client, stop_margin=20).stop_container(7))
    assert client.commands == ["timeout -k 5 17 docker stop -t 7 job-1234abcd 2>&1"]
    assert client.timeouts == [27]
    default = _fake(0, "")
    run(_job(default).stop_container())
    assert default.commands == ["timeout -k 5 40 docker stop -t 30 job-1234abcd 2>&1"]


def test_stop_of_a_missing_container_succeeds_and_a_hung_docker_is_transient() -> None:
    run(_job(_fake(1, "Error response from daemon: No such container: job-1234abcd\n")).stop_container(1))
    with pytest.raises(TransientError, match="did not return") as hung:
        run(_job(_fake(124, "")).stop_container(1))
    assert hung.value.reason == "ContainerStopFailed"
    with pytest.raises(TransientError):
        run(_job(_fake(1, "Cannot connect to the Docker daemon")).stop_container(1))


# ---- per-call timeouts from the phase budget ----------------------------------------------------


def test_every_call_gets_at_most_the_remaining_phase_budget() -> None:
    client = _fake(0, "")
    deadline = NOW + timedelta(seconds=45)
    run(_job(client).pull_image(TAO_IMAGE, ngc_api_key=NGC, deadline=deadline))
    run(_job(client).stop_container(30, deadline=NOW + timedelta(seconds=500)))
    run(_job(client).stop_container(30, deadline=deadline))
    assert client.timeouts == [45, 45, 60, 45]  # the third keeps its own bound (grace + margin)


def test_a_spent_budget_starts_no_call() -> None:
    client = FakeClient()
    with pytest.raises(TransientError) as info:
        run(_job(client).pull_image(TAO_IMAGE, ngc_api_key=NGC, deadline=NOW + timedelta(seconds=0.5)))
    assert info.value.reason == "PhaseBudgetSpent"
    assert client.events == []


def test_a_blocking_wait_is_shortened_to_end_within_the_budget() -> None:
    client = _fake(124, "__taobrev_state__\n__taobrev_log_tail__\n")
    run(_job(client, wait_margin=10).wait_exit_with_tail(30, deadline=NOW + timedelta(seconds=25)))
    assert client.commands[0].startswith("timeout 15 docker wait")
    assert client.timeouts == [25]


# ---- S3: the keys exist only while staging and while uploading ----------------------------------


def test_stage_inputs_copies_every_prefix_in_one_command_with_the_keys_present_only_during_it() -> None:
    client = _fake(0, "TAOBREV_STEP 0\nTAOBREV_STAGED 0 4\nTAOBREV_STEP 1\nTAOBREV_STAGED 1 2\n")
    count = run(
        _job(client).stage_inputs(
            [StageInput("s3://bkt/data/train/", "train"), StageInput("s3://bkt/data/val", "val")],
            "http://127.0.0.1:9000",
            "us-east-1",
            credentials=CREDS,
        )
    )
    assert count == 6
    assert client.timeouts == [120, 2 * 3600], "each input keeps its own transfer budget"
    assert client.puts == [
        (
            "tbj-inst",
            f"{JOB_DIR}/secrets/s3.env",
            b"AWS_ACCESS_KEY_ID=AKIAKEY\nAWS_SECRET_ACCESS_KEY=S3SECRET\nAWS_DEFAULT_REGION=us-east-1\n",
            0o600,
        )
    ]
    [command] = client.commands
    assert [kind for kind, _ in client.events] == ["put", "exec"]
    assert _trap_removes(command) == ["HOME/taobrev/job-1234abcd/secrets/s3.env"]
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
    assert "s3://bkt/data/val" in words


def test_a_failing_second_input_is_named_and_classified() -> None:
    inputs = [StageInput("s3://a/x", "x"), StageInput("s3://b/y", "y")]
    denied = _steps(1, **{"0": "TAOBREV_STAGED 0 1\n", "1": "An error occurred (AccessDenied)"})
    with pytest.raises(PermanentError, match=r"inputs\[1\]\.uri s3://b/y") as info:
        run(_job(FakeClient(answer=denied)).stage_inputs(inputs, credentials=CREDS))
    assert info.value.reason == "S3AccessDenied"
    missing = _steps(1, **{"0": "An error occurred (NoSuchBucket)"})
    with pytest.raises(SpecError, match=r"inputs\[0\]"):
        run(_job(FakeClient(answer=missing)).stage_inputs(inputs, credentials=CREDS))
    flaky = _steps(1, **{"0": "TAOBREV_STAGED 0 1\n", "1": "Connection reset by peer"})
    with pytest.raises(TransientError) as transient:
        run(_job(FakeClient(answer=flaky)).stage_inputs(inputs, credentials=CREDS))
    assert transient.value.reason == "StagingFailed"


def test_stage_inputs_rejects_empty_prefixes_and_escaping_paths_before_delivering_keys() -> None:
    with pytest.raises(SpecError, match="holds no objects"):
        run(
            _job(_fake(0, "TAOBREV_STAGED 0 0\n")).stage_inputs(
                [StageInput("s3://b/x", "x")], credentials=CREDS
            )
        )
    for bad in ("../x", "/abs", "a/../b", "a b"):
        client = FakeClient()
        with pytest.raises(SpecError, match="inputs"):
            run(_job(client).stage_inputs([StageInput("s3://b/x", bad)], credentials=CREDS))
        assert client.events == []
    with pytest.raises(SpecError, match="s3://"):
        run(_job(FakeClient()).stage_inputs([StageInput("http://b/x", "x")], credentials=CREDS))
    nothing = FakeClient()
    assert run(_job(nothing).stage_inputs([], credentials=CREDS)) == 0
    assert nothing.events == []


def _upload_answer(
    local: dict[str, int], remote: list[list[object]] | None
) -> Callable[[str], tuple[int, str]]:
    def answer(command: str) -> tuple[int, str]:
        lines = "".join(f"F\t{size}\t{path}\n" for path, size in local.items())
        listing = lines + "TAOBREV_LISTING\n" + json.dumps(remote) + "\n"
        return 0, f"TAOBREV_STEP upload\nTAOBREV_STEP verify\n{listing}"

    return answer


def test_upload_saves_logs_copies_both_dirs_and_verifies_sizes_in_one_command() -> None:
    local = {"results/model.pth": 100, "results/status.json": 20, "logs/container.log": 7}
    remote = [["p/r/results/model.pth", 100], ["p/r/results/status.json", 20], ["p/r/logs/container.log", 7]]
    client = FakeClient(answer=_upload_answer(local, remote))
    uploaded = run(
        _job(client).upload_results("s3://bkt/p/r/", "http://127.0.0.1:1", None, credentials=CREDS)
    )
    assert uploaded == (3, 127)
    [command] = client.commands
    assert [kind for kind, _ in client.events] == ["put", "exec"]
    assert client.puts[0][1] == f"{JOB_DIR}/secrets/s3.env"
    assert _trap_removes(command) == ["HOME/taobrev/job-1234abcd/secrets/s3.env"]
    assert "docker logs --timestamps job-1234abcd >" in command
    assert "logs/container.log" in command
    assert "s3 cp /job/results s3://bkt/p/r/results --recursive" in command
    assert "s3 cp /job/logs s3://bkt/p/r/logs --recursive" in command
    assert "--bucket bkt --prefix p/r/" in command
    assert command.index("s3 cp /job/logs") < command.index("list-objects-v2")


def test_upload_verification_fails_on_a_missing_or_short_object() -> None:
    local = {"results/model.pth": 100}
    for remote in ([["p/results/model.pth", 99]], [], None):
        client = FakeClient(answer=_upload_answer(local, remote))
        with pytest.raises(TransientError, match="verification"):
            run(_job(client).upload_results("s3://bkt/p", credentials=CREDS))


def test_a_failed_copy_is_transient_with_the_copy_output() -> None:
    answer = _steps(1, upload="upload failed: simulated outage")
    with pytest.raises(TransientError, match="uploading results") as info:
        run(_job(FakeClient(answer=answer)).upload_results("s3://bkt/p", credentials=CREDS))
    assert info.value.cli_message == "upload failed: simulated outage"


# ---- teardown ------------------------------------------------------------------------------------


def test_clear_removes_containers_and_files_in_one_call_and_checks_each() -> None:
    client = FakeClient(answer=lambda _c: (0, "TAOBREV_CLEARED 0 0"))
    run(_job(client).clear())
    (command,) = client.commands
    assert command.startswith('set -- job-1234abcd job-1234abcd-ckpt; docker rm -f "$@" >/dev/null 2>&1; ')
    assert 'rm -rf "$HOME"/taobrev/job-1234abcd' in command
    # Each container is checked gone, the checkpoint sync's too (its config has the S3 keys).
    assert 'for n in "$@"; do docker inspect "$n" >/dev/null 2>&1 && c=1; done' in command


@pytest.mark.parametrize("keep_container", [True, False])
def test_a_kept_instance_loses_only_what_holds_a_secret(keep_container: bool) -> None:
    """spec.debug.keepInstanceOnFailure: the secrets directory (key and env files, the registry
    login) and the checkpoint sync's container go; the job directory stays, and so does the job's
    stopped container unless its config holds secret env."""
    client = FakeClient(answer=lambda _c: (0, "TAOBREV_CLEARED 0 0"))
    run(_job(client).clear(keep=True, keep_container=keep_container))
    (command,) = client.commands
    removed = "job-1234abcd-ckpt" if keep_container else "job-1234abcd-ckpt job-1234abcd"
    assert command.startswith(f"docker rm -f {removed} >/dev/null 2>&1; ")
    assert 'rm -rf "$HOME"/taobrev/job-1234abcd/secrets ' in command
    assert 'rm -rf "$HOME"/taobrev/job-1234abcd ' not in command
    with pytest.raises(TransientError) as exc:
        run(_job(_fake(0, "TAOBREV_CLEARED 0 1")).clear(keep=True))
    assert exc.value.reason == "CleanupFailed"


@pytest.mark.parametrize(
    ("out", "reason"),
    [
        ("TAOBREV_CLEARED 1 0", "ContainerRemoveFailed"),
        ("TAOBREV_CLEARED 0 1", "CleanupFailed"),
        ("", "ContainerRemoveFailed"),  # no report: nothing is known to be removed
    ],
)
def test_clear_says_which_part_was_left(out: str, reason: str) -> None:
    with pytest.raises(TransientError) as exc:
        run(_job(_fake(0, out)).clear())
    assert exc.value.reason == reason


# ---- no secret on argv, none delivered outside its step -----------------------------------------


def test_no_secret_value_reaches_any_command_and_each_file_is_removed_by_the_command_reading_it() -> None:
    client = FakeClient(answer=_upload_answer({}, []))
    job = _job(client)

    async def everything() -> None:
        await job.write_spec("a: 1\n")
        await job.pull_image(TAO_IMAGE, ngc_api_key=NGC)
        await job.stage_inputs([StageInput("s3://b/x", "x")], credentials=CREDS)
        await job.start_container(
            TAO_IMAGE, "arch", "train", env={"PUBLIC": "1"}, secret_env={"HF": "hf_SECRET"}
        )
        await job.upload_results("s3://b/p", "http://127.0.0.1:1", "r", credentials=CREDS)
        await job.clear()

    def answer(c: str) -> tuple[int, str]:
        if "TAOBREV_STAGED" in c:
            return 0, "TAOBREV_STAGED 0 1\n"
        if "TAOBREV_CLEARED" in c:
            return 0, "TAOBREV_CLEARED 0 0\n"
        return _upload_answer({}, [])(c)

    client.answer = answer
    run(everything())
    joined = "\n".join(client.commands)
    for value in ("NGCSECRET", "S3SECRET", "AKIAKEY", "hf_SECRET"):
        assert value not in joined
    # Every secret file put is followed by exactly one command, which removes it on exit.
    for i, (kind, path) in enumerate(client.events):
        if kind == "put" and "/secrets/" in path:
            next_kind, command = client.events[i + 1]
            assert next_kind == "exec"
            name = path.rsplit("/", 1)[1]
            assert f"HOME/taobrev/job-1234abcd/secrets/{name}" in _trap_removes(command)


# ---- pure helpers --------------------------------------------------------------------------------


def test_env_files_refuse_values_docker_cannot_carry_without_echoing_them() -> None:
    assert env_file({"A": "x y=z", "B": b"\xc3\xa9"}) == b"A=x y=z\nB=\xc3\xa9\n"
    for bad in ("s3cr3t\nv", "s3cr3t\rv", "s3cr3t\0v"):
        with pytest.raises(
            SpecError, match="secret environment variable TOKEN has a value with a line"
        ) as info:
            env_file({"TOKEN": bad}, source="secret environment variable")
        assert "s3cr3t" not in str(info.value)
    with pytest.raises(SpecError, match="not UTF-8"):
        env_file({"A": b"\xff"})
    with pytest.raises(SpecError, match="invalid"):
        env_file({"A-B": "x"})


def test_s3_env_file_carries_the_keys_region_and_session_token() -> None:
    creds = S3Credentials(b"AK", b"SK", session_token=b"ST")
    assert s3_env_file(creds, region="eu-west-1") == (
        b"AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=SK\nAWS_SESSION_TOKEN=ST\nAWS_DEFAULT_REGION=eu-west-1\n"
    )
    assert "SK" not in repr(creds)
    assert "AK" not in repr(creds)


def test_s3_uri_split_and_listing_parse() -> None:
    assert split_s3_uri("s3://b/a/b/") == ("b", "a/b")
    assert split_s3_uri("s3://b") == ("b", "")
    local, remote = parse_listing("F\t3\tresults/a b\nTAOBREV_LISTING\nnull\n")
    assert local == {"results/a b": 3}
    assert remote == {}


def test_job_ids_must_be_container_names() -> None:
    with pytest.raises(SpecError):
        Workload(FakeClient(), "i", "bad name", settings=WorkloadSettings(aws_cli_image=AWS_IMAGE))
