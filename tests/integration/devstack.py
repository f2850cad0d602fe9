"""Driving the local stack from tests: ``slinky ...`` run as a user would, from the working tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def slinky(*args: str, timeout: float = 120) -> str:
    """Run ``slinky ARGS`` (e.g. ``dev up --slurmd 2``); fail with its output unless it exits 0; return stdout
    and stderr (``dev`` logs its progress on stderr)."""
    out = subprocess.run(
        [sys.executable, "-m", "slinky.cli", *args], cwd=REPO, text=True, capture_output=True, timeout=timeout
    )
    assert out.returncode == 0, (
        f"slinky {' '.join(args)} exited {out.returncode}:\n{out.stdout[-2000:]}{out.stderr[-2000:]}"
    )
    return out.stdout + out.stderr
