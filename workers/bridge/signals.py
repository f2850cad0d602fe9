"""Delivering signals to lifecycles, the same way for every watcher of the worker: one at a time with backoff
(``signal_lifecycle``), and a lifecycle's burst as one (``Coalescer``)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from slinky import telemetry

logger = logging.getLogger(__name__)
ATTEMPTS = 5
"""Tries of a signal whose failure is not transient (a lost one is covered by the lifecycle's safety re-check)."""
TRANSIENT_ATTEMPTS = 10
"""Tries of a signal while Temporal is rate-limiting or unavailable: about 2.5 minutes with the backoff below."""
TRANSIENT = frozenset(
    {
        RPCStatusCode.RESOURCE_EXHAUSTED,  # the frontend's rate limits (namespace or instance RPS)
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.ABORTED,
    }
)
"""Failures that pass: the call is tried again (the SDK has retried each a few times already)."""
MAX_DELAY = 30.0
MAX_BATCH = 500
"""Items in one send at most: 500 pod events are about 75 KB, far below Temporal's payload limits."""
SEND_INTERVAL = 0.5
"""Seconds between two sends to one lifecycle: what comes meanwhile waits for the next. Two signals a second at
most, so at most 16 wait while a lifecycle's workflow task runs a long local activity (the SDK completes the task,
which takes in what waited, every 8 s), far from the server's limit of 100."""

T = TypeVar("T")


def retry_delay(call: str, err: RPCError, attempt: int) -> float:
    """Seconds to wait before trying ``call`` again after ``err`` (attempt 0 is the first failure), counted in
    ``slinky_bridge_temporal_call_retries_total``. Exponential with jitter, capped at 30 s; a rate limit waits at
    least 1 s, so a busy frontend is backed off, not hammered."""
    telemetry.TEMPORAL_CALL_RETRIES.labels(call, err.status.name if err.status else "UNKNOWN").inc()
    delay = min(0.2 * 2**attempt, MAX_DELAY)
    if err.status == RPCStatusCode.RESOURCE_EXHAUSTED:
        delay = max(delay, 1.0)
    return float(delay * random.uniform(0.75, 1.25))


async def signal_lifecycle(temporal: Client, workflow_id: str, name: str, arg: Any, limit: asyncio.Semaphore) -> bool:
    """Signal ``name`` (with ``arg``, unless None) to ``workflow_id``; True when delivered.

    A lifecycle that already ended (NOT_FOUND) has nothing left to learn: that is not an error. Other RPC
    failures are retried with backoff, a rate limit or an unavailable frontend for longer (the watchers' next
    event or the lifecycle's safety re-check covers a signal given up on).
    """
    started = time.monotonic()
    async with limit:
        attempt = 0
        while True:
            try:
                handle = temporal.get_workflow_handle(workflow_id)
                await (handle.signal(name) if arg is None else handle.signal(name, arg))
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return False
                attempt += 1
                if attempt >= (TRANSIENT_ATTEMPTS if err.status in TRANSIENT else ATTEMPTS):
                    logger.error("%s to %s not delivered (%s) after %d attempts", name, workflow_id, err, attempt)
                    return False
                delay = retry_delay("signal", err, attempt - 1)
                logger.warning("%s to %s failed (%s), attempt %d; again in %.1fs", name, workflow_id,
                               err.status, attempt, delay)  # fmt: skip
                await asyncio.sleep(delay)
                continue
            telemetry.SIGNALS_SENT.labels(name).inc()
            telemetry.SIGNAL_SECONDS.labels(name).observe(time.monotonic() - started)
            return True


class Coalescer(Generic[T]):
    """Items for one lifecycle go together: at most one send per ``interval``, with all that came meanwhile.

    A quiet lifecycle's item is sent at once, alone: no added latency. A burst (a 1,000-pod gang created or deleted
    at once) becomes a few sends instead of one per pod. That matters twice to Temporal: each signal is an RPC and a
    history event, and while a lifecycle's workflow task runs (a long local activity: binding 1,000 pods) the
    server buffers the signals that arrive; past 100 buffered events it fails the task
    (``WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND``) and the local activity runs again (seen at 1,000 pods:
    four failed tasks, deletion 38 s). A key has at most one send under way; its items keep their order.
    """

    def __init__(
        self,
        send: Callable[[str, list[T]], Awaitable[None]],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        max_batch: int = MAX_BATCH,
        interval: float = SEND_INTERVAL,
    ) -> None:
        self._send = send
        self._spawn = spawn
        self._max = max_batch
        self._interval = interval
        self._queued: dict[str, list[T]] = {}

    def put(self, key: str, item: T) -> None:
        queued = self._queued.get(key)
        if queued is not None:  # a send for this key is queued or under way: the next one takes this item too
            queued.append(item)
            return
        self._queued[key] = [item]
        self._spawn(self._drain(key))

    def waiting(self) -> int:
        """Items not yet handed to a send."""
        return sum(len(items) for items in self._queued.values())

    async def _drain(self, key: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            while items := self._queued[key]:
                batch, self._queued[key] = items[: self._max], items[self._max :]
                started = loop.time()
                try:
                    await self._send(key, batch)
                except Exception:  # sends handle their RPC failures; this batch is lost (the safety re-check covers
                    # it), the items queued behind it are not
                    logger.exception("sending %d item(s) to %s failed", len(batch), key)
                # The key stays busy for the rest of the interval: a burst's next items go in the next send.
                await asyncio.sleep(max(0.0, self._interval - (loop.time() - started)))
        finally:
            del self._queued[key]
