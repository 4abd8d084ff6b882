"""Pure parts of the brev client: output parsers, argv builders, the exec sentinel, error mapping,
credential documents. Each expectation comes from the CLI source (restated in
tests/brevsim/SIM-CONTRACT.md)."""

from __future__ import annotations

import base64
import json
import re
import shlex
from pathlib import Path

import pytest

from controller.api.errors import (
    BrevPermanentError,
    BrevTransientError,
    InstanceAmbiguous,
    InstanceFailedWorkspace,
    InstanceNotFound,
    SpecError,
)
from controller.brev import cli, commands, credentials, output
from controller.brev.client import BrevCredentials, CreateRequest
from controller.brev.runner import RunResult

# ---- JSON / ls / search / version ----------------------------------------------------------------

LS_ONE = """no oauth found for token
{
  "workspaces": [
    {
      "name": "tbj-a",
      "id": "ws-1",
      "status": "RUNNING",
      "build_status": "COMPLETED",
      "shell_status": "READY",
      "health_status": "HEALTHY",
      "instance_type": "g6e.xlarge",
      "instance_kind": "gpu",
      "gpu": "L40S"
    }
  ]
}
"""


def test_ls_json_is_read_from_the_first_brace_line_after_stray_lines() -> None:
    [inst] = output.parse_instances(LS_ONE)
    assert inst.name == "tbj-a"
    assert (inst.status, inst.shell_status, inst.gpu, inst.instance_kind) == (
        "RUNNING",
        "READY",
        "L40S",
        "gpu",
    )


def test_ls_json_with_null_workspaces_means_no_instances() -> None:
    assert output.parse_instances('{\n  "workspaces": null\n}\n') == []


def test_ls_json_after_the_logged_out_prompt_without_newline_still_parses() -> None:
    # The prompt has no newline, so JSON may not start a line; but it then never follows (EOF).
    # What matters: a JSON line after other stray lines is found.
    text = "WARN: malformed refresh token, logging out\n" + '{"workspaces": null}'
    assert output.parse_instances(text) == []


def test_ls_output_without_json_is_an_error() -> None:
    with pytest.raises(ValueError, match="no JSON"):
        output.parse_instances("You have 0 instances in Org x\n")


def test_search_json_array_and_empty_outputs() -> None:
    doc = [
        {
            "type": "g6e.xlarge",
            "provider": "aws",
            "gpu_name": "L40S",
            "gpu_count": 1,
            "vram_per_gpu_gb": 48.0,
            "price_per_hour": 1.86,
            "cloud": "aws",
        }
    ]
    [entry] = output.parse_search(json.dumps(doc, indent=2))
    assert (entry.type, entry.gpu_name, entry.gpu_count, entry.vram_per_gpu_gb) == (
        "g6e.xlarge",
        "L40S",
        1,
        48.0,
    )
    assert entry.raw["cloud"] == "aws"
    assert output.parse_search("[]\n") == []
    assert output.parse_search("") == []


@pytest.mark.parametrize(
    ("stdout", "tag"),
    [
        ("Current Version: v0.6.327\n", "v0.6.327"),
        ("Current Version: 0.6.327\n", "v0.6.327"),
        ("Current Version: v0.6.327-2-g12d39b75\n", "v0.6.327-2-g12d39b75"),
        (
            "A new version of brev has been released!\nCurrent version: v0.6.320\nNew Version: v0.6.327\n",
            "v0.6.320",
        ),
    ],
)
def test_version_line_is_parsed(stdout: str, tag: str) -> None:
    assert output.parse_version(stdout) == tag


def test_unparseable_version_output_raises() -> None:
    with pytest.raises(ValueError):
        output.parse_version("brev version unknown\n")


def test_version_mismatch_is_a_warning_naming_both_versions() -> None:
    assert output.version_warning("v0.6.327", "v0.6.327") is None
    warning = output.version_warning("v0.6.335", "v0.6.327")
    assert warning is not None
    assert "v0.6.335" in warning
    assert "v0.6.327" in warning


