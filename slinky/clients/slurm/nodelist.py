"""Slurm's node list as of the last read, asked for again only when a node may have changed.

``GET nodes`` answers about 3 KB per node: with 1,000 nodes a 3 MB answer, and the operator's node poll asked for it
every second (150-180 ms/s of slurmrestd at rest, issue 16). :class:`NodeList` asks ``GET nodes?update_time=T``,
which slurmrestd answers with 304 and no body when no node changed since ``T`` (measured on 26.05), and keeps the
last list.

Slurm's time has a resolution of a second. slurmctld answers "no change" only when its last node update is before
the second asked, so a change in the same second as the previous answer is seen (measured on 26.05: a drain right
after a read, in the same second, came back with the next read). After each change the next read also asks from a
second earlier, and a read at least ``full_seconds`` after the last full one asks for every node whatever
``update_time`` would say: nets, not needs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from slinky.clients.slurm.client import SlurmApi
from slinky.clients.slurm.models import Node

__all__ = ["FULL_SECONDS", "NodeList"]

FULL_SECONDS = 60.0
"""Every node is read at least this often. Counted in time, not reads: the operator reads every second, and a full
list of 1,000 nodes (3 MB) every 12 reads was still most of slurmrestd's work at rest."""


class NodeList:
    """The nodes of one slurmrestd, read with ``update_time``.

    Args:
        client: The cluster's client.
        full_seconds: See :data:`FULL_SECONDS`.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self, client: SlurmApi, *, full_seconds: float = FULL_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.client = client
        self.full_seconds = full_seconds
        self.clock = clock
        self.nodes: list[Node] = []
        self._since: int | None = None
        self._confirm = False
        self._full_at = -float("inf")
        """When the last full list was asked for."""
        self.reads = 0
        self.unchanged = 0
        """Reads answered "no node changed" (the kept list served)."""

    async def read(self) -> tuple[list[Node], bool]:
        """Every node, and whether the list may differ from the previous read's (False: the same list object).

        Raises:
            SlurmError: The request failed; the next read asks the same again.
        """
        now = self.clock()
        if self._since is None or now - self._full_at >= self.full_seconds:
            ask = None
        else:
            ask = self._since - 1 if self._confirm else self._since
        page = await self.client.list_nodes_since(ask)
        if ask is None:
            self._full_at = now
        self.reads += 1
        if not page.changed:
            self._confirm = False
            self.unchanged += 1
            return self.nodes, False
        self._confirm = page.last_update != self._since
        self._since = page.last_update
        self.nodes = list(page.nodes)
        return self.nodes, True
