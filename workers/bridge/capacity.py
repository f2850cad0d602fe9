"""Whether Slurm would start a job right now, estimated locally: the gate of submit's immediate allocation.

An immediate allocation (``job/allocate``) that Slurm refuses leaves a FAILED job record behind (in ``squeue
--states=all`` for ``MinJobAge``, and in accounting). So the submit asks for one only when this estimate says
it will be granted, and queues the job with ``job/submit`` otherwise. The estimate costs no request: it reads
the job watcher (jobs waiting for nodes; nodes of running jobs) and the node cache (partitions; drained or
down nodes, refreshed every few seconds). Slurm stays the judge: when the estimate is wrong the allocation
is refused and the job is queued, so the cost of a wrong guess is one FAILED record, never a wrong start.

A queued job must not reach slurmctld while this worker's allocations are still on their way: until the
scheduler's next pass it is a PENDING job of the partition, and Slurm refuses every immediate allocation
behind it for priority (2013), even on a free node. In a burst larger than the free nodes that left FAILED
records (seen in make test: 12 pods on 8 nodes, 2 refused). So a queued submit first waits until no
allocation is under way, and no allocation starts while a queued submit is under way (it would stand behind
that job in Slurm's queue anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Final, Protocol

from slinky.clients.slurm import JobWatcher, Node

UNUSABLE_STATES: Final = frozenset(
    {
        "DOWN",
        "DRAIN",
        "FAIL",
        "FUTURE",
        "MAINTENANCE",
        "NOT_RESPONDING",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWERING_UP",
        "REBOOT_ISSUED",
        "REBOOT_REQUESTED",
        "RESERVED",
        "UNKNOWN",
    }
)
"""Node state flags that keep an allocation off a node (slurmrestd's ``state`` list)."""


class SlurmNodes(Protocol):
    def slurm_nodes(self) -> Mapping[str, Node] | None: ...


class FreeNodes:
    """Implements ``activities.slurm.Capacity``."""

    def __init__(
        self, watcher: JobWatcher, nodes: SlurmNodes, held: Callable[[], AbstractSet[str]] = frozenset
    ) -> None:
        self.watcher = watcher
        self.nodes = nodes
        self.held = held
        """Nodes Slurm holds with no job on them (``workers.bridge.phantom_nodes``): busy, though no job runs there."""
        self._in_flight = 0
        """Nodes asked for by allocations under way in this worker (not yet known to the watcher)."""
        self._queueing = 0
        """Queued submits under way in this worker (waiting for the allocations, or in ``job/submit``)."""
        self._allocations_done = asyncio.Event()
        self._allocations_done.set()

    def may_start_now(self, partition: str | None, node_count: int, excluded: Collection[str] = ()) -> bool:
        """False while a job waits for nodes or is being queued (Slurm would refuse for priority) or too few
        nodes look free.

        ``excluded``: the job's ``excluded_nodes`` (nodes the pod does not fit). Other constraints (features,
        sizes) are not modelled: a job that needs them may be refused once, then it is queued.
        """
        if self._queueing or self.watcher.has_waiting_jobs():
            return False
        nodes = self.nodes.slurm_nodes()
        if nodes is None:
            return True  # no node view yet: let Slurm decide
        busy = self.watcher.running_nodes() | self.held()
        free = sum(
            1
            for node in nodes.values()
            if (partition is None or partition in node.partitions)
            and node.name not in busy
            and node.name not in excluded
            and not (node.states & UNUSABLE_STATES)
        )
        return free - self._in_flight >= node_count

    @contextlib.contextmanager
    def allocating(self, node_count: int) -> Iterator[None]:
        """Count ``node_count`` nodes as taken while an allocation is under way."""
        self._in_flight += node_count
        self._allocations_done.clear()
        try:
            yield
        finally:
            self._in_flight -= node_count
            if not self._in_flight:
                self._allocations_done.set()

    @contextlib.asynccontextmanager
    async def queueing(self) -> AsyncIterator[None]:
        """Hold new allocations off, and wait until none is under way, while a job is queued (``job/submit``
        and the index told of it): the queued job is then younger than every allocation Slurm has answered."""
        self._queueing += 1
        try:
            await self._allocations_done.wait()
            yield
        finally:
            self._queueing -= 1
