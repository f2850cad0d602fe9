"""The node sync reconciler: applies :mod:`slinky.bridge.nodesync` decisions to Kubernetes and Slurm.

* Kubernetes nodes by list-watch (resume from the last resourceVersion, relist on 410). Only changes
  that matter to a rule (labels, our annotations, ``spec``, capacity, addresses) queue the node: the
  status heartbeats every node agent sends are stored and otherwise ignored.
* Slurm nodes by ``GET nodes?update_time=`` (``NodeList``): every ``refresh_seconds`` (default 10 s) a full pass
  re-plans every node, and right after the reconciler's own actions the touched nodes are re-planned on fresh data.
* Every step is idempotent and level-triggered, so several replicas (or a test's own instance beside
  the bridge worker) converge instead of fighting, and a node waiting to drain never holds up another.
* Slurm nodes that no Kubernetes node maps to are retired only if the bridge registered them
  (:func:`slinky.bridge.nodesync.plan_orphan`), and only once the Kubernetes list has been read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from slinky import wellknown
from slinky.bridge import nodesync
from slinky.bridge.translate.nodes import slurm_node_name
from slinky.clients.errors import (
    KubeConflict,
    KubeError,
    KubeNotFound,
    SlurmConflict,
    SlurmError,
    SlurmNotFound,
)
from slinky.clients.kube import KubeClient
from slinky.clients.slurm import Node as SlurmNode
from slinky.clients.slurm import NodeUpdate, SlurmApi
from slinky.clients.slurm.nodelist import NodeList
from slinky.config import Settings

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
_RELEVANT_ANNOTATIONS = (wellknown.ANNOTATION_EXTERNAL_NODE_PARTITIONS, wellknown.ANNOTATION_TOPOLOGY_SPEC)
_TAINT_RETRIES = 3


def fingerprint(node: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the rules read from a node; a change elsewhere (heartbeats, conditions) is ignored."""
    metadata = node.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    status = node.get("status") or {}
    return (
        repr(sorted((metadata.get("labels") or {}).items())),
        tuple(annotations.get(key) for key in _RELEVANT_ANNOTATIONS),
        repr(node.get("spec") or {}),
        repr(sorted((status.get("capacity") or {}).items())),
        repr(status.get("addresses") or []),
    )


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


_SLURM_ACTIONS = (
    nodesync.Drain,
    nodesync.Undrain,
    nodesync.CreateSlurmNode,
    nodesync.SetComment,
    nodesync.DeleteSlurmNode,
)


def _touches_slurm(actions: list[nodesync.Action]) -> bool:
    return any(isinstance(a, _SLURM_ACTIONS) for a in actions)


