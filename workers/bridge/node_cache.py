"""The worker's view of nodes: Kubernetes nodes by list-watch, Slurm nodes by a refresh every few seconds.

Translation needs every node (to exclude the ones a pod does not fit) and binding needs the Kubernetes
node of a Slurm node. Both read this cache, so the lifecycle never lists nodes per pod.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from slinky import wellknown
from slinky.clients.errors import SlurmError
from slinky.clients.kube import KubeClient
from slinky.clients.slurm import Node, SlurmApi

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
        self.synced = asyncio.Event()

    def kube_nodes(self) -> Sequence[Mapping[str, Any]]:
        return list(self._nodes.values())

    def slurm_node_names(self) -> AbstractSet[str] | None:
        return None if self._slurm_nodes is None else self._slurm_nodes.keys()

    def slurm_nodes(self) -> Mapping[str, Node] | None:
        """Slurm's nodes as of the last refresh (partitions, drain and down flags), or None before it."""
        return self._slurm_nodes

    def kube_node_for(self, slurm_node: str) -> str | None:
        """The Kubernetes node of a Slurm node: by the slurm-nodename label, else by the same name."""
        if slurm_node in self._by_slurm_name:
            return self._by_slurm_name[slurm_node]
        return slurm_node if slurm_node in self._nodes else None

    def _reindex(self) -> None:
        self._by_slurm_name = {
            labels[wellknown.LABEL_SLURM_NODENAME]: name
            for name, node in self._nodes.items()
            if wellknown.LABEL_SLURM_NODENAME in (labels := node["metadata"].get("labels") or {})
        }

    async def run(self) -> None:
        await asyncio.gather(self._watch_kube(), self._refresh_slurm())

    async def _watch_kube(self) -> None:
        async for kind, obj in self.kube.list_watch("/api/v1/nodes"):
            if kind == "SYNC":
                self._nodes = {n["metadata"]["name"]: n for n in obj["items"]}
                self.synced.set()
            elif kind == "DELETED":
                self._nodes.pop(obj["metadata"]["name"], None)
            else:
                self._nodes[obj["metadata"]["name"]] = obj
            self._reindex()

    async def _refresh_slurm(self) -> None:
        while True:
            try:
                self._slurm_nodes = {n.name: n for n in await self.slurm.list_nodes()}
            except SlurmError as err:
                logger.warning("slurm node refresh failed: %s", type(err).__name__)
            await asyncio.sleep(self.slurm_refresh_seconds)
