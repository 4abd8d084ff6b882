"""A loopback S3 endpoint: moto in server mode as a real separate process.

    server = S3Server.start(log_dir)
    server.create_bucket("results")
    server.client().list_objects_v2(Bucket="results")
    server.stop()

It runs `python -m moto.server -H 127.0.0.1 -p PORT` (not the in-process ThreadedMotoServer), so the
operator, the simulator's aws-cli image and the tests all talk to it over HTTP like to real S3.
Readiness is an HTTP answer from the endpoint, polled until a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.devenv.ports import free_port

DUMMY_ACCESS_KEY = "AKIASIMULATEDS3KEY00"
DUMMY_SECRET_KEY = "simulated-s3-secret-key-not-real-0000000"
REGION = "us-east-1"


class S3ServerError(RuntimeError):
    """The S3 server could not start; the message carries its log tail."""


@dataclass
class S3Server:
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    _clients: list[Any] = field(default_factory=list)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, log_dir: Path, *, timeout: float = 30.0, attempts: int = 3) -> S3Server:
        log_dir.mkdir(parents=True, exist_ok=True)
        last_error = ""
        for attempt in range(attempts):
            port = free_port()
            log_path = log_dir / f"moto-{port}.log"
            env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
            with log_path.open("wb") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            server = cls(port=port, process=proc, log_path=log_path)
            try:
                server.wait_ready(timeout)
                return server
            except S3ServerError as e:
                server.stop()
                last_error = f"attempt {attempt + 1}: {e}"
        raise S3ServerError(f"moto S3 server did not start after {attempts} attempts; {last_error}")

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise S3ServerError(f"exited with {self.process.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.endpoint_url + "/", timeout=1.0) as resp:  # noqa: S310 - loopback
                    if resp.status < 500:
                        return
            except urllib.error.HTTPError as e:
                if e.code < 500:
                    return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise S3ServerError(f"no HTTP answer from {self.endpoint_url} within {timeout}s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def client(self) -> Any:
        """A boto3 S3 client for this endpoint with dummy credentials."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=DUMMY_ACCESS_KEY,
            aws_secret_access_key=DUMMY_SECRET_KEY,
            region_name=REGION,
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def add_user(self, name: str, actions: list[str]) -> tuple[str, str]:
        """An IAM user allowed `actions` on every resource; returns its (access key id, secret
        key). The policy matters only once `require_auth()` was called."""
        import boto3

        iam = boto3.client(
            "iam",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=DUMMY_ACCESS_KEY,
            aws_secret_access_key=DUMMY_SECRET_KEY,
            region_name=REGION,
        )
        iam.create_user(UserName=name)
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
        }
        iam.put_user_policy(UserName=name, PolicyName="allowed", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return str(key["AccessKeyId"]), str(key["SecretAccessKey"])

    def require_auth(self) -> None:
        """From now on moto checks every request's signature and key against its IAM (users made
        with `add_user`), as S3 does: unknown keys are refused with InvalidAccessKeyId, a user's
        policy decides AccessDenied. The dummy keys stop working; use this on a server of its own."""
        request = urllib.request.Request(  # noqa: S310 - loopback
            # text/plain: a form body would be parsed by Flask and reach moto empty
            self.endpoint_url + "/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310 - loopback
            if resp.status != 200:
                raise S3ServerError(f"moto refused to require auth: HTTP {resp.status}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def running(log_dir: Path) -> Any:
    server = S3Server.start(log_dir)
    try:
        yield server
    finally:
        server.stop()
