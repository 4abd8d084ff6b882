"""deploy/gitops/argocd-health.lua, run by a real Lua 5.1 interpreter (Argo CD runs gopher-lua, 5.1).

Each tests/data/health/*.yaml holds a TaoBrevJob (`object`) and the health Argo CD must show for it
(`expected.status`, and `expected.message_contains` substrings). Adding a fixture file is all it
takes to pin another case, e.g. a status captured from an end-to-end run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from lupa import lua51

from controller.api.status import TaoBrevJobStatus

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "gitops" / "argocd-health.lua"
CM_PATCH = REPO / "deploy" / "gitops" / "argocd-cm-patch.yaml"
FIXTURES = sorted((REPO / "tests" / "data" / "health").glob("*.yaml"))
HEALTH_KEY = "resource.customizations.health.taobrev.io_TaoBrevJob"
ARGO_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}


def to_lua(lua: Any, value: Any) -> Any:
    """Python -> Lua the way Argo CD hands objects to scripts: maps are tables, lists 1-based
    tables, nulls absent."""
    if isinstance(value, dict):
        return lua.table_from({k: to_lua(lua, v) for k, v in value.items() if v is not None})
    if isinstance(value, list):
        return lua.table_from([to_lua(lua, v) for v in value])
    return value


def run_health(obj: dict[str, Any]) -> dict[str, str]:
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = to_lua(lua, obj)
    # Argo CD runs the script as a chunk whose `return` is the health table.
    result = lua.execute(SCRIPT.read_text())
    return {"status": result["status"], "message": result["message"]}


def test_there_are_fixtures_for_every_health_status() -> None:
    """The fixture set covers Progressing, Healthy and Degraded (guards against an empty glob)."""
    statuses = {yaml.safe_load(f.read_text())["expected"]["status"] for f in FIXTURES}
    assert {"Progressing", "Healthy", "Degraded"} <= statuses


def _as_written_now(obj: dict[str, Any]) -> dict[str, Any]:
    """The fixture's object as this release stores it: its (flat, earlier-release) status read by
    the operator's parser and written back with sub-records."""
    status = TaoBrevJobStatus.from_k8s(obj.get("status")).to_k8s()
    return {**obj, "status": status}


@pytest.mark.parametrize("shape", ["as-stored", "rewritten"])
@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_health_matches_fixture(fixture: Path, shape: str) -> None:
    """The Lua health check reports the fixture's expected status with a useful message, on the
    object as stored in the fixture (the hand-written ones hold the flat status of earlier
    releases, as an upgrade leaves it until the next write; the real-* ones what this release
    writes) and as this release rewrites it."""
    data = yaml.safe_load(fixture.read_text())
    expected = data["expected"]
    assert expected["status"] in ARGO_STATUSES, f"{fixture.name}: not an Argo CD health status"
    obj = (
        data["object"]
        if shape == "as-stored" or "status" not in data["object"]
        else _as_written_now(data["object"])
    )
    if shape == "rewritten" and "status" in data["object"]:
        assert "exitCode" not in obj["status"] and "instanceName" not in obj["status"]
    health = run_health(obj)
    assert health["status"] == expected["status"], health
    assert health["message"], "every health carries a message"
    for part in expected.get("message_contains", []):
        assert part in health["message"], (part, health["message"])


def test_object_with_empty_status_is_progressing() -> None:
    """status: {} (the operator has not written yet) is Progressing, not an error."""
    health = run_health({"apiVersion": "taobrev.io/v1alpha1", "kind": "TaoBrevJob", "status": {}})
    assert health["status"] == "Progressing"


def test_argocd_cm_patch_embeds_the_same_script() -> None:
    """argocd-cm-patch.yaml carries argocd-health.lua verbatim under the right argocd-cm key."""
    patch = yaml.safe_load(CM_PATCH.read_text())
    assert patch["metadata"]["name"] == "argocd-cm"
    assert patch["data"][HEALTH_KEY] == SCRIPT.read_text()