# ---- create argv ---------------------------------------------------------------------------------

CREATE_HELP_FLAGS = output.help_flags(
    """Flags:
  -n, --name string             Base name
  -t, --type string             Comma-separated list of instance types to try
  -d, --detached                Don't wait
      --timeout int             Timeout in seconds (default 300)
  -g, --gpu-name string         Filter by GPU name
  -v, --min-vram float          Minimum VRAM per GPU in GB
Global Flags:
      --no-check-latest   Do not check
"""
)


def test_help_flags_never_confuse_gpu_name_with_gpu() -> None:
    assert "gpu-name" in CREATE_HELP_FLAGS
    assert "gpu" not in CREATE_HELP_FLAGS
    assert {"detached", "type", "timeout", "min-vram", "no-check-latest"} <= CREATE_HELP_FLAGS


def test_create_argv_uses_name_detached_and_long_flags_only() -> None:
    request = CreateRequest(
        name="tbj-ns-job-1234abcd",
        types=("g6e.xlarge", "g5.xlarge"),
        gpu_name="L40S",
        min_vram=24.0,
        min_disk=500,
        max_boot_time=7,
        timeout_seconds=300,
    )
    argv = commands.create_argv("brev", request, CREATE_HELP_FLAGS)
    assert argv[:4] == ["brev", "create", "tbj-ns-job-1234abcd", "--detached"]
    assert argv[argv.index("--type") + 1] == "g6e.xlarge,g5.xlarge"
    assert argv[argv.index("--gpu-name") + 1] == "L40S"
    assert argv[argv.index("--min-vram") + 1] == "24"
    assert argv[argv.index("--min-disk") + 1] == "500"
    assert argv[argv.index("--max-boot-time") + 1] == "7"
    assert all(not re.fullmatch(r"-[a-zA-Z]", a) for a in argv), (
        "short flags differ between create and search"
    )


def test_create_argv_formats_fractional_numbers_without_exponents() -> None:
    argv = commands.create_argv(
        "brev", CreateRequest(name="a", min_capability=8.6, min_vram=1_000_000), frozenset()
    )
    assert argv[argv.index("--min-capability") + 1] == "8.6"
    assert argv[argv.index("--min-vram") + 1] == "1000000"


@pytest.mark.parametrize(
    ("field", "spec_field"),
    [("cloud_cred_id", "cloudCredId"), ("workspace_group_id", "workspaceGroupId"), ("gpu", "gpu")],
)
def test_seed_only_create_fields_are_refused_when_the_cli_lacks_the_flag(field: str, spec_field: str) -> None:
    request = CreateRequest(name="a", **{field: "x"})  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=spec_field):
        commands.create_argv("brev", request, CREATE_HELP_FLAGS)


def test_seed_only_create_fields_pass_through_when_the_cli_has_the_flag() -> None:
    flags = CREATE_HELP_FLAGS | {"cloud-cred-id", "workspace-group-id", "gpu"}
    request = CreateRequest(name="a", cloud_cred_id="cc-1", workspace_group_id="wg-1", gpu="L40S:1")
    argv = commands.create_argv("brev", request, flags)
    assert argv[argv.index("--cloud-cred-id") + 1] == "cc-1"
    assert argv[argv.index("--workspace-group-id") + 1] == "wg-1"
    assert argv[argv.index("--gpu") + 1] == "L40S:1"


def test_create_rejects_startup_script_that_would_read_a_local_file() -> None:
    with pytest.raises(SpecError, match="startupScript"):
        commands.create_argv("brev", CreateRequest(name="a", startup_script="@/etc/passwd"), frozenset())


@pytest.mark.parametrize("name", ["", "-a", "a b", "a/b", "x" * 64, "_a"])
def test_invalid_instance_names_are_rejected_before_calling_brev(name: str) -> None:
    with pytest.raises(SpecError, match="not a valid brev name"):
        commands.check_name(name)


