"""`python -m tests.simulation --seeds N [--start S]` or `--seed n` (replay, trace printed)."""

from __future__ import annotations

import argparse
import sys
import time

from tests.simulation.run import run_seed


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--seed", type=int, default=None, help="replay one seed, printing its trace")
    args = parser.parse_args()
    if args.seed is not None:
        sim = run_seed(args.seed)
        print("\n".join(sim.lines))
        for v in sim.violations:
            print(f"VIOLATION seed={args.seed}: {v}")
        return 1 if sim.violations else 0
    failed = 0
    started = time.monotonic()
    for seed in range(args.start, args.start + args.seeds):
        sim = run_seed(seed)
        if sim.violations:
            failed += 1
            print(f"seed {seed}: {sim.violations[0]}  (replay: make simulate SEED={seed})", flush=True)
    took = time.monotonic() - started
    print(f"{args.seeds} seeds from {args.start}: {failed} failed, {took:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
