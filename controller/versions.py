"""Typed access to versions.yaml, the one place the project's pinned versions live."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TaoImages(_Frozen):
    pyt: str


class Images(_Frozen):
    tao_toolkit: TaoImages
    aws_cli: str


class BrevPins(_Frozen):
    cli_version: str
    cli_sha256: str


class KubernetesPins(_Frozen):
    version: str
    etcd_version: str
    kubectl_pypi: str


class GoPins(_Frozen):
    toolchain: str


class Versions(_Frozen):
    images: Images
    brev: BrevPins
    kubernetes: KubernetesPins
    go: GoPins


def versions_path() -> Path:
    # The container image copies versions.yaml next to the package; a checkout has it at the top.
    override = os.environ.get("TAOBREV_VERSIONS_FILE")
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent / "versions.yaml"


@lru_cache(maxsize=1)
def load_versions() -> Versions:
    return Versions.model_validate(yaml.safe_load(versions_path().read_text()))
