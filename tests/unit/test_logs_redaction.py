"""controller.observability.logs: one format for structlog and stdlib (kopf) lines, and secrets
never printed."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from controller.brev.client import BrevCredentials
from controller.brev.credentials import identity_of
from controller.observability.logs import (
    MASK,
    configure_logging,
    forget_registered_secrets,
    job_logger,
    redact_text,
    redact_value,
    register_secret,
)

# Clearly fake values shaped like the real thing.
NGC_KEY = "nvapi-FAKEfakeFAKEfake0123456789abcdefABCDEF_-xyz"
BREV_KEY = "bak-2FAKEfake3FAKEfake4FAKE"
AWS_ID = "AKIAFAKEFAKEFAKE1234"
AWS_SECRET = "fAkE/SeCrEt+KeY0123456789abcdefGHIJKLMNO"  # 40 chars
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJmYWtlIn0.c2lnbmF0dXJlLWZha2U"


@pytest.fixture(autouse=True)
def _clean_logging() -> Iterator[None]:
    """configure_logging touches process-wide state: restore it after each test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    kopf_filters = list(logging.getLogger("kopf.objects").filters)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("kopf.objects").filters[:] = kopf_filters
    structlog.reset_defaults()
    forget_registered_secrets()


def json_lines(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


# -- pattern-based redaction -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "leaked"),
    [
        (f"export NGC_API_KEY={NGC_KEY}", NGC_KEY),
        (f"key is {NGC_KEY} ok", NGC_KEY),
        (f"brev login --api-key {BREV_KEY} --org-id org-1", BREV_KEY),
        (f"brev login --api-key={BREV_KEY}", BREV_KEY),
        (f"using {BREV_KEY}", BREV_KEY),
        (f"AWS_ACCESS_KEY_ID={AWS_ID}", AWS_ID),
        (f"access key {AWS_ID} denied", AWS_ID),
        (f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", AWS_SECRET),
        (f"aws configure set aws_secret_access_key {AWS_SECRET}", AWS_SECRET),
        (f'{{"SecretAccessKey": "{AWS_SECRET}"}}', AWS_SECRET),
        (f"token={JWT}", JWT),
        (f"got {JWT} from server", JWT),
        ("Authorization: Bearer abcdef123456", "abcdef123456"),
        ("curl -H 'Authorization: Basic dXNlcjpwYXNz'", "dXNlcjpwYXNz"),
        ("password=hunter2hunter2", "hunter2hunter2"),
        ('{"password": "correct horse battery"}', "correct horse battery"),
        ("client_secret: s3cr3tv4lue", "s3cr3tv4lue"),
        ("X-Api-Key: abc123def456", "abc123def456"),
        ("db_credential=opensesame", "opensesame"),
        ("docker login nvcr.io --password plainpass1", "plainpass1"),
        ("docker login nvcr.io --password=plainpass1", "plainpass1"),
        ("docker login -u $oauthtoken -p plainpass2 nvcr.io", "plainpass2"),
        ("brev login --token refreshtok:device1", "refreshtok:device1"),
    ],
)
def test_credential_looking_text_is_masked(text: str, leaked: str) -> None:
    """Credentials are masked by shape or by their key/flag name, without being registered."""
    redacted = redact_text(text)
    assert leaked not in redacted
    assert MASK in redacted


@pytest.mark.parametrize(
    "text",
    [
        "job team-a/visual-changenet-train-01 entered Running",
        "uploading to s3://tao-results/team-a/run-7/results/",
        "s3://my-secret-bucket/tokens/train.tfrecord",
        "instance tbj-3f2a9c1e-visual-changenet is RUNNING",
        "instance bak-visual-changenet-01 is RUNNING",
        "ssh -p 22 ubuntu@host",
        "mkdir -p /workspace/data/images",
        "docker run --gpus 1 --shm-size 16g nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt",
        "secretName=ngc-credentials secretKeyRef=NGC_API_KEY",
        "TAOBREV_KUBE_TOKEN_PATH=/var/run/secrets/taobrev/kubernetes/token",
        "accessKeyIdKey=AWS_ACCESS_KEY_ID secretAccessKeyKey=AWS_SECRET_ACCESS_KEY",
        "sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9",
        "Secret ngc-credentials has no key NGC_API_KEY; add it or set credentials.ngcApiKey.key",
        "container exited with code 137 after 3601 s",
    ],
)
def test_ordinary_text_is_not_redacted(text: str) -> None:
    """Job names, S3 URIs, instance names, Secret NAMES and ordinary flags stay readable."""
    assert redact_text(text) == text


def test_registered_secret_is_masked_anywhere() -> None:
    """A registered value is masked wherever it appears, even when it looks ordinary, and in a
    text redacted before it was registered (short texts' answers are kept: never a stale one)."""
    long = "x" * 300 + " 0penSesame"
    assert redact_text("plain words 0penSesame here") == "plain words 0penSesame here"
    assert redact_text(long) == long
    register_secret("0penSesame")
    register_secret(b"bytes-secret-9")
    assert redact_text("plain words 0penSesame here") == f"plain words {MASK} here"
    assert redact_text(long) == "x" * 300 + f" {MASK}"
    assert redact_text("x=bytes-secret-9;") == f"x={MASK};"
    assert redact_text("prefix0penSesamesuffix") == f"prefix{MASK}suffix"


def test_registered_secret_containing_another_is_masked_whole() -> None:
    """Overlapping registered values: the longer one is masked entirely, no tail leaks."""
    register_secret("abcd")
    register_secret("abcd-efgh-ijkl")
    assert redact_text("v=abcd-efgh-ijkl") == f"v={MASK}"


def test_tiny_or_empty_values_are_not_registered() -> None:
    """Empty and very short values are ignored, so they cannot mask every 'a' in the logs."""
    register_secret("")
    register_secret(None)
    register_secret("ab")
    assert redact_text("a cab ab") == "a cab ab"


def test_nested_structures_are_redacted() -> None:
    """Dict keys named like credentials mask their values; lists and dicts are walked."""
    register_secret("registered-value-1")
    value = {
        "env": [{"name": "NGC_API_KEY", "value": NGC_KEY}, {"name": "EPOCHS", "value": "10"}],
        "headers": {"Authorization": "Bearer zzzzzzzzzz", "Accept": "json"},
        "password": 12345678,
        "api_key": None,
        "credentials": {"ngcApiKey": {"name": "ngc", "key": "NGC_API_KEY"}},
        "argv": ["brev", "login", "--api-key", "opaquevalue", "--org-id", "org-1"],
        "docker": ("docker", "login", "-u", "$oauthtoken", "-p", "opaque2", "nvcr.io"),
        "ports": ["ssh", "-p", "22"],
        "notes": ["free text registered-value-1 inside"],
    }
    out = redact_value(value)
    flat = json.dumps(out)
    for leaked in (NGC_KEY, "zzzzzzzzzz", "12345678", "opaquevalue", "opaque2", "registered-value-1"):
        assert leaked not in flat
    assert out["env"][1] == {"name": "EPOCHS", "value": "10"}
    assert out["headers"]["Accept"] == "json"
    assert out["api_key"] is None  # "not set" is useful and not a secret
    assert out["credentials"] == {"ngcApiKey": {"name": "ngc", "key": "NGC_API_KEY"}}
    assert out["argv"][-2:] == ["--org-id", "org-1"]
    assert isinstance(out["docker"], tuple)
    assert out["ports"] == ["ssh", "-p", "22"]


# -- the configured pipeline -----------------------------------------------------------------------


def test_job_logger_lines_carry_job_identity_as_json() -> None:
    """Every job_logger line has namespace, name, uid, phase, instance, level and timestamp."""
    buf = io.StringIO()
    configure_logging(json=True, stream=buf)
    log = job_logger("team-a", "train-1", "uid-1", "Running", "tbj-uid-1")
    log.info("container started", exit_code=None)
    log.warning("slow pull")
    lines = json_lines(buf)
    assert len(lines) == 2
    for line in lines:
        assert {k: line[k] for k in ("namespace", "name", "uid", "phase", "instance")} == {
            "namespace": "team-a",
            "name": "train-1",
            "uid": "uid-1",
            "phase": "Running",
            "instance": "tbj-uid-1",
        }
        assert line["timestamp"].endswith("Z")
    assert [line["level"] for line in lines] == ["info", "warning"]
    assert lines[0]["event"] == "container started"


def test_structlog_fields_and_event_text_are_redacted() -> None:
    """Registered values and credential shapes are masked in the event text and in every field."""
    buf = io.StringIO()
    configure_logging(json=True, stream=buf)
    register_secret("S3-secret-value-xyz")
    log = job_logger("ns", "j", "u", "Uploading", None)
    log.info(
        f"upload with S3-secret-value-xyz and {NGC_KEY}",
        env={"AWS_SECRET_ACCESS_KEY": "S3-secret-value-xyz"},
        token="anything",
        argv=["aws", "s3", "cp", "--sse-c-key", "S3-secret-value-xyz"],
        results_uri="s3://bucket/prefix/results/",
    )
    raw = buf.getvalue()
    assert "S3-secret-value-xyz" not in raw
    assert NGC_KEY not in raw
    (line,) = json_lines(buf)
    assert line["token"] == MASK
    assert line["results_uri"] == "s3://bucket/prefix/results/"
    assert line["instance"] is None


def test_stdlib_kopf_style_lines_get_same_format_and_redaction() -> None:
    """kopf logs through stdlib (with k8s_ref extras): same JSON shape, same masking, object fields."""
    buf = io.StringIO()
    configure_logging(json=True, stream=buf)
    register_secret("kopf-leak-value")
    ref = {
        "apiVersion": "taobrev.io/v1alpha1",
        "kind": "TaoBrevJob",
        "name": "j1",
        "uid": "u1",
        "namespace": "ns1",
    }
    logging.getLogger("kopf.objects").info(
        "Handler 'reconcile' failed: %s", "token=kopf-leak-value", extra={"k8s_ref": ref}
    )
    logging.getLogger("kopf.activities.startup").warning("Bearer abcdefghijkl rejected")
    raw = buf.getvalue()
    assert "kopf-leak-value" not in raw
    assert "abcdefghijkl" not in raw
    first, second = json_lines(buf)
    assert first["logger"] == "kopf.objects"
    assert first["level"] == "info"
    assert (first["namespace"], first["name"], first["uid"]) == ("ns1", "j1", "u1")
    assert first["event"].startswith("Handler 'reconcile' failed: token=")
    assert second["logger"] == "kopf.activities.startup"
    assert second["event"] == f"Bearer {MASK} rejected"
    assert "timestamp" in second


def test_kopf_event_poster_sees_redacted_message() -> None:
    """Handlers on kopf.objects (kopf's Event poster is one) receive the already-masked message."""
    configure_logging(json=True, stream=io.StringIO())
    register_secret("event-leak-value")
    seen: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    capture = Capture()
    kopf_objects = logging.getLogger("kopf.objects")
    kopf_objects.addHandler(capture)
    try:
        kopf_objects.warning("retrying after %s", "event-leak-value")
    finally:
        kopf_objects.removeHandler(capture)
    assert seen == [f"retrying after {MASK}"]


def test_exception_tracebacks_are_redacted() -> None:
    """A traceback (formatted to text before redaction) does not leak a registered value."""
    buf = io.StringIO()
    configure_logging(json=True, stream=buf)
    register_secret("trace-leak-value")
    try:
        raise RuntimeError("failed with trace-leak-value")
    except RuntimeError:
        job_logger("ns", "j", "u", None, None).exception("boom")
        logging.getLogger("kopf.objects").exception("boom stdlib")
    raw = buf.getvalue()
    assert "trace-leak-value" not in raw
    lines = json_lines(buf)
    assert all("RuntimeError" in line["exception"] for line in lines)


def test_console_renderer_on_terminal_and_level_filtering() -> None:
    """json=False renders console text (still redacted); DEBUG lines are dropped at INFO level."""
    buf = io.StringIO()
    configure_logging(json=False, level="INFO", stream=buf)
    log = job_logger("ns", "j", "u", "Pending", None)
    log.debug("hidden detail")
    log.info("login", api_key=BREV_KEY)
    out = buf.getvalue()
    assert "hidden detail" not in out
    assert "login" in out
    assert BREV_KEY not in out
    assert not out.lstrip().startswith("{")


def test_json_is_chosen_when_not_a_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    """json=None picks JSON for a non-terminal stream (what a Pod's stdout is)."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    buf = io.StringIO()  # StringIO.isatty() is False
    configure_logging(stream=buf)
    structlog.get_logger("t").info("hello")
    assert json_lines(buf)[0]["event"] == "hello"


def test_reconfiguring_replaces_the_handler() -> None:
    """Calling configure_logging twice leaves one handler: no duplicated lines."""
    first, second = io.StringIO(), io.StringIO()
    configure_logging(json=True, stream=first)
    configure_logging(json=True, stream=second)
    logging.getLogger("x").warning("once")
    assert first.getvalue() == ""
    assert len(json_lines(second)) == 1


def test_bad_level_names_the_allowed_values() -> None:
    """An unknown level is a clear error naming the accepted levels."""
    with pytest.raises(ValueError, match="log level 'LOUD' is not one of DEBUG, INFO"):
        configure_logging(level="LOUD", stream=io.StringIO())


@pytest.mark.parametrize(
    "text",
    ["x" * 300_000, "-" * 300_000, "password" * 40_000, "a-" * 150_000, "--" + "a" * 300_000],
    ids=["word-run", "dash-run", "repeated-key-word", "dashed-word", "long-flag"],
)
def test_long_runs_are_redacted_in_linear_time(text: str) -> None:
    """A progress bar or a multi-megabyte log line goes through the same step as everything else.
    The key=value pattern used to backtrack cubically over a long run of word characters (a
    5,000-character line took minutes; these inputs would take days), wedging the pass."""
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "creds",
    [
        BrevCredentials(api_key="bak-0123456789abcdefXYZ", org_id="org-sim"),
        BrevCredentials(token="eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyLTEifQ.c2lnbmF0dXJl"),
    ],
)
def test_the_brev_identity_recorded_in_status_survives_redaction(creds: BrevCredentials) -> None:
    """status.brevIdentity is a fact the machine compares after a restart: the sink redaction must
    leave it intact (an identity that looked credential-shaped came back as `api-key:***` and
    stalled every restarted teardown as InstanceNotAccessible)."""
    ident, _ = identity_of(creds, "", {})
    assert redact_text(ident) == ident
