"""What the operator drops from the bodies kopf keeps per running job."""

from __future__ import annotations

from typing import Any

import kopf

from controller.kube.bodies import shed_unused


def test_managed_fields_leave_the_body_kopf_holds_and_everything_else_stays() -> None:
    raw: dict[str, Any] = {
        "metadata": {
            "name": "j",
            "uid": "u",
            "annotations": {"a": "b"},
            "finalizers": ["taobrev.io/teardown"],
            "managedFields": [{"manager": "kubectl-create", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"task": {}},
        "status": {"phase": "Running"},
    }
    body = kopf.Body(raw)  # type: ignore[arg-type]  # kopf's RawBody is a TypedDict
    shed_unused(body)
    assert "managedFields" not in raw["metadata"]  # kopf's own dict, not a copy
    assert body.metadata.name == "j"
    assert raw["metadata"]["finalizers"] == ["taobrev.io/teardown"]
    assert dict(body.status) == {"phase": "Running"}
    assert dict(body.spec) == {"task": {}}


def test_a_body_without_metadata_or_managed_fields_is_left_alone() -> None:
    shed_unused({})
    raw = {"metadata": {"name": "j"}}
    shed_unused(raw)
    assert raw == {"metadata": {"name": "j"}}
