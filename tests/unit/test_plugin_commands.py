"""The plugin's commands against a recording stand-in for kubectl (injected as main's runner, no
process started): the exact argv and patches each sends, cancel's annotation, suspend refusing an
admitted job and re-checking after a Conflict, the flags passed through, and the exit codes. The
same commands run through `kubectl taobrev` on a real API server in tests/e2e/test_plugin.py."""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from controller.api.naming import CANCEL_ANNOTATION
from controller.plugin import COMMANDS, main, parser
from controller.plugin.cancel import cancel_patch
from controller.plugin.kubectl import RESOURCE, Completed
from controller.plugin.suspend import suspend_patch

NOW = datetime(2026, 12, 5, 11, 0, 7, tzinfo=UTC)


def merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386, as the API server applies `kubectl patch --type=merge`."""
    out = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


class FakeKubectl:
    """Answers `get`, `patch`, `wait` and `get events` for the objects it holds; records every argv."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.calls: list[list[str]] = []
        self.conflicts = 0  # patches to refuse with a Conflict (the object changed meanwhile)
        self.on_conflict: dict[str, Any] = {}  # what changed it

    def __call__(self, argv: Sequence[str], stdin: str | None, timeout: float) -> Completed:
        self.calls.append(list(argv))
        words = [a for a in argv[1:] if not a.startswith("--") or a.startswith("--for")]
        words = [w for w in words if w not in ("-o", "json")]
        verb = words[0]
        if verb == "get" and words[1] == "events":
            return Completed(0, json.dumps({"items": []}), "")
        if verb == "get" and len(words) == 2:
            return Completed(0, json.dumps({"items": list(self.objects.values())}), "")
        name = words[2] if verb != "wait" else words[1].split("/")[1]
        if name not in self.objects:
            return Completed(1, "", f'Error from server (NotFound): {RESOURCE} "{name}" not found\n')
        if verb == "patch":
            patch = json.loads(argv[argv.index("-p") + 1])
            if self.conflicts:
                self.conflicts -= 1
                self.objects[name] = merge(self.objects[name], self.on_conflict)
                return Completed(1, "", "Error from server (Conflict): the object has been modified\n")
            self.objects[name] = merge(self.objects[name], patch)
        return Completed(0, json.dumps(self.objects[name]), "")

    def patches(self) -> list[dict[str, Any]]:
        return [json.loads(c[c.index("-p") + 1]) for c in self.calls if "patch" in c]


def tbj(name: str, *, status: dict[str, Any] | None = None, suspend: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "taobrev.io/v1alpha1",
        "kind": "TaoBrevJob",
        "metadata": {"name": name, "namespace": "ml", "resourceVersion": "41", "uid": f"uid-{name}"},
        "spec": {"suspend": suspend, "data": {"resultsUri": f"s3://results/{name}"}},
        "status": status or {},
    }


ADMITTED = {"phase": "Running", "queue": {"admittedAt": "2026-12-05T10:00:00Z"}}
FINISHED = {"phase": "Deleted", "outcome": "Canceled", "reason": "Canceled"}


def run(fake: FakeKubectl, *argv: str) -> int:
    return main(list(argv), runner=fake, clock=lambda: NOW)


def test_every_command_is_registered_once_and_has_examples_and_exit_codes_in_its_help() -> None:
    top = parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    choices: dict[str, argparse.ArgumentParser] = sub.choices
    assert sorted(choices) == ["cancel", "cost", "describe", "get", "logs", "plan", "resume", "suspend"]
    assert len(COMMANDS) == len(set(COMMANDS))
    for name, command in choices.items():
        epilog = command.epilog or ""
        assert "kubectl taobrev" in epilog, name
        assert "exit codes" in epilog, name


def test_connection_flags_reach_kubectl_as_kubectl_spells_them() -> None:
    fake = FakeKubectl(tbj("a"))
    assert run(fake, "get", "a", "-n", "ml", "--context", "prod", "--kubeconfig", "/k") == 0
    assert fake.calls == [
        ["kubectl", "--kubeconfig=/k", "--context=prod", "--namespace=ml", "get", RESOURCE, "a", "-o", "json"]
    ]
    fake.calls.clear()
    assert run(fake, "cost", "-A") == 0
    assert fake.calls == [["kubectl", "get", RESOURCE, "--all-namespaces", "-o", "json"]]


def test_kubectls_flags_may_come_before_the_command_as_kubectl_users_type_them() -> None:
    fake = FakeKubectl(tbj("a"))
    assert run(fake, "-n", "ml", "--context=prod", "get", "a") == 0
    assert fake.calls[-1][:3] == ["kubectl", "--context=prod", "--namespace=ml"]
    assert run(fake, "-A", "cost") == 0
    assert "--all-namespaces" in fake.calls[-1]
    with pytest.raises(SystemExit):
        run(fake, "--bogus", "get")


def test_an_unknown_job_exits_1_with_kubectls_own_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(FakeKubectl(), "describe", "nope") == 1
    assert capsys.readouterr().err.strip() == f'Error from server (NotFound): {RESOURCE} "nope" not found'


def test_a_bad_flag_exits_1_with_a_pointer_to_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run(FakeKubectl(), "get", "-o", "xml")
    assert exit_.value.code == 1
    assert "invalid choice: 'xml'" in capsys.readouterr().err


def test_name_with_all_namespaces_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(FakeKubectl(tbj("a")), "get", "a", "-A") == 1
    assert "give -n NAMESPACE instead of -A" in capsys.readouterr().err


