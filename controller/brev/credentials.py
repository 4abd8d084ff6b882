"""Headless brev login material: validating credentials and writing ~/.brev/credentials.json in
exactly the shape `brev login --api-key/--token` leaves it (so no secret is ever on argv)."""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from controller.api.errors import BrevConfigError
from controller.brev.client import BrevCredentials

API_KEY_PREFIX = "bak-"


def _b64url_json(part: str) -> Any:
    padded = part + "=" * (-len(part) % 4)
    return json.loads(base64.urlsafe_b64decode(padded))


def jwt_claims(token: str) -> dict[str, Any] | None:
    """Unverified claims of a JWT, or None if `token` is not one (like jwt.ParseUnverified)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        header = _b64url_json(parts[0])
        claims = _b64url_json(parts[1])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return None
    return claims


def jwt_valid(token: str, now: float) -> bool:
    """What `LoginWithToken` decides: a JWT whose exp/nbf claims hold now (iat is not enforced)."""
    claims = jwt_claims(token)
    if claims is None:
        return False
    exp = claims.get("exp")
    if isinstance(exp, int | float) and now >= exp:
        return False
    nbf = claims.get("nbf")
    return not (isinstance(nbf, int | float) and now < nbf)


def validate_credentials(creds: BrevCredentials) -> None:
    if creds.api_key:
        if creds.token:
            raise BrevConfigError(
                "the Brev credentials Secret sets both an API key and a token; keep only one "
                "(the API key, which never expires client-side)"
            )
        if not creds.api_key.strip().startswith(API_KEY_PREFIX):
            raise BrevConfigError(f"the Brev API key in the Secret must start with {API_KEY_PREFIX!r}")
        if not (creds.org_id and creds.org_id.strip()):
            raise BrevConfigError(
                "the Brev credentials Secret has an API key but no org id; add the org id key "
                "(api key auth requires an org id)"
            )
    elif not (creds.token and creds.token.strip()):
        raise BrevConfigError(
            "the Brev credentials Secret holds neither an API key (with org id) nor a token"
        )


def credentials_documents(creds: BrevCredentials, now: float) -> tuple[dict[str, str], dict[str, str] | None]:
    """(credentials.json, active_org.json or None) exactly as `brev login` leaves them:
    `--api-key K --org-id O` stores the key fields and sets the active org {id: O, name: O};
    `--token T` stores an unexpired JWT as access_token (refresh "auto-login"), anything else as
    refresh_token (access "auto-login")."""
    validate_credentials(creds)
    if creds.api_key:
        org = (creds.org_id or "").strip()
        doc = {
            "access_token": "",
            "refresh_token": "",
            "api_key": creds.api_key.strip(),
            "api_key_org_id": org,
        }
        return doc, {"id": org, "name": org, "userNetworkId": ""}
    token = (creds.token or "").strip()
    if jwt_valid(token, now):
        doc = {"access_token": token, "refresh_token": "auto-login"}
    else:
        doc = {"access_token": "auto-login", "refresh_token": token}
    org_doc = None
    if creds.org_id and creds.org_id.strip():
        org = creds.org_id.strip()
        org_doc = {"id": org, "name": org, "userNetworkId": ""}
    return doc, org_doc


def write_private_json(path: Path, doc: object) -> None:
    """Atomically write `doc` as Go's MarshalIndent(v, "", " ") would, mode 0600."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            Path(tmp).unlink()
        raise


def secret_digest(secret: str) -> str:
    """A short, stable fingerprint of a secret (sha256), fit for logs and status; not reversible."""
    return hashlib.sha256(secret.strip().encode()).hexdigest()[:16]


def read_access_token(path: Path) -> str:
    """The `access_token` of a credentials.json (`""` when absent or unreadable)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return ""
    value = doc.get("access_token") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else ""


def _subject(token: str) -> str | None:
    claims = jwt_claims(token.strip())
    sub = claims.get("sub") if claims else None
    return sub if isinstance(sub, str) and sub else None


def identity_of(creds: BrevCredentials, access_token: str, learnt: dict[str, str]) -> tuple[str, str | None]:
    """(identity, digest to remember it under or None). An API key names its org and a key
    digest (the org's instances are all visible to it); a token names the user: the `sub` of the
    token itself when it is a JWT, else of the access JWT the CLI refreshed into credentials.json
    (remembered per token digest), else only the token digest."""
    if creds.api_key:
        return f"org-key:{(creds.org_id or '').strip()}:{secret_digest(creds.api_key)}", None
    token = (creds.token or "").strip()
    sub = _subject(token)
    if sub is not None:
        return f"user:{sub}", None
    digest = secret_digest(token)
    if digest in learnt:
        return learnt[digest], None
    sub = _subject(access_token)
    if sub is not None:
        return f"user:{sub}", digest
    return f"token:{digest}", None
