"""HS256 JWT minting for Slurm (the operator's own client and the Token CR): claims, signature, refresh at 80 %."""

from __future__ import annotations

import base64
import json

import pytest

from slinky.clients.slurm.jwt import (
    MAX_LIFETIME_SECONDS,
    InvalidToken,
    MintedToken,
    claims_of,
    mint,
    refresh_due,
)

KEY = b"k" * 32


def test_the_claims_are_upstreams_and_the_signature_is_hs256() -> None:
    token = mint(KEY, "slurm", 900, now=1000, jti="j1")
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header == {"alg": "HS256", "typ": "JWT"}
    assert claims_of(token, KEY) == {
        "sun": "slurm",
        "iss": "slurm-operator",
        "iat": 1000,
        "nbf": 1000,
        "exp": 1900,
        "jti": "j1",
    }
    with pytest.raises(InvalidToken):
        claims_of(token, b"another key of 32 bytes........")
    with pytest.raises(InvalidToken):
        claims_of("not.a.jwt", KEY)


def test_lifetime_is_clamped_to_slurms_infinite_and_bad_input_is_refused() -> None:
    claims = claims_of(mint(KEY, "u", 10**12, now=0), KEY)
    assert claims["exp"] == MAX_LIFETIME_SECONDS
    with pytest.raises(ValueError):
        mint(b"", "u", 60)
    with pytest.raises(ValueError):
        mint(KEY, "", 60)


def test_refresh_is_due_at_80_percent_when_expired_or_when_the_key_rotated() -> None:
    token = mint(KEY, "slurm", 100, now=0)
    assert not refresh_due(token, KEY, now=79)
    assert refresh_due(token, KEY, now=80)
    assert refresh_due(token, KEY, now=500)
    assert refresh_due(token, b"rotated", now=1)
    assert refresh_due("garbage", KEY, now=1)


def test_the_provider_keeps_its_token_until_due_and_follows_a_rotated_key() -> None:
    clock = [0.0]
    key = [KEY]
    provider = MintedToken(read_key=lambda: key[0], lifetime_seconds=100, clock=lambda: clock[0])
    first = provider.token()
    clock[0] = 50
    assert provider.token() == first
    clock[0] = 81
    second = provider.token()
    assert second != first and claims_of(second, KEY)["iat"] == 81
    key[0] = b"rotated-key"
    third = provider.token()
    assert claims_of(third, b"rotated-key")["iat"] == 81
