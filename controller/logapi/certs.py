"""The log API's serving certificate: `tls.crt`/`tls.key` from a mounted directory (a cert-manager
Certificate's Secret; the APIService then carries its CA in caBundle and kube-apiserver verifies
us), or, without one, a self-signed certificate made at start-up, as metrics-server does (its
APIService then says insecureSkipTLSVerify: the proxy still authenticates itself to us with its
client certificate, but does not verify who we are)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class ServingCert:
    cert_file: Path
    key_file: Path
    self_signed: bool


def serving_cert(cert_dir: Path | None, work_dir: Path, dns_names: list[str]) -> ServingCert:
    if cert_dir is not None:
        cert, key = cert_dir / "tls.crt", cert_dir / "tls.key"
        for path in (cert, key):
            if not path.is_file():
                raise FileNotFoundError(
                    f"{path} not found: TAOBREV_LOG_API_CERT_DIR must hold tls.crt and tls.key "
                    "(mount the Certificate's Secret there, or unset it for a self-signed one)"
                )
        return ServingCert(cert, key, self_signed=False)
    work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    key_obj = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])])
    now = dt.datetime.now(dt.UTC)
    cert_obj = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key_obj.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key_obj, hashes.SHA256())
    )
    cert, key = work_dir / "log-api.crt", work_dir / "log-api.key"
    key.touch(mode=0o600)
    key.write_bytes(
        key_obj.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    cert.write_bytes(cert_obj.public_bytes(serialization.Encoding.PEM))
    return ServingCert(cert, key, self_signed=True)
