"""HS256 JWTs for Slurm, minted from the cluster's ``jwt_hs256.key``, as slurm-operator does (issue 10).

Slurm's ``auth/jwt`` accepts a token signed with the key in ``AuthAltParameters=jwt_key=...`` whose ``sun``
claim names the Slurm user and whose ``exp`` lies ahead. The operator mints its own (user ``slurm``, 15 min,
refreshed at 80 % of the lifetime: upstream §2.3) and the Token CR mints them into Secrets (§2.11) with the
claims ``sun``, ``iss=slurm-operator``, ``iat``, ``nbf``, ``exp`` and ``jti``. Pure functions, plus one token
provider for :class:`~slinky.clients.slurm.auth.SlurmAuth`; stdlib only (hmac, hashlib, base64).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ISSUER = "slurm-operator"
MAX_LIFETIME_SECONDS = 2**31 - 2
"""Slurm's "infinite": lifetimes are clamped to it (upstream ``slurmjwt/token.go``)."""
REFRESH_FRACTION = 0.8
"""A token is replaced once this share of its lifetime has passed."""


class InvalidToken(ValueError):
    """Not a token of this key: malformed, another algorithm, or a bad signature."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint(key: bytes, user: str, lifetime_seconds: float, *, now: float | None = None, jti: str | None = None) -> str:
    """A signed HS256 JWT for Slurm user ``user``, valid from ``now`` for ``lifetime_seconds`` (clamped)."""
    if not key:
        raise ValueError("the JWT key is empty")
    if not user:
        raise ValueError("a Slurm user name is required")
    issued = int(time.time() if now is None else now)
    lifetime = max(1, min(int(lifetime_seconds), MAX_LIFETIME_SECONDS))
    header = {"alg": "HS256", "typ": "JWT"}
    claims = {
        "sun": user,
        "iss": ISSUER,
        "iat": issued,
        "nbf": issued,
        "exp": issued + lifetime,
        "jti": jti or str(uuid.uuid4()),
    }
    signing_input = ".".join(_b64(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims))
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


def claims_of(token: str, key: bytes) -> dict[str, Any]:
    """The claims of a token signed with ``key``.

    Raises:
        InvalidToken: Malformed, not HS256, or signed with another key.
    """
    try:
        header_b64, claims_b64, signature_b64 = token.strip().split(".")
        header = json.loads(_unb64(header_b64))
        claims = json.loads(_unb64(claims_b64))
        signature = _unb64(signature_b64)
    except ValueError as err:
        raise InvalidToken(f"not a JWT: {err}") from err
    if not isinstance(header, dict) or header.get("alg") != "HS256" or not isinstance(claims, dict):
        raise InvalidToken("not an HS256 JWT")
    expected = hmac.new(key, f"{header_b64}.{claims_b64}".encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(signature, expected):
        raise InvalidToken("the signature does not match this key")
    return claims


def refresh_due(token: str, key: bytes, *, now: float | None = None) -> bool:
    """Whether ``token`` should be replaced: at 80 % of its lifetime, when expired, or when it is not a valid
    token of ``key`` at all (a rotated key makes every earlier token due at once)."""
    try:
        claims = claims_of(token, key)
        issued, expires = float(claims["iat"]), float(claims["exp"])
    except (InvalidToken, KeyError, TypeError, ValueError):
        return True
    moment = time.time() if now is None else now
    return moment >= issued + REFRESH_FRACTION * (expires - issued)


@dataclass
class MintedToken:
    """A :class:`~slinky.clients.slurm.auth.TokenProvider` that mints its own token from a key and replaces it at
    80 % of its lifetime; ``read_key`` is asked each time, so a rotated key takes effect at once."""

    read_key: Callable[[], bytes]
    user: str = "slurm"
    lifetime_seconds: float = 900.0
    clock: Callable[[], float] = time.time
    _token: str = ""

    def token(self) -> str:
        key, now = self.read_key(), self.clock()
        if not self._token or refresh_due(self._token, key, now=now):
            self._token = mint(key, self.user, self.lifetime_seconds, now=now)
        return self._token
