"""`python -m tests.brevsim ROOT [--speed S] [--s3-endpoint URL]`: set up a simulator for a demo.

Prints the `export` lines that put its `brev`/`ssh` first on PATH.
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
    args = parser.parse_args()
    sim = BrevSim(args.root.resolve(), speed=args.speed, s3_endpoint=args.s3_endpoint)
    if args.login:
        sim.login_api_key()
    print(f'export PATH="{sim.bin_dir}:$PATH"')
    print(f'export HOME="{sim.home}"')


if __name__ == "__main__":
    main()
