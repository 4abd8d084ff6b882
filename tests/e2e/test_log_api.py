"""The log API as users reach it: through kube-apiserver (an aggregated API, front-proxy
authentication), as a user who holds only the built-in `view` role in the job's namespace (the
controller-manager's clusterrole-aggregation fills it from deploy/base/log-api.yaml's ClusterRoles).

The operator serves the running container's log from the instance (one remote stream per job,
however many viewers) and the finished job's from the archive in S3.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.devenv.controlplane import kubectl_path
from tests.devenv.operator import OPERATOR_NAMESPACE, OperatorProcess
from tests.devenv.plugin import plugin_env, user_argv
from tests.fixtures.operator import HF_TOKEN, SECRET_VALUES, Stack
from tests.fixtures.polling import until

STAMP = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z ")


def log_path(namespace: str, name: str, query: str = "") -> str:
    path = f"/apis/logs.taobrev.io/v1alpha1/namespaces/{namespace}/taobrevjobs/{name}/log"
    return f"{path}?{query}" if query else path


@pytest.fixture
def viewer(stack: Stack, tmp_path: Path) -> Path:
    """A kubeconfig for ServiceAccount `viewer`, bound to the built-in `view` role in the job's
    namespace only: no Brev, no S3, no port-forward rights."""
    token = stack.cp.service_account_token(stack.namespace, "viewer", duration="1h")
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "viewer-view", "namespace": stack.namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": stack.namespace}],
    }
    stack.apply(binding)
    config = tmp_path / "viewer.kubeconfig"
    stack.cp.write_user_kubeconfig(config, "viewer", token, namespace=stack.namespace)

    # The aggregation controller fills `view` from taobrev-view asynchronously: wait for the rule.
    def aggregated() -> bool | None:
        rules = (
            json.loads(stack.kubectl("get", "clusterrole", "view", "-o", "json").stdout).get("rules") or []
        )
        return any("logs.taobrev.io" in (r.get("apiGroups") or []) for r in rules) or None

    until(aggregated, "the view role to include taobrevjobs/log", guard=60, interval=0.2)
    return config


def raw(config: Path, path: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(
        [kubectl_path(), f"--kubeconfig={config}", "get", "--raw", path], capture_output=True, check=False
    )
    if check:
        assert done.returncode == 0, done.stderr.decode()
    return done


class Follower:
    """A follow as a user runs it (`kubectl taobrev logs -f` or `kubectl get --raw ...?follow=true`),
    its output read line by line as it arrives."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=plugin_env())
        self.lines: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait(self, timeout: float = 120) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code

    def text(self) -> bytes:
        return b"".join(self.lines)


@pytest.fixture
def followers() -> Iterator[list[Follower]]:
    made: list[Follower] = []
    yield made
    for f in made:
        if f.proc.poll() is None:
            f.proc.kill()
            f.proc.wait()


def test_a_viewer_follows_a_running_log_shares_one_stream_and_reads_the_archive(
    stack: Stack, viewer: Path, followers: list[Follower]
) -> None:
    name = "watched"
    # 5 s per epoch at the simulator's speed (0.01): epochs arrive while viewers watch. At 2 s the
    # whole run (12 s) could end before two viewers connected on a loaded machine (a fresh-clone
    # run with load ~10 saw neither follower get epoch 2 while it ran).
    manifest = stack.job_manifest(
        name, simulation={"epochs": 6, "epoch_seconds": 500, "echo_env": "HF_TOKEN"}
    )
    stack.apply(manifest)
    stack.wait_for(name, lambda o: ((o or {}).get("status") or {}).get("phase") == "Running", "Running")

    # Two viewers follow at once, one with the plugin, one with kubectl get --raw; both see epochs
    # arrive while the job still runs.
    followers.append(Follower(user_argv(viewer, "logs", name, "-f", "--timestamps")))
    raw_path = log_path(stack.namespace, name, "follow=true&timestamps=true")
    followers.append(Follower([kubectl_path(), f"--kubeconfig={viewer}", "get", "--raw", raw_path]))
    until(
        lambda: all(b"Epoch 2/6" in f.text() for f in followers) or None,
        "both viewers to see epoch 2 live",
        guard=120,
        interval=0.2,
        # What each viewer got, its exit code, and the job: a failure under load says where it stuck.
        detail=lambda: (
            "; ".join(
                f"viewer {i}: exit {f.proc.poll()}, last output {f.text()[-300:]!r}"
                for i, f in enumerate(followers)
            )
            + f"; job status {stack.get(name)!r}"[:1500]
        ),
    )
    assert stack.status(name).get("phase") == "Running", "epoch 2 was seen before the run ended"
    for f in followers:
        assert f.wait() == 0, f.proc.stderr.read() if f.proc.stderr else ""
        text = f.text()
        assert b"Epoch 6/6" in text and b"finished successfully" in text, text[-500:]
        assert all(STAMP.match(line) for line in f.lines if line.strip()), f.lines[:3]
        for secret in SECRET_VALUES:
            assert secret.encode() not in text, "a secret value was served"
        assert b"environment HF_TOKEN=" in text  # the line is there, its value masked
    # The plugin ends with the container's exit code, once the operator has recorded it.
    assert followers[0].proc.stderr is not None
    assert b"container exited with code 0" in followers[0].proc.stderr.read()
    # One remote `docker logs -f` for the job, however many viewers.
    streams = [c for c in stack.sim.calls() if c.program == "docker" and "logs" in c.argv and "-f" in c.argv]
    assert len(streams) == 1, [c.argv for c in streams]

    status = stack.wait_finished(name)
    assert status["outcome"] == "Succeeded"
    # Finished: the archived log (S3), served the same way, to the same user.
    archived = raw(viewer, log_path(stack.namespace, name)).stdout
    assert b"Epoch 1/6" in archived and b"Epoch 6/6" in archived
    assert not STAMP.match(archived), "no timestamps unless asked"
    assert HF_TOKEN.encode() not in archived
    tail = raw(viewer, log_path(stack.namespace, name, "tailLines=2&timestamps=true")).stdout.splitlines()
    assert len(tail) == 2 and all(STAMP.match(line) for line in tail), tail
    assert b"finished successfully" in tail[-1]
    limited = raw(viewer, log_path(stack.namespace, name, "limitBytes=100")).stdout
    assert len(limited) == 100
    argv = user_argv(viewer, "logs", name, "--tail", "1")
    done = subprocess.run(argv, capture_output=True, env=plugin_env(), check=False)
    assert done.returncode == 0 and b"finished successfully" in done.stdout, done


