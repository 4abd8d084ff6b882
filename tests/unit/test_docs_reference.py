"""The documentation keeps up with the code: every CRD field is in the generated reference, the
reference is current, and every reason the operator writes is in the troubleshooting page with
what to do. (The site build itself, links and anchors included: tests/integration/test_docs_site.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from controller.api import reasons
from controller.fleet import admission
from controller.lifecycle.phases import Phase
from tests.devenv import crdref

REPO = Path(__file__).resolve().parents[2]
TROUBLESHOOTING = REPO / "docs" / "troubleshooting.md"


def all_reasons() -> set[str]:
    """Every reason in controller/api/reasons.py (each CamelCase constant, and `<Phase>Timeout`
    for every phase with a timeout), plus the queue reasons admission writes."""
    constants = {
        value
        for name, value in vars(reasons).items()
        if name.isupper() and isinstance(value, str) and not name.startswith("_")
    }
    timeouts = {reasons.timeout(phase) for phase in Phase if phase != Phase.DELETED}
    queue = {*admission.LIMIT_REASONS, admission.SUSPENDED}
    return constants | timeouts | queue


def documented_reasons() -> dict[str, str]:
    """`### Reason` headings of the troubleshooting page -> the text under each."""
    sections = re.split(r"^### ", TROUBLESHOOTING.read_text(), flags=re.MULTILINE)[1:]
    out = {}
    for section in sections:
        heading, _, body = section.partition("\n")
        out[heading.strip()] = body.split("\n## ", 1)[0].strip()
    return out


def test_every_reason_is_in_the_troubleshooting_page_with_what_to_do() -> None:
    documented = documented_reasons()
    missing = sorted(all_reasons() - documented.keys())
    assert not missing, f"add a `### <Reason>` section to docs/troubleshooting.md for: {missing}"
    terse = sorted(r for r in all_reasons() if len(documented[r].split()) < 5)
    assert not terse, f"say what the reason means and what to do: {terse}"


def test_the_troubleshooting_page_documents_no_reason_the_code_lacks() -> None:
    stale = sorted(documented_reasons().keys() - all_reasons())
    assert not stale, f"docs/troubleshooting.md documents reasons the operator never writes: {stale}"


def test_the_reason_list_sees_the_constants() -> None:
    found = all_reasons()
    assert {"SecretNotFound", "BudgetExceeded", "RunningTimeout", "NamespaceGPULimit"} <= found
    assert "DeletedTimeout" not in found


def test_every_crd_field_is_in_the_reference() -> None:
    reference = crdref.REFERENCE_PATH.read_text()
    for crd_file in crdref.CRD_FILES:
        paths = crdref.all_paths(yaml.safe_load(crd_file.read_text()))
        assert len(paths) > 10, crd_file
        missing = [p for p in paths if f"| `{p}` |" not in reference]
        assert not missing, f"{crd_file.name}: fields missing from docs/crd-reference.md: {missing[:10]}"


def test_the_reference_names_type_default_and_validation() -> None:
    reference = crdref.REFERENCE_PATH.read_text()
    (row,) = [line for line in reference.splitlines() if line.startswith("| `spec.priority` |")]
    assert row.split(" | ")[1:4] == ["integer", "`0`", ">= -1000000; <= 1000000"]
    assert "**required**" in reference
    assert "Rule: `has(self.reuse) != has(self.ephemeral)`" in reference


def test_a_field_added_to_the_crd_fails_the_check() -> None:
    crd = yaml.safe_load(crdref.CRD_FILES[0].read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["newField"] = {"type": "string", "description": "new"}
    assert "spec.newField" in crdref.all_paths(crd)
    assert "| `spec.newField` |" not in crdref.REFERENCE_PATH.read_text()


def test_the_committed_reference_is_current() -> None:
    assert crdref.render() == crdref.REFERENCE_PATH.read_text(), (
        "docs/crd-reference.md has drifted from crds/: run `python -m tests.devenv.crdref --write`"
    )


def test_the_site_hook_unescapes_pipes_only_in_table_code() -> None:
    from tests.devenv.mkdocs_hooks import unescape_table_code

    page = "| `a\\|b` | c \\| d |\ntext `x\\|y`\n"
    assert unescape_table_code(page) == "| `a|b` | c \\| d |\ntext `x\\|y`\n"
