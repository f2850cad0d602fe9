"""workers/leading.py: how a worker process ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_exit_now_flushes_the_logs_and_exits_with_the_code_without_finalizing(tmp_path: Path) -> None:
    """The process exits with its code and its last log lines, and skips finalization (no atexit hook runs)."""
    script = (
        "import atexit, logging, sys\n"
        "from workers.leading import exit_now\n"
        "logging.basicConfig(stream=sys.stderr, level=logging.INFO)\n"
        "atexit.register(lambda: print('finalized', flush=True))\n"
        "print('buffered', end='')\n"
        "logging.getLogger('t').info('last words')\n"
        "exit_now(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 3
    assert done.stdout == "buffered"
    assert "last words" in done.stderr
