"""What the benchmarks share: running one so that SIGTERM, like Ctrl-C, cancels it and its cleanup still runs."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

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
