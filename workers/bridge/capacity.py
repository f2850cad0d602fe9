"""Whether Slurm would start a job right now, estimated locally: the gate of submit's immediate allocation.

An immediate allocation (``job/allocate``) that Slurm refuses leaves a FAILED job record behind (in ``squeue
--states=all`` for ``MinJobAge``, and in accounting). So the submit asks for one only when this estimate says
it will be granted, and queues the job with ``job/submit`` otherwise. The estimate costs no request: it reads
the job watcher (jobs waiting for nodes; nodes of running jobs) and the node cache (partitions; drained or
down nodes, refreshed every few seconds). Slurm stays the judge: when the estimate is wrong the allocation
is refused and the job is queued, so the cost of a wrong guess is one FAILED record, never a wrong start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Mapping
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

    def __init__(self, watcher: JobWatcher, nodes: SlurmNodes) -> None:
        self.watcher = watcher
        self.nodes = nodes
        self._in_flight = 0
        """Nodes asked for by allocations under way in this worker (not yet known to the watcher)."""

    def may_start_now(self, partition: str | None, node_count: int, excluded: Collection[str] = ()) -> bool:
        """False while a job waits for nodes (Slurm would refuse for priority) or too few nodes look free.

        ``excluded``: the job's ``excluded_nodes`` (nodes the pod does not fit). Other constraints (features,
        sizes) are not modelled: a job that needs them may be refused once, then it is queued.
        """
        if self.watcher.has_waiting_jobs():
            return False
        nodes = self.nodes.slurm_nodes()
        if nodes is None:
            return True  # no node view yet: let Slurm decide
        busy = self.watcher.running_nodes()
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
        try:
            yield
        finally:
            self._in_flight -= node_count
