"""Processes the development stack starts, and only those: PID files that also record identity.

A PID file holds ``<pid> <starttime>`` where starttime is field 22 of ``/proc/<pid>/stat``. ``down`` only
signals a PID whose start time still matches, so a recycled PID is never killed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

_STARTED: list[subprocess.Popen[bytes]] = []


@atexit.register
def _release_daemons() -> None:
    """The stack's daemons outlive this process by design; tell Popen not to warn that they still run."""
    for proc in _STARTED:
        if proc.poll() is None:
            proc.returncode = 0


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time in ticks): with the PID it names one process for good. None when
    there is no such process or it is a zombie (it has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces: split after its closing parenthesis.
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else fields[19]


def namespace_pids(name: str) -> list[int]:
    """Every process inside the named network namespace (``/run/netns/<name>``): a node's daemons and the
    containers they started."""
    try:
        inode = os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return []
    wanted = f"net:[{inode}]"
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns" / "net") == wanted:
                    pids.append(int(entry.name))
    return pids


def kill_namespace(name: str, *, timeout: float = 5.0) -> int:
    """SIGKILL whatever still runs in the namespace, as a runtime kills a container's cgroup (a process left
    there would keep the namespace, its veth and its addresses alive after ``ip netns delete``); how many are
    left after ``timeout``."""
    pids = namespace_pids(name)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if start_time(p) is not None]
        time.sleep(0.02)
    return len(namespace_pids(name))


class ProcessTable:
    """PID files under one directory, one per named process."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _file(self, name: str) -> Path:
        return self.directory / f"{name}.pid"

    def running(self, name: str) -> int | None:
        """Return the PID of ``name`` if the very process we started is still alive."""
        path = self._file(name)
        try:
            pid_text, start = path.read_text().split()
        except (OSError, ValueError):
            return None
        pid = int(pid_text)
        if start_time(pid) != start:
            return None
        # A zombie has exited; it only waits to be reaped.
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return None
        return None if state == "Z" else pid

    def recorded(self, name: str) -> int | None:
        """The PID written for ``name``, whether or not that process still runs (None: never started, or
        stopped by ``stop``). A recorded PID whose process is gone is a crash."""
        try:
            return int(self._file(name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self, name: str) -> int | None:
        """SIGKILL the very process started as ``name`` (a crash, for tests); its PID file stays, as after a
        real crash. Returns the PID, or None when it was not running."""
        pid = self.running(name)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.01)
        return pid

    def record(self, name: str, pid: int) -> None:
        start = start_time(pid)
        if start is None:
            raise RuntimeError(f"{name} exited at once (pid {pid})")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._file(name).write_text(f"{pid} {start}\n")

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> int:
        """Start ``argv`` in its own session, logging to ``log``; return its PID."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
            )
        self.record(name, proc.pid)
        # The daemon outlives this object; keep the handle so Python does not warn it is still running.
        _STARTED.append(proc)
        return proc.pid

    def stop(self, name: str, *, timeout: float = 10.0) -> bool:
        """TERM, then KILL after ``timeout``, the process named ``name``; True if one was running."""
        pid = self.running(name)
        self._file(name).unlink(missing_ok=True) if pid is None else None
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.05)
        self._file(name).unlink(missing_ok=True)
        return True

    def names(self) -> list[str]:
        return sorted(p.stem for p in self.directory.glob("*.pid"))


def _alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
