"""The worker's view of nodes: Kubernetes nodes by list-watch, Slurm nodes by a refresh every few seconds.

Translation needs every node (to exclude the ones a pod does not fit) and binding needs the Kubernetes
node of a Slurm node. Both read this cache, so the lifecycle never lists nodes per pod.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from slinky import wellknown
from slinky.clients.errors import SlurmError
from slinky.clients.kube import KubeClient
from slinky.clients.slurm import Node, SlurmApi
from slinky.clients.slurm.nodelist import NodeList

logger = logging.getLogger(__name__)


class NodeCache:
    """Implements ``activities.kube.NodeView``."""

    def __init__(self, kube: KubeClient, slurm: SlurmApi, *, slurm_refresh_seconds: float = 5.0) -> None:
        self.kube = kube
        self.slurm = slurm
        self.slurm_refresh_seconds = slurm_refresh_seconds
        self._nodes: dict[str, dict[str, Any]] = {}
        self._slurm_nodes: dict[str, Node] | None = None
        self._by_slurm_name: dict[str, str] = {}
        self._slurm_list = NodeList(slurm)
        self.slurm_read_at = -float("inf")
        """When the read that ``slurm_nodes`` answers from (or a later one that found no change) was asked
        (``time.monotonic``)."""
        self.synced = asyncio.Event()

    def kube_nodes(self) -> Sequence[Mapping[str, Any]]:
        return list(self._nodes.values())

    def slurm_node_names(self) -> AbstractSet[str] | None:
        return None if self._slurm_nodes is None else self._slurm_nodes.keys()

    def slurm_nodes(self) -> Mapping[str, Node] | None:
        """Slurm's nodes as of the last refresh (partitions, drain and down flags), or None before it."""
        return self._slurm_nodes

    def kube_node(self, name: str) -> Mapping[str, Any] | None:
        """The Kubernetes node of this name as last seen, or None."""
        return self._nodes.get(name)

    def kube_node_for(self, slurm_node: str) -> str | None:
        """The Kubernetes node of a Slurm node: by the slurm-nodename label, else by the same name."""
        if slurm_node in self._by_slurm_name:
            return self._by_slurm_name[slurm_node]
        return slurm_node if slurm_node in self._nodes else None

    def _put(self, name: str, node: dict[str, Any] | None) -> None:
        """One node added, changed (``node``) or gone (None): the cache and its Slurm-name index, in O(1) (a full
        re-index per event was 40 % of the worker's CPU with 1,000 nodes sending status updates)."""
        old = self._nodes.pop(name, None)
        old_slurm = _slurm_name(old) if old is not None else None
        if old_slurm is not None and self._by_slurm_name.get(old_slurm) == name:
            del self._by_slurm_name[old_slurm]
        if node is None:
            return
        self._nodes[name] = node
        slurm_name = _slurm_name(node)
        if slurm_name is not None:
            self._by_slurm_name[slurm_name] = name

    async def run(self) -> None:
        await asyncio.gather(self._watch_kube(), self._refresh_slurm())

    async def _watch_kube(self) -> None:
        async for kind, obj in self.kube.list_watch("/api/v1/nodes"):
            if kind == "SYNC":
                self._nodes, self._by_slurm_name = {}, {}
                for node in obj["items"]:
                    self._put(node["metadata"]["name"], node)
                self.synced.set()
            else:
                self._put(obj["metadata"]["name"], None if kind == "DELETED" else obj)

    async def _refresh_slurm(self) -> None:
        """Slurm's nodes every few seconds, read only when one changed (``NodeList``: ``update_time``, and every
        node every minute): with 1,000 idle nodes the answer is a 304."""
        while True:
            try:
                asked = time.monotonic()
                nodes, changed = await self._slurm_list.read()
                if changed:
                    self._slurm_nodes = {n.name: n for n in nodes}
                self.slurm_read_at = asked
            except SlurmError as err:
                logger.warning("slurm node refresh failed: %s", type(err).__name__)
            await asyncio.sleep(self.slurm_refresh_seconds)


def _slurm_name(node: Mapping[str, Any]) -> str | None:
    return (node["metadata"].get("labels") or {}).get(wellknown.LABEL_SLURM_NODENAME)
