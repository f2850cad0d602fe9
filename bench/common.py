"""What the benchmarks share: running one so that SIGTERM, like Ctrl-C, cancels it and its cleanup still runs,
and observers that run in the background for the length of an ``async with``."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import Self, TypeVar

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
