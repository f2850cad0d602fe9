"""Finds and clears phantom allocations (:mod:`slinky.bridge.phantoms`) from the node cache and the job watcher.

Runs on the leader beside the job watcher. Every ``period_seconds`` one check, with no request of its own unless a
suspect needs a complete job view asked after the node snapshot (the watcher is asked for one) or a confirmed node is
cleared (one read of that node, then two or three node updates). Nothing is kept that Slurm does not keep: a worker
killed between a clearing's ``DOWN`` and its ``RESUME`` leaves a node whose reason says so, and the next leader
finishes it (:func:`~slinky.bridge.phantoms.is_half_cleared`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any, Protocol

from slinky import telemetry
from slinky.bridge.phantoms import (
    SETTLE_SECONDS,
    PhantomTracker,
    down_reason,
    is_half_cleared,
    is_suspect,
    may_clear,
    resume_steps,
)
from slinky.clients.errors import SlurmError, SlurmNotFound
from slinky.clients.events import EventRecorder, object_event
from slinky.clients.slurm import JobWatcher, Node, NodeUpdate, SlurmApi

logger = logging.getLogger(__name__)

REASON_FOUND = "SlurmNodeAllocatedWithoutJob"
REASON_CLEARED = "SlurmNodeAllocationCleared"


class NodeView(Protocol):
    """What the check reads from the worker's node cache (``workers.bridge.node_cache.NodeCache``)."""

    slurm_read_at: float

    def slurm_nodes(self) -> Mapping[str, Node] | None: ...

    def kube_node_for(self, slurm_node: str) -> str | None: ...

    def kube_node(self, name: str) -> Mapping[str, Any] | None: ...


class PhantomNodes:
    """Keeps :meth:`held` (confirmed phantoms, which the submit's free-node estimate counts busy) and clears them."""

    def __init__(
        self,
        slurm: SlurmApi,
        watcher: JobWatcher,
        nodes: NodeView,
        events: EventRecorder | None,
        *,
        clear: bool = True,
        period_seconds: float = 10.0,
        settle_seconds: float = SETTLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slurm = slurm
        self.watcher = watcher
        self.nodes = nodes
        self.events = events
        self.clear = clear
        self.period_seconds = period_seconds
        self.clock = clock
        self.tracker = PhantomTracker(settle_seconds)
        self._held: frozenset[str] = frozenset()
        self._reported: set[str] = set()
        """Confirmed nodes already logged and told in an Event (once per confirmation)."""
        self._kept: set[str] = set()
        """Confirmed nodes not cleared because Slurm counts resources allocated on them (logged once)."""
        self.cleared = 0

    def held(self) -> AbstractSet[str]:
        """The confirmed phantoms not cleared yet."""
        return self._held

    async def run(self) -> None:
        while True:
            try:
                await self.check_once()
            except SlurmError as err:
                logger.warning("phantom allocations: %s", err)
            except Exception:
                logger.exception("phantom allocation check failed")
            await asyncio.sleep(self.period_seconds)

    async def check_once(self) -> None:
        """One check; see the module docstring."""
        nodes = self.nodes.slurm_nodes()
        if nodes is None:
            return
        read_at = self.nodes.slurm_read_at
        for node in nodes.values():
            if is_half_cleared(node):
                await self._finish(node.name)
        if not any(is_suspect(node, self.watcher.running_nodes()) for node in nodes.values()):
            self._confirm(self.tracker.observe({}, frozenset(), self.clock()))
            return
        if self.watcher.answered_since < read_at and not await self.watcher.caught_up(read_at, self.period_seconds):
            return  # no job view asked after the snapshot: no verdict this time, the suspects stay as they are
        self._confirm(self.tracker.observe(nodes, self.watcher.running_nodes(), self.clock()))
        if self.clear:
            for name in sorted(self._held):
                await self._clear(name)

    def _confirm(self, confirmed: frozenset[str]) -> None:
        self._held = confirmed
        for name in sorted(confirmed - self._reported):
            telemetry.PHANTOM_ALLOCATIONS.labels("found").inc()
            then = "clearing it (DOWN, then RESUME)" if self.clear else "not cleared (clear_phantom_allocations off)"
            message = (
                f"Slurm holds node {name} as allocated with no job on it for {self.tracker.settle_seconds:.0f} s: "
                f"counted busy; {then}"
            )
            logger.warning("phantom allocation: %s", message)
            self._event(name, REASON_FOUND, message, "Warning")
        self._reported = set(confirmed)
        self._kept &= confirmed  # a node confirmed again later is told of again

    async def _clear(self, name: str) -> None:
        """Re-read the node; ``DOWN`` and ``RESUME`` it when Slurm still counts nothing allocated there."""
        try:
            node = await self.slurm.get_node(name)
        except SlurmNotFound:
            self._forget(name)
            return
        running = self.watcher.running_nodes()
        if not may_clear(node, running):
            if not is_suspect(node, running):
                self._forget(name)  # it ended by itself, or a job now runs there
            elif name not in self._kept:
                self._kept.add(name)
                logger.warning(
                    "phantom allocation on %s not cleared: Slurm counts %d CPUs and %d MiB allocated on it",
                    name,
                    node.alloc_cpus,
                    node.alloc_memory,
                )
            return
        reason = down_reason(node)
        await self.slurm.update_node(name, NodeUpdate(state=["DOWN"], reason=reason))
        for step in resume_steps(reason):
            await self.slurm.update_node(name, step)
        self._cleared(name)

    async def _finish(self, name: str) -> None:
        """A clearing cut after its ``DOWN``: its ``RESUME`` (and drain), if a fresh read still says so."""
        try:
            node = await self.slurm.get_node(name)
        except SlurmNotFound:
            return
        if not is_half_cleared(node):
            return
        logger.info("phantom allocation on %s: finishing a clearing cut after its DOWN", name)
        for step in resume_steps(node.reason):
            await self.slurm.update_node(name, step)
        self._cleared(name)

    def _cleared(self, name: str) -> None:
        self._forget(name)
        self.cleared += 1
        telemetry.PHANTOM_ALLOCATIONS.labels("cleared").inc()
        logger.info("phantom allocation on %s cleared (DOWN, then RESUME)", name)
        self._event(
            name, REASON_CLEARED, f"Slurm node {name} set DOWN, then RESUME: its allocation with no job is gone"
        )

    def _forget(self, name: str) -> None:
        self.tracker.forget(name)
        self._held = self._held - {name}
        self._reported.discard(name)
        self._kept.discard(name)

    def _event(self, slurm_name: str, reason: str, message: str, type_: str = "Normal") -> None:
        kube_name = self.nodes.kube_node_for(slurm_name)
        node = self.nodes.kube_node(kube_name) if kube_name is not None else None
        if self.events is None or kube_name is None or node is None:
            return
        event = object_event("v1", "Node", "default", kube_name, node["metadata"]["uid"], reason, message, type_)
        event["involvedObject"]["namespace"] = ""  # a cluster-scoped object: as kubectl describe node asks
        self.events.record(event)
