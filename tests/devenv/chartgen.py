"""Keep the Helm chart's generated parts equal to their sources (run by tests.devenv.crdgen).

- ``crds/`` of the chart: byte copies of the repository's ``crds/*.yaml`` (Helm installs a chart's
  crds/ directory on first install and never upgrades it; docs/helm.md "Upgrading");
- ``files/``: byte copies of deploy/monitoring's PrometheusRule and Grafana dashboard, which the
  chart reads with .Files.Get (a chart cannot reach files outside its directory);
- ``values.schema.json``'s ``settings`` properties: one per TAOBREV_* setting of
  controller/settings.py, with its description and default, so a misspelled setting fails
  `helm install` instead of being ignored by the operator.

``crdgen --write`` writes them, ``crdgen --check`` (in `make lint`) fails on drift.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from controller.settings import PREFIX, Settings

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "taobrev-operator"
SCHEMA = CHART / "values.schema.json"

COPIES: dict[Path, Path] = {
    CHART / "crds" / "taobrevjob.yaml": REPO / "crds" / "taobrevjob.yaml",
    CHART / "crds" / "taobrevnotifier.yaml": REPO / "crds" / "taobrevnotifier.yaml",
    CHART / "files" / "prometheusrule.yaml": REPO / "deploy" / "monitoring" / "prometheusrule.yaml",
    CHART / "files" / "taobrev-operator.json": REPO
    / "deploy"
    / "monitoring"
    / "dashboards"
    / "taobrev-operator.json",
}


def setting_names() -> list[str]:
    return sorted(PREFIX + name.upper() for name in Settings.model_fields)


def settings_schema() -> dict[str, Any]:
    """The `settings` value: a map of known TAOBREV_* names to scalars (the ConfigMap quotes them)."""
    properties: dict[str, Any] = {}
    for name, field in sorted(Settings.model_fields.items()):
        default = field.default
        shown = ",".join(default) if isinstance(default, tuple) else default
        suffix = "" if shown in (None, "") else f" (default: {shown})"
        properties[PREFIX + name.upper()] = {
            "description": f"{field.description or name}{suffix}",
            "type": ["string", "number", "boolean"],
        }
    return {
        "description": (
            "TAOBREV_* operator settings (controller/settings.py, docs/settings.md) put in the "
            "settings ConfigMap; settings the chart derives from other values are refused by the templates"
        ),
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }


def schema_text(current: str) -> str:
    """values.schema.json with its `settings` property regenerated, the rest kept."""
    schema = json.loads(current)
    schema["properties"]["settings"] = settings_schema()
    return json.dumps(schema, indent=2) + "\n"


def expected() -> dict[Path, str]:
    files = {dest: src.read_text() for dest, src in COPIES.items()}
    files[SCHEMA] = schema_text(SCHEMA.read_text())
    return files


def write() -> list[Path]:
    written = []
    for path, text in expected().items():
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            written.append(path)
    return written


def drifted() -> list[Path]:
    return [path for path, text in expected().items() if not path.exists() or path.read_text() != text]
