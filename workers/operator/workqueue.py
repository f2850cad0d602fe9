"""A per-object work queue, as client-go's: a key waits at most once, is worked on by one worker at a time,
and is run again if it was marked while being worked on. One broken object never blocks the others."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

Key = tuple[str, str]
"""(namespace, name) of the object to reconcile."""


class WorkQueue:
    """De-duplicating keys; a key is processed by one worker at a time and re-run if marked meanwhile."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._active: set[Key] = set()
        self._again: set[Key] = set()
        self._failures: dict[Key, int] = {}
        self._timers: dict[Key, tuple[float, asyncio.TimerHandle]] = {}
        self.runs = 0
        self.failed = 0
        """Reconciles done, and how many of them failed (the operator's metrics read both)."""

    def add(self, key: Key) -> None:
        if key in self._active:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_later(self, key: Key, seconds: float, *, replace: bool = False) -> None:
        """Add ``key`` in ``seconds``. One timer per key, the earliest kept (as client-go's delaying queue), or
        this one with ``replace`` (a Token's next refresh): a reconcile that asks again each time it runs never
        piles up timers."""
        loop = asyncio.get_running_loop()
        due = loop.time() + seconds
        held = self._timers.get(key)
        if held is not None:
            if held[0] <= due and not replace:
                return
            held[1].cancel()
        self._timers[key] = (due, loop.call_later(seconds, self._fire, key))

    def cancel_later(self, key: Key) -> None:
        if held := self._timers.pop(key, None):
            held[1].cancel()

    def _fire(self, key: Key) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def waiting_later(self) -> int:
        """Keys with a timer set."""
        return len(self._timers)

    async def get(self) -> Key:
        key = await self._queue.get()
        self._queued.discard(key)
        self._active.add(key)
        return key

    def done(self, key: Key) -> None:
        self._active.discard(key)
        if key in self._again:
            self._again.discard(key)
            self.add(key)

    async def serve(self, reconcile: Callable[[Key], Awaitable[None]], kind: str) -> None:
        """One worker: reconcile keys forever; a failing key is retried on its own backoff (0.5 s doubling to
        30 s), so one broken object never stops the others."""
        while True:
            key = await self.get()
            self.runs += 1
            try:
                await reconcile(key)
                self._failures.pop(key, None)
            except Exception as err:
                self.failed += 1
                failures = self._failures[key] = self._failures.get(key, 0) + 1
                delay = min(0.5 * 2**failures, 30.0)
                logger.warning("reconcile %s %s/%s failed (%s); again in %.1fs", kind, *key, err, delay)
                self.add_later(key, delay)
            finally:
                self.done(key)
