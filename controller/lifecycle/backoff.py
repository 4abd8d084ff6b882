"""The one exponential backoff of the operator (PURE): `base`, doubling per consecutive
failure, capped.

Used by the reconciler (a pass that failed transiently) and by decide() (an action that failed
transiently). The exponent is capped too: a retry count that grows without end (a cleanup that is
retried for days) must never overflow a float.
"""

from __future__ import annotations

# 2**32 x any sane base is far above any cap; past it the cap holds anyway.
_MAX_EXPONENT = 32


def exponential(attempt: int, *, base: float, cap: float) -> float:
    """Seconds to wait after the `attempt`-th consecutive failure (1, 2, ...): base, 2 x base,
    4 x base ... never above `cap`. An attempt below 1 counts as the first."""
    if base <= 0:
        raise ValueError(f"backoff base must be > 0, got {base}")
    exponent = min(max(attempt, 1) - 1, _MAX_EXPONENT)
    return float(min(base * 2**exponent, cap))