def test_cancel_sends_the_annotation_with_the_request_time_and_says_what_happens(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cancel_patch(NOW) == {"metadata": {"annotations": {CANCEL_ANNOTATION: "2026-12-05T11:00:07Z"}}}
    fake = FakeKubectl(tbj("a", status=ADMITTED))
    assert run(fake, "cancel", "a") == 0
    assert fake.calls[-1] == [
        "kubectl", "patch", RESOURCE, "a", "--type=merge",
        "-p", '{"metadata": {"annotations": {"taobrev.io/cancel": "2026-12-05T11:00:07Z"}}}', "-o", "json",
    ]  # fmt: skip
    out = capsys.readouterr().out
    assert "taobrevjob/a cancel requested" in out
    assert "uploads the results to s3://results/a, deletes the instance" in out
    assert "outcome Canceled. The TaoBrevJob stays" in out
    assert fake.objects["a"]["spec"]["suspend"] is False  # spec untouched


def test_cancel_twice_keeps_the_first_request_and_a_finished_job_is_left_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    asked = tbj("a", status=ADMITTED)
    asked["metadata"]["annotations"] = {CANCEL_ANNOTATION: "2026-12-05T10:59:00Z"}
    fake = FakeKubectl(asked, tbj("b", status=FINISHED))
    assert run(fake, "cancel", "a") == 0
    assert run(fake, "cancel", "b") == 0
    assert fake.patches() == []
    out = capsys.readouterr().out
    assert "cancel already requested at 2026-12-05T10:59:00Z" in out
    assert "taobrevjob/b has already finished; nothing to cancel" in out


def test_cancel_wait_waits_on_the_phase_through_kubectl_wait(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeKubectl(tbj("a", status=ADMITTED))
    assert run(fake, "cancel", "a", "--wait", "--timeout", "20m") == 0
    assert [
        "kubectl",
        "wait",
        f"{RESOURCE}/a",
        "--for=jsonpath={.status.phase}=Deleted",
        "--timeout=1200s",
    ] in (fake.calls)
    assert run(fake, "cancel", "a", "--wait", "--timeout", "soon") == 1
    assert "--timeout 'soon'" in capsys.readouterr().err


def test_suspend_patches_a_pending_job_on_the_resource_version_it_checked() -> None:
    assert suspend_patch(True, "41") == {"spec": {"suspend": True}, "metadata": {"resourceVersion": "41"}}
    fake = FakeKubectl(tbj("a", status={"phase": "Pending"}))
    assert run(fake, "suspend", "a") == 0
    assert fake.patches() == [{"metadata": {"resourceVersion": "41"}, "spec": {"suspend": True}}]


def test_suspend_refuses_an_admitted_job_plainly_and_changes_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake = FakeKubectl(tbj("a", status=ADMITTED), tbj("b", status=FINISHED))
    assert run(fake, "suspend", "a") == 1
    err = capsys.readouterr().err
    assert "was already admitted (phase Running)" in err
    assert "the run continues and spec was left unchanged" in err
    assert "kubectl taobrev cancel a -n ml" in err
    assert run(fake, "suspend", "b") == 1
    assert "has already finished" in capsys.readouterr().err
    assert fake.patches() == []


def test_a_job_admitted_between_the_check_and_the_patch_is_refused_after_the_conflict(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake = FakeKubectl(tbj("a", status={"phase": "Pending"}))
    fake.conflicts, fake.on_conflict = 1, {"status": ADMITTED, "metadata": {"resourceVersion": "42"}}
    assert run(fake, "suspend", "a") == 1
    assert "was already admitted" in capsys.readouterr().err
    assert fake.objects["a"]["spec"]["suspend"] is False


def test_resume_clears_suspend_and_is_a_no_op_when_not_suspended(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeKubectl(tbj("a", status={"phase": "Pending"}, suspend=True), tbj("b"))
    assert run(fake, "resume", "a") == 0
    assert run(fake, "resume", "b") == 0
    assert fake.patches() == [{"metadata": {"resourceVersion": "41"}, "spec": {"suspend": False}}]
    out = capsys.readouterr().out
    assert "taobrevjob/a resumed (spec.suspend: false)" in out
    assert "taobrevjob/b is not suspended; nothing to do" in out


def test_suspend_warns_when_gitops_manages_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    job = tbj("a", status={"phase": "Pending"})
    job["metadata"]["labels"] = {"kustomize.toolkit.fluxcd.io/name": "jobs"}
    assert run(FakeKubectl(job), "suspend", "a") == 0
    assert "looks managed by GitOps (kustomize.toolkit.fluxcd.io/name)" in capsys.readouterr().out


def test_get_json_prints_the_object_and_a_listing_as_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeKubectl(tbj("a"), tbj("b"))
    assert run(fake, "get", "a", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["name"] == "a"
    assert run(fake, "get", "-o", "json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["kind"] == "List"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a", "b"]


def test_an_empty_namespace_says_so_on_stderr_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(FakeKubectl(), "get", "-n", "ml") == 0
    assert capsys.readouterr().err.strip() == "No resources found in ml namespace."


def test_describe_asks_for_the_objects_events_by_uid_in_its_namespace() -> None:
    fake = FakeKubectl(tbj("a"))
    assert run(fake, "describe", "a") == 0
    assert fake.calls[-1] == [
        "kubectl", "--namespace=ml", "get", "events",
        "--field-selector", "involvedObject.uid=uid-a", "-o", "json",
    ]  # fmt: skip