# ---- exec sentinel -------------------------------------------------------------------------------

TRICKY_COMMANDS = [
    "echo ok",
    "echo 'single' \"double\" `backtick`",
    "printf '%s\\n' \"$HOME\" '$HOME' \\$HOME",
    "echo a; echo b && false || echo c",
    "echo it's; echo \"quote'd\"",
    "line1\nline2 'with quotes'\n  indented $VAR",
    "echo -la --",
    "cat <<'EOF'\nhere doc $x\nEOF",
    "echo '\"'\"'\"'",
    "exit 7",
    "echo ✓ ünïcode",
]


def _brev_local_form(command: str) -> str:
    """How brev embeds the command in its local `bash -c` string (SIM-CONTRACT.md section 5)."""
    escaped = command.replace("'", "'\"'\"'")
    return f"ssh -T -o ConnectTimeout=5 -o LogLevel=ERROR inst '{escaped}'"


def _inner_command(wrapped: str) -> str:
    """Recover what the remote `bash -c` receives from a wrapped command string."""
    lexer = shlex.shlex(wrapped, posix=True, punctuation_chars=True)
    tokens = list(lexer)
    assert tokens[:2] == ["bash", "-c"]
    arg = tokens[2]
    match = re.fullmatch(r"\$\(printf %s ([A-Za-z0-9+/=]+) \| base64 -d\)", arg)
    if match:
        return base64.b64decode(match.group(1)).decode()
    return arg


@pytest.mark.parametrize("command", TRICKY_COMMANDS)
def test_wrapped_command_is_one_line_and_survives_brev_and_shell_quoting(command: str) -> None:
    marker = commands.new_marker()
    wrapped = commands.wrap_command(command, marker)
    assert "\n" not in wrapped, "multi-line payloads hang brev exec (#429)"
    assert "\r" not in wrapped, "multi-line payloads hang brev exec (#429)"
    assert not wrapped.startswith("@")
    # brev quotes it for its local bash; the remote shell receives exactly `wrapped` back.
    assert shlex.split(_brev_local_form(wrapped))[-1] == wrapped
    assert _inner_command(wrapped) == command
    assert wrapped.endswith(f"printf '\\n%s %s\\n' {marker} \"$?\"")


def test_commands_starting_with_at_or_empty_are_refused() -> None:
    for bad in ("@script.sh", "", "   ", "a\0b"):
        with pytest.raises(ValueError):
            commands.wrap_command(bad, "m")


def test_markers_are_random_per_call() -> None:
    assert commands.new_marker() != commands.new_marker()


# ---- remote paths for put_file -------------------------------------------------------------------


def test_put_file_command_expands_home_and_quotes_the_rest() -> None:
    command = commands.put_file_command("~/taobrev/j 1/secrets/ngc key", 0o600, "abcd")
    assert command.startswith("umask 077 && mkdir -p \"$HOME\"/'taobrev/j 1/secrets' && cat > ")
    assert "chmod 600" in command
    assert command.endswith("\"$HOME\"/'taobrev/j 1/secrets/ngc key'")


@pytest.mark.parametrize("path", ["relative/file", "~/", "/"])
def test_put_file_refuses_paths_that_are_not_files(path: str) -> None:
    with pytest.raises(ValueError):
        commands.put_file_command(path, 0o600, "t")


# ---- error mapping -------------------------------------------------------------------------------


def _r(stdout: str = "", stderr: str = "", rc: int = 1) -> RunResult:
    return RunResult(returncode=rc, stdout=stdout, stderr=stderr, seconds=0.1)


TRACE = (
    "[error] \ngithub.com/brevdev/brev-cli/pkg/cmd/gpucreate.RunCreate\n"
    "pkg/cmd/gpucreate/gpucreate.go:512\n: "
)


