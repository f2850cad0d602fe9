"""What the benchmarks share: running one so that SIGTERM, like Ctrl-C, cancels it and its cleanup still runs,
observers that run in the background for the length of an ``async with``, progress lines for long runs, and
the CPU the stack's processes used during a phase."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Self, TextIO, TypeVar

import httpx

T = TypeVar("T")


async def run_cancellable(run: Callable[[], Awaitable[T]]) -> T:
    """Await ``run()``; a SIGTERM cancels it (its ``finally`` blocks clean up), as Ctrl-C does."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None and threading.current_thread() is threading.main_thread():
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await run()
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)


class Observer:
    """``_run`` in the background while the ``async with`` lasts; with ``wait_synced`` the entry waits (30 s at
    most) until ``_run`` sets ``synced`` (a watch's first listing)."""

    wait_synced = False

    def __init__(self) -> None:
        self.synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._run())
        if self.wait_synced:
            await asyncio.wait_for(self.synced.wait(), 30)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class Progress:
    """Progress on stderr for long runs: ``phase`` prints a line at once, ``ticking`` a line every ``every``
    seconds for as long as its ``with`` lasts, with the counts its callable reports (``"40/64 bound"``).

    A thread prints, so a phase blocked in synchronous code (the chaos run) still shows it is alive.
    """

    def __init__(self, name: str, every: float = 5.0, stream: TextIO | None = None) -> None:
        self.name = name
        self.every = every
        self.stream = stream or sys.stderr
        self.started = time.monotonic()

    def phase(self, text: str) -> None:
        print(f"[{self.name} {time.monotonic() - self.started:7.1f}s] {text}", file=self.stream, flush=True)

    @contextlib.contextmanager
    def ticking(self, label: str, counts: Callable[[], str]) -> Iterator[None]:
        stop = threading.Event()
        began = time.monotonic()

        def tick() -> None:
            while not stop.wait(self.every):
                with contextlib.suppress(Exception):  # a count read mid-update must not end the ticker
                    self.phase(f"{label}: {counts()} ({time.monotonic() - began:.0f} s)")

        self.phase(f"{label} ...")
        thread = threading.Thread(target=tick, daemon=True, name=f"progress-{label}")
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            with contextlib.suppress(Exception):
                self.phase(f"{label}: done, {counts()} in {time.monotonic() - began:.1f} s")


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process (its threads included), None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class CpuMeter:
    """CPU seconds used by named processes between ``start`` and ``stop``: the stack's own (its pid files)
    plus any the benchmark started. A process that restarted in between counts as missing, not as zero."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)
        self._before: dict[str, float] = {}

    @classmethod
    def of_pid_files(cls, directory: Path, extra: dict[str, int] | None = None) -> CpuMeter:
        pids: dict[str, int] = {}
        for path in sorted(directory.glob("*.pid")):
            with contextlib.suppress(ValueError, OSError):
                pids[path.stem] = int(path.read_text().split()[0])
        return cls({**pids, **(extra or {}), "benchmark": os.getpid()})

    def start(self) -> None:
        self._before = {name: s for name, pid in self.pids.items() if (s := cpu_seconds(pid)) is not None}

    def stop(self) -> dict[str, float]:
        """CPU seconds per process since ``start``, largest first."""
        used: dict[str, float] = {}
        for name, before in self._before.items():
            after = cpu_seconds(self.pids[name])
            if after is not None and after >= before:
                used[name] = after - before
        return dict(sorted(used.items(), key=lambda item: -item[1]))


def slurm_rest(env: dict[str, str], timeout: float) -> httpx.AsyncClient:
    """A raw client of the stack's slurmrestd (v0.0.44, the SlurmUser's JWT): the benchmarks' own reads and their
    baselines, outside the product's client."""
    token = Path(env["SLURM_JWT_FILE"]).read_text().strip()
    return httpx.AsyncClient(
        base_url=env["SLURM_REST_URL"] + "/slurm/v0.0.44",
        headers={"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token},
        timeout=timeout,
    )
