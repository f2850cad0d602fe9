"""Delivering one signal to one lifecycle, the same way for every watcher of the worker."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

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