@pytest.mark.parametrize(
    ("result", "auth"),
    [
        (_r("You are currently logged out, would you like to log in? [Y/n]: ", "EOF\n"), True),
        (_r("", TRACE + "EOF\n"), True),
        (_r("WARN: malformed refresh token, logging out\n", "x"), True),
        (_r("", TRACE + "401 Unauthorized: invalid or expired token"), True),
        (_r("", "could only create 0/1 instances"), False),
        (_r("", "instance with id/name x not found"), False),
    ],
)
def test_auth_failures_are_recognised_by_substring(result: RunResult, auth: bool) -> None:
    assert output.is_auth_failure(result) is auth


def test_create_duplicate_name_is_adopted() -> None:
    result = _r(
        "",
        "Error: workspace 'tbj-a' already exists. Use a different name or delete the existing workspace\n"
        + TRACE
        + "could only create 0/1 instances",
    )
    assert output.create_outcome("tbj-a", result).adopted is True
    assert output.create_outcome("tbj-a", _r("tbj-a\n", "", 0)).adopted is False


@pytest.mark.parametrize(
    ("stderr", "error", "reason"),
    [
        (
            "Trying g6e.xlarge for 1 instance(s)...\n"
            'Skipping: instance type "g6e.xlarge" is currently unavailable '
            "(no capacity); try again later\n\nWarning: Only created 0/1 instances\n"
            + TRACE
            + "could only create 0/1 instances",
            BrevTransientError,
            "InsufficientCapacity",
        ),
        (
            TRACE
            + "no GPU instances match the specified filters. Try 'brev search' to see available options",
            BrevPermanentError,
            "NoMatchingInstanceType",
        ),
        (
            "Skipping: instance type \"zz\" is not a recognized type; run 'brev search'\n"
            + TRACE
            + "could only create 0/1 instances",
            BrevPermanentError,
            "UnknownInstanceType",
        ),
        ("unknown flag: --gpu", BrevPermanentError, "BrevRequestRejected"),
        (TRACE + "name must be 63 characters or fewer (got 70)", BrevPermanentError, "BrevRequestRejected"),
        (TRACE + "dial tcp: i/o timeout", BrevTransientError, "BrevUnavailable"),
    ],
)
def test_create_failures_map_onto_the_hierarchy_keeping_the_cli_message(
    stderr: str, error: type[Exception], reason: str
) -> None:
    with pytest.raises(error) as info:
        output.create_outcome("tbj-a", _r("", stderr))
    assert info.value.reason == reason  # type: ignore[attr-defined]
    assert stderr.strip()[-40:] in info.value.cli_message  # type: ignore[attr-defined]


# brev create's type fallback (pkg/cmd/gpucreate): a type without capacity is skipped on the CLI
# side (nothing sent), then the next type's request reaches Brev and fails. That failure decides:
# a 502 or a timeout may have created the instance, so it is no refusal (issue 25, scenario 7).
_SKIP_CAPACITY = (
    "Attempting to create 1 instance(s) with 1 parallel attempts\n"
    "Instance types to try: g6e.xlarge, g6.xlarge\n\n"
    "Trying g6e.xlarge for 1 instance(s)...\n"
    'Skipping: instance type "g6e.xlarge" is currently unavailable (no capacity); try again later '
    "or run 'brev search' to find another type\n\nType g6e.xlarge had failures, trying next type...\n\n"
    "Trying g6.xlarge for 1 instance(s)...\n"
    "[Worker 1] Trying g6.xlarge for instance 'tbj-a'...\n"
)
_AFTER_ATTEMPT = "\nType g6.xlarge had failures, trying next type...\n\nWarning: Only created 0/1 instances\n"