class NodeSyncer:
    """Keeps Slurm's node view in step with Kubernetes' (docs/node-sync.md)."""

    def __init__(
        self,
        kube: KubeClient,
        slurm: SlurmApi,
        *,
        scheduler_name: str = wellknown.SCHEDULER_NAME,
        refresh_seconds: float = 10.0,
        resolve: nodesync.Resolver | None = None,
        concurrency: int = 16,
    ) -> None:
        self.kube = kube
        self.slurm = slurm
        self._slurm_list = NodeList(slurm)
        self.scheduler_name = scheduler_name
        self.refresh_seconds = refresh_seconds
        self.resolve = resolve
        self._sem = asyncio.Semaphore(concurrency)
        self._nodes: dict[str, Obj] = {}
        self._slurm: dict[str, SlurmNode] | None = None
        self._dirty: set[str] = set()
        """Kubernetes node names to re-plan."""
        self._dirty_slurm: set[str] = set()
        """Slurm node names whose Kubernetes node went away (orphan candidates)."""
        self._listed = False
        self._stale = True
        self._last_refresh = 0.0
        self._wake = asyncio.Event()
        self._quiet: dict[str, str] = {}
        """Last WaitDrained/Blocked line per node, so a long wait is logged once."""
        self.synced = asyncio.Event()
        """Set after the first full pass."""
        self.actions_applied = 0

    @classmethod
    def from_settings(cls, kube: KubeClient, slurm: SlurmApi, settings: Settings) -> NodeSyncer:
        return cls(kube, slurm, scheduler_name=settings.bridge.scheduler_name)

    # --------------------------------------------------------------------------------------------- running
    async def run(self) -> None:
        await asyncio.gather(self._watch_kube(), self._reconcile_loop())

    def poke(self) -> None:
        """Re-plan everything now (tests)."""
        self._stale = True
        self._last_refresh = 0.0
        self._wake.set()

    async def _watch_kube(self) -> None:
        async for kind, obj in self.kube.list_watch("/api/v1/nodes"):
            if kind != "SYNC":
                self._on_event(kind, obj)
                continue
            fresh = {n["metadata"]["name"]: n for n in obj["items"]}
            for name in self._nodes.keys() - fresh.keys():
                self._dirty_slurm.add(slurm_node_name(self._nodes[name]))
            self._nodes = fresh
            self._dirty.update(fresh)
            self._listed = True
            self._wake.set()

    def _on_event(self, kind: str, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        old = self._nodes.get(name)
        if kind == "DELETED":
            self._nodes.pop(name, None)
            self._dirty.discard(name)
            self._dirty_slurm.add(slurm_node_name(obj))
            self._wake.set()
            return
        self._nodes[name] = obj
        if old is None or fingerprint(old) != fingerprint(obj):
            if old is not None and slurm_node_name(old) != slurm_node_name(obj):
                self._dirty_slurm.add(slurm_node_name(old))
            self._dirty.add(name)
            self._wake.set()

    async def _reconcile_loop(self) -> None:
        while True:
            timeout = max(0.0, self._last_refresh + self.refresh_seconds - time.monotonic())
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.reconcile_once()
            except SlurmError as err:
                logger.warning("node sync: Slurm node list failed: %s", err)
                self._last_refresh = time.monotonic()  # retry at the next period, not in a hot loop
            except Exception:
                logger.exception("node sync pass failed")
                await asyncio.sleep(1)

    async def reconcile_once(self) -> None:
        """One pass: a full one when the period is up, else only the queued nodes."""
        full = time.monotonic() - self._last_refresh >= self.refresh_seconds
        if full or self._stale or self._slurm is None:
            # With update_time: 1,000 unchanged nodes are a 304, not 3 MB every 10 s (NodeList). slurmctld counts a
            # change in the same second as the last answer as a change, so the reconciler's own actions are seen.
            nodes, changed = await self._slurm_list.read()
            if changed or self._slurm is None:
                self._slurm = {n.name: n for n in nodes}
            self._stale = False
            if full:
                self._last_refresh = time.monotonic()
        if not self._nodes and not self._dirty and not full:
            return
        by_slurm = {slurm_node_name(n): name for name, n in self._nodes.items()}
        if full:
            kube_names, self._dirty = set(self._nodes), set()
            orphans, self._dirty_slurm = set(self._slurm) - by_slurm.keys(), set()
        else:
            kube_names, self._dirty = self._dirty & self._nodes.keys(), set()
            orphans, self._dirty_slurm = (self._dirty_slurm & self._slurm.keys()) - by_slurm.keys(), set()
        if not self._listed:
            orphans = set()  # never retire anything before the Kubernetes list has been read
        jobs = [self._sync_node(name) for name in sorted(kube_names)]
        jobs += [self._sync_orphan(name) for name in sorted(orphans)]
        progressed = await asyncio.gather(*jobs)
        if any(progressed):
            self._stale = True
            self._wake.set()
        if full:
            self.synced.set()

    # --------------------------------------------------------------------------------------------- applying
    async def _sync_node(self, kube_name: str) -> bool:
        node = self._nodes.get(kube_name)
        if node is None or self._slurm is None:
            return False
        slurm_name = slurm_node_name(node)
        actions = nodesync.plan(node, self._slurm.get(slurm_name), self.scheduler_name, resolve=self.resolve)
        if _touches_slurm(actions):
            # The listing may be seconds old: an admin's drain since then must not be overwritten.
            try:
                current = await self._fresh(slurm_name)
            except SlurmError as err:
                logger.warning("node %s: cannot read Slurm node %s: %s", kube_name, slurm_name, err)
                return False
            actions = nodesync.plan(node, current, self.scheduler_name, resolve=self.resolve)
        return await self._apply(kube_name, slurm_name, actions)

    async def _sync_orphan(self, slurm_name: str) -> bool:
        if self._slurm is None or slurm_name not in self._slurm:
            return False
        actions = nodesync.plan_orphan(self._slurm[slurm_name])
        if _touches_slurm(actions):
            try:
                current = await self._fresh(slurm_name)
            except SlurmError as err:
                logger.warning("Slurm node %s: cannot read it: %s", slurm_name, err)
                return False
            actions = nodesync.plan_orphan(current) if current is not None else []
        return await self._apply(None, slurm_name, actions)

    async def _fresh(self, slurm_name: str) -> SlurmNode | None:
        """Re-read one Slurm node right before acting on it (and update the listing)."""
        try:
            current: SlurmNode | None = await self.slurm.get_node(slurm_name)
        except SlurmNotFound:
            current = None
        if self._slurm is not None:
            if current is None:
                self._slurm.pop(slurm_name, None)
            else:
                self._slurm[slurm_name] = current
        return current

    async def _apply(self, kube_name: str | None, slurm_name: str, actions: list[nodesync.Action]) -> bool:
        """Apply in order, stopping at the first failure; True when something was changed (or tried)."""
        label = kube_name or f"(slurm) {slurm_name}"
        self._log_quiet(label, actions)
        if not nodesync.is_progress(actions):
            return False
        async with self._sem:
            for action in actions:
                if isinstance(action, nodesync.WaitDrained | nodesync.Blocked):
                    continue
                logger.info("node %s: %s", label, nodesync.describe(action))
                try:
                    await self._do(kube_name, slurm_name, action)
                    self.actions_applied += 1
                except (SlurmError, KubeError) as err:
                    logger.warning("node %s: %s failed: %s", label, nodesync.describe(action), err)
                    break
        return True

    def _log_quiet(self, label: str, actions: list[nodesync.Action]) -> None:
        waits = [a for a in actions if isinstance(a, nodesync.WaitDrained | nodesync.Blocked)]
        line = "; ".join(nodesync.describe(a) for a in waits)
        if line and self._quiet.get(label) != line and not nodesync.is_progress(actions):
            log = logger.warning if isinstance(waits[0], nodesync.Blocked) else logger.info
            log("node %s: %s", label, line)
        if line:
            self._quiet[label] = line
        else:
            self._quiet.pop(label, None)

    async def _do(self, kube_name: str | None, slurm_name: str, action: nodesync.Action) -> None:
        match action:
            case nodesync.Drain(reason=reason):
                await self.slurm.drain_node(slurm_name, reason)
            case nodesync.Undrain():
                try:
                    await self.slurm.update_node(slurm_name, NodeUpdate(state=["UNDRAIN"]))
                except SlurmNotFound:
                    pass
            case nodesync.CreateSlurmNode(node_conf=conf, comment=comment, drain_reason=drain_reason):
                try:
                    await self.slurm.create_node(conf)
                except SlurmConflict:
                    pass  # 2168: another replica created it; the comment below adopts it either way
                if drain_reason:
                    await self.slurm.drain_node(slurm_name, drain_reason)
                await self.slurm.update_node(slurm_name, NodeUpdate(comment=comment))
            case nodesync.SetComment(comment=comment):
                await self.slurm.update_node(slurm_name, NodeUpdate(comment=comment))
            case nodesync.DeleteSlurmNode():
                try:
                    await self.slurm.delete_node(slurm_name)
                except SlurmNotFound:
                    pass
            case nodesync.AddTaint() | nodesync.RemoveTaint():
                if kube_name is not None:
                    await self._patch_taints(kube_name, action)
            case _:
                pass

    async def _patch_taints(self, kube_name: str, action: nodesync.AddTaint | nodesync.RemoveTaint) -> None:
        """Read-modify-write of ``spec.taints`` guarded by resourceVersion (taints have no merge key)."""
        node = self._nodes.get(kube_name)
        for _ in range(_TAINT_RETRIES):
            if node is None:
                node = await self.kube.get(f"/api/v1/nodes/{kube_name}")
            taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != action.key]
            if isinstance(action, nodesync.AddTaint):
                taints.append({"key": action.key, "value": action.value, "effect": action.effect})
            body = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": taints or None},
            }
            try:
                updated = await self.kube.patch(f"/api/v1/nodes/{kube_name}", body)
            except KubeConflict:
                node = None
                continue
            except KubeNotFound:
                return
            current = self._nodes.get(kube_name)
            if current is not None and _rv(updated) > _rv(current):
                self._nodes[kube_name] = updated  # the watch event follows; plan on fresh data until then
            return
        raise KubeConflict(f"PATCH /api/v1/nodes/{kube_name}: resourceVersion kept changing", status_code=409)
