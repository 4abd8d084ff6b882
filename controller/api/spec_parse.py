"""A TaoBrevJob `.spec` as read from the API server, parsed into the model (PURE).

pydantic's validation errors become one SpecError naming every bad field by its API path
(camelCase, `[i]` for items). Apart from models.py so that the API's data types know nothing of
the operator's error hierarchy.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from controller.api.errors import SpecError
from controller.api.models import TaoBrevJobSpec


def parse_spec(spec: Any, *, default_image: str | None = None) -> TaoBrevJobSpec:
    """Validate a `.spec`; raise SpecError naming every bad field.

    `default_image` fills an omitted spec.task.image (the API server applies the same default
    from the CRD, so this matters only for specs that did not pass through it)."""
    task = spec.get("task") if isinstance(spec, dict) else None
    if default_image is not None and isinstance(task, dict) and "image" not in task:
        spec = {**spec, "task": {**task, "image": default_image}}
    try:
        return TaoBrevJobSpec.model_validate(spec)
    except ValidationError as exc:
        raise SpecError(f"invalid TaoBrevJob spec: {format_validation_error(exc, 'spec')}") from exc


def format_validation_error(exc: ValidationError, root: str) -> str:
    """One line per error, each starting with the field's API path (camelCase, [i] for items)."""
    lines = []
    for err in exc.errors():
        path = root
        for part in err["loc"]:
            path += f"[{part}]" if isinstance(part, int) else f".{part}"
        msg = err["msg"].removeprefix("Value error, ")
        if msg.startswith(f"{path}"):  # our own messages already name the field
            lines.append(msg)
        else:
            lines.append(f"{path}: {msg}")
    return "; ".join(lines)
