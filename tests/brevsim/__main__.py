"""`python -m tests.brevsim ROOT [--speed S] [--s3-endpoint URL]`: set up a simulator for a demo.

Prints the `export` lines that put its `brev`/`ssh` first on PATH. The simulator's daemon (its
instances' sshd and containers) keeps running; `python -m tests.brevsim ROOT --stop` stops it and
every process the simulator started.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tests.brevsim.harness import BrevSim


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.brevsim")
    parser.add_argument("root", type=Path, help="directory for the simulator (bin/, state/, home/)")
    parser.add_argument(
        "--speed", type=float, default=1.0, help="delay factor: 1.0 looks real, 0.01 for tests"
    )
    parser.add_argument("--s3-endpoint", default=None, help="loopback S3 endpoint the aws-cli image uses")
    parser.add_argument("--login", action="store_true", help="write API-key credentials into its HOME")
    parser.add_argument("--stop", action="store_true", help="stop its daemon and every process it started")
    args = parser.parse_args()
    if args.stop:
        BrevSim(args.root.resolve(), speed=args.speed).close()
        return
    sim = BrevSim(args.root.resolve(), speed=args.speed, s3_endpoint=args.s3_endpoint, detach=True)
    if args.login:
        sim.login_api_key()
    print(f'export PATH="{sim.bin_dir}:$PATH"')
    print(f'export HOME="{sim.home}"')


if __name__ == "__main__":
    main()
