"""Credential handling of the real CLI (pkg/auth, pkg/store/authtoken.go) against the simulated backend.

Client side: credentials.json (or a mounted k8s service-account token, which wins), the
`no oauth found for token` stray line, KAS refresh (`sessionKey:deviceId` only, else
`WARN: malformed refresh token, logging out`), and the logged-out prompt read from stdin.
Server side: the simulated backend accepts its API key + org, and JWTs it minted and not expired.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.brevsim.goerr import CLIError, trace
from tests.brevsim.store import Store, read_json, write_json

KAS_ISSUER = "https://login.nvidia.com"
AUTH0_ISSUER = "https://brevdev.us.auth0.com/"
SA_TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"
PROMPT = "You are currently logged out, would you like to log in? [Y/n]: "
DEFAULT_TOKEN_TTL_S = 3600.0


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint_jwt(
    secret: str, *, ttl_s: float, email: str, now: float, issuer: str = KAS_ISSUER, user_id: str = "user-sim"
) -> str:
    """An HS256 JWT for `user_id` (its `sub`); `now` is the simulated clock (so the harness can
    expire sessions)."""
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = {"iss": issuer, "sub": user_id, "email": email, "iat": int(now), "exp": now + ttl_s}
    payload = _b64(json.dumps(claims).encode())
    sig = hmac.new(secret.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64(sig)}"


def jwt_claims(token: str) -> dict[str, Any] | None:
    """ParseUnverified: claims of a well-formed JWT, else None."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(_unb64(parts[1]))
    except ValueError:
        return None
    return claims if isinstance(claims, dict) else None


def jwt_valid_client_side(token: str, now: float) -> bool:
    claims = jwt_claims(token)
    if claims is None:
        return False
    exp = claims.get("exp")
    return not (isinstance(exp, int | float) and now >= exp)


def jwt_signed_by(token: str, secret: str) -> bool:
    parts = token.split(".")
    if len(parts) != 3:
        return False
    sig = hmac.new(secret.encode(), f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
    return hmac.compare_digest(_b64(sig), parts[2])


@dataclass(frozen=True)
class Session:
    api_key: bool
    org_id: str
    org_name: str
    user_id: str


class Auth:
    def __init__(self, store: Store, home: Path) -> None:
        self.store = store
        self.home = home
        self.brev_dir = home / ".brev"
        self.creds_path = self.brev_dir / "credentials.json"
        self._session: Session | None = None

    def saved_tokens(self) -> dict[str, str] | None:
        sa_path = Path(str(self.store.config().get("sa_token_path", SA_TOKEN_PATH)))
        try:
            sa_token = sa_path.read_text().strip()
        except OSError:
            sa_token = ""
        if sa_token:
            # pkg/store/authtoken.go GetAuthTokens: the pod's SA token wins over credentials.json
            return {"access_token": sa_token}
        tokens = read_json(self.creds_path, None)
        if not isinstance(tokens, dict):
            return None
        if not (tokens.get("access_token") or tokens.get("refresh_token") or tokens.get("api_key")):
            return None
        return {k: str(v) for k, v in tokens.items() if isinstance(v, str)}

    def standard_login_stray_line(self) -> None:
        """StandardLogin at start-up: a non-JWT / unknown-issuer access token prints a stray line."""
        tokens = self.saved_tokens()
        if tokens and tokens.get("access_token") and not tokens.get("api_key"):
            claims = jwt_claims(tokens["access_token"]) or {}
            if claims.get("iss") not in (KAS_ISSUER, AUTH0_ISSUER):
                sys.stdout.write("no oauth found for token\n")
                sys.stdout.flush()

    def save(self, tokens: dict[str, str]) -> None:
        self.brev_dir.mkdir(parents=True, exist_ok=True)
        write_json(self.creds_path, tokens)
        self.creds_path.chmod(0o600)

    def _refresh(self, refresh_token: str) -> str | None:
        """KasAuthenticator.GetNewAuthTokensWithRefresh."""
        parts = refresh_token.split(":")
        if len(parts) != 2:
            self.brev_dir.mkdir(parents=True, exist_ok=True)
            (self.brev_dir / ".invalid-refresh-token").write_text(refresh_token)
            sys.stdout.write("WARN: malformed refresh token, logging out\n")
            sys.stdout.flush()
            return None
        sessions = self.store.read().get("sessions", {})
        if refresh_token not in sessions:
            return None  # UNAUTHORIZED from KAS -> treated as logged out
        cfg = self.store.config()
        ttl = float(self.store.fault("token_ttl_s") or DEFAULT_TOKEN_TTL_S) * self.store.speed
        user = str(sessions[refresh_token].get("user_id") or cfg["user_id"])
        access = mint_jwt(
            str(cfg["secret"]), ttl_s=ttl, email=str(cfg["email"]), now=self.store.now(), user_id=user
        )
        self.save({"access_token": access, "refresh_token": refresh_token})
        return access

    def _prompt(self) -> None:
        """PromptForLogin: reads one line from stdin; /dev/null -> EOF; an open pipe blocks."""
        sys.stdout.write(PROMPT)
        sys.stdout.flush()
        try:
            line = sys.stdin.buffer.readline()
        except (OSError, ValueError):
            line = b""
        if not line:
            raise CLIError("EOF")
        if line.strip().lower() not in (b"", b"y"):
            raise CLIError("user declined to login")
        # The device flow needs a browser; headless it ends in a timeout (SIM-CONTRACT.md section 2).
        sys.stdout.write(f"Login here: {KAS_ISSUER}/device?user_code=SIM-CODE\n")
        sys.stdout.flush()
        time.sleep(self.store.delay("device_login_s", 300.0))
        raise CLIError("timed out waiting for login")

    def session(self) -> Session:
        """GetFreshAccessTokenOrLogin + the server's check of that credential."""
        if self._session is not None:
            return self._session
        cfg = self.store.config()
        if self.store.consume_fault_counter("auth_eof_once"):
            self._prompt()
        tokens = self.saved_tokens()
        credential: str | None = None
        if tokens is not None:
            if tokens.get("api_key", "").strip():
                key = tokens["api_key"].strip()
                org = tokens.get("api_key_org_id", "")
                if key != cfg["api_key"] or org != cfg["org_id"]:
                    raise CLIError(_server_error(401, "invalid api key"))
                self._session = Session(True, org, org, str(cfg["user_id"]))
                return self._session
            access = tokens.get("access_token", "")
            refresh = tokens.get("refresh_token", "")
            if jwt_valid_client_side(access, self.store.now()):
                credential = access
            elif refresh:
                credential = self._refresh(refresh)
            elif access:
                credential = access
        if credential is None:
            self._prompt()
            raise CLIError("EOF")  # unreachable: _prompt always raises
        claims = jwt_claims(credential) or {}
        exp = claims.get("exp")
        if (
            not jwt_signed_by(credential, str(cfg["secret"]))
            or not isinstance(exp, int | float)
            or self.store.now() >= exp
        ):
            raise CLIError(_server_error(401, "invalid or expired token"))
        # The server knows the user from the token's subject: whose instances this login owns.
        user = str(claims.get("sub") or cfg["user_id"])
        self._session = Session(False, str(cfg["org_id"]), str(cfg["org_name"]), user)
        return self._session


def _server_error(code: int, message: str) -> str:
    reason = {401: "Unauthorized", 403: "Forbidden", 400: "Bad Request", 404: "Not Found"}.get(code, "")
    return (
        trace("pkg/store.(*AuthHTTPStore).GetCurrentUser", "pkg/store/user.go", 77)
        + f"{code} {reason}: {message}"
    )
