"""deploy/helm/taobrev-operator read as files: its pins agree with the project's, its schema with
the operator's settings. (Rendering, lint and install: tests/integration/test_helm_chart.py,
tests/e2e/test_helm.py.)"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from controller.versions import load_versions
from tests.devenv import chartgen

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "taobrev-operator"


def test_chart_version_and_app_version_are_the_packages() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert chart["apiVersion"] == "v2"  # Helm 3 and Helm 4 both install v2 charts
    assert chart["version"] == chart["appVersion"] == version


def test_the_default_image_is_versions_yaml_pin_with_its_digest() -> None:
    """As deploy/base's `images:` entry: versions.yaml's images.operator, tag and digest
    (`make resolve-digests` writes all three places)."""
    image = yaml.safe_load((CHART / "values.yaml").read_text())["image"]
    pin = load_versions().images.operator
    assert f"{image['repository']}:{image['tag']}" == pin.image
    assert image["digest"] == pin.digest
    assert image["pullPolicy"] == "IfNotPresent"


def test_every_operator_setting_is_in_the_schema_and_nothing_else() -> None:
    schema = json.loads(chartgen.SCHEMA.read_text())
    settings = schema["properties"]["settings"]
    assert sorted(settings["properties"]) == chartgen.setting_names()
    assert settings["additionalProperties"] is False


def test_every_default_value_is_described_by_the_schema() -> None:
    schema = json.loads(chartgen.SCHEMA.read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert schema["additionalProperties"] is False
    assert set(values) <= set(schema["properties"])
    assert set(values["settings"]) <= set(schema["properties"]["settings"]["properties"])


def test_the_settings_the_chart_derives_are_real_settings() -> None:
    """The refused names in templates/_helpers.tpl are settings the operator reads (a renamed
    setting would otherwise slip through unrefused)."""
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    reserved = re.findall(r'^\s+"(TAOBREV_[A-Z_]+)" "', helpers, re.M)
    assert len(reserved) >= 10
    assert set(reserved) <= set(chartgen.setting_names())


def test_the_chart_copies_are_in_sync() -> None:
    """crds/, the alerts and the dashboard in the chart equal their sources (`make crds` syncs)."""
    assert chartgen.drifted() == []


def documented_values(schema: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of the values users set: objects with fixed keys are walked into; free-form
    maps (labels, settings) and lists are one value each."""
    paths = []
    for name, sub in schema["properties"].items():
        path = f"{prefix}{name}"
        if name == "global":
            continue
        if sub.get("additionalProperties") is False and name != "settings":
            paths += documented_values(sub, f"{path}.")
        else:
            paths.append(path)
    return paths


def test_docs_helm_md_documents_every_value() -> None:
    """docs/helm.md's values table names every value of the schema."""
    schema = json.loads(chartgen.SCHEMA.read_text())
    doc = (REPO / "docs" / "helm.md").read_text()
    paths = documented_values(schema)
    assert len(paths) > 30
    assert [p for p in paths if f"`{p}`" not in doc] == []
