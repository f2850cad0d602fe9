"""Driving the local stack from tests: ``slinky ...`` run as a user would, from the working tree, and the dev
stack's bridge worker stopped and started around a test."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from slinky.dev import stack as dev_stack
from tests.integration.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
PID_FILE = REPO / ".slinky-dev" / "pids" / "bridge-worker.pid"


def slinky(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    """Run ``slinky ARGS`` (e.g. ``dev up --slurmd 2``); fail with its output unless it exits 0; return stdout
    and stderr (``dev`` logs its progress on stderr). ``env``: the dev stack's values (``dev_env``), for
    commands that talk to it."""
    environ = {**os.environ, **{k: v for k, v in env.items() if k != "PATH"}} if env is not None else None
    out = subprocess.run(
        [sys.executable, "-m", "slinky.cli", *args],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=timeout,
        env=environ,
    )
    assert out.returncode == 0, (
        f"slinky {' '.join(args)} exited {out.returncode}:\n{out.stdout[-2000:]}{out.stderr[-2000:]}"
    )
    return out.stdout + out.stderr


def kubectl(env: dict[str, str], *args: str, stdin: str | None = None, check: bool = True) -> str:
    """``kubectl ARGS`` against the stack (``env``: ``dev_env``); its stdout; fails with its stderr unless it exits
    0 (or ``check`` is off)."""
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", env["KUBECONFIG"], *args],
        input=stdin,
        text=True,
        capture_output=True,
        check=False,
        timeout=120,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr}")
    return proc.stdout


def scontrol(*argv: str) -> None:
    """``scontrol ARGS`` in the dev stack's Slurm root; fails unless it exits 0."""
    subprocess.run(dev_stack._chroot("/usr/bin/scontrol", *argv), check=True, capture_output=True, text=True)


def worker_pid() -> int:
    return int(PID_FILE.read_text().split()[0])


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def kill_worker() -> None:
    pid = worker_pid()
    assert alive(pid), "the bridge worker is not running"
    os.kill(pid, signal.SIGKILL)
    eventually(lambda: not alive(pid), timeout=10, what="bridge worker dead")


def restart_worker() -> None:
    """Start the bridge worker exactly as `slinky dev up` does (it starts only what is missing)."""
    out = slinky("dev", "up", timeout=90)
    assert "bridge worker started" in out, out[-2000:]
    assert alive(worker_pid())


@contextlib.contextmanager
def worker_killed() -> Iterator[None]:
    """SIGKILL the bridge worker; always restart it, even if the body fails (the stack is shared)."""
    kill_worker()
    try:
        yield
    finally:
        if not alive(worker_pid()):
            restart_worker()
