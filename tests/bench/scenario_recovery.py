"""Recovery figures come from tests/bench_recovery.py (`run(scale) -> dict`, written by the recovery
simulator engineer). Without it, the bench says so loudly in its table instead of skipping."""

from __future__ import annotations

import importlib
import importlib.util

from tests.bench.figures import Figure

MODULE = "tests.bench_recovery"
MISSING = "recovery: not available (tests/bench_recovery.py missing)"


def run(factor: float) -> list[Figure]:
    if importlib.util.find_spec(MODULE) is None:
        print(f"\n!!! {MISSING} !!!\n", flush=True)
        return [Figure("recovery", None, "", note=MISSING)]
    module = importlib.import_module(MODULE)
    results = module.run(factor)
    return [
        Figure(f"recovery: {key}", float(value), "real s" if key.endswith("_s") else "")
        for key, value in dict(results).items()
    ]