@pytest.mark.parametrize(
    "failure",
    [
        "502 Bad Gateway",
        'Post "https://brevapi.example/api/organizations/o/workspaces": context deadline exceeded '
        "(Client.Timeout exceeded while awaiting headers)",
        "500 Internal Server Error: please retry",
    ],
)
def test_a_failure_after_a_capacity_skip_is_no_refusal(failure: str) -> None:
    stderr = (
        _SKIP_CAPACITY
        + f"[Worker 1] g6.xlarge Failed: {TRACE}{failure}\n"
        + _AFTER_ATTEMPT
        + TRACE
        + "could only create 0/1 instances"
    )
    with pytest.raises(BrevTransientError) as info:
        output.create_outcome("tbj-a", _r("", stderr))
    assert info.value.reason != "InsufficientCapacity"
    assert info.value.reason not in ("UnknownInstanceType", "NoMatchingInstanceType")
    assert "may exist" in info.value.message
    assert failure in info.value.cli_message


def test_an_unrecognized_type_skipped_before_a_failed_request_is_no_permanent_refusal() -> None:
    stderr = (
        "Trying zz for 1 instance(s)...\n"
        "Skipping: instance type \"zz\" is not a recognized type; run 'brev search' to see available types\n"
        "Trying g6.xlarge for 1 instance(s)...\n"
        "[Worker 1] Trying g6.xlarge for instance 'tbj-a'...\n"
        f"[Worker 1] g6.xlarge Failed: {TRACE}502 Bad Gateway\n"
        + _AFTER_ATTEMPT
        + TRACE
        + "could only create 0/1 instances"
    )
    with pytest.raises(BrevTransientError) as info:
        output.create_outcome("tbj-a", _r("", stderr))
    assert info.value.reason == "BrevUnavailable"


def test_every_type_skipped_for_capacity_is_a_refusal_even_with_a_retry_hint() -> None:
    stderr = (
        "Trying a for 1 instance(s)...\n"
        'Skipping: instance type "a" is currently unavailable (no capacity); try again later\n'
        "Trying b for 1 instance(s)...\n"
        'Skipping: could not resolve workspace group for "b" (instance-type listing was unavailable); '
        "please retry\n\nWarning: Only created 0/1 instances\n" + TRACE + "could only create 0/1 instances"
    )
    with pytest.raises(BrevTransientError) as info:
        output.create_outcome("tbj-a", _r("", stderr))
    assert info.value.reason == "InsufficientCapacity"


def test_delete_of_missing_instance_is_instance_not_found() -> None:
    stderr = "1 error occurred:\n\t* " + TRACE + "instance with id/name tbj-a not found\n\n"
    with pytest.raises(InstanceNotFound):
        output.delete_outcome("tbj-a", _r("", stderr))
    output.delete_outcome("tbj-a", _r("tbj-a\n", "", 0))


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ("multiple instances found with id/name tbj-a", InstanceAmbiguous),
        ("instance with id/name tbj-a is a failed workspace", InstanceFailedWorkspace),
        ("instance with id/name tbj-a not found", InstanceNotFound),
    ],
)
def test_delete_resolution_failures_map_onto_their_own_errors(message: str, error: type[Exception]) -> None:
    stderr = "1 error occurred:\n\t* " + TRACE + message + "\n\n"
    with pytest.raises(error) as info:
        output.delete_outcome("tbj-a", _r("", stderr))
    assert type(info.value) is error
    assert message in str(info.value)


def test_start_of_missing_instance_exits_zero_but_is_instance_not_found() -> None:
    with pytest.raises(InstanceNotFound):
        output.start_outcome("tbj-a", _r("tried to start with local path but path not found\ntbj-a\n", "", 0))


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        ("RUNNING", None),
        ("STARTING", None),
        ("STOPPING", BrevTransientError),
        ("FAILURE", BrevPermanentError),
    ],
)
def test_start_of_a_not_stopped_instance(status: str, outcome: type[Exception] | None) -> None:
    result = _r("", TRACE + f"Instance is not stopped status={status}")
    if outcome is None:
        output.start_outcome("tbj-a", result)
    else:
        with pytest.raises(outcome):
            output.start_outcome("tbj-a", result)


# ---- credentials ---------------------------------------------------------------------------------


