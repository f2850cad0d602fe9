"""Phantom allocations: external nodes Slurm holds as allocated while no job is on them (pure rules).

After four ``kill -9`` of slurmctld within a minute (``bench/chaos.py --seed 9``, session 18), slurmctld 26.05 kept
an external node ALLOCATED with ``alloc_cpus`` 0 and no job on it, across restarts. Slurm then refuses every
immediate allocation that lands there (2016, ``Requested nodes are busy``) and never schedules a queued job on it:
one node of capacity gone until an administrator clears it.

The bridge already has both views that tell such a node from a busy one, at no extra request: the node list (the
worker's node cache) and the job watcher's running jobs. A node is a **suspect** when a node snapshot says it is
ALLOCATED or MIXED (not COMPLETING), it is an external node, and no job seen running by a complete job view asked
after that snapshot lists it. Right after a job ends the node snapshot may still say ALLOCATED for a few seconds
while the watcher already saw the end: so a node is **confirmed** only once every check over at least
``SETTLE_SECONDS`` found it a suspect. A confirmed node counts as busy in the submit's free-node estimate at once.

Clearing it takes ``DOWN`` then ``RESUME``: the only way out Slurm allows (``State=IDLE``
is refused: ``Invalid node state transition``). ``DOWN`` kills jobs on a node, so it is sent only after a fresh read
of that node says ALLOCATED with no CPU and no memory allocated (:func:`may_clear`: Slurm's own count agrees with the
watcher; a node with a real job reads ``alloc_cpus`` > 0, measured on 26.05), and Slurm itself places no job on a
node it holds as allocated between that read and the ``DOWN``. The ``DOWN`` reason carries the drain reason the
node had, so a clearing cut between its steps (:func:`is_half_cleared`) is finished from Slurm's state alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Final

from slinky.clients.slurm.models import Node, NodeUpdate

SETTLE_SECONDS: Final = 30.0
"""A suspect is confirmed after this long (every check in between found it a suspect)."""
CLEAR_REASON: Final = "slurm-bridge: allocated with no job on it, cleared by the bridge"
"""The ``DOWN`` reason while a phantom allocation is cleared (``slurm-bridge: `` prefix: the bridge's own)."""

_WAS_DRAINING: Final = "; was draining: "
_HELD: Final = frozenset({"ALLOCATED", "MIXED"})


def is_suspect(node: Node, running_nodes: AbstractSet[str]) -> bool:
    """Slurm holds this external node as allocated (not completing) and no running job lists it."""
    return (
        node.is_external
        and bool(node.states & _HELD)
        and "COMPLETING" not in node.states
        and node.name not in running_nodes
    )


def may_clear(node: Node, running_nodes: AbstractSet[str]) -> bool:
    """A fresh read still says phantom, and Slurm counts nothing allocated on it: ``DOWN`` kills no job."""
    return is_suspect(node, running_nodes) and node.alloc_cpus == 0 and node.alloc_memory == 0


def down_reason(node: Node) -> str:
    """The ``DOWN`` reason that clears ``node``: :data:`CLEAR_REASON`, with the drain reason it had, if any (``DOWN``
    keeps DRAIN but replaces its reason; ``RESUME`` then clears both)."""
    return CLEAR_REASON + (_WAS_DRAINING + node.reason if node.is_drain else "")


def is_half_cleared(node: Node) -> bool:
    """``DOWN`` by a clearing that did not get to its ``RESUME`` (the worker was killed in between)."""
    return "DOWN" in node.states and node.reason.startswith(CLEAR_REASON)


def resume_steps(reason: str) -> list[NodeUpdate]:
    """What follows the ``DOWN`` with this :func:`down_reason`: ``RESUME``, and the drain again if it was draining."""
    _, draining, was = reason.partition(_WAS_DRAINING)
    steps = [NodeUpdate(state=["RESUME"])]
    if draining:
        steps.append(NodeUpdate(state=["DRAIN"], reason=was or CLEAR_REASON))
    return steps


@dataclass
class PhantomTracker:
    """Suspects over time: a node confirmed phantom once every check for ``settle_seconds`` found it a suspect."""

    settle_seconds: float = SETTLE_SECONDS
    _since: dict[str, float] = field(default_factory=dict)

    def observe(self, nodes: Mapping[str, Node], running_nodes: AbstractSet[str], now: float) -> frozenset[str]:
        """One check: ``nodes`` from a snapshot, ``running_nodes`` from a complete job view asked after it. A node
        that is no suspect now starts over. Returns the confirmed nodes."""
        suspects = [name for name, node in nodes.items() if is_suspect(node, running_nodes)]
        self._since = {name: self._since.get(name, now) for name in suspects}
        return self.confirmed(now)

    def confirmed(self, now: float) -> frozenset[str]:
        """The nodes suspect for at least ``settle_seconds`` as of the last check."""
        return frozenset(name for name, since in self._since.items() if now - since >= self.settle_seconds)

    def forget(self, name: str) -> None:
        """The node was cleared (or is gone): it starts over."""
        self._since.pop(name, None)
