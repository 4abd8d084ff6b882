"""`nvidia-smi` on a simulated instance (enough for `nvidia-smi -L` and a glance at the table)."""

from __future__ import annotations

import sys

from tests.brevsim.record import record_call
from tests.brevsim.store import Store, read_json

MEMORY_MIB = {"L40S": 46068, "A100": 81920, "H100": 81559, "A10G": 23028, "T4": 15360}


def main(state: str, instance_id: str, argv: list[str]) -> int:
    store = Store(state)
    meta = read_json(store.instance_dir(instance_id) / "meta.json", {})
    record_call(store.calls_path, "nvidia-smi", argv, where="remote", instance=meta.get("name"))
    gpu = str(meta.get("gpu") or "L40S")
    if not gpu:
        sys.stderr.write("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
        return 9
    if "-L" in argv:
        sys.stdout.write(f"GPU 0: NVIDIA {gpu} (UUID: GPU-{instance_id}-0000-0000-0000-000000000000)\n")
        return 0
    mem = MEMORY_MIB.get(gpu, 16384)
    sys.stdout.write(
        "+-----------------------------------------------------------------------------------------+\n"
        "| NVIDIA-SMI 570.133.20             Driver Version: 570.133.20     CUDA Version: 12.8     |\n"
        "|-----------------------------------------+------------------------+----------------------+\n"
        f"|   0  NVIDIA {gpu:<28}On  |   00000000:00:1E.0 Off |                    0 |\n"
        f"| N/A   32C    P8             23W /  350W |       1MiB / {mem:>5}MiB |      0%      Default |\n"
        "+-----------------------------------------+------------------------+----------------------+\n"
    )
    return 0
