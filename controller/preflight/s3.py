"""The pre-flight's S3 calls, with the job's own credentials, from the operator (boto3).

Two questions, each answered by the smallest call that proves it:
- the results location is writable: a marker object is written under `resultsUri` and removed
  (the upload writes there with the same keys; a bucket typo or read-only keys show here, not
  after the run);
- every input has something to stage: one listing of at most one key under the input's prefix,
  the way the staging's `aws s3 cp --recursive` lists it.

boto3 is imported on first use (a running operator that never pre-flights pays nothing for it)
and its blocking calls run in a worker thread. Credentials never leave this module except into
boto3's request signing; error text is S3's, which never echoes a secret key.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from controller.api.reasons import (
    INPUT_NOT_FOUND,
    INPUT_NOT_READABLE,
    RESULTS_BUCKET_NOT_FOUND,
    RESULTS_NOT_WRITABLE,
    S3_CREDENTIALS_INVALID,
    S3_UNREACHABLE,
)
from controller.brev.envfile import S3Credentials
from controller.lifecycle.steps import Problem
from controller.preflight.checks import marker_key, s3_location

# S3 error codes that mean "these keys are not valid here" rather than "not allowed".
_BAD_CREDENTIALS = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "InvalidClientTokenId"}
)
_MARKER_BODY = b"written and removed by the taobrev operator's pre-flight; safe to delete\n"


@dataclass(frozen=True)
class S3Target:
    """Where and as whom: the job's endpoint, region and keys, and where the keys come from (for
    messages: the Secret's name, never its values)."""

    endpoint_url: str | None
    region: str
    credentials: S3Credentials
    secret: str  # "<namespace>/<name>" of the credentials Secret


class S3Checks:
    # Clients kept, by endpoint, region and keys: making one costs ~0.3 s of CPU (botocore loads
    # its service model), and a burst of jobs usually shares one S3 Secret.
    CLIENTS_KEPT = 16

    def __init__(self, *, connect_timeout: float = 5.0, read_timeout: float = 15.0) -> None:
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._clients: OrderedDict[tuple[str | None, str, str, str], Any] = OrderedDict()
        # A boto3 Session is not safe to make clients from in two threads at once.
        self._lock = threading.Lock()
        self._session: Any = None

    async def check(
        self, target: S3Target, results_uri: str, inputs: list[str], job_id: str
    ) -> list[Problem]:
        return await asyncio.to_thread(self._check, target, results_uri, inputs, job_id)

    def client(self, target: S3Target) -> Any:
        """A boto3 S3 client for `target` (kept: see CLIENTS_KEPT); call it in a worker thread."""
        creds = target.credentials
        key = (
            target.endpoint_url,
            target.region,
            creds.access_key_id.decode(),
            hashlib.sha256(creds.secret_access_key).hexdigest(),
        )
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = self._new_client(target)
                while len(self._clients) > self.CLIENTS_KEPT:
                    self._clients.popitem(last=False)
            self._clients.move_to_end(key)
            return client

    def _new_client(self, target: S3Target) -> Any:
        # On first use: a running operator that never pre-flights never loads boto3.
        import boto3  # noqa: PLC0415
        from botocore.config import Config  # noqa: PLC0415

        self._session = self._session or boto3.session.Session()
        config = Config(
            connect_timeout=self._connect_timeout,
            read_timeout=self._read_timeout,
            retries={"max_attempts": 2, "mode": "standard"},
            # Path-style for S3-compatible endpoints (MinIO, Ceph, a loopback server): their
            # buckets are rarely DNS names. AWS itself gets its default.
            s3={"addressing_style": "path"} if target.endpoint_url else None,
        )
        return self._session.client(
            "s3",
            endpoint_url=target.endpoint_url,
            region_name=target.region,
            aws_access_key_id=target.credentials.access_key_id.decode(),
            aws_secret_access_key=target.credentials.secret_access_key.decode(),
            config=config,
        )

    def _check(self, target: S3Target, results_uri: str, inputs: list[str], job_id: str) -> list[Problem]:
        try:
            client = self.client(target)
        except Exception as exc:  # e.g. an endpoint botocore refuses: a finding, not a crash
            return [_unreachable(target, f"{type(exc).__name__}: {exc}"[:300])]
        problem = self._writable(client, target, results_uri, job_id)
        if problem is not None and problem.reason in (S3_CREDENTIALS_INVALID, S3_UNREACHABLE):
            return [problem]  # the inputs would only repeat it
        problems = [problem] if problem is not None else []
        for i, uri in enumerate(inputs):
            found = self._input(client, target, i, uri)
            if found is not None:
                problems.append(found)
                if found.reason in (S3_CREDENTIALS_INVALID, S3_UNREACHABLE):
                    break
        return problems

    def _writable(self, client: Any, target: S3Target, results_uri: str, job_id: str) -> Problem | None:
        field = "spec.data.resultsUri"
        bucket, key = marker_key(results_uri, job_id)
        try:
            client.put_object(Bucket=bucket, Key=key, Body=_MARKER_BODY)
        except Exception as exc:  # every failure is a finding, mapped below
            found, code, text = _classify(exc, target)
            if found is not None:
                return found
            if code == "NoSuchBucket":
                return Problem(
                    field,
                    RESULTS_BUCKET_NOT_FOUND,
                    f"{field} {results_uri}: bucket {bucket!r} does not exist{_at(target)}: create it "
                    "or fix the URI",
                )
            return Problem(
                field,
                RESULTS_NOT_WRITABLE,
                f"{field} {results_uri}: the keys in Secret {target.secret} (spec.credentials.s3) may not "
                f"write there ({code}: {text}): grant s3:PutObject on the bucket or fix the URI",
            )
        # Writable is proven; a marker left behind (no delete permission) is harmless.
        with contextlib.suppress(Exception):
            client.delete_object(Bucket=bucket, Key=key)
        return None

    def _input(self, client: Any, target: S3Target, i: int, uri: str) -> Problem | None:
        field = f"spec.data.inputs[{i}].uri"
        bucket, key = s3_location(uri)
        prefix = f"{key.rstrip('/')}/" if key else ""
        try:
            answer = client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
        except Exception as exc:  # every failure is a finding, mapped below
            found, code, text = _classify(exc, target)
            if found is not None:
                return found
            if code == "NoSuchBucket":
                return Problem(
                    field,
                    INPUT_NOT_FOUND,
                    f"{field} {uri}: bucket {bucket!r} does not exist{_at(target)}: fix the URI",
                )
            return Problem(
                field,
                INPUT_NOT_READABLE,
                f"{field} {uri}: the keys in Secret {target.secret} (spec.credentials.s3) may not list "
                f"it ({code}: {text}): grant s3:ListBucket and s3:GetObject, or fix the URI",
            )
        if int(answer.get("KeyCount") or 0) == 0:
            return Problem(
                field,
                INPUT_NOT_FOUND,
                f"{field} {uri} holds no objects (staging copies s3://{bucket}/{prefix}*): upload the "
                "data or fix the URI",
            )
        return None


