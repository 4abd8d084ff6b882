"""The small subset of Go text/template that docker `--format` users write.

Supported actions: `{{.}}`, `{{.A.B}}`, `{{json .A}}`, `{{index .A "k"}}`, `{{.Label "k"}}`
(ps rows), `{{upper X}}`/`{{lower X}}`, a leading `table`, and `\\t` / `\\n` escapes.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

ACTION = re.compile(r"{{-?\s*(.*?)\s*-?}}")


class TemplateError(Exception):
    pass


def go_str(v: Any) -> str:
    if v is None:
        return "<no value>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{go_str(v[k])}" for k in sorted(v)) + "]"
    if isinstance(v, list):
        return "[" + " ".join(go_str(x) for x in v) + "]"
    return str(v)


def _path(obj: Any, expr: str) -> Any:
    if expr == ".":
        return obj
    cur = obj
    for part in expr.lstrip(".").split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise TemplateError(f'template: :1: executing "" at <{expr}>: can\'t evaluate field {part}')
        cur = cur[part]
    return cur


def _eval(obj: Any, words: list[str]) -> Any:
    if not words:
        raise TemplateError("template: :1: missing value for command")
    head = words[0]
    if head == "json":
        return json.dumps(_eval(obj, words[1:]), separators=(",", ":"))
    if head in ("upper", "lower"):
        text = go_str(_eval(obj, words[1:]))
        return text.upper() if head == "upper" else text.lower()
    if head == "index":
        container = _eval(obj, words[1:2])
        key = words[2] if len(words) > 2 else ""
        return container.get(key) if isinstance(container, dict) else None
    if head == ".Label" and isinstance(obj, dict):
        return (obj.get("_labels") or {}).get(words[1] if len(words) > 1 else "", "")
    if head.startswith("."):
        return _path(obj, head)
    raise TemplateError(f'template: :1: function "{head}" not defined')


def render(template: str, obj: Any) -> str:
    template = template.replace("\\t", "\t").replace("\\n", "\n")

    def action(m: re.Match[str]) -> str:
        return go_str(_eval(obj, shlex.split(m.group(1))))

    return ACTION.sub(action, template)


def strip_table(template: str) -> tuple[str, bool]:
    if template.startswith("table"):
        return template[5:].lstrip(), True
    return template, False
