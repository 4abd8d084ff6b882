"""Throw-away PKI for the local control plane: a CA, a serving cert for 127.0.0.1/localhost, and
the service-account signing key.

Uses the `openssl` CLI (present on every Debian/Ubuntu machine) so the dev environment needs no
crypto library. Nothing here is secret beyond the lifetime of one control plane.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed (exit {proc.returncode}): {proc.stderr.strip()}")


def create_pki(directory: Path, *, days: int = 30) -> Pki:
    """Write a fresh CA, serving cert/key and service-account RSA key into ``directory``."""
    if shutil.which("openssl") is None:
        raise RuntimeError(
            "the `openssl` CLI is required for the local control plane; apt-get install openssl"
        )
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    pki = Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        service_account_key=directory / "service-account.key",
    )
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(days),
        "-keyout", str(pki.ca_key), "-out", str(pki.ca_cert),
        "-subj", "/CN=taobrev-devenv-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    csr = directory / "apiserver.csr"
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes",
        "-keyout", str(pki.serving_key), "-out", str(csr),
        "-subj", "/CN=kube-apiserver",
        cwd=directory,
    )  # fmt: skip
    ext = directory / "apiserver.ext"
    # Clients verify the SAN, never the CN; 127.0.0.1 and localhost are the only names we serve on.
    ext.write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(pki.ca_cert), "-CAkey", str(pki.ca_key),
        "-CAcreateserial", "-days", str(days), "-extfile", str(ext), "-out", str(pki.serving_cert),
        cwd=directory,
    )  # fmt: skip
    # One RSA key both verifies (--service-account-key-file) and signs (--service-account-signing-key-file).
    _openssl(
        "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
        "-out", str(pki.service_account_key),
        cwd=directory,
    )  # fmt: skip
    for key in (pki.ca_key, pki.serving_key, pki.service_account_key):
        key.chmod(0o600)
    csr.unlink()
    ext.unlink()
    return pki
