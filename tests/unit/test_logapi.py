"""The log API's pure parts: the query, where an attempt's log is, line shaping, the front-proxy
user, and the plugin's request."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from controller.api.status import TaoBrevJobStatus
from controller.logapi.archive import archive_key
from controller.logapi.auth import RequestHeaderConfig, Unauthenticated, peer_common_name, user_from_headers
from controller.logapi.hub import select_backlog, stamp_ns
from controller.logapi.protocol import MAX_LINE_BYTES, LogQuery, QueryError, parse_query, shape_line
from controller.logapi.source import Archived, Live, NoLog, log_source
from controller.plugin.kubectl import PluginError
from controller.plugin.logs import log_path, since_seconds

MiB = 1024 * 1024


def test_the_query_takes_kubectl_logs_names_and_caps_the_bytes_at_the_servers_limit() -> None:
    q = parse_query({"follow": "true", "tailLines": "5", "sinceSeconds": "60", "timestamps": "1"}, 10 * MiB)
    assert q == LogQuery(follow=True, tail_lines=5, since_seconds=60, timestamps=True, limit_bytes=10 * MiB)
    assert parse_query({"limitBytes": str(50 * MiB)}, 10 * MiB).limit_bytes == 10 * MiB
    assert parse_query({"limitBytes": "100"}, 10 * MiB).limit_bytes == 100
    assert parse_query({}, MiB) == LogQuery(limit_bytes=MiB)


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"tail": "5"}, "'tail'"),
        ({"tailLines": "ten"}, "tailLines"),
        ({"tailLines": "-1"}, "tailLines"),
        ({"sinceSeconds": "0"}, "sinceSeconds"),
        ({"follow": "maybe"}, "follow"),
        ({"attempt": "0"}, "attempt"),
    ],
)
def test_a_bad_parameter_is_named_with_the_fix(params: dict[str, str], named: str) -> None:
    with pytest.raises(QueryError, match=named):
        parse_query(params, MiB)


def _status(*attempts: dict[str, Any], phase: str = "Running") -> TaoBrevJobStatus:
    return TaoBrevJobStatus.from_k8s({"phase": phase, "jobId": "job-1", "attempts": list(attempts)})


def _attempt(n: int, **run: Any) -> dict[str, Any]:
    upload = run.pop("upload", {})
    return {"attempt": n, "instance": {"name": f"inst-a{n}"}, "run": run, "upload": upload}


def test_a_running_attempt_is_read_on_its_instance_and_a_finished_one_from_the_archive() -> None:
    assert log_source(_status(), None) == NoLog("the job has not started a run yet (phase Running)")
    running = _status(_attempt(1, startedAt="2026-12-05T10:00:00Z"))
    assert log_source(running, None) == Live(1, "inst-a1", "job-1", running=True)
    exited = _status(
        _attempt(1, startedAt="2026-12-05T10:00:00Z", exitedAt="2026-12-05T10:05:00Z"), phase="Uploading"
    )
    assert log_source(exited, None) == Live(1, "inst-a1", "job-1", running=False)
    uploaded = _attempt(1, startedAt="2026-12-05T10:00:00Z", upload={"uploadedAt": "2026-12-05T10:06:00Z"})
    assert log_source(_status(uploaded, phase="Deleted"), None) == Archived(1)
    not_started = _status(_attempt(1), phase="Pulling")
    assert isinstance(log_source(not_started, None), NoLog)


def test_an_earlier_attempt_says_why_its_log_is_gone() -> None:
    lost = _attempt(1, startedAt="2026-12-05T10:00:00Z")
    lost["endedReason"] = "InstanceLost"
    second = _attempt(2, startedAt="2026-12-05T11:00:00Z")
    status = _status(lost, second)
    gone = log_source(status, 1)
    assert isinstance(gone, NoLog) and "InstanceLost" in gone.message and "logTail" in gone.message
    missing = log_source(status, 7)
    assert isinstance(missing, NoLog) and "1, 2" in missing.message
    both = _status(
        _attempt(1, startedAt="2026-12-05T10:00:00Z", upload={"uploadedAt": "2026-12-05T10:06:00Z"}),
        _attempt(2, startedAt="2026-12-05T11:00:00Z", upload={"uploadedAt": "2026-12-05T11:06:00Z"}),
        phase="Deleted",
    )
    replaced = log_source(both, 1)
    assert isinstance(replaced, NoLog) and "replaced by attempt 2" in replaced.message
    assert log_source(both, 2) == Archived(2)


def test_docker_times_order_by_value_not_by_text() -> None:
    # RFC3339Nano drops trailing zeros of the fraction: text order is not time order.
    a, b = b"2026-12-05T10:00:00.5Z", b"2026-12-05T10:00:00.123456789Z"
    assert a > b and stamp_ns(a) > stamp_ns(b)  # type: ignore[operator]
    assert stamp_ns(b"2026-12-05T10:00:01Z") == stamp_ns(b"2026-12-05T10:00:00Z") + 1_000_000_000  # type: ignore[operator]
    assert stamp_ns(b"yesterday") is None


def test_a_viewer_starts_from_the_newest_lines_its_query_keeps() -> None:
    lines = [f"2026-12-05T10:00:{s:02d}.000000001Z line {s}\n".encode() for s in range(10)]
    now = stamp_ns(b"2026-12-05T10:00:10Z") / 1e9  # type: ignore[operator]
    assert select_backlog(lines, LogQuery(tail_lines=2), now) == lines[-2:]
    assert select_backlog(lines, LogQuery(since_seconds=3), now) == lines[7:]
    assert select_backlog(lines, LogQuery(since_seconds=3, tail_lines=1), now) == lines[-1:]
    assert select_backlog(lines, LogQuery(tail_lines=0), now) == []


def test_a_line_keeps_its_time_only_when_asked_and_a_giant_line_is_cut() -> None:
    line = b"2026-12-05T10:00:00.1Z Epoch 1/3\n"
    assert shape_line(line, timestamps=False) == b"Epoch 1/3\n"
    assert shape_line(line, timestamps=True) == line
    assert shape_line(b"no stamp here\n", timestamps=True) == b"no stamp here\n"
    huge = shape_line(b"2026-12-05T10:00:00.1Z " + b"x" * (MAX_LINE_BYTES * 2) + b"\n", timestamps=False)
    assert len(huge) <= MAX_LINE_BYTES + 16 and huge.endswith(b"[cut]\n")


def test_the_archive_is_where_the_upload_saves_the_log() -> None:
    assert archive_key("s3://bucket/runs/a/") == ("bucket", "runs/a/logs/container.log")
    assert archive_key("s3://bucket") == ("bucket", "logs/container.log")


def test_the_front_proxy_names_the_user_its_groups_and_extras() -> None:
    config = RequestHeaderConfig.from_config_map(
        {
            "requestheader-allowed-names": '["front-proxy-client"]',
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
            "requestheader-client-ca-file": "PEM",
        }
    )
    assert config.allowed_names == ("front-proxy-client",) and config.client_ca == "PEM"
    headers = {"X-Remote-User": "alice", "X-Remote-Group": "devs", "X-Remote-Extra-Scopes": "a"}
    multi = {"X-Remote-Group": ["devs", "system:authenticated"], "X-Remote-Extra-Scopes": ["a", "b"]}
    user = user_from_headers(config, headers, lambda h: multi.get(h, [headers[h]] if h in headers else []))
    assert user.name == "alice"
    assert user.groups == ("devs", "system:authenticated")
    assert user.extra == (("scopes", ("a", "b")),)
    with pytest.raises(Unauthenticated):
        user_from_headers(config, {}, lambda h: [])
    cert = {"subject": ((("organizationName", "x"),), (("commonName", "front-proxy-client"),))}
    assert peer_common_name(cert) == "front-proxy-client"
    assert peer_common_name(None) is None


def _args(**kw: Any) -> argparse.Namespace:
    base = {
        "follow": False,
        "attempt": None,
        "tail": -1,
        "since": None,
        "timestamps": False,
        "limit_bytes": None,
        "step": None,
    }
    return argparse.Namespace(**{**base, **kw})


def test_the_plugin_asks_the_log_api_with_kubectl_logs_options() -> None:
    prefix = "/apis/logs.taobrev.io/v1alpha1/namespaces/ml/taobrevjobs/t7/log"
    assert log_path("ml", "t7", _args()) == prefix
    path = log_path("ml", "t7", _args(follow=True, attempt=2, tail=20, since="1h30m", timestamps=True))
    assert path == f"{prefix}?follow=true&attempt=2&tailLines=20&sinceSeconds=5400&timestamps=true"
    assert since_seconds("45s") == 45 and since_seconds("10m") == 600
    for bad in ("", "ten minutes", "0s", "5d"):
        with pytest.raises(PluginError, match="--since"):
            since_seconds(bad)
    with pytest.raises(PluginError, match="--attempt"):
        log_path("ml", "t7", _args(attempt=0))
    assert log_path("ml", "t7", _args(step="evaluate")) == f"{prefix}?step=evaluate"


def _workflow(*steps: dict[str, Any], run_step: str | None, phase: str = "Running") -> TaoBrevJobStatus:
    attempt = _attempt(1, startedAt="2026-12-05T10:00:00Z", step=run_step)
    return TaoBrevJobStatus.from_k8s(
        {"phase": phase, "jobId": "job-1", "attempts": [attempt], "steps": list(steps)}
    )


def test_a_workflow_steps_log_is_read_live_while_its_container_runs_then_from_its_archive() -> None:
    """`kubectl taobrev logs JOB --step NAME`: the step's own container while it is the current
    one, then logs/<step>/container.log; without --step, the running step's."""
    done = {"name": "train", "phase": "Succeeded", "attempt": 1, "startedAt": "2026-12-05T10:00:00Z",
            "resultsVerified": True}  # fmt: skip
    running = {"name": "evaluate", "phase": "Running", "attempt": 1, "startedAt": "2026-12-05T10:10:00Z"}
    pending = {"name": "export", "phase": "Pending"}
    status = _workflow(done, running, pending, run_step="evaluate")
    assert log_source(status, None, "evaluate") == Live(1, "inst-a1", "job-1.evaluate", running=True)
    assert log_source(status, None) == Live(1, "inst-a1", "job-1.evaluate", running=True)
    assert log_source(status, None, "train") == Archived(1, step="train")
    assert log_source(status, None, "export") == NoLog("step export has not run (Pending)")
    missing = log_source(status, None, "prune")
    assert isinstance(missing, NoLog) and "its steps are train, evaluate, export" in missing.message
    reused = {"name": "train", "phase": "Reused"}
    assert log_source(_workflow(reused, run_step=None), None, "train") == Archived(1, step="train")
    single = _status(_attempt(1, startedAt="2026-12-05T10:00:00Z"))
    no_flow = log_source(single, None, "train")
    assert isinstance(no_flow, NoLog) and "leave --step out" in no_flow.message
    assert parse_query({"step": "evaluate"}, MiB).step == "evaluate"
    with pytest.raises(QueryError, match="step"):
        parse_query({"step": "Bad Name"}, MiB)


def test_a_steps_archived_log_is_under_logs_step() -> None:
    assert archive_key("s3://b/out", "evaluate") == ("b", "out/logs/evaluate/container.log")
    assert archive_key("s3://b", "evaluate") == ("b", "logs/evaluate/container.log")
    assert archive_key("s3://b/out") == ("b", "out/logs/container.log")
