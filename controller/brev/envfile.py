"""docker `--env-file` content (PURE): the one builder for every env file the operator writes
(the container's secret env, the S3 keys the aws-cli container reads)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.api.errors import SpecError

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class S3Credentials:
    """The keys the aws-cli container gets through `--env-file` (values kept out of repr)."""

    access_key_id: bytes = field(repr=False)
    secret_access_key: bytes = field(repr=False)
    session_token: bytes | None = field(default=None, repr=False)


def env_file(values: Mapping[str, str | bytes], *, source: str = "environment variable") -> bytes:
    """docker `--env-file` content: one `KEY=value` line each, no quoting. The one builder for
    every env file the operator writes (container env, S3 keys). `source` names where the values
    come from in the error (never the value itself: it may be a secret)."""
    lines: list[bytes] = []
    for key, raw in values.items():
        if not ENV_NAME_RE.match(key):
            raise SpecError(
                f"{source} name {key!r} is invalid: use letters, digits and '_', not starting with a digit"
            )
        value = raw if isinstance(raw, bytes) else raw.encode()
        if b"\n" in value or b"\r" in value or b"\0" in value:
            raise SpecError(
                f"{source} {key} has a value with a line break or NUL, which docker's --env-file "
                "cannot carry: store the value on one line"
            )
        try:
            value.decode()
        except UnicodeDecodeError:
            raise SpecError(
                f"{source} {key} has a value that is not UTF-8, which docker's --env-file refuses"
            ) from None
        lines.append(key.encode() + b"=" + value + b"\n")
    return b"".join(lines)


def s3_env_file(credentials: S3Credentials, *, region: str | None = None) -> bytes:
    values: dict[str, bytes | str] = {
        "AWS_ACCESS_KEY_ID": credentials.access_key_id,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key,
    }
    if credentials.session_token:
        values["AWS_SESSION_TOKEN"] = credentials.session_token
    if region:
        values["AWS_DEFAULT_REGION"] = region
    return env_file(values, source="S3 credential")


@dataclass(frozen=True)
class JobSecrets:
    """Secret values for one job, read from Kubernetes Secrets; never logged, put on argv or
    shown by repr. Each reaches the instance only for the step that reads it (see workload)."""

    ngc_api_key: bytes = field(repr=False)
    s3_access_key_id: bytes = field(repr=False)
    s3_secret_access_key: bytes = field(repr=False)
    extra_env: Mapping[str, bytes] = field(default_factory=dict, repr=False)

    def values(self) -> list[bytes]:
        return [self.ngc_api_key, self.s3_access_key_id, self.s3_secret_access_key, *self.extra_env.values()]

    @property
    def s3(self) -> S3Credentials:
        return S3Credentials(self.s3_access_key_id, self.s3_secret_access_key)