def _classify(exc: Exception, target: S3Target) -> tuple[Problem | None, str, str]:
    """(the problem when it is no answer or bad keys, S3's error code, its message)."""
    code, text = _error(exc)
    if code is None:
        return _unreachable(target, text), "", text
    if code in _BAD_CREDENTIALS:
        return _bad_credentials(target, code), code, text
    return None, code, text


def _error(exc: Exception) -> tuple[str | None, str]:
    """(S3's error code, its message); code None: no answer from S3 (connection, timeout)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        err = response.get("Error") or {}
        code = str(err.get("Code") or "") or None
        if code is None:
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            code = {403: "AccessDenied", 404: "NoSuchBucket"}.get(int(status or 0))
        if code is not None:
            return code, str(err.get("Message") or code)[:300]
    return None, f"{type(exc).__name__}: {exc}"[:300]


def _at(target: S3Target) -> str:
    return f" at {target.endpoint_url}" if target.endpoint_url else ""


def _bad_credentials(target: S3Target, code: str) -> Problem:
    field = "spec.credentials.s3"
    return Problem(
        field,
        S3_CREDENTIALS_INVALID,
        f"S3{_at(target)} refused the keys in Secret {target.secret} ({field}) with {code}: put a "
        "valid access key id and secret access key in the Secret (or point spec.credentials.s3 at "
        "the right one)",
    )


def _unreachable(target: S3Target, text: str) -> Problem:
    field = "spec.data.s3EndpointUrl" if target.endpoint_url else "spec.data.s3Region"
    return Problem(
        field,
        S3_UNREACHABLE,
        f"S3{_at(target) or f' in region {target.region}'} did not answer ({text}): check {field} "
        "and that the operator may reach it (egress, proxy)",
    )