def _jwt(claims: dict[str, object]) -> str:
    def enc(d: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    return f"{enc({'alg': 'HS256', 'typ': 'JWT'})}.{enc(claims)}.c2ln"


def test_api_key_credentials_have_the_shape_brev_login_api_key_leaves() -> None:
    doc, org = credentials.credentials_documents(BrevCredentials(api_key="bak-abc", org_id="org-1"), now=0)
    assert doc == {"access_token": "", "refresh_token": "", "api_key": "bak-abc", "api_key_org_id": "org-1"}
    assert org == {"id": "org-1", "name": "org-1", "userNetworkId": ""}


def test_unexpired_jwt_token_is_stored_as_access_token() -> None:
    token = _jwt({"exp": 2000, "iss": "https://login.nvidia.com"})
    doc, org = credentials.credentials_documents(BrevCredentials(token=token), now=1000)
    assert doc == {"access_token": token, "refresh_token": "auto-login"}
    assert org is None


def test_expired_jwt_or_opaque_token_is_stored_as_refresh_token() -> None:
    expired = _jwt({"exp": 500})
    assert credentials.credentials_documents(BrevCredentials(token=expired), now=1000)[0] == {
        "access_token": "auto-login",
        "refresh_token": expired,
    }
    assert credentials.credentials_documents(BrevCredentials(token="sess:dev"), now=1000)[0] == {
        "access_token": "auto-login",
        "refresh_token": "sess:dev",
    }


@pytest.mark.parametrize(
    ("creds", "message"),
    [
        (BrevCredentials(api_key="bak-x"), "org id"),
        (BrevCredentials(api_key="key-x", org_id="o"), "must start with 'bak-'"),
        (BrevCredentials(api_key="bak-x", org_id="o", token="t"), "both"),
        (BrevCredentials(), "neither"),
    ],
)
def test_bad_credentials_are_a_configuration_error_naming_the_fix(
    creds: BrevCredentials, message: str
) -> None:
    with pytest.raises(cli.BrevConfigError, match=message):
        credentials.validate_credentials(creds)


def test_credentials_repr_never_shows_secret_values() -> None:
    text = repr(BrevCredentials(api_key="bak-supersecret", org_id="org-1", token="tok-supersecret"))
    assert "supersecret" not in text
    assert "org-1" in text


# ---- identity ------------------------------------------------------------------------------------


def test_api_key_identity_names_the_org_and_a_key_digest_never_the_key() -> None:
    creds = BrevCredentials(api_key="bak-SECRETKEY", org_id="org-1")
    ident, learn = credentials.identity_of(creds, "", {})
    assert ident == f"org-key:org-1:{credentials.secret_digest('bak-SECRETKEY')}"
    assert "SECRETKEY" not in ident
    assert learn is None
    other, _ = credentials.identity_of(BrevCredentials(api_key="bak-OTHER", org_id="org-1"), "", {})
    assert other != ident


def test_jwt_token_identity_is_its_subject() -> None:
    token = _jwt({"sub": "user-42", "exp": 9e9})
    assert credentials.identity_of(BrevCredentials(token=token), "", {}) == ("user:user-42", None)


def test_opaque_token_identity_is_learnt_from_the_refreshed_access_jwt_and_stays_stable() -> None:
    creds = BrevCredentials(token="sess:dev")
    digest = credentials.secret_digest("sess:dev")
    assert credentials.identity_of(creds, "auto-login", {}) == (f"token:{digest}", None)
    ident, learn = credentials.identity_of(creds, _jwt({"sub": "user-7"}), {})
    assert (ident, learn) == ("user:user-7", digest)
    # a re-login puts "auto-login" back into credentials.json: the learnt identity stays
    assert credentials.identity_of(creds, "auto-login", {digest: ident}) == ("user:user-7", None)


def test_read_access_token_tolerates_missing_and_broken_files(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    assert credentials.read_access_token(path) == ""
    path.write_text("{not json")
    assert credentials.read_access_token(path) == ""
    path.write_text('{"access_token": "abc"}')
    assert credentials.read_access_token(path) == "abc"
