"""The simulated public instance-type catalog (`GET /v1/instance/types`) and `brev search` logic."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class InstanceType:
    type: str
    cloud: str
    provider: str
    gpu_name: str  # "" for CPU-only
    gpu_count: int
    vram_per_gpu_gb: float
    capability: float
    vcpus: int
    ram_gb: float
    arch: str
    disk_min_gb: float
    disk_max_gb: float
    disk_price_per_gb_mo: float
    boot_time_seconds: int
    stoppable: bool
    rebootable: bool
    flex_ports: bool
    price_per_hour: float
    manufacturer: str = "NVIDIA"

    @property
    def total_vram_gb(self) -> float:
        return self.vram_per_gpu_gb * self.gpu_count


CATALOG: tuple[InstanceType, ...] = (
    InstanceType(
        "g6e.xlarge",
        "aws",
        "aws",
        "L40S",
        1,
        48,
        8.9,
        4,
        32,
        "x86_64",
        500,
        16000,
        0.0,
        420,
        True,
        True,
        True,
        1.86,
    ),
    InstanceType(
        "hyperstack_L40S",
        "hyperstack",
        "shadeform",
        "L40S",
        1,
        48,
        8.9,
        28,
        58,
        "x86_64",
        500,
        500,
        0.0,
        300,
        False,
        True,
        False,
        1.39,
    ),
    InstanceType(
        "g5.xlarge",
        "aws",
        "aws",
        "A10G",
        1,
        24,
        8.6,
        4,
        16,
        "x86_64",
        500,
        16000,
        0.0,
        420,
        True,
        True,
        True,
        1.21,
    ),
    InstanceType(
        "a2-ultragpu-1g:nvidia-a100-80gb:1",
        "gcp",
        "gcp",
        "A100",
        1,
        80,
        8.0,
        12,
        170,
        "x86_64",
        500,
        10000,
        0.0,
        390,
        True,
        True,
        True,
        5.07,
    ),
    InstanceType(
        "massedcompute_A100_sxm4_80G",
        "massedcompute",
        "shadeform",
        "A100",
        1,
        80,
        8.0,
        24,
        120,
        "x86_64",
        1000,
        1000,
        0.0,
        600,
        False,
        False,
        False,
        1.89,
    ),
    InstanceType(
        "p5.48xlarge",
        "aws",
        "aws",
        "H100",
        8,
        80,
        9.0,
        192,
        2048,
        "x86_64",
        1000,
        16000,
        0.0,
        600,
        True,
        True,
        True,
        98.32,
    ),
    InstanceType(
        "n1-standard-4:nvidia-tesla-t4:1",
        "gcp",
        "gcp",
        "T4",
        1,
        16,
        7.5,
        4,
        15,
        "x86_64",
        100,
        10000,
        0.0,
        300,
        True,
        True,
        True,
        0.55,
    ),
    InstanceType(
        "m7i.xlarge",
        "aws",
        "aws",
        "",
        0,
        0,
        0.0,
        4,
        16,
        "x86_64",
        100,
        16000,
        0.0,
        180,
        True,
        True,
        True,
        0.2,
    ),
)

BY_TYPE: dict[str, InstanceType] = {t.type: t for t in CATALOG}

SORT_KEYS: dict[str, Callable[[InstanceType], Any]] = {
    "price": lambda t: t.price_per_hour,
    "gpu-count": lambda t: t.gpu_count,
    "vram": lambda t: t.vram_per_gpu_gb,
    "total-vram": lambda t: t.total_vram_gb,
    "vcpu": lambda t: t.vcpus,
    "type": lambda t: t.type,
    "capability": lambda t: t.capability,
    "provider": lambda t: t.provider,
    "disk": lambda t: t.disk_max_gb,
    "boot-time": lambda t: t.boot_time_seconds,
    "ram": lambda t: t.ram_gb,
    "arch": lambda t: t.arch,
}


def go_num(x: float) -> float | int:
    """Go's encoding/json writes 48.0 as 48."""
    return int(x) if float(x).is_integer() else x


@dataclass
class Filters:
    gpu_name: str = ""
    provider: str = ""
    arch: str = ""
    min_vram: float = 0
    min_total_vram: float = 0
    min_capability: float = 0
    min_vcpu: int = 0
    min_ram: float = 0
    min_disk: float = 0
    max_boot_time: int = 0  # minutes
    stoppable: bool = False
    rebootable: bool = False
    flex_ports: bool = False
    sort: str = "price"
    desc: bool = False
    cpu: bool = False


def search(f: Filters) -> list[InstanceType]:
    out: list[InstanceType] = []
    for t in CATALOG:
        if f.cpu != (t.gpu_count == 0):
            continue
        if not f.cpu and t.manufacturer != "NVIDIA":
            continue
        if f.gpu_name and f.gpu_name.lower() not in t.gpu_name.lower():
            continue
        if f.provider and f.provider.lower() not in f"{t.cloud}:{t.provider}".lower():
            continue
        if f.arch and f.arch.lower() != t.arch.lower():
            continue
        if t.vram_per_gpu_gb < f.min_vram or t.total_vram_gb < f.min_total_vram:
            continue
        if t.capability < f.min_capability or t.vcpus < f.min_vcpu or t.ram_gb < f.min_ram:
            continue
        if f.min_disk and t.disk_max_gb < f.min_disk:
            continue
        if f.max_boot_time and (t.boot_time_seconds <= 0 or t.boot_time_seconds > f.max_boot_time * 60):
            continue
        if (f.stoppable and not t.stoppable) or (f.rebootable and not t.rebootable):
            continue
        if f.flex_ports and not t.flex_ports:
            continue
        out.append(t)
    out.sort(key=SORT_KEYS[f.sort.lower() or "price"], reverse=f.desc)
    return out


def to_json(t: InstanceType, target_disk: float = 0) -> dict[str, Any]:
    d: dict[str, Any] = {
        "type": t.type,
        "cloud": t.cloud,
        "provider": t.provider,
        "gpu_name": t.gpu_name,
        "gpu_count": t.gpu_count,
        "vram_per_gpu_gb": go_num(t.vram_per_gpu_gb),
        "total_vram_gb": go_num(t.total_vram_gb),
        "capability": go_num(t.capability),
        "vcpus": t.vcpus,
        "memory": f"{go_num(t.ram_gb)}GiB",
        "ram_gb": go_num(t.ram_gb),
        "arch": t.arch,
        "disk_min_gb": go_num(t.disk_min_gb),
        "disk_max_gb": go_num(t.disk_max_gb),
    }
    if t.disk_price_per_gb_mo:
        d["disk_price_per_gb_mo"] = go_num(t.disk_price_per_gb_mo)
    d |= {
        "boot_time_seconds": t.boot_time_seconds,
        "stoppable": t.stoppable,
        "rebootable": t.rebootable,
        "flex_ports": t.flex_ports,
    }
    if target_disk:
        d["target_disk_gb"] = go_num(target_disk)
    d["price_per_hour"] = go_num(t.price_per_hour)
    return d


def boot_str(seconds: int) -> str:
    m, s = divmod(seconds, 60)
    return f"{m}m{s}s" if s else f"{m}m"


def features(t: InstanceType) -> str:
    s = ("S" if t.stoppable else "") + ("R" if t.rebootable else "") + ("P" if t.flex_ports else "")
    return s or "-"
