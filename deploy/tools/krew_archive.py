"""The krew archive of `kubectl taobrev`: deploy/krew/kubectl-taobrev (a shell shim that runs the
plugin from the installed taobrev-operator package) in a zip, byte for byte reproducible (stored,
not deflated: no zlib version can change the bytes; fixed times and modes), so the sha256 in
deploy/krew/taobrev.yaml can be checked against the shim in the repository.

    python3 deploy/tools/krew_archive.py OUT.zip     # write it, print its sha256
    python3 deploy/tools/krew_archive.py --check     # exit 1 if the manifest's sha256 differs

Release: publish OUT.zip at the manifest's `uri` (tests/unit/test_krew_manifest.py holds the
sha256 and the version to the shim and pyproject.toml).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import zipfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / "deploy" / "krew" / "kubectl-taobrev"
MANIFEST = REPO / "deploy" / "krew" / "taobrev.yaml"
# The earliest time a zip can hold; anything fixed would do.
EPOCH = (1980, 1, 1, 0, 0, 0)
UNIX = 3


def archive(shim: Path = SHIM) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as zf:
        info = zipfile.ZipInfo(shim.name, date_time=EPOCH)
        info.create_system = UNIX  # so the mode below is read as a Unix mode (krew keeps it)
        info.external_attr = (0o100755 & 0xFFFF) << 16
        zf.writestr(info, shim.read_bytes())
    return buffer.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_sha256s(path: Path = MANIFEST) -> set[str]:
    doc = yaml.safe_load(path.read_text())
    return {str(p["sha256"]) for p in doc["spec"]["platforms"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy/tools/krew_archive.py")
    parser.add_argument("out", nargs="?", help="where to write the zip")
    parser.add_argument("--check", action="store_true", help="compare with the manifest's sha256")
    args = parser.parse_args(argv)
    data = archive()
    digest = sha256(data)
    if args.out:
        Path(args.out).write_bytes(data)
    print(digest)
    if args.check and manifest_sha256s() != {digest}:
        where = MANIFEST.relative_to(REPO)
        print(f"{where} has sha256 {sorted(manifest_sha256s())}, the shim's archive {digest}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
