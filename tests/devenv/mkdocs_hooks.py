"""MkDocs hooks of the documentation site (mkdocs.yml `hooks:`).

The docs are read in two places that disagree on one thing: in a table, GitHub needs a pipe inside
a code span escaped (`a\\|b`, or the cell splits), while Python-Markdown's tables leave code spans
alone and would show the backslash. The pages are written for GitHub; this hook drops the escape
inside code spans of table rows before the site renders them.
"""

from __future__ import annotations

from typing import Any


def _unescape_code(line: str) -> str:
    parts = line.split("`")
    return "`".join(p.replace("\\|", "|") if i % 2 else p for i, p in enumerate(parts))


def unescape_table_code(markdown: str) -> str:
    return "\n".join(
        _unescape_code(line) if line.lstrip().startswith("|") else line for line in markdown.split("\n")
    )


def on_page_markdown(markdown: str, **_: Any) -> str:
    return unescape_table_code(markdown)
