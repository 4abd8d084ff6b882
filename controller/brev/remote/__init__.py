"""The shell programs `Workload` runs on an instance, kept as template files (`<name>.sh`, here).

A template file is a bash program that shellcheck reads as it is (`make lint` checks the files and
the programs rendered from them). Its format:

- A line whose first non-blank character is `#` is a comment: the header (what the program does,
  its placeholders, why the non-obvious parts are there) and notes in the body. Comments are not
  sent.
- The program sent is the other lines, indentation removed, joined by one space. So a line ends
  only where a space means what the line break means: after `;`, `&&`, `||`, `|`, `then`, `do`,
  `else`, `in` or `{`; or with ` \\` (a continuation: the backslash goes, the words run on). A
  quote never spans lines and a comment never follows code on its line
  (tests/unit/test_remote_templates.py checks all of this).
- `@name@` is a placeholder. In the raw file it is one literal word, valid shell, so the file
  itself can be checked (not `@{name}`: shellcheck reports braces inside a word, SC1083). It
  renders as its value, substituted as given: the caller shell-quotes every value
  (`shlex.quote`), nothing here quotes, and a value is never read as template text. A value is a
  string (one or more words, never empty), a number, or a sequence of words, joined by spaces; an
  empty sequence (an option not given) renders as nothing and takes the space before it along.

Each file is read once per process (`functools.cache`); `render` checks that the values given
are exactly the template's placeholders.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Sequence
from dataclasses import dataclass

PLACEHOLDER_RE = re.compile(r"@([a-z][a-z0-9_]*)@")
# A placeholder with the one space before it (taken along when its value is an empty sequence).
_SLOT_RE = re.compile(r"( ?)@([a-z][a-z0-9_]*)@")

Value = str | int | Sequence[str]


@dataclass(frozen=True)
class Template:
    name: str
    program: str  # the joined lines, placeholders in place
    placeholders: frozenset[str]


def names() -> list[str]:
    """Every template shipped with the operator, by name (its file name without `.sh`)."""
    files = importlib.resources.files(__name__).iterdir()
    return sorted(f.name.removesuffix(".sh") for f in files if f.name.endswith(".sh"))


def source(name: str) -> str:
    """The template file's text."""
    return importlib.resources.files(__name__).joinpath(f"{name}.sh").read_text(encoding="utf-8")


def program_lines(text: str) -> list[str]:
    """The lines of a template that are sent (comments and blank lines left out), unindented."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def join_lines(lines: Sequence[str]) -> str:
    """One program line from template lines: joined by one space, a trailing ` \\` dropped."""
    return " ".join(line.removesuffix("\\").rstrip() for line in lines)


@functools.cache
def template(name: str) -> Template:
    program = join_lines(program_lines(source(name)))
    return Template(name, program, frozenset(PLACEHOLDER_RE.findall(program)))


def _word(name: str, value: Value) -> str:
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if not value:
            raise ValueError(f"remote template value {name} is empty (an optional one is a list)")
        return value
    return " ".join(value)


def render(name: str, /, **values: Value) -> str:
    """Template `name` with every placeholder replaced by its (caller-quoted) value."""
    tpl = template(name)
    given = set(values)
    if given != tpl.placeholders:
        missing, unused = sorted(tpl.placeholders - given), sorted(given - tpl.placeholders)
        raise ValueError(f"remote template {name}: missing values {missing}, unused values {unused}")
    words = {key: _word(key, value) for key, value in values.items()}

    def fill(match: re.Match[str]) -> str:
        word = words[match.group(2)]
        return match.group(1) + word if word else ""

    return _SLOT_RE.sub(fill, tpl.program)
