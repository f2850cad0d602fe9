"""Delivering one signal to one lifecycle, the same way for every watcher of the worker."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from slinky import telemetry

logger = logging.getLogger(__name__)
ATTEMPTS = 5


async def signal_lifecycle(temporal: Client, workflow_id: str, name: str, arg: Any, limit: asyncio.Semaphore) -> bool:
    """Signal ``name`` to ``workflow_id``; True when delivered.

    A lifecycle that already ended (NOT_FOUND) has nothing left to learn: that is not an error. Other RPC
    failures are retried with backoff (the watchers' next event or the safety re-check covers a loss).
    """
    started = time.monotonic()
    async with limit:
        for attempt in range(ATTEMPTS):
            try:
                await temporal.get_workflow_handle(workflow_id).signal(name, arg)
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return False
                logger.warning("%s to %s failed (%s), attempt %d", name, workflow_id, err.status, attempt + 1)
                await asyncio.sleep(0.2 * 2**attempt)
                continue
            telemetry.SIGNALS_SENT.labels(name).inc()
            telemetry.SIGNAL_SECONDS.labels(name).observe(time.monotonic() - started)
            return True
    return False