def test_the_view_role_elsewhere_grants_nothing_and_bad_queries_name_the_parameter(
    stack: Stack, viewer: Path
) -> None:
    other = f"elsewhere-{stack.namespace[-6:]}"
    stack.kubectl("create", "namespace", other)
    refused = raw(viewer, log_path(other, "anything"), check=False)
    assert refused.returncode != 0
    assert b"Forbidden" in refused.stderr and b"taobrevjobs/log" in refused.stderr, refused.stderr
    argv = user_argv(viewer, "logs", "anything", "-n", other)
    plugin = subprocess.run(argv, capture_output=True, env=plugin_env(), check=False)
    assert plugin.returncode == 1 and b"Forbidden" in plugin.stderr, plugin
    # In its own namespace: a job that does not exist is NotFound (after authorization).
    missing = raw(viewer, log_path(stack.namespace, "nope"), check=False)
    assert b"NotFound" in missing.stderr, missing.stderr
    bad = raw(viewer, log_path(stack.namespace, "nope", "tailLines=ten"), check=False)
    assert b"tailLines" in bad.stderr, bad.stderr
    # Discovery lists the subresource (kubectl api-resources skips names with a slash).
    discovered = json.loads(raw(viewer, "/apis/logs.taobrev.io/v1alpha1").stdout)
    assert [r["name"] for r in discovered["resources"]] == ["taobrevjobs/log"]


def test_a_standby_replica_serves_a_running_log_over_its_own_session(
    stack: Stack, viewer: Path, tmp_path: Path
) -> None:
    """Every replica serves the log API (the Service selects them all): the one answering need
    not lead. The second operator is a standby (the Lease is the first one's); kube-apiserver is
    pointed at it, and it streams the running job's log with its own brev and ssh (here they share
    the simulator's home; in a cluster each Pod has its own)."""
    standby = OperatorProcess(
        stack.cp,
        stack.sim,
        tmp_path / "standby",
        extra_env={"TAOBREV_NAMESPACES": stack.namespace, "POD_ID": "standby"},
    )
    name = "on-standby"
    stack.apply(stack.job_manifest(name, simulation={"epochs": 4, "epoch_seconds": 200}))
    stack.wait_for(name, lambda o: ((o or {}).get("status") or {}).get("phase") == "Running", "Running")
    try:
        standby.start()  # routes the APIService to it
        lease = json.loads(
            stack.kubectl("get", "lease", "taobrev-operator", "-n", OPERATOR_NAMESPACE, "-o", "json").stdout
        )
        assert not lease["spec"]["holderIdentity"].startswith("standby"), "the first operator leads"
        follow = Follower(user_argv(viewer, "logs", name, "-f"))
        assert follow.wait(180) == 0, follow.proc.stderr.read() if follow.proc.stderr else ""
        assert b"Epoch 4/4" in follow.text()
        assert "log_request" in standby.log_text() and "log_request" not in stack.operator.log_text()
    finally:
        standby.stop()
        stack.operator.route_log_api()
