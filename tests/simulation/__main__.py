"""`python -m tests.simulation --seeds N [--start S] [--jobs J]`, or `--seed n` (replay: the
seed's whole trace is printed). `make simulate SEEDS=N` / `make simulate SEED=n`."""

from __future__ import annotations

import argparse
import sys
import time

from tests.simulation.run import run_seed, run_seeds

PROGRESS_EVERY = 1000


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (seeds are independent)")
    parser.add_argument("--seed", type=int, default=None, help="replay one seed, printing its trace")
    args = parser.parse_args()
    if args.seed is not None:
        sim = run_seed(args.seed)
        print("\n".join(sim.lines))
        for v in sim.violations:
            print(f"VIOLATION seed={args.seed}: {v}")
        return 1 if sim.violations else 0
    started = time.monotonic()
    seeds = range(args.start, args.start + args.seeds)
    failed = 0
    for done, (seed, violations) in enumerate(run_seeds(seeds, jobs=args.jobs), start=1):
        if violations:
            failed += 1
            print(f"seed {seed}: {violations[0]}  (replay: make simulate SEED={seed})", flush=True)
        if done % PROGRESS_EVERY == 0 and done < args.seeds:
            # A long run says how far it got: stopped early, its count still stands.
            took = time.monotonic() - started
            line = f"simulation: {done} seeds from {args.start} (to {seed}): {failed} failed, {took:.0f} s"
            print(line, flush=True)
    took = time.monotonic() - started
    first = args.start
    print(f"simulation: {args.seeds} seeds from {first}: {failed} failed, {took:.1f} s, {args.jobs} jobs")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
