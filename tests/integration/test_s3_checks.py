"""The pre-flight's S3 checks (controller/s3_checks.py) against a real S3-protocol server (moto in
server mode on loopback) with boto3, as the operator runs them before `brev create` (issue 32).

A second moto that checks keys and policies like S3 (`require_auth`) shows wrong credentials and
keys that may read but not write."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.api import reasons
from controller.brev.envfile import S3Credentials
from controller.lifecycle.steps import Problem
from controller.preflight.s3 import S3Checks, S3Target
from tests.devenv.ports import free_port
from tests.devenv.s3 import DUMMY_ACCESS_KEY, DUMMY_SECRET_KEY, REGION, S3Server

JOB = "job-1a2b3c4d"


def target(endpoint: str, key: str = DUMMY_ACCESS_KEY, secret: str = DUMMY_SECRET_KEY) -> S3Target:
    return S3Target(
        endpoint_url=endpoint,
        region=REGION,
        credentials=S3Credentials(key.encode(), secret.encode()),
        secret="ml/s3-credentials",
    )


def check(t: S3Target, results: str, inputs: list[str] | None = None) -> list[Problem]:
    return asyncio.run(S3Checks(connect_timeout=2, read_timeout=5).check(t, results, inputs or [], JOB))


def fresh_bucket(server: S3Server) -> str:
    name = f"pf-{uuid.uuid4().hex[:12]}"
    server.create_bucket(name)
    return name


def test_a_writable_results_location_and_present_inputs_pass_and_leave_no_marker(s3_server: S3Server) -> None:
    bucket = fresh_bucket(s3_server)
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="data/train/0001.jpg", Body=b"x")
    client.put_object(Bucket=bucket, Key="specs/train.yaml", Body=b"a: 1\n")
    problems = check(
        target(s3_server.endpoint_url),
        f"s3://{bucket}/runs/one",
        [f"s3://{bucket}/data", f"s3://{bucket}/specs/"],
    )
    assert problems == []
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert not [k for k in keys if "taobrev-preflight" in k]  # written, then removed


def test_a_missing_results_bucket_is_named_with_the_field_and_the_fix(s3_server: S3Server) -> None:
    (problem,) = check(target(s3_server.endpoint_url), "s3://no-such-results-bucket/run-1")
    assert problem.field == "spec.data.resultsUri"
    assert problem.reason == reasons.RESULTS_BUCKET_NOT_FOUND
    assert "'no-such-results-bucket' does not exist" in problem.message
    assert "create it or fix the URI" in problem.message


def test_an_empty_or_missing_input_prefix_is_named_by_its_index(s3_server: S3Server) -> None:
    bucket = fresh_bucket(s3_server)
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="data/a.jpg", Body=b"x")
    # "dataset.zip" shares the prefix's characters but is not under data-v2/: staging copies nothing.
    client.put_object(Bucket=bucket, Key="data-v2.zip", Body=b"x")
    problems = check(
        target(s3_server.endpoint_url),
        f"s3://{bucket}/out",
        [f"s3://{bucket}/data", f"s3://{bucket}/data-v2", "s3://no-such-input-bucket/x"],
    )
    assert [(p.field, p.reason) for p in problems] == [
        ("spec.data.inputs[1].uri", reasons.INPUT_NOT_FOUND),
        ("spec.data.inputs[2].uri", reasons.INPUT_NOT_FOUND),
    ]
    assert "holds no objects" in problems[0].message and "upload the data" in problems[0].message
    assert "does not exist" in problems[1].message


def test_an_endpoint_that_does_not_answer_is_named_not_taken_for_a_missing_bucket() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    (problem,) = check(target(dead), "s3://bucket/out", ["s3://bucket/in"])
    assert problem.reason == reasons.S3_UNREACHABLE
    assert problem.field == "spec.data.s3EndpointUrl"
    assert dead in problem.message


@pytest.fixture
def strict_s3(tmp_path: Path) -> Iterator[S3Server]:
    """A moto of its own that checks every key and policy, as S3 does."""
    server = S3Server.start(tmp_path / "s3-auth")
    try:
        yield server
    finally:
        server.stop()


def test_wrong_keys_and_read_only_keys_are_told_apart(strict_s3: S3Server) -> None:
    bucket = fresh_bucket(strict_s3)
    strict_s3.client().put_object(Bucket=bucket, Key="in/a.jpg", Body=b"x")
    writer = strict_s3.add_user("writer", ["s3:*"])
    reader = strict_s3.add_user("reader", ["s3:ListBucket", "s3:GetObject"])
    strict_s3.require_auth()

    # The dummy keys are unknown to this S3: S3CredentialsInvalid, naming the Secret, not its values.
    (problem,) = check(target(strict_s3.endpoint_url), f"s3://{bucket}/out", [f"s3://{bucket}/in"])
    assert problem.reason == reasons.S3_CREDENTIALS_INVALID
    assert problem.field == "spec.credentials.s3"
    assert "ml/s3-credentials" in problem.message
    assert DUMMY_SECRET_KEY not in problem.message and DUMMY_ACCESS_KEY not in problem.message

    # Keys that may read but not write: the results are not writable, the inputs are fine.
    (problem,) = check(target(strict_s3.endpoint_url, *reader), f"s3://{bucket}/out", [f"s3://{bucket}/in"])
    assert (problem.field, problem.reason) == ("spec.data.resultsUri", reasons.RESULTS_NOT_WRITABLE)
    assert reader[1] not in problem.message

    assert check(target(strict_s3.endpoint_url, *writer), f"s3://{bucket}/out", [f"s3://{bucket}/in"]) == []


def test_an_endpoint_botocore_refuses_is_a_finding_not_a_crash() -> None:
    (problem,) = check(target("http://exa mple:9000"), "s3://bucket/out")
    assert problem.reason == reasons.S3_UNREACHABLE
    assert problem.field == "spec.data.s3EndpointUrl"
