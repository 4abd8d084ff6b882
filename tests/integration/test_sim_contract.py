"""Contract tests of the Brev simulator: each pins one behaviour of the real CLI (SIM-CONTRACT.md
sections 2-5) or of what runs on an instance (section 6), by running the simulator's EXECUTABLES
as subprocesses.

Time: lifecycle steps are driven with `BrevSim.advance()` (the simulated clock), never fixed sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.brevsim.faults import KNOBS, UnknownFault
from tests.brevsim.harness import BrevSim
from tests.brevsim.tao import BAR_STEPS
from tests.devenv.s3 import S3Server
from tests.fixtures.polling import wait_until

pytestmark = pytest.mark.integration

TAO = "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt"
AWS = "public.ecr.aws/aws-cli/aws-cli:2.22.35"
PROMPT = "You are currently logged out, would you like to log in? [Y/n]: "
HANG_GUARD = 60  # seconds; only guards against hangs
STOP_GRACE = 3000  # nominal s: 30 s of wall time at speed 0.01, for a stop that must be graceful


def run(
    sim: BrevSim,
    argv: Sequence[str],
    *,
    stdin: Any = subprocess.DEVNULL,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    if input is not None:
        stdin = None
    proc = subprocess.run(
        list(argv),
        env=env or sim.env(),
        stdin=stdin,
        input=input,
        capture_output=True,
        timeout=HANG_GUARD,
        check=False,
    )
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def brev(sim: BrevSim, *argv: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return run(sim, ["brev", *argv], **kw)


def ls_json(sim: BrevSim) -> list[dict[str, Any]]:
    res = brev(sim, "ls", "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout[res.stdout.index("{") :])["workspaces"] or []


def ready_instance(sim: BrevSim, name: str = "inst") -> str:
    """A logged-in sim with one RUNNING, ssh-ready instance and a fresh ssh config."""
    sim.login_api_key()
    sim.add_instance(name)
    assert brev(sim, "refresh").returncode == 0
    return name


def remote(sim: BrevSim, inst: str, command: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """What the client does for exact exit codes: ssh with ONE command string."""
    return run(sim, ["ssh", "-T", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", inst, command], **kw)


# -- global behaviour ---------------------------------------------------------------------------
def test_version_no_check_latest_prints_only_current_version(brev_sim: BrevSim) -> None:
    res = brev(brev_sim, "--version", "--no-check-latest")
    assert (res.returncode, res.stdout) == (0, "Current Version: v0.6.327\n")


def test_there_is_no_version_subcommand(brev_sim: BrevSim) -> None:
    res = brev(brev_sim, "version")
    assert res.returncode == 1
    assert 'unknown command "version" for "brev"' in res.stderr


def test_orgs_command_does_not_exist_and_suggests_org(brev_sim: BrevSim) -> None:
    res = brev(brev_sim, "orgs", "--json")
    assert res.returncode == 1
    assert 'unknown command "orgs" for "brev"' in res.stderr
    assert "\torg\n" in res.stderr


def test_logged_out_prompt_without_newline_then_eof_on_devnull(brev_sim: BrevSim) -> None:
    res = brev(brev_sim, "ls", "--json")
    assert res.returncode == 1
    assert res.stdout == PROMPT
    assert res.stderr == "EOF\n"


def test_logged_out_prompt_blocks_on_an_open_stdin_pipe(brev_sim: BrevSim) -> None:
    proc = subprocess.Popen(
        ["brev", "ls", "--json"],
        env=brev_sim.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    seen = b""
    while not seen.endswith(PROMPT.encode()):
        chunk = proc.stdout.read1(4096)  # type: ignore[attr-defined]
        assert chunk, "brev exited before prompting"
        seen += chunk
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.5)  # still blocked reading the pipe
    proc.stdin.close()  # EOF unblocks it
    assert proc.wait(timeout=HANG_GUARD) == 1
    assert proc.stderr is not None
    assert proc.stderr.read() == b"EOF\n"


def test_closed_stdin_makes_stdin_reading_commands_panic_with_exit_2(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    res = run(brev_sim, ["bash", "-c", "exec 0<&-; exec brev delete x"])
    assert res.returncode == 2
    assert res.stderr.startswith("panic: runtime error: invalid memory address or nil pointer dereference")


def test_api_key_login_writes_credentials_without_prompting(brev_sim: BrevSim) -> None:
    res = brev(brev_sim, "login", "--api-key", BrevSim.API_KEY, "--org-id", BrevSim.ORG_ID)
    assert res.returncode == 0
    assert "API key saved for org org-sim" in res.stdout
    creds = json.loads((brev_sim.home / ".brev" / "credentials.json").read_text())
    assert creds["api_key"] == BrevSim.API_KEY
    assert creds["api_key_org_id"] == BrevSim.ORG_ID
    assert ls_json(brev_sim) == []


def test_api_key_login_without_org_id_is_refused(brev_sim: BrevSim) -> None:
    res = brev(brev_sim, "login", "--api-key", BrevSim.API_KEY)
    assert res.returncode == 1
    assert (
        "api key auth requires an org id; run brev login --api-key <api-key> --org-id <org-id>" in res.stderr
    )


def test_login_with_non_jwt_token_stores_it_as_refresh_and_then_logs_out(brev_sim: BrevSim) -> None:
    res = brev(brev_sim, "login", "--token", "opaque-console-token")
    creds = json.loads((brev_sim.home / ".brev" / "credentials.json").read_text())
    assert creds == {"access_token": "auto-login", "refresh_token": "opaque-console-token"}
    assert res.returncode == 1
    assert res.stderr == "EOF\n"
    assert "WARN: malformed refresh token, logging out" in res.stdout
    again = brev(brev_sim, "ls", "--json")
    # the stray line of StandardLogin precedes everything, so naive JSON parsing breaks
    assert again.stdout.startswith("no oauth found for token\n")
    assert again.returncode == 1


def test_jwt_token_session_expires_with_its_jwt(brev_sim: BrevSim) -> None:
    token = brev_sim.mint_access_token(ttl_s=3600)
    res = brev(brev_sim, "login", "--token", token)
    assert res.returncode == 0, res.stderr
    assert "current organization: org-sim" in res.stdout
    assert ls_json(brev_sim) == []
    brev_sim.advance(3601)
    expired = brev(brev_sim, "ls", "--json")
    assert expired.returncode == 1
    assert "WARN: malformed refresh token, logging out" in expired.stdout  # the stored "auto-login"
    assert expired.stdout.endswith(PROMPT)
    assert expired.stderr == "EOF\n"


def test_session_key_refresh_token_survives_expiry(brev_sim: BrevSim) -> None:
    refresh = brev_sim.mint_refresh_token()
    assert brev(brev_sim, "login", "--token", refresh).returncode == 0
    brev_sim.advance(7200)
    assert ls_json(brev_sim) == []


def test_auth_eof_fault_ends_after_relogin(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.set_faults(auth_eof_once=5)
    first = brev(brev_sim, "ls", "--json")
    assert (first.returncode, first.stderr) == (1, "EOF\n")
    assert brev(brev_sim, "login", "--api-key", BrevSim.API_KEY, "--org-id", BrevSim.ORG_ID).returncode == 0
    assert ls_json(brev_sim) == []


def test_service_account_token_overrides_credentials_file(brev_sim: BrevSim, tmp_path: Path) -> None:
    brev_sim.login_api_key()
    sa = tmp_path / "sa-token"
    sa.write_text("eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJrdWJlcm5ldGVzIn0.c2ln")
    brev_sim.use_service_account_token(sa)
    res = brev(brev_sim, "ls", "--json")
    assert res.returncode == 1
    assert res.stdout.startswith("no oauth found for token\n")


# -- ls / search --------------------------------------------------------------------------------
def test_ls_json_with_zero_instances_prints_null(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    res = brev(brev_sim, "ls", "--json")
    assert (res.returncode, res.stdout) == (0, '{\n  "workspaces": null\n}\n')


def test_ls_json_has_exactly_the_workspace_info_keys(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.add_instance("one")
    (ws,) = ls_json(brev_sim)
    assert set(ws) == {
        "name",
        "id",
        "status",
        "build_status",
        "shell_status",
        "health_status",
        "instance_type",
        "instance_kind",
        "gpu",
    }
    assert (ws["status"], ws["shell_status"], ws["gpu"], ws["instance_kind"]) == (
        "RUNNING",
        "READY",
        "L40S",
        "gpu",
    )


def test_ls_unknown_positional_prints_nothing_and_too_many_args_fails(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    assert (brev(brev_sim, "ls", "bogus").returncode, brev(brev_sim, "ls", "bogus").stdout) == (0, "")
    res = brev(brev_sim, "ls", "a", "b")
    assert res.returncode == 1
    assert "too many args provided" in res.stderr


def test_ls_orgs_refused_with_api_key_auth(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    res = brev(brev_sim, "ls", "orgs", "--json")
    assert res.returncode == 1
    assert "api key auth cannot list organizations" in res.stderr


def test_search_json_is_an_array_without_placement_ids_and_needs_no_login(brev_sim: BrevSim) -> None:
    res = brev(brev_sim, "search", "--json", "--gpu-name", "l40s")
    assert res.returncode == 0, res.stderr
    items = json.loads(res.stdout)
    assert items
    assert all(i["gpu_name"] == "L40S" for i in items)
    assert {"type", "provider", "gpu_count", "vram_per_gpu_gb", "price_per_hour"} <= set(items[0])
    assert not any("workspace" in k or "cloud_cred" in k for i in items for k in i)
    assert brev(brev_sim, "search", "--json", "--gpu-name", "nope").stdout == "[]\n"


def test_search_rejects_an_invalid_sort(brev_sim: BrevSim) -> None:
    res = brev(brev_sim, "search", "--sort", "cheapest")
    assert res.returncode == 1
    assert 'invalid sort option "cheapest". Valid options: arch, boot-time' in res.stderr


# -- create -------------------------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--gpu", "--cloud-cred-id", "--workspace-group-id", "--region"])
def test_create_refuses_seed_only_flags(brev_sim: BrevSim, flag: str) -> None:
    brev_sim.login_api_key()
    res = brev(brev_sim, "create", "x", flag, "L40S:1")
    assert (res.returncode, res.stderr) == (1, f"unknown flag: {flag}\n")
    assert brev_sim.created_count() == 0


def test_create_help_lists_real_flags_only(brev_sim: BrevSim) -> None:
    res = brev(brev_sim, "create", "--help")
    assert res.returncode == 0
    assert "--gpu-name string" in res.stdout
    assert "--detached" in res.stdout
    assert "--cloud-cred-id" not in res.stdout
    assert "--gpu " not in res.stdout


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("-bad", "name must start with a letter or digit"),
        ("a" * 64, "name must be 63 characters or fewer (got 64)"),
        ("bad/name", "name must start with a letter or digit"),
    ],
)
def test_create_validates_the_name(brev_sim: BrevSim, name: str, message: str) -> None:
    brev_sim.login_api_key()
    res = brev(brev_sim, "create", "--name", name, "--detached")
    assert res.returncode == 1
    assert message in res.stderr


def test_create_piped_stdout_holds_only_names_and_progress_goes_to_stderr(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    res = brev(brev_sim, "create", "job-a", "--type", "g6e.xlarge", "--detached")
    assert (res.returncode, res.stdout) == (0, "job-a\n")
    assert "[Worker 1] g6e.xlarge Success! Created instance 'job-a'" in res.stderr
    assert brev_sim.created_count("job-a") == 1


def test_create_duplicate_name_is_fatal_with_exit_1(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    assert brev(brev_sim, "create", "dup", "-t", "g6e.xlarge", "-d").returncode == 0
    res = brev(brev_sim, "create", "dup", "-t", "g6e.xlarge", "-d")
    assert res.returncode == 1
    assert "duplicate workspace" in res.stderr
    assert (
        "Error: workspace 'dup' already exists. Use a different name or delete the existing workspace"
        in res.stderr
    )
    assert res.stderr.endswith("could only create 0/1 instances\n")
    assert brev_sim.created_count("dup") == 1


def test_create_skips_types_without_capacity_and_tries_the_next(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.set_faults(capacity=["g6e.xlarge"])
    res = brev(brev_sim, "create", "cap", "--type", "g6e.xlarge,g5.xlarge", "-d")
    assert res.returncode == 0, res.stderr
    assert 'Skipping: instance type "g6e.xlarge" is currently unavailable (no capacity)' in res.stderr
    assert [w["instance_type"] for w in ls_json(brev_sim)] == ["g5.xlarge"]


def test_create_server_failure_is_logged_per_attempt_and_exits_1(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.set_faults(create_fails="no cloud credential for workspace group")
    res = brev(brev_sim, "create", "f", "-t", "g6e.xlarge", "-d")
    assert res.returncode == 1
    assert "[Worker 1] g6e.xlarge Failed:" in res.stderr
    assert "no cloud credential" in res.stderr
    assert "could only create 0/1 instances" in res.stderr


def test_create_failure_status_and_wait_timeout_still_exit_0(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.set_faults(failure_status="out of capacity in zone")
    res = brev(brev_sim, "create", "doomed", "-t", "g6e.xlarge")
    assert res.returncode == 0, res.stderr
    assert "  doomed: instance doomed failed: out of capacity in zone" in res.stderr
    assert res.stdout == "doomed\n"
    # A deploy far past the 1 s timeout (0.01 s of wall time at this speed): the default 1.2 s
    # deploy could end before a loaded machine's first poll, which then sees RUNNING.
    brev_sim.set_faults(deploy_s=100_000)
    slow = brev(brev_sim, "create", "slow", "-t", "g6e.xlarge", "--timeout", "1")
    assert slow.returncode == 0
    assert "  slow: Timeout waiting for ready state" in slow.stderr


def real_seconds_per_nominal_second(sim: BrevSim) -> None:
    """For tests that assert a state INSIDE a lifecycle window: at the fixture's speed 0.01 a
    15 s nominal window is 0.15 s of wall time, which a loaded CI machine can overrun between
    `advance()` and the next `ls`. At speed 1 the window is the nominal length and `advance()`
    alone moves the clock (these tests sleep nowhere)."""
    sim.set_speed(1.0)


def test_instance_goes_deploying_then_running_building_then_completed(brev_sim: BrevSim) -> None:
    real_seconds_per_nominal_second(brev_sim)
    brev_sim.login_api_key()
    assert brev(brev_sim, "create", "life", "-t", "g6e.xlarge", "-d").returncode == 0
    fields = ("status", "build_status", "shell_status", "health_status")
    (ws,) = ls_json(brev_sim)
    assert tuple(ws[f] for f in fields) == ("DEPLOYING", "PENDING", "NOT READY", "")
    brev_sim.advance(120)
    (ws,) = ls_json(brev_sim)
    assert tuple(ws[f] for f in fields) == ("RUNNING", "BUILDING", "NOT READY", "")
    brev_sim.advance(15)
    (ws,) = ls_json(brev_sim)
    assert tuple(ws[f] for f in fields) == ("RUNNING", "COMPLETED", "READY", "HEALTHY")


def test_ssh_is_refused_for_a_while_after_running_and_ready(brev_sim: BrevSim) -> None:
    real_seconds_per_nominal_second(brev_sim)
    brev_sim.login_api_key()
    assert brev(brev_sim, "create", "boot", "-t", "g6e.xlarge", "-d").returncode == 0
    brev_sim.advance(120 + 15)
    assert ls_json(brev_sim)[0]["shell_status"] == "READY"
    assert brev(brev_sim, "refresh").returncode == 0
    refused = remote(brev_sim, "boot", "echo ok")
    assert refused.returncode == 255
    assert "Connection refused" in refused.stderr
    brev_sim.advance(60)
    ok = remote(brev_sim, "boot", "echo ok")
    assert (ok.returncode, ok.stdout) == (0, "ok\n")


def test_ssh_to_an_alias_missing_from_the_config_cannot_resolve(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.add_instance("norefresh")
    res = remote(brev_sim, "norefresh", "true")
    assert res.returncode == 255
    assert "ssh: Could not resolve hostname norefresh: Name or service not known" in res.stderr


def test_refresh_writes_ssh_config_include_and_key(brev_sim: BrevSim) -> None:
    ready_instance(brev_sim, "cfg")
    home = brev_sim.home
    assert f'Include "{home}/.brev/ssh_config"' in (home / ".ssh" / "config").read_text()
    conf = (home / ".brev" / "ssh_config").read_text()
    assert "Host cfg\n" in conf
    assert "Host cfg-host\n" in conf
    assert "ControlPersist 10m" in conf
    assert (home / ".brev" / "brev.pem").stat().st_mode & 0o777 == 0o600


def test_parallel_creates_of_distinct_names_all_succeed_consistently(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    names = [f"par-{i}" for i in range(10)]
    with ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(lambda n: brev(brev_sim, "create", n, "-t", "g6e.xlarge", "-d"), names))
    assert [r.returncode for r in results] == [0] * 10, [r.stderr for r in results]
    listed = ls_json(brev_sim)
    assert sorted(w["name"] for w in listed) == sorted(names)
    assert len({w["id"] for w in listed}) == 10
    assert all(brev_sim.created_count(n) == 1 for n in names)


# -- delete / stop / start ----------------------------------------------------------------------
def test_delete_has_no_yes_flag(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.add_instance("d")
    res = brev(brev_sim, "delete", "d", "--yes")
    assert (res.returncode, res.stderr) == (1, "unknown flag: --yes\n")
    assert [w["name"] for w in ls_json(brev_sim)] == ["d"]


def test_delete_shows_deleting_then_gone_and_is_not_idempotent(brev_sim: BrevSim) -> None:
    real_seconds_per_nominal_second(brev_sim)
    brev_sim.login_api_key()
    brev_sim.add_instance("d")
    res = brev(brev_sim, "delete", "d")
    assert (res.returncode, res.stdout) == (0, "d\n")  # piped: names only
    assert [w["status"] for w in ls_json(brev_sim)] == ["DELETING"]
    brev_sim.advance(30)
    assert ls_json(brev_sim) == []
    again = brev(brev_sim, "delete", "d")
    assert again.returncode == 1
    assert again.stderr.startswith("1 error occurred:\n\t* ")
    assert "instance with id/name d not found" in again.stderr


def test_delete_reads_instance_names_from_piped_stdin(brev_sim: BrevSim) -> None:
    real_seconds_per_nominal_second(brev_sim)
    brev_sim.login_api_key()
    brev_sim.add_instance("p1")
    brev_sim.add_instance("p2")
    res = brev(brev_sim, "delete", input=b"p1\np2\n")
    assert (res.returncode, res.stdout) == (0, "p1\np2\n")
    assert {w["status"] for w in ls_json(brev_sim)} == {"DELETING"}
    (call,) = [c for c in brev_sim.calls() if c.program == "brev" and c.argv == ["delete"]]
    assert call.stdin_bytes == 6


def test_start_of_a_missing_name_prints_path_message_and_exits_0(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    res = brev(brev_sim, "start", "ghost", "-d")
    assert res.returncode == 0
    assert res.stdout == "tried to start with local path but path not found\nghost\n"


def test_start_of_a_running_instance_is_an_error(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.add_instance("r")
    res = brev(brev_sim, "start", "r", "-d")
    assert (res.returncode, res.stderr) == (1, "Instance is not stopped status=RUNNING\n")


def test_stop_then_start_detached(brev_sim: BrevSim) -> None:
    real_seconds_per_nominal_second(brev_sim)
    brev_sim.login_api_key()
    brev_sim.add_instance("s")
    assert brev(brev_sim, "stop", "s").stdout == "s\n"
    brev_sim.advance(20)
    assert ls_json(brev_sim)[0]["status"] == "STOPPED"
    res = brev(brev_sim, "start", "s", "--detached")
    assert res.returncode == 0
    assert "Instance s is starting." in res.stdout
    assert ls_json(brev_sim)[0]["status"] == "STARTING"


# -- exec ---------------------------------------------------------------------------------------
def test_exec_with_dash_dash_treats_only_the_last_word_as_the_command(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    res = brev(brev_sim, "exec", inst, "--", "docker", "inspect", "x")
    assert res.returncode == 1
    assert 'ssh connection failed and could not look up instance "docker"' in res.stderr
    assert 'could not look up instance "inspect"' in res.stderr
    assert res.stderr.startswith("\n=== inst ===\n")
    ran = [c.argv for c in brev_sim.calls() if c.where == "remote" and c.program == "bash"]
    assert ["-c", "x"] in ran  # the "command" that reached the instance


def test_exec_without_dash_dash_fails_flag_parsing(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    res = brev(brev_sim, "exec", inst, "ls", "-la")
    assert (res.returncode, res.stderr) == (1, "unknown shorthand flag: 'l' in -la\n")


def test_exec_argument_errors(brev_sim: BrevSim) -> None:
    ready_instance(brev_sim)
    none = brev(brev_sim, "exec")
    assert none.returncode == 1
    assert "requires at least 1 arg(s), only received 0" in none.stderr
    no_inst = brev(brev_sim, "exec", "echo hi")
    assert "instance name required: provide as argument or pipe from another command" in no_inst.stderr
    empty = brev(brev_sim, "exec", "inst", "")
    assert (empty.returncode, empty.stderr) == (1, "command is required\n")


def test_exec_appends_the_instance_name_when_stdout_is_piped(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    res = brev(brev_sim, "exec", inst, "echo hi")
    assert (res.returncode, res.stdout) == (0, "hi\ninst\n")


def test_exec_does_not_forward_stdin_it_reads_it_as_instance_names(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    res = brev(brev_sim, "exec", inst, "cat; echo done", input=b"data\n")
    assert res.returncode == 1
    assert res.stdout.startswith("done\ninst\n")  # remote cat saw EOF
    assert 'could not look up instance "data"' in res.stderr


def test_exec_reruns_a_failing_remote_command_and_exits_1(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    res = brev(brev_sim, "exec", inst, "echo run >> ~/count; exit 3")
    assert res.returncode == 1
    assert "Connection failed, checking instance status...\n" in res.stderr
    assert res.stderr.endswith("exit status 3\n")
    assert (brev_sim.instance_files(inst) / "count").read_text() == "run\nrun\n"


def test_exec_reads_a_command_file_with_at(brev_sim: BrevSim, tmp_path: Path) -> None:
    inst = ready_instance(brev_sim)
    script = tmp_path / "job.sh"
    script.write_text("echo from-file\n")
    res = brev(brev_sim, "exec", inst, f"@{script}")
    assert (res.returncode, res.stdout) == (0, "from-file\ninst\n")


def test_exec_on_a_missing_instance(brev_sim: BrevSim) -> None:
    ready_instance(brev_sim)
    res = brev(brev_sim, "exec", "ghost", "echo hi")
    assert res.returncode == 1
    assert 'ssh connection failed and could not look up instance "ghost"' in res.stderr
    assert "exit status 255\nPlease check your instances with: brev ls" in res.stderr


def test_exec_on_a_deploying_instance_does_not_wait(brev_sim: BrevSim) -> None:
    real_seconds_per_nominal_second(brev_sim)  # DEPLOYING is 1.2 s of wall time at speed 0.01
    brev_sim.login_api_key()
    brev_sim.add_instance("dep", status="DEPLOYING")
    res = brev(brev_sim, "exec", "dep", "echo hi")
    assert res.returncode == 1
    assert 'instance "dep" is in state "DEPLOYING" — please check with: brev ls' in res.stderr


def test_exec_when_ssh_is_refused_fails_without_waiting(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.add_instance("cold", ssh_ready=False)
    res = brev(brev_sim, "exec", "cold", "echo hi")
    assert res.returncode == 1
    assert 'could not connect to instance "cold"' in res.stderr
    assert "Please check with: brev ls" in res.stderr


def test_exec_on_a_stopped_instance_starts_it_first(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.add_instance("zz", status="STOPPED")
    brev_sim.set_faults(start_s=1, ssh_delay_s=0)
    res = brev(brev_sim, "exec", "zz", "echo hi")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "Instance zz is starting. \n\nhi\nzz\n"


def test_exec_without_ssh_auth_sock_spawns_an_agent_each_call(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    env = brev_sim.env()
    env.pop("SSH_AUTH_SOCK", None)
    assert brev(brev_sim, "exec", inst, "true", env=env).returncode == 0
    assert len([c for c in brev_sim.calls() if c.program == "ssh-agent"]) == 1
    env["SSH_AUTH_SOCK"] = "/nonexistent/agent.sock"
    assert brev(brev_sim, "exec", inst, "true", env=env).returncode == 0
    assert len([c for c in brev_sim.calls() if c.program == "ssh-agent"]) == 1


def test_exec_waits_for_background_jobs_holding_stdout(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    res = brev(brev_sim, "exec", inst, "(sleep 0.3; echo late) & echo early")
    assert res.stdout == "early\nlate\ninst\n"


def test_ssh_forwards_stdin_and_propagates_the_exit_code(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    res = remote(brev_sim, inst, "cat > ~/in.txt; exit 7", input=b"secret-bytes")
    assert res.returncode == 7
    assert (brev_sim.instance_files(inst) / "in.txt").read_bytes() == b"secret-bytes"
    (call,) = [c for c in brev_sim.calls() if c.program == "ssh"]
    assert call.stdin_bytes == len(b"secret-bytes")
    assert all("secret-bytes" not in " ".join(c.argv) for c in brev_sim.calls())


def test_remote_commands_run_in_the_sandbox_home(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    res = remote(brev_sim, inst, 'echo "$HOME"; pwd; command -v docker nvidia-smi | wc -l')
    home = str(brev_sim.instance_files(inst))
    assert res.stdout == f"{home}\n{home}\n2\n"


def test_deleting_an_instance_kills_its_containers(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    docker_login(brev_sim, inst)
    write_spec(brev_sim, inst, "j", epochs=100000)
    assert remote(brev_sim, inst, run_tao("j")).returncode == 0
    (obj,) = brev_sim.containers(inst)
    pid = obj["State"]["Pid"]
    assert brev(brev_sim, "delete", inst).returncode == 0

    def dead() -> bool:
        try:
            return not brev_sim.containers(inst)[0]["State"]["Running"]
        except KeyError:
            return True  # the delete already finished: the instance and its containers are purged

    wait_until(dead, "the container to die")
    # The kill is asynchronous to the listing: wait for the process itself to be gone too.
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), f"container process {pid} to exit")
    assert remote(brev_sim, inst, "true").returncode == 255


def test_an_instance_that_vanishes_mid_run_disappears_from_ls(brev_sim: BrevSim) -> None:
    real_seconds_per_nominal_second(brev_sim)
    brev_sim.login_api_key()
    brev_sim.set_faults(disappear_after_s=300)
    assert brev(brev_sim, "create", "flaky", "-t", "g6e.xlarge", "-d").returncode == 0
    brev_sim.advance(120 + 60)
    assert [w["status"] for w in ls_json(brev_sim)] == ["RUNNING"]
    brev_sim.advance(300)
    assert ls_json(brev_sim) == []


# -- docker on the instance ---------------------------------------------------------------------
def docker_login(sim: BrevSim, inst: str, key: bytes = b"nvapi-test-key") -> subprocess.CompletedProcess[str]:
    return remote(sim, inst, "docker login nvcr.io --username '$oauthtoken' --password-stdin", input=key)


def write_spec(sim: BrevSim, inst: str, job: str, *, epochs: int = 2, **simulation: Any) -> None:
    spec = {
        "simulation": {"epochs": epochs, "epoch_seconds": 1, **simulation},
        "train": {"num_epochs": epochs},
    }
    d = sim.instance_files(inst) / "taobrev" / job / "spec"
    d.mkdir(parents=True)
    (d / "spec.yaml").write_text(json.dumps(spec))  # JSON is YAML


def run_tao(job: str, *, detach: bool = True, gpus: bool = True) -> str:
    return (
        f"docker run {'-d ' if detach else '--rm '}--name {job} --label tao-job={job} "
        f"{'--gpus all ' if gpus else ''}--shm-size 16g -v ~/taobrev/{job}/spec:/workspace/spec:ro "
        f"-v ~/taobrev/{job}/results:/workspace/results {TAO} visual_changenet train "
        "-e /workspace/spec/spec.yaml results_dir=/workspace/results"
    )


def test_docker_login_reads_the_key_on_stdin_and_never_on_argv(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    res = docker_login(brev_sim, inst)
    assert (res.returncode, res.stdout) == (0, "Login Succeeded\n")
    (call,) = [c for c in brev_sim.calls() if c.program == "docker"]
    assert call.stdin_bytes == len(b"nvapi-test-key")
    assert call.where == "remote"
    assert call.instance == inst
    assert all("nvapi-test-key" not in " ".join(c.argv) for c in brev_sim.calls())
    empty = docker_login(brev_sim, inst, key=b"")
    assert empty.returncode == 1
    assert "Cannot perform an interactive login from a non TTY device" in empty.stderr


def test_docker_login_to_nvcr_needs_the_literal_oauthtoken_user(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    # double quotes: the remote shell expands $oauthtoken to "" (a classic quoting bug)
    expanded = remote(
        brev_sim, inst, 'docker login nvcr.io --username "$oauthtoken" --password-stdin', input=b"k"
    )
    assert (expanded.returncode, expanded.stderr) == (1, "Must provide --username with --password-stdin\n")
    wrong = remote(brev_sim, inst, "docker login nvcr.io --username admin --password-stdin", input=b"k")
    assert wrong.returncode == 1
    assert "unauthorized: authentication required" in wrong.stderr


def test_docker_manifest_inspect_needs_login_and_entitlement(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    probe = f"docker manifest inspect {TAO} >/dev/null && echo AUTH_OK || echo AUTH_FAIL"
    assert remote(brev_sim, inst, probe).stdout == "AUTH_FAIL\n"
    docker_login(brev_sim, inst)
    assert remote(brev_sim, inst, probe).stdout == "AUTH_OK\n"
    brev_sim.set_faults(ngc_entitlement=True)
    denied = remote(brev_sim, inst, f"docker manifest inspect {TAO}")
    assert denied.returncode == 1
    assert "unauthorized" in denied.stderr


def test_docker_image_inspect_then_pull(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    docker_login(brev_sim, inst)
    missing = remote(brev_sim, inst, f"docker image inspect {TAO}")
    assert missing.returncode == 1
    assert f"Error: No such image: {TAO}" in missing.stderr
    pull = remote(brev_sim, inst, f"docker pull {TAO}")
    assert pull.returncode == 0
    assert f"Status: Downloaded newer image for {TAO}" in pull.stdout
    assert "Pull complete" in pull.stdout
    assert remote(brev_sim, inst, f"docker image inspect {TAO} >/dev/null").returncode == 0


def test_docker_pull_failure_fault(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    docker_login(brev_sim, inst)
    brev_sim.set_faults(pull_fails="net/http: TLS handshake timeout")
    res = remote(brev_sim, inst, f"docker pull {TAO}")
    assert res.returncode == 1
    assert "TLS handshake timeout" in res.stderr


def test_docker_run_detached_inspect_wait_logs_ps_rm(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    docker_login(brev_sim, inst)
    write_spec(brev_sim, inst, "job1", epochs=2)
    started = brev(brev_sim, "exec", inst, run_tao("job1"))
    assert started.returncode == 0, started.stderr
    cid = started.stdout.splitlines()[0]
    assert len(cid) == 64
    state = json.loads(remote(brev_sim, inst, "docker inspect --format '{{json .State}}' job1").stdout)
    assert set(state) >= {
        "Status",
        "Running",
        "ExitCode",
        "StartedAt",
        "FinishedAt",
        "Pid",
        "OOMKilled",
        "Error",
    }
    assert remote(brev_sim, inst, "docker wait job1").stdout == "0\n"
    assert remote(
        brev_sim, inst, "docker inspect --format '{{.State.Status}} {{.State.ExitCode}}' job1"
    ).stdout == ("exited 0\n")
    full = json.loads(remote(brev_sim, inst, "docker inspect job1").stdout)
    assert full[0]["Config"]["Labels"] == {"tao-job": "job1"}
    assert full[0]["Name"] == "/job1"
    logs = remote(brev_sim, inst, "docker logs --tail 1 job1").stdout
    assert logs.endswith("train finished successfully\n")
    assert logs.count("\n") == 1
    ps = remote(brev_sim, inst, "docker ps -a --filter label=tao-job=job1 --format '{{.Names}} {{.State}}'")
    assert ps.stdout == "job1 exited\n"
    assert remote(brev_sim, inst, "docker ps --format '{{.Names}}'").stdout == ""
    results = brev_sim.instance_files(inst) / "taobrev" / "job1" / "results" / "train"
    assert (results / "model_latest.pth").exists()
    last = json.loads((results / "status.json").read_text().splitlines()[-1])
    assert (last["status"], last["message"]) == (
        "RUNNING",
        "Train finished successfully.",
    )  # TAO 6: no SUCCESS
    assert remote(brev_sim, inst, "docker rm -f job1").stdout == "job1\n"
    gone = remote(brev_sim, inst, "docker inspect job1")
    assert gone.returncode == 1
    assert "Error: No such object: job1" in gone.stderr


def test_docker_run_name_conflict_exits_125(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    docker_login(brev_sim, inst)
    write_spec(brev_sim, inst, "c", epochs=1)
    assert remote(brev_sim, inst, run_tao("c")).returncode == 0
    res = remote(brev_sim, inst, run_tao("c"))
    assert res.returncode == 125
    assert 'Conflict. The container name "/c" is already in use' in res.stderr


def test_docker_stop_sends_sigterm_and_the_exit_code_is_143(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    docker_login(brev_sim, inst)
    write_spec(brev_sim, inst, "long", epochs=100000)
    assert remote(brev_sim, inst, run_tao("long")).returncode == 0
    # A grace TAO can use on a loaded machine (docker's default 10 s is 0.1 s of wall time at this
    # speed, then SIGKILL: 137); the stop returns at the exit, so a long one costs nothing.
    assert remote(brev_sim, inst, f"docker stop -t {STOP_GRACE} long").stdout == "long\n"
    assert remote(brev_sim, inst, "docker wait long").stdout == "143\n"


def test_a_waiting_docker_wait_wakes_when_another_session_stops_the_container(brev_sim: BrevSim) -> None:
    """`docker wait` sleeps on the container's pidfds and a FIFO of its own that state writes poke
    (no polling): a stop from another ssh session must still end it with the container's exit
    code, and the FIFO goes with the wait."""
    inst = ready_instance(brev_sim)
    docker_login(brev_sim, inst)
    write_spec(brev_sim, inst, "long", epochs=100000)
    assert remote(brev_sim, inst, run_tao("long")).returncode == 0
    ssh = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", inst, "docker wait long"]
    waiting = subprocess.Popen(ssh, env=brev_sim.env(), stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        fifos = "instances/*/docker/containers/*/waiters/*"
        while not (waiter := next(brev_sim.state_dir.glob(fifos), None)):
            assert waiting.poll() is None, "docker wait ended before the stop"
            assert time.monotonic() < deadline, "docker wait never opened its FIFO (it would poll)"
            time.sleep(0.05)  # a directory entry: no event to wait on
        assert stat.S_ISFIFO(waiter.stat().st_mode)
        assert remote(brev_sim, inst, f"docker stop -t {STOP_GRACE} long").stdout == "long\n"
        out, _ = waiting.communicate(timeout=30)
        assert (waiting.returncode, out) == (0, "143\n")
        assert not waiter.exists(), "the ended wait left its FIFO behind"
    finally:
        waiting.kill()
        waiting.wait()
    status = brev_sim.instance_files(inst) / "taobrev" / "long" / "results" / "train" / "status.json"
    assert json.loads(status.read_text().splitlines()[-1])["status"] == "FAILURE"


def test_docker_run_foreground_rm_streams_output_and_returns_the_exit_code(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    docker_login(brev_sim, inst)
    write_spec(brev_sim, inst, "fg", epochs=1, exit_code=3)
    res = remote(brev_sim, inst, run_tao("fg", detach=False))
    assert res.returncode == 3
    assert "Epoch 1/1" in res.stdout
    assert remote(brev_sim, inst, "docker ps -a -q").stdout == ""  # --rm removed it


def test_training_failure_fault_and_missing_gpus(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    docker_login(brev_sim, inst)
    write_spec(brev_sim, inst, "t", epochs=1)
    brev_sim.set_faults(train_exit_code=137)
    assert remote(brev_sim, inst, run_tao("t", detach=False)).returncode == 137
    brev_sim.clear_faults()
    nogpu = remote(brev_sim, inst, run_tao("t", detach=False, gpus=False))
    assert nogpu.returncode == 1
    assert "No CUDA GPUs are available" in nogpu.stderr


def test_unknown_images_are_not_pulled(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    res = remote(brev_sim, inst, "docker run --rm ubuntu:22.04 true")
    assert res.returncode == 125
    assert "Unable to find image 'ubuntu:22.04' locally" in res.stderr
    assert "pull access denied" in res.stderr


def test_detached_container_does_not_hang_brev_exec(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    docker_login(brev_sim, inst)
    write_spec(brev_sim, inst, "bg", epochs=100000)
    res = brev(brev_sim, "exec", inst, run_tao("bg"))
    assert res.returncode == 0
    status = remote(brev_sim, inst, "docker inspect --format '{{.State.Running}}' bg").stdout
    assert status == "true\n"


def test_s3_upload_through_the_aws_cli_image(brev_sim: BrevSim, s3_server: S3Server) -> None:
    inst = ready_instance(brev_sim)
    s3_server.create_bucket("sim-results")
    job = brev_sim.instance_files(inst) / "taobrev" / "u"
    (job / "results" / "train").mkdir(parents=True)
    (job / "results" / "train" / "model.pth").write_bytes(b"weights")
    creds = b"AWS_ACCESS_KEY_ID=AKIATEST\nAWS_SECRET_ACCESS_KEY=very-secret\nAWS_DEFAULT_REGION=us-east-1\n"
    assert (
        remote(
            brev_sim, inst, "mkdir -p ~/taobrev/u/secrets && cat > ~/taobrev/u/secrets/s3.env", input=creds
        ).returncode
        == 0
    )
    upload = (
        f"docker run --rm --env-file ~/taobrev/u/secrets/s3.env -v ~/taobrev/u:/job {AWS} "
        f"--endpoint-url {s3_server.endpoint_url} s3 cp /job/results s3://sim-results/p/results --recursive"
    )
    res = remote(brev_sim, inst, upload)
    assert res.returncode == 0, res.stderr
    body = s3_server.client().get_object(Bucket="sim-results", Key="p/results/train/model.pth")["Body"].read()
    assert body == b"weights"
    aws_calls = [c for c in brev_sim.calls() if c.program == "aws"]
    assert aws_calls
    assert aws_calls[0].where == "remote"
    assert all("very-secret" not in " ".join(c.argv) for c in brev_sim.calls())
    brev_sim.set_faults(upload_fails="simulated outage")
    failed = remote(brev_sim, inst, upload)
    assert failed.returncode == 1
    assert "upload failed:" in failed.stderr


def test_docker_login_honours_docker_config(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    login = "DOCKER_CONFIG=~/job/docker docker login nvcr.io --username '$oauthtoken' --password-stdin"
    assert remote(brev_sim, inst, login, input=b"k").returncode == 0
    assert (brev_sim.instance_files(inst) / "job" / "docker" / "config.json").exists()
    assert remote(brev_sim, inst, f"docker manifest inspect {TAO}").returncode == 1  # ~/.docker has no login
    assert remote(brev_sim, inst, f"DOCKER_CONFIG=~/job/docker docker manifest inspect {TAO}").returncode == 0


def test_ssh_agent_stand_in_binds_the_requested_socket(brev_sim: BrevSim, tmp_path: Path) -> None:
    sock = tmp_path / "agent.sock"
    res = run(brev_sim, ["ssh-agent", "-s", "-a", str(sock)])
    assert res.returncode == 0
    assert f"SSH_AUTH_SOCK={sock}; export SSH_AUTH_SOCK;" in res.stdout
    assert sock.is_socket()
    assert [c.argv for c in brev_sim.calls() if c.program == "ssh-agent"] == [["-s", "-a", str(sock)]]


# -- declared knobs (faults.py) -----------------------------------------------------------------
def test_a_misspelled_fault_is_refused_naming_the_declared_one(brev_sim: BrevSim) -> None:
    with pytest.raises(UnknownFault, match="did you mean 'exec_never_ready'"):
        brev_sim.set_faults(exec_never_redy=True)
    assert not brev_sim.store.faults_path.exists(), "nothing was written"


def test_a_hand_written_unknown_fault_fails_the_simulated_cli_loudly(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.store.faults_path.write_text('{"create_fail": "boom"}')
    res = brev(brev_sim, "create", "x", "-t", "g6e.xlarge", "-d")
    assert res.returncode != 0
    assert "unknown simulator fault 'create_fail'" in res.stderr


def test_every_knob_is_documented_in_sim_contract_md() -> None:
    text = (Path(__file__).resolve().parents[1] / "brevsim" / "SIM-CONTRACT.md").read_text()
    undocumented = [name for name in KNOBS if f"`{name}`" not in text]
    assert undocumented == []


# -- whose instances a login sees and touches (section 11 of the CLI contract) ---------------------
TEAMMATE = "user-teammate"


def names(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(str(w["name"]) for w in rows)


def ls_all(sim: BrevSim) -> list[dict[str, Any]]:
    res = brev(sim, "ls", "--json", "--all")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout[res.stdout.index("{") :])["workspaces"] or []


def test_api_key_login_lists_and_resolves_the_whole_org(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.add_instance("mine")
    brev_sim.add_instance("theirs", owner=TEAMMATE)
    assert names(ls_json(brev_sim)) == ["mine", "theirs"]
    assert names(ls_all(brev_sim)) == ["mine", "theirs"]
    res = brev(brev_sim, "delete", "theirs")
    assert res.returncode == 0, res.stderr


def test_token_login_lists_only_its_own_instances_unless_all(brev_sim: BrevSim) -> None:
    brev_sim.add_instance("mine")
    brev_sim.add_instance("theirs", owner=TEAMMATE)
    brev_sim.login_as_user(BrevSim.USER_ID)
    assert names(ls_json(brev_sim)) == ["mine"]
    assert names(ls_all(brev_sim)) == ["mine", "theirs"]
    brev_sim.login_as_user(TEAMMATE)
    assert names(ls_json(brev_sim)) == ["theirs"]


def test_token_login_cannot_delete_or_exec_a_teammates_instance_even_when_listed(
    brev_sim: BrevSim,
) -> None:
    theirs = brev_sim.add_instance("theirs", owner=TEAMMATE)
    brev_sim.login_as_user(BrevSim.USER_ID)
    assert names(ls_all(brev_sim)) == ["theirs"]
    for target in ("theirs", theirs):
        res = brev(brev_sim, "delete", target)
        assert res.returncode == 1
        assert f"instance with id/name {target} not found" in res.stderr
    assert brev(brev_sim, "refresh").returncode == 0
    res = brev(brev_sim, "exec", "theirs", "echo hi")
    assert res.returncode == 1
    assert 'ssh connection failed and could not look up instance "theirs"' in res.stderr
    assert [w["status"] for w in ls_all(brev_sim)] == ["RUNNING"]
    brev_sim.login_as_user(TEAMMATE)
    assert brev(brev_sim, "delete", "theirs").returncode == 0, "the owner can"


def test_a_refresh_token_session_belongs_to_its_user(brev_sim: BrevSim) -> None:
    brev_sim.add_instance("theirs", owner=TEAMMATE)
    brev_sim.login_token(brev_sim.mint_refresh_token(user_id=TEAMMATE))
    assert names(ls_json(brev_sim)) == ["theirs"]


def test_delete_and_exec_by_id(brev_sim: BrevSim) -> None:
    ready_instance(brev_sim)
    real_seconds_per_nominal_second(brev_sim)
    inst_id = ls_json(brev_sim)[0]["id"]
    res = brev(brev_sim, "exec", inst_id, "echo hi")
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"hi\n{inst_id}\n"
    assert "Connection failed, checking instance status..." in res.stderr  # ids go the recovery path
    assert brev(brev_sim, "delete", inst_id).returncode == 0
    assert [w["status"] for w in ls_json(brev_sim)] == ["DELETING"]


def test_duplicate_names_drop_failed_ones_then_refuse_to_pick(brev_sim: BrevSim) -> None:
    real_seconds_per_nominal_second(brev_sim)
    brev_sim.login_api_key()
    brev_sim.add_instance("dup", status="FAILURE")
    live = brev_sim.add_instance("dup")
    assert brev(brev_sim, "delete", "dup").returncode == 0, "the one live instance is meant"
    statuses = {w["id"]: w["status"] for w in ls_json(brev_sim)}
    assert statuses[live] == "DELETING"
    second = brev_sim.add_instance("dup")
    third = brev_sim.add_instance("dup")
    res = brev(brev_sim, "delete", "dup")
    assert res.returncode == 1
    assert "multiple instances found with id/name dup" in res.stderr
    assert brev(brev_sim, "delete", second).returncode == 0
    assert brev(brev_sim, "delete", third).returncode == 0


def test_a_name_matching_only_failed_instances_is_a_failed_workspace(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.add_instance("bad", status="FAILURE")
    brev_sim.add_instance("bad", status="FAILURE")
    res = brev(brev_sim, "delete", "bad")
    assert res.returncode == 1
    assert "instance with id/name bad is a failed workspace" in res.stderr
    brev_sim.add_instance("lone", status="FAILURE")
    assert brev(brev_sim, "delete", "lone").returncode == 0, "a single match is taken as is"


def test_duplicate_rules_hold_for_a_token_login_among_its_own(brev_sim: BrevSim) -> None:
    brev_sim.add_instance("dup")
    brev_sim.add_instance("dup")
    brev_sim.add_instance("dup", owner=TEAMMATE)
    brev_sim.login_as_user(TEAMMATE)
    assert brev(brev_sim, "delete", "dup").returncode == 0, "only its own instance is a match"
    brev_sim.login_as_user(BrevSim.USER_ID)
    res = brev(brev_sim, "delete", "dup")
    assert "multiple instances found with id/name dup" in res.stderr


# -- a world as hostile as Brev -------------------------------------------------------------------
def test_ls_omit_hides_an_instance_from_the_next_n_listings_only(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.add_instance("keep")
    hidden = brev_sim.add_instance("blink")
    brev_sim.set_faults(ls_omit={hidden: 2})
    assert names(ls_json(brev_sim)) == ["keep"]
    assert names(ls_all(brev_sim)) == ["keep"]
    assert names(ls_json(brev_sim)) == ["blink", "keep"]
    brev_sim.set_faults(ls_omit={"blink": 1})
    assert names(ls_json(brev_sim)) == ["keep"]
    assert brev(brev_sim, "delete", "blink").returncode == 0, "it exists all along"


def test_an_accepted_delete_can_leave_the_instance_running_then_deleting(brev_sim: BrevSim) -> None:
    real_seconds_per_nominal_second(brev_sim)
    brev_sim.login_api_key()
    brev_sim.add_instance("slow")
    brev_sim.set_faults(delete_lag_s=60, delete_s=600)
    assert brev(brev_sim, "delete", "slow").returncode == 0
    assert [w["status"] for w in ls_json(brev_sim)] == ["RUNNING"]
    again = brev(brev_sim, "delete", "slow")
    assert again.returncode == 0, "still resolvable, accepted again"
    stop = brev(brev_sim, "stop", "slow")
    assert stop.returncode == 1
    assert "is being deleted" in stop.stderr, "a listed-but-deleted instance is never resurrected"
    brev_sim.advance(61)
    assert [w["status"] for w in ls_json(brev_sim)] == ["DELETING"]
    brev_sim.advance(600)
    assert ls_json(brev_sim) == []


def test_sshd_dead_while_ls_says_running_fails_exec_at_once(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    brev_sim.set_faults(sshd_dead=[inst])
    ws = ls_json(brev_sim)[0]
    assert (ws["status"], ws["shell_status"]) == ("RUNNING", "READY")
    direct = remote(brev_sim, inst, "echo hi")
    assert direct.returncode == 255
    assert "Connection reset by peer" in direct.stderr
    res = brev(brev_sim, "exec", inst, "echo hi")
    assert res.returncode == 1
    assert f'could not connect to instance "{inst}"' in res.stderr


def test_exec_hangs_while_ls_says_running(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    brev_sim.set_faults(exec_hangs=True)
    proc = subprocess.Popen(
        ["brev", "exec", inst, "echo hi"],
        env=brev_sim.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)  # still hanging; only the caller's own deadline ends it
        assert [w["status"] for w in ls_json(brev_sim)] == ["RUNNING"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=HANG_GUARD)


def test_docker_dead_fails_every_docker_command(brev_sim: BrevSim) -> None:
    inst = ready_instance(brev_sim)
    brev_sim.set_faults(docker_dead=True)
    res = remote(brev_sim, inst, "docker ps")
    assert res.returncode == 1
    assert "Cannot connect to the Docker daemon at unix:///var/run/docker.sock" in res.stderr
    assert remote(brev_sim, inst, "echo alive").stdout == "alive\n"


def test_training_output_has_progress_bars_and_a_huge_line_and_tail_counts_newlines_only(
    brev_sim: BrevSim,
) -> None:
    inst = ready_instance(brev_sim)
    docker_login(brev_sim, inst)
    write_spec(brev_sim, inst, "bars", epochs=1)
    brev_sim.set_faults(tao_progress_bars=True, tao_long_line_bytes=3_000_000)
    assert remote(brev_sim, inst, run_tao("bars")).returncode == 0
    assert remote(brev_sim, inst, "docker wait bars").stdout == "0\n"
    logs = remote(brev_sim, inst, "docker logs --tail 4 bars").stdout
    lines = logs.split("\n")
    assert len(lines) == 5, "four \\n-terminated lines"
    assert lines[-1] == ""
    assert len(lines[0]) >= 3_000_000
    assert lines[1].count("\r") == BAR_STEPS + 1, "a \\r-only run of redraws is ONE line"
    assert "Epoch 1/1: loss=" in lines[2]
    assert lines[3].endswith("train finished successfully")


def test_targeted_faults_hit_only_the_named_instances(brev_sim: BrevSim) -> None:
    ready_instance(brev_sim, "healthy")
    sick = brev_sim.add_instance("sick")
    assert brev(brev_sim, "refresh").returncode == 0
    brev_sim.set_faults(exec_never_ready=[sick], docker_dead=["sick"])
    assert remote(brev_sim, "healthy", "docker ps -q").returncode == 0
    refused = remote(brev_sim, "sick", "true")
    assert refused.returncode == 255
    assert "Connection refused" in refused.stderr
