"""API keys and short-lived browser tokens.

Keys come from config or `VOXRT_API_KEYS`. Browsers cannot set headers on a WebSocket, so `POST /v1/tokens`
(API key required) mints a token passed as `?token=`: `v1.<expires_unix>.<nonce>.<hmac-sha256>`, signed with
the server's secret. Every comparison is constant-time (`hmac.compare_digest`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import secrets
import time


class Authenticator:
    def __init__(self, api_keys: tuple[str, ...], secret: str | None = None) -> None:
        self._keys = [k.encode() for k in api_keys]
        self._secret = (secret or secrets.token_hex(32)).encode()

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def check_key(self, key: str | None) -> bool:
        if key is None:
            return False
        candidate = key.encode()
        ok = False
        for known in self._keys:  # no early exit: time does not depend on which key matched
            ok |= hmac.compare_digest(candidate, known)
        return ok

    def mint(self, ttl_s: float, now_s: float | None = None) -> tuple[str, int]:
        # rounded up: a token's whole-second expiry must not fall before now + ttl (a 0.5 s token truncated to
        # the current second would be expired on arrival)
        expires = math.ceil((now_s if now_s is not None else time.time()) + ttl_s)
        nonce = base64.urlsafe_b64encode(secrets.token_bytes(12)).decode().rstrip("=")
        body = f"v1.{expires}.{nonce}"
        return f"{body}.{self._sign(body)}", expires

    def check_token(self, token: str | None, now_s: float | None = None) -> bool:
        if not token or token.count(".") != 3:
            return False
        body, _, signature = token.rpartition(".")
        if not hmac.compare_digest(signature.encode(), self._sign(body).encode()):
            return False
        version, expires, _nonce = body.split(".")
        now = now_s if now_s is not None else time.time()
        return version == "v1" and expires.isdigit() and int(expires) > now

    def check(self, authorization: str | None, token: str | None) -> bool:
        """True when auth is off, or the `Authorization: Bearer` value is a key or a valid token, or the
        `token` query value is a valid token."""
        if not self.enabled:
            return True
        bearer = _bearer(authorization)
        return self.check_key(bearer) or self.check_token(bearer) or self.check_token(token)

    def _sign(self, body: str) -> str:
        digest = hmac.new(self._secret, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None
