"""Slurm's node list as of the last read, asked for again only when a node may have changed.

``GET nodes`` answers about 3 KB per node: with 1,000 nodes a 3 MB answer, and the operator's node poll asked for it
every second (150-180 ms/s of slurmrestd at rest, issue 16). :class:`NodeList` asks ``GET nodes?update_time=T``,
which slurmrestd answers with 304 and no body when no node changed since ``T`` (measured on 26.05), and keeps the
last list.

Slurm's time has a resolution of a second: a change later in the same second as an answer would read as
"unchanged" at that answer's time. So after each change the next read asks from a second earlier (a full list), and
only then is a 304 trusted; and every ``full_every``-th read asks for every node whatever ``update_time`` would say.
"""

from __future__ import annotations

from slinky.clients.slurm.client import SlurmApi
from slinky.clients.slurm.models import Node

__all__ = ["FULL_EVERY", "NodeList"]

FULL_EVERY = 12
"""Every 12th read lists every node."""


class NodeList:
    """The nodes of one slurmrestd, read with ``update_time``.

    Args:
        client: The cluster's client.
        full_every: See :data:`FULL_EVERY`.
    """

    def __init__(self, client: SlurmApi, *, full_every: int = FULL_EVERY) -> None:
        self.client = client
        self.full_every = full_every
        self.nodes: list[Node] = []
        self._since: int | None = None
        self._confirm = False
        self.reads = 0
        self.unchanged = 0
        """Reads answered "no node changed" (the kept list served)."""

    async def read(self) -> tuple[list[Node], bool]:
        """Every node, and whether the list may differ from the previous read's (False: the same list object).

        Raises:
            SlurmError: The request failed; the next read asks the same again.
        """
        if self._since is None or self.reads % self.full_every == 0:
            ask = None
        else:
            ask = self._since - 1 if self._confirm else self._since
        page = await self.client.list_nodes_since(ask)
        self.reads += 1
        if not page.changed:
            self._confirm = False
            self.unchanged += 1
            return self.nodes, False
        self._confirm = page.last_update != self._since
        self._since = page.last_update
        self.nodes = list(page.nodes)
        return self.nodes, True
