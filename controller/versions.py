"""Typed access to versions.yaml, the one place the project's pinned versions live."""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TaoImages(_Frozen):
    pyt: str
    deploy: str
    data_services: str

    def by_kind(self) -> dict[str, str]:
        """Workflow steps' default images, keyed like models.ImageKind."""
        return {"pyt": self.pyt, "deploy": self.deploy, "data_services": self.data_services}


# What versions.yaml holds for a digest not resolved yet (`make resolve-digests` replaces it).
UNRESOLVED_DIGEST = "REPLACE_AT_RELEASE"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class PinnedImage(_Frozen):
    """An image tag plus the manifest digest it resolved to at release."""

    image: str
    digest: str

    @field_validator("digest")
    @classmethod
    def _digest_or_placeholder(cls, value: str) -> str:
        if value != UNRESOLVED_DIGEST and not _DIGEST.fullmatch(value):
            raise ValueError(
                f"digest {value!r} is neither sha256:<64 hex> nor {UNRESOLVED_DIGEST}: "
                "run `make resolve-digests` instead of editing it by hand"
            )
        return value

    @property
    def resolved(self) -> bool:
        return self.digest != UNRESOLVED_DIGEST

    @property
    def reference(self) -> str:
        """`image@digest` once resolved (the registry serves exactly that content), else the tag."""
        return f"{self.image}@{self.digest}" if self.resolved else self.image


class Images(_Frozen):
    tao_toolkit: TaoImages
    aws_cli_pin: PinnedImage = Field(alias="aws_cli")
    python_base: PinnedImage
    operator: PinnedImage

    @property
    def aws_cli(self) -> str:
        """The aws-cli image reference run on instances (pinned by digest once resolved)."""
        return self.aws_cli_pin.reference


class BrevPins(_Frozen):
    cli_version: str
    cli_sha256: str


class KubernetesPins(_Frozen):
    version: str
    etcd_version: str
    kubectl_pypi: str


class KueuePins(_Frozen):
    version: str


class GoPins(_Frozen):
    toolchain: str


class HelmPins(_Frozen):
    # helm.sh/helm/v3 and helm.sh/helm/v4 module versions (cmd/helm), built by tests/devenv/helmbuild.py.
    v3: str
    v4: str


class Versions(_Frozen):
    images: Images
    brev: BrevPins
    kubernetes: KubernetesPins
    kueue: KueuePins
    go: GoPins
    helm: HelmPins


def versions_path() -> Path:
    # The container image copies versions.yaml next to the package; a checkout has it at the top.
    override = os.environ.get("TAOBREV_VERSIONS_FILE")
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent / "versions.yaml"


@lru_cache(maxsize=1)
def load_versions() -> Versions:
    return Versions.model_validate(yaml.safe_load(versions_path().read_text()))
