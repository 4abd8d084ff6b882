"""Prints the scale factor, what it scaled, and the final table (figure, value, goal, pass/miss)."""

from __future__ import annotations

from collections.abc import Sequence

from tests.bench.figures import Figure
from tests.bench.scale import UNSCALED_SETTINGS, Scale


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def scale_header(scale: Scale) -> str:
    lines = [
        f"== scale factor F = {scale.factor:g}: every nominal duration and interval below runs F times "
        "as long; figures are printed in wall seconds and scaled back to real seconds (wall / F)",
        "   simulator (nominal s):     " + ", ".join(f"{k} {v:g}" for k, v in scale.brev_durations().items()),
    ]
    for knob in [*scale.settings(), *scale.timeout_knobs()]:
        flag = "  (floor of the field: slower than the real ratio)" if knob.floored else ""
        lines.append(f"   {knob.name:<38} nominal {knob.nominal:>7g} s -> {knob.used:g} s{flag}")
    lines += [f"   not scaled: {name}: {why}" for name, why in UNSCALED_SETTINGS.items()]
    return "\n".join(lines)


def table(figures: Sequence[Figure]) -> str:
    rows = [("figure", "value", "unit", "goal", "result")]
    rows += [(f.name, _fmt(f.value), f.unit, f.goal_text, f.verdict) for f in figures]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    out = []
    for i, row in enumerate(rows):
        out.append("  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    notes = [f"  [{f.name}] {f.note}" for f in figures if f.note]
    return "\n".join(out + (["notes:", *notes] if notes else []))
