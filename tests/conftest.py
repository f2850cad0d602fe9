"""Shared fixtures. Integration tests use the real local stack: started once per run, or reused."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def dev_env() -> Iterator[dict[str, str]]:
    """The env values of a running `slinky dev up` stack (KUBECONFIG, SLURM_REST_URL, TEMPORAL_ADDRESS...).

    A healthy running stack is reused and left running. Otherwise the fixture starts one and stops it
    at the end of the session, unless SLINKY_KEEP_STACK=1.
    """
    from slinky.dev import stack

    started = False
    if stack.status(quiet=True) != 0:
        proc = subprocess.run(
            [sys.executable, "-m", "slinky.cli", "dev", "up"], cwd=REPO, text=True, capture_output=True
        )
        if proc.returncode != 0:
            pytest.fail(f"slinky dev up failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        started = True
    yield stack.load_env_file()
    if started and os.environ.get("SLINKY_KEEP_STACK") != "1":
        subprocess.run([sys.executable, "-m", "slinky.cli", "dev", "down"], cwd=REPO, check=False, capture_output=True)
