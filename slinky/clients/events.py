"""Kubernetes Events recorded in the background, as client-go's event recorder does.

An Event tells a user what happened to their pod; it is never worth holding a lifecycle step for. The
bridge records them through this queue: :meth:`EventRecorder.record` returns at once, a few consumers post
the Events, a failed post is retried once when the API server was unavailable, and a full queue drops the
Event with a warning and a count (``slinky_bridge_events_dropped_total``). The consumers start with the first
Event. :func:`pod_event` builds the Event itself, the same for every sender. Without the queue, a gang of 64
pods spent half a second posting "submitted" Events inside the workflow task that had to finish before the
job's start could be handled (bench/bridge.py).

Owns: the queue and its consumers. Touches: ``POST /api/v1/namespaces/{ns}/events`` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

from slinky import telemetry
from slinky.clients.errors import KubeError, KubeNotFound, KubeUnavailable
from slinky.clients.kube import KubeClient, Obj, rfc3339

logger = logging.getLogger(__name__)
COMPONENT: Final = "slurm-bridge"
MESSAGE_LIMIT: Final = 1024


def pod_event(namespace: str, name: str, uid: str, reason: str, message: str, type_: str = "Normal") -> Obj:
    """A core/v1 Event about one pod, from the bridge (message cut to ``MESSAGE_LIMIT``)."""
    return object_event("v1", "Pod", namespace, name, uid, reason, message, type_)


def object_event(
    api_version: str,
    kind: str,
    namespace: str,
    name: str,
    uid: str,
    reason: str,
    message: str,
    type_: str = "Normal",
    component: str = COMPONENT,
) -> Obj:
    """A core/v1 Event about one object (message cut to ``MESSAGE_LIMIT``), from ``component``."""
    now = rfc3339()
    involved = {"apiVersion": api_version, "kind": kind, "namespace": namespace, "name": name, "uid": uid}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "type": type_,
        "source": {"component": component},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "reportingComponent": component,
    }


class EventRecorder:
    """Posts core/v1 Events from a bounded queue; ``async with recorder:`` runs the consumers."""

    def __init__(self, kube: KubeClient, *, consumers: int = 4, max_queue: int = 10_000) -> None:
        self.kube = kube
        self.consumers = consumers
        self._queue: asyncio.Queue[Obj] = asyncio.Queue(maxsize=max_queue)
        self._tasks: list[asyncio.Task[None]] = []
        self.posted = 0
        self.dropped = 0

    def record(self, event: Obj) -> None:
        """Queue one Event (its ``metadata.namespace`` says where); never blocks, drops when full. Called from
        the event loop; the first call starts the consumers."""
        self.start()
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
            telemetry.EVENTS_DROPPED.inc()
            logger.warning("event queue full; dropped %s on %s", event.get("reason"), _target(event))

    async def _post(self, event: Obj) -> None:
        path = f"/api/v1/namespaces/{event['metadata']['namespace']}/events"
        for attempt in range(2):
            try:
                await self.kube.create(path, event, decode=False)
                self.posted += 1
                return
            except KubeUnavailable as err:
                if attempt == 0:
                    await asyncio.sleep(1.0 if err.retry_after is None else err.retry_after)
                    continue
                logger.warning("event %s on %s not recorded: %s", event.get("reason"), _target(event), err)
            except KubeError as err:
                # A namespace being deleted, or gone: nothing left to tell anyone there (a deleted namespace of
                # thousands of pods made as many warnings). Anything else is worth a warning.
                terminating = "NamespaceTerminating" in err.causes or isinstance(err, KubeNotFound)
                log = logger.debug if terminating else logger.warning
                log("event %s on %s not recorded: %s", event.get("reason"), _target(event), err)
                return

    async def _consume(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._post(event)
            except Exception:
                logger.exception("event %s on %s failed", event.get("reason"), _target(event))
            finally:
                self._queue.task_done()

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._consume(), name=f"events-{i}") for i in range(self.consumers)]

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait (bounded) until every queued Event was posted or given up."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout)

    async def aclose(self, timeout: float = 5.0) -> None:
        """Post what is queued (bounded by ``timeout``), then stop the consumers."""
        if self._tasks:
            await self.flush(timeout)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def __aenter__(self) -> EventRecorder:
        self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def _target(event: Obj) -> str:
    obj = event.get("involvedObject") or {}
    return f"{obj.get('namespace', '')}/{obj.get('name', '')}"
