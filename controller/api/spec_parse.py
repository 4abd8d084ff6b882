"""A TaoBrevJob `.spec` as read from the API server, parsed into the model (PURE).

pydantic's validation errors become one SpecError naming every bad field by its API path
(camelCase, `[i]` for items). Apart from models.py so that the API's data types know nothing of
the operator's error hierarchy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from controller.api.errors import SpecError
from controller.api.models import ImageKind, TaoBrevJobSpec, image_kind


def parse_spec(
    spec: Any, *, default_image: str | None = None, step_images: Mapping[str, str] | None = None
) -> TaoBrevJobSpec:
    """Validate a `.spec`; raise SpecError naming every bad field.

    `default_image` fills an omitted spec.task.image (the API server applies the same default
    from the CRD, so this matters only for specs that did not pass through it). `step_images`
    (ImageKind value -> image, versions.yaml images.tao_toolkit) fills each omitted
    spec.steps[].image by its action (`image_kind`); without it, the kinds are derived from
    `default_image`'s `-pyt` tag. The CRD cannot default these: the default depends on the action.

    Normalisation: the single-action form (`spec.task`) stays as it is stored, and
    `TaoBrevJobSpec.workflow()` reads it as a one-step workflow, so objects applied before
    workflows existed parse and run unchanged."""
    task = spec.get("task") if isinstance(spec, dict) else None
    if default_image is not None and isinstance(task, dict) and "image" not in task:
        spec = {**spec, "task": {**task, "image": default_image}}
    steps = spec.get("steps") if isinstance(spec, dict) else None
    images = step_images if step_images is not None else derived_step_images(default_image)
    if images and isinstance(steps, list):
        filled = [_with_image(step, images) for step in steps]
        spec = {**spec, "steps": filled}
    try:
        return TaoBrevJobSpec.model_validate(spec)
    except ValidationError as exc:
        raise SpecError(f"invalid TaoBrevJob spec: {format_validation_error(exc, 'spec')}") from exc


def _with_image(step: Any, images: Mapping[str, str]) -> Any:
    if not isinstance(step, dict) or step.get("image") is not None or not isinstance(step.get("action"), str):
        return step
    image = images.get(image_kind(step["action"]).value)
    return {**step, "image": image} if image is not None else step


_PYT_SUFFIX = "-pyt"


def derived_step_images(default_image: str | None) -> dict[str, str]:
    """`...:6.26.3-pyt` -> the same release's -deploy and -data-services tags (TAO's naming):
    a fallback for callers that pass only the default image; versions.yaml pins all three."""
    if default_image is None:
        return {}
    if not default_image.endswith(_PYT_SUFFIX):
        return {kind.value: default_image for kind in ImageKind}
    base = default_image.removesuffix(_PYT_SUFFIX)
    return {
        ImageKind.PYT.value: default_image,
        ImageKind.DEPLOY.value: f"{base}-deploy",
        ImageKind.DATA_SERVICES.value: f"{base}-data-services",
    }


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
