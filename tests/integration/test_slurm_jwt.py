"""The real slurmrestd accepts a JWT we mint from the cluster's jwt_hs256.key (as the operator will), and
refuses one signed with another key."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from slinky.clients.slurm.jwt import mint
from slinky.dev import stack

pytestmark = pytest.mark.integration


def _diag(env: dict[str, str], token: str) -> int:
    headers = {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token}
    return httpx.get(f"{env['SLURM_REST_URL']}/slurm/v0.0.44/diag", headers=headers, timeout=30).status_code


def test_slurmrestd_accepts_our_minted_token_and_refuses_a_foreign_key(dev_env: dict[str, str]) -> None:
    key = (Path(stack.STATE) / "slurm" / "root" / "etc" / "slurm" / "jwt_hs256.key").read_bytes()
    assert _diag(dev_env, mint(key, "slurm", 900)) == 200
    # A wrong signature is refused like a malformed token: 26.05 answers 511 (Network Authentication Required)
    assert _diag(dev_env, mint(b"x" * 32, "slurm", 900)) in (401, 511)
