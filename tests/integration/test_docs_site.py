"""The documentation site builds the way `make docs` builds it: `mkdocs build --strict` with the
repository's mkdocs.yml, so a warning fails it — a page left out of the nav, a link to a page that
does not exist, a link to a heading that does not exist (mkdocs.yml's `validation:`). And the
links of README.md, which GitHub renders outside the site, point at files that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    result = mkdocs_build(REPO / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "site" / "troubleshooting" / "index.html").is_file()
    assert "WARNING" not in result.stderr, result.stderr[-4000:]


def test_a_broken_anchor_fails_the_build(tmp_path: Path) -> None:
    """The check above can fail: a copy of the docs with one link to a heading that does not
    exist is refused."""
    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(REPO / "docs"), str(docs)], check=True, timeout=60)
    page = docs / "index.md"
    page.write_text(page.read_text() + "\nSee [nowhere](troubleshooting.md#no-such-reason).\n")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    config["docs_dir"] = str(docs)
    config["hooks"] = [str(REPO / hook) for hook in config.get("hooks", [])]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    result = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-reason" in result.stderr


def test_readme_links_point_at_files_that_exist() -> None:
    readme = (REPO / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if "://" not in t]
    assert local, "README.md links to no doc"
    missing = [t for t in local if not (REPO / t).exists()]
    assert not missing, missing


def test_readme_stays_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 250
