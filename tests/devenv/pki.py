"""Throw-away PKI for the local control plane: a CA, a serving cert for 127.0.0.1/localhost, the
service-account signing key, and the front proxy's own CA and client certificate (kube-apiserver
presents it to aggregated API servers such as the operator's log API).

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
    front_proxy_ca: Path
    front_proxy_client_cert: Path
    front_proxy_client_key: Path


FRONT_PROXY_CLIENT = "front-proxy-client"


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
        front_proxy_ca=directory / "front-proxy-ca.crt",
        front_proxy_client_cert=directory / "front-proxy-client.crt",
        front_proxy_client_key=directory / "front-proxy-client.key",
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
    csr.unlink()
    ext.unlink()
    _front_proxy(directory, pki, days)
    for key in (pki.ca_key, pki.serving_key, pki.service_account_key, pki.front_proxy_client_key):
        key.chmod(0o600)
    return pki


def _front_proxy(directory: Path, pki: Pki, days: int) -> None:
    """A CA of its own (as kubeadm makes): a certificate from the client CA must not pass as the proxy."""
    ca_key = directory / "front-proxy-ca.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(days),
        "-keyout", str(ca_key), "-out", str(pki.front_proxy_ca),
        "-subj", "/CN=taobrev-devenv-front-proxy-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    csr = directory / "front-proxy-client.csr"
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes",
        "-keyout", str(pki.front_proxy_client_key), "-out", str(csr),
        "-subj", f"/CN={FRONT_PROXY_CLIENT}",
        cwd=directory,
    )  # fmt: skip
    ext = directory / "front-proxy-client.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(pki.front_proxy_ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", str(days), "-extfile", str(ext), "-out", str(pki.front_proxy_client_cert),
        cwd=directory,
    )  # fmt: skip
    ca_key.unlink()  # nothing signs with it again
    csr.unlink()
    ext.unlink()


def issue_log_api_cert(pki: Pki, directory: Path, names: list[str], *, days: int = 30) -> Path:
    """`tls.crt`/`tls.key` in `directory` for the operator's log API, signed by the cluster CA (what
    a cert-manager Certificate would hold): the APIService then verifies it through caBundle."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    key, cert, csr, ext = (directory / n for n in ("tls.key", "tls.crt", "tls.csr", "tls.ext"))
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
        "-subj", f"/CN={names[0]}",
        cwd=directory,
    )  # fmt: skip
    ext.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=" + ",".join(f"DNS:{n}" for n in names) + "\n"
    )
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(pki.ca_cert), "-CAkey", str(pki.ca_key),
        "-CAcreateserial", "-days", str(days), "-extfile", str(ext), "-out", str(cert),
        cwd=directory,
    )  # fmt: skip
    key.chmod(0o600)
    csr.unlink()
    ext.unlink()
    return directory
