"""The remote program templates (controller/brev/remote/*.sh): each is a well-formed template (a
header naming what it takes, lines that join without changing what bash reads, placeholders all
given and all used) and each is rendered by some `Workload` method. What a rendered program says
is checked by tests/unit/test_workload_commands.py and, run by real bash, by the simulator's
tests; that it is clean shell, by `make lint` (tests/devenv/shellcheck_remote.py)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from controller.brev import remote, workload
from tests.devenv import shellcheck_remote

NAMES = remote.names()
REPO = Path(__file__).resolve().parents[2]
# Where a line break may stand for a space (and a space for a line break) without changing what
# bash reads: after a command separator, a pipe, a keyword that a command follows, a `{`, or
# with a continuation backslash.
LINE_ENDS = re.compile(r"(;|&&|\|\||\||\{|\\|(^|\s)(then|do|else|in))$")


def _sample(name: str) -> dict[str, str]:
    return {key: f"V{i}_{key}" for i, key in enumerate(sorted(remote.template(name).placeholders))}


def _unquoted_quote(line: str) -> bool:
    """True when `line` leaves a quote open (a quote would span lines)."""
    quote = ""
    escaped = False
    for char in line:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote and char == quote:
            quote = ""
        elif not quote and char in "'\"":
            quote = char
    return bool(quote)


def test_the_templates_are_found() -> None:
    assert len(NAMES) >= 20, NAMES
    assert {"secret_scope", "aws", "pull_image", "start_container", "clear"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_each_template_opens_with_a_header_naming_its_shell_its_job_and_its_placeholders(name: str) -> None:
    text = remote.source(name)
    lines = text.splitlines()
    assert lines[0] == "# shellcheck shell=bash", f"{name}: shellcheck must know the file's shell"
    assert lines[1].startswith(f"# {name}"), f"{name}: the header's first line says what {name} does"
    header = "\n".join(line for line in lines if line.startswith("#"))
    assert "Placeholders:" in header, name
    for key in remote.template(name).placeholders:
        assert f"@{key}@" in header, f"{name}: the header does not say what @{key}@ is"


@pytest.mark.parametrize("name", NAMES)
def test_template_lines_join_without_changing_what_bash_reads(name: str) -> None:
    """The raw file (what shellcheck reads) and the program sent (its lines joined by spaces)
    are the same commands: each line break stands where a space means the same."""
    lines = remote.program_lines(remote.source(name))
    assert lines, f"{name} holds no program"
    for line in lines[:-1]:
        assert LINE_ENDS.search(line), f"{name}: a line break after {line!r} would end a command"
    for line in lines:
        assert not _unquoted_quote(line.removesuffix("\\")), f"{name}: a quote spans lines at {line!r}"
        assert not re.search(r"\s#", line), f"{name}: a comment after code would swallow the next lines"
    assert not lines[-1].endswith("\\"), name


@pytest.mark.parametrize("name", NAMES)
def test_each_template_renders_every_placeholder_from_the_values_given(name: str) -> None:
    values = _sample(name)
    program = remote.render(name, **values)
    assert not remote.PLACEHOLDER_RE.search(program), program
    assert "@{" not in program
    assert "\n" not in program, "a program is one line"
    for value in values.values():
        assert value in program
    if values:
        missing = dict(values)
        missing.pop(next(iter(missing)))
        with pytest.raises(ValueError, match="missing values"):
            remote.render(name, **missing)
    with pytest.raises(ValueError, match="unused values"):
        remote.render(name, **values, not_a_placeholder="x")


def test_an_option_not_given_renders_as_nothing_with_the_space_before_it() -> None:
    bare = remote.render("aws", s3_env="ENV", mounts=[], image="IMG", s3_options=[])
    assert bare == "docker run --rm --env-file ENV -e AWS_PAGER= IMG"
    full = remote.render(
        "aws", s3_env="ENV", mounts=["-v", "a:b"], image="IMG", s3_options=["--region", "'x y'"]
    )
    assert full == "docker run --rm --env-file ENV -e AWS_PAGER= -v a:b IMG --region 'x y'"


def test_values_are_substituted_as_given_and_never_read_as_template_text() -> None:
    # Quoting is the caller's: a value is not quoted again, and an @...@ in it is no placeholder.
    assert remote.render("wait_exit", seconds=5, name="'@name@'") == "timeout 5 docker wait '@name@' 2>&1"
    with pytest.raises(ValueError, match="empty"):
        remote.render("wait_exit", seconds=5, name="")


def test_each_template_file_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    real = remote.source

    def counting(name: str) -> str:
        reads.append(name)
        return real(name)

    remote.template.cache_clear()
    monkeypatch.setattr(remote, "source", counting)
    try:
        for _ in range(3):
            remote.render("clear", names=["n", "c"], job_dir="d")
        assert reads == ["clear"]
    finally:
        remote.template.cache_clear()


def test_every_template_is_rendered_by_some_workload_method(monkeypatch: pytest.MonkeyPatch) -> None:
    used: set[str] = set()
    real = remote.render

    def recording(name: str, /, **values: remote.Value) -> str:
        used.add(name)
        return real(name, **values)

    monkeypatch.setattr(workload, "render", recording)
    shellcheck_remote.programs()
    assert used == set(NAMES), f"never rendered: {sorted(set(NAMES) - used)}"


def test_every_marker_the_parsers_read_is_printed_by_a_template() -> None:
    text = " ".join(remote.template(name).program for name in NAMES)
    markers = [
        value
        for key, value in vars(workload).items()
        if key.startswith("_") and isinstance(value, str) and value.startswith(("TAOBREV_", "__taobrev"))
    ]
    assert len(markers) >= 15, markers  # the filter above found them
    for marker in markers:
        assert re.search(rf"(?<![\w]){re.escape(marker)}(?![\w])", text), f"no template prints {marker}"
    # The exit code of `timeout` that wait_exit_with_tail's answer is read by.
    assert f"[ $rc -ne {workload._TIMEOUT_RC} ]" in remote.template("if_exited").program


def test_the_templates_are_package_data_of_the_operator() -> None:
    """The image installs the wheel: a template outside package-data would be missing there
    (tests/integration/test_wheel.py checks the built wheel itself)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["package-data"]["controller.brev.remote"] == ["*.sh"]
    assert {p.stem for p in Path(remote.__file__).parent.glob("*.sh")} == set(NAMES)
