"""What the pre-flight judges without I/O (PURE): the problems it can report, the image reference
grammar, where an S3 URI points, and whether `brev search`'s catalog can satisfy the instance
selection.

The pre-flight (controller/preflight/checker.py) runs before `brev create`: a job that cannot succeed
(a typo in a bucket, a GPU name Brev does not know, a Secret not there yet) must not boot a GPU
instance that bills until the mistake shows hours later. Every problem names the spec field and
the fix, because the user reads it in `kubectl describe` and nowhere else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from controller.api.models import EphemeralInstance
from controller.api.reasons import (
    GPU_NAME_UNKNOWN,
    IMAGE_REFERENCE_INVALID,
    INSTANCE_TYPE_UNKNOWN,
    NO_INSTANCE_TYPE_MATCHES,
    PRICE_UNKNOWN,
)
from controller.brev.client import SearchResult
from controller.lifecycle.steps import Problem

# At most this many problems are kept in status (the first ones are what a user fixes first).
MAX_PROBLEMS = 8


# --- the image reference (github.com/distribution/reference's grammar) ------------------------

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
_NAME_MAX = 255


def image_problems(image: str, field: str = "spec.task.image") -> list[Problem]:
    """docker's reference grammar: a repository path is lowercase, a first component without a
    dot, colon or `localhost` is a path (not a registry), and the name is at most 255 characters.
    The CRD's pattern lets some of these through (e.g. `TAO/toolkit:6`), which only `docker pull`
    on the instance would refuse — after the boot is paid for. `field`: where the image was
    given (a workflow step's spec.steps[i].image)."""
    match = _REFERENCE.match(image)
    first = image.split("/", 1)[0]
    registry = "/" in image and ("." in first or ":" in first or first == "localhost")
    if match is None or (not registry and first != first.lower()):
        return [
            Problem(
                field,
                IMAGE_REFERENCE_INVALID,
                f"{field} {image!r} is not a valid image reference (registry/repository[:tag]"
                "[@sha256:digest], the repository in lowercase): fix the image name, e.g. "
                "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt",
            )
        ]
    if len(match.group("name")) > _NAME_MAX:
        return [
            Problem(
                field,
                IMAGE_REFERENCE_INVALID,
                f"{field}: the repository name is longer than {_NAME_MAX} characters: shorten it",
            )
        ]
    return []


# --- S3 locations ------------------------------------------------------------------------------


def s3_location(uri: str) -> tuple[str, str]:
    """(bucket, key prefix) of s3://bucket[/prefix]; the prefix keeps a trailing "/" if given."""
    rest = uri.removeprefix("s3://")
    bucket, _, key = rest.partition("/")
    return bucket, key


def marker_key(results_uri: str, job_id: str) -> tuple[str, str]:
    """Where the pre-flight writes (and removes) its marker to prove the results are writable:
    under the results prefix, where the upload will write, named for the job."""
    bucket, prefix = s3_location(results_uri)
    prefix = prefix.rstrip("/")
    key = f"{prefix}/.taobrev-preflight-{job_id}" if prefix else f".taobrev-preflight-{job_id}"
    return bucket, key


# --- the instance selection against `brev search --json` --------------------------------------


def selection_problems(
    ephemeral: EphemeralInstance, catalog: Sequence[SearchResult]
) -> tuple[list[Problem], list[tuple[str, float | None]]]:
    """Problems with the instance selection, and the types `brev create` would try in order.

    Explicit `types`: each must be in the catalog (brev skips an unknown one with "not a
    recognized type", so a typo silently narrows the fallback list, or leaves nothing). No types:
    the CLI picks every catalog type matching the filters, so `gpuName` and `provider` (both
    case-insensitive substrings, as brev matches them) must match at least one entry. The numeric
    filters and the CLI's own defaults are left to brev: a create it refuses for them creates
    nothing and bills nothing. A type's price must be known (`price_per_hour` > 0): budgets in
    dollars and the plan's cost ceiling need it."""
    by_type: dict[str, float | None] = {}
    for r in catalog:
        price = r.price_per_hour if r.price_per_hour > 0 else None
        known = by_type.get(r.type)
        by_type[r.type] = known if known is not None else price
    if ephemeral.types:
        problems, candidates = _named_types(ephemeral.types, by_type)
    else:
        problems, candidates = _filtered_types(ephemeral, catalog, by_type)
    unpriced = [t for t, price in candidates if price is None]
    # Explicit types: each one may be the one created. Filters: brev sorts by price, so one
    # priced match is enough to know what the cheapest choice costs.
    if unpriced and not problems and (ephemeral.types or len(unpriced) == len(candidates)):
        problems.append(
            Problem(
                "spec.instance.ephemeral.types" if ephemeral.types else "spec.instance.ephemeral",
                PRICE_UNKNOWN,
                f"`brev search` gives no price for {', '.join(unpriced[:5])}: the cost of the run "
                "cannot be known or capped; choose types with a listed price",
            )
        )
    return problems, candidates


def _named_types(
    types: Sequence[str], by_type: dict[str, float | None]
) -> tuple[list[Problem], list[tuple[str, float | None]]]:
    problems: list[Problem] = []
    candidates: list[tuple[str, float | None]] = []
    for i, t in enumerate(types):
        if t in by_type:
            candidates.append((t, by_type[t]))
            continue
        problems.append(
            Problem(
                f"spec.instance.ephemeral.types[{i}]",
                INSTANCE_TYPE_UNKNOWN,
                f"spec.instance.ephemeral.types[{i}] {t!r} is not an instance type `brev search` lists: "
                "fix the name (see `brev search --json`) or remove it",
            )
        )
    return problems, candidates


def _filtered_types(
    ephemeral: EphemeralInstance, catalog: Sequence[SearchResult], by_type: dict[str, float | None]
) -> tuple[list[Problem], list[tuple[str, float | None]]]:
    matching = list(catalog)
    for field, value, attr in (
        ("gpuName", ephemeral.gpu_name, "gpu_name"),
        ("provider", ephemeral.provider, "provider"),
    ):
        if not value:
            continue
        wanted = value.lower()
        hits = [r for r in matching if wanted in str(getattr(r, attr)).lower()]
        if not hits:
            known = sorted({str(getattr(r, attr)) for r in catalog})
            shown = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
            reason = GPU_NAME_UNKNOWN if attr == "gpu_name" else NO_INSTANCE_TYPE_MATCHES
            problem = Problem(
                f"spec.instance.ephemeral.{field}",
                reason,
                f"spec.instance.ephemeral.{field} {value!r} matches no instance type `brev search` "
                f"lists (known: {shown}): fix it",
            )
            return [problem], []
        matching = hits
    candidates: list[tuple[str, float | None]] = []
    # brev sorts by price: the cheapest match is tried first.
    for r in sorted(matching, key=lambda r: (r.price_per_hour <= 0, r.price_per_hour, r.type)):
        if all(r.type != t for t, _ in candidates):
            candidates.append((r.type, by_type[r.type]))
    return [], candidates
