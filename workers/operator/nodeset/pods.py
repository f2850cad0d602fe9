"""Each NodeSet pod's steps: create and delete, its metadata and SlurmNodeState* conditions kept in step with
its Slurm node, cordon propagation, drift repair, and forgetting the Slurm node of a pod that is gone.

Writes go to the apiserver; what it answers is kept in the shared pod cache (``remember``) so the next
reconcile does not write the same thing again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from slinky.clients.errors import KubeConflict, KubeError, KubeNotFound, SlurmError, SlurmNotFound
from slinky.clients.events import pod_event
from slinky.clients.kube import rfc3339
from slinky.clients.slurm import SlurmApi
from slinky.operator import pod_sync, registration, slurm_state, updates
from slinky.operator.models import ControllerKey, SlurmNodeView
from workers.operator.nodeset.poll import ControllerPoll, NodePolls, hostname_of, scale_in_key
from workers.operator.runtime import COMPONENT, Runtime
from workers.operator.slurm_clients import ControllerProblem, SlurmClients
from workers.operator.workqueue import Key

logger = logging.getLogger(__name__)
Obj = dict[str, Any]

DRIFT_GRACE_SECONDS = 15.0
QUOTE_SECONDS = 20.0
"""How long a slurmd log line read for a condition is reused before the log is read again."""
QUOTE_KEEP_SECONDS = 120.0
"""How long the last line read is kept for a pod name whose log says nothing new (a pod made again)."""
LOG_TAIL = {"container": "slurmd", "tailLines": 20}
"""A Ready pod whose Slurm node has been missing this long is deleted and made again (drift repair)."""


def is_terminating(pod: Obj) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


class PodSteps:
    """The per-pod steps, on the runtime's shared pod and node caches."""

    def __init__(
        self, runtime: Runtime, slurm: SlurmClients, polls: NodePolls, pods: dict[Key, Obj], nodes: dict[Key, Obj]
    ) -> None:
        self.runtime = runtime
        self.kube = runtime.kube
        self.slurm = slurm
        self.polls = polls
        self.pods = pods
        self.nodes = nodes
        self._quotes: dict[str, tuple[float, str]] = {}
        """<namespace>/<pod name> -> (when read, slurmd's last words)."""

    async def last_words(self, namespace: str, name: str) -> str:
        """slurmd's most telling recent log line (registration.last_words) of pod ``name``, for the
        SlurmdRegistered condition. Read at most every QUOTE_SECONDS per pod name; a pod made again under the name
        (or gone for the moment) keeps the last line read, for QUOTE_KEEP_SECONDS, so the condition does not
        change with each new pod. "" when nothing was ever read."""
        key = f"{namespace}/{name}"
        now = time.monotonic()
        self._quotes = {k: v for k, v in self._quotes.items() if now - v[0] < QUOTE_KEEP_SECONDS}
        cached = self._quotes.get(key)
        if cached is not None and now - cached[0] < QUOTE_SECONDS:
            return cached[1]
        try:
            text = await self.kube.get_text(f"/api/v1/namespaces/{namespace}/pods/{name}/log", LOG_TAIL)
        except KubeError as err:
            logger.debug("log of %s: %s", key, err)
            text = ""
        words = registration.last_words(text)
        if words and not words.startswith("unable to retrieve container logs"):  # a container being replaced
            self._quotes[key] = (now, words)
            return words
        return cached[1] if cached is not None else ""

    def node_of(self, pod: Obj) -> Obj | None:
        """The Kubernetes node the pod runs on (cluster-scoped: cached under namespace "")."""
        return self.nodes.get(("", (pod.get("spec") or {}).get("nodeName") or ""))

    async def slow_start(self, pods: list[Obj]) -> None:
        """Create pods in batches of 1, 2, 4... and stop at the first failure (as kube's SlowStartBatch)."""
        batch, i = 1, 0
        while i < len(pods):
            chunk = pods[i : i + batch]
            results = await asyncio.gather(*(self.create(p) for p in chunk), return_exceptions=True)
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:
                raise failed[0]
            i += len(chunk)
            batch *= 2

    async def create(self, pod: Obj) -> None:
        namespace = pod["metadata"]["namespace"]
        with contextlib.suppress(KubeConflict):  # already exists: the watch has not shown it yet
            await self.kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)
            logger.info("created pod %s/%s", namespace, pod["metadata"]["name"])

    async def delete(self, pod: Obj) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(KubeNotFound, KubeConflict):
            await self.kube.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", uid=meta["uid"])

    async def sync(self, pod: Obj, view: SlurmNodeView | None, *, protect: bool = True) -> None:
        """pod-deadline, pod-protect (unless `workloadDisruptionProtection: false`) and the SlurmNodeState*
        conditions, written only when they change."""
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        with contextlib.suppress(KubeNotFound, KubeConflict):
            if (patch := pod_sync.metadata_patch(pod, view, protect=protect)) is not None:
                patch["metadata"]["uid"] = meta["uid"]
                self.remember(await self.kube.patch(path, patch))
            if (conditions := pod_sync.conditions_patch(pod, view, rfc3339())) is not None:
                body = {"metadata": {"uid": meta["uid"]}, "status": {"conditions": conditions}}
                self.remember(await self.kube.patch(path + "/status", body, "strategic"))

    def remember(self, pod: Obj) -> None:
        """Keep what the apiserver answered, so the next reconcile does not write the same thing again."""
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        current = self.pods.get(key)
        if current is None or int(current["metadata"].get("resourceVersion", 0)) <= int(
            pod["metadata"].get("resourceVersion", 0)
        ):
            self.pods[key] = pod

    async def cordon(self, slurm: SlurmApi, pod: Obj, view: SlurmNodeView | None) -> None:
        """Cordon propagation, Kubernetes -> Slurm (upstream's syncCordon; a foreign reason is never touched)."""
        node = self.node_of(pod)
        action = pod_sync.cordon_action(pod, view, node)
        if action.kind == "none" or view is None:
            return
        try:
            # The poll's view may be a second old: decide again on a fresh read, so an admin's DRAIN that
            # landed meanwhile is never overwritten (one read, only when the step would write).
            fresh = await slurm.get_node(view.name)
            view = view.model_copy(update={"states": list(fresh.state), "reason": fresh.reason})
            action = pod_sync.cordon_action(pod, view, node)
            if action.kind == "none":
                return
            if action.kind == "drain":
                await slurm.drain_node(view.name, action.reason)
                self.event(pod, "Cordoned", f"Slurm node {view.name} drains: {action.reason}")
            else:
                await slurm.resume_node(view.name)
                self.event(pod, "Uncordoned", f"Slurm node {view.name} resumed ({action.why})")
        except SlurmNotFound:
            return
        except SlurmError as err:  # e.g. 2180 "Invalid node state transition" while slurmd re-registers
            logger.warning("cordon step on Slurm node %s: %s (again at the next change)", view.name, err)

    async def repair_drift(self, pod: Obj, poll: ControllerPoll) -> bool:
        """A Running, Ready pod whose Slurm node has been missing for the grace period is deleted (and so made
        again): its slurmd lost its registration (upstream's SlurmNodes step)."""
        name = hostname_of(pod)
        if not poll.synced or name in poll.nodes or not updates.is_ready(pod):
            poll.missing_since.pop(name, None)
            return False
        since = poll.missing_since.setdefault(name, time.monotonic())
        if time.monotonic() - since < DRIFT_GRACE_SECONDS:
            return False
        poll.missing_since.pop(name, None)
        message = f"Slurm node {name} is missing while the pod is Ready: deleting the pod to make it again"
        logger.warning("%s/%s: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], message)
        self.event(pod, "SlurmNodeMissing", message, "Warning")
        await self.delete(pod)
        return True

    async def forget_deleted(self, pod: Obj) -> None:
        """A NodeSet pod is gone for good (its containers stopped): delete its Slurm node unless a new pod of the
        same name runs or the node may not be forgotten (slurm_state.forgettable). This catches what a preStop
        leaves: a slurmd that re-registered while stopping, a NodeSet or a pod deleted by hand."""
        key = scale_in_key(pod)
        controller = ControllerKey(namespace=key[0], name=key[1])
        if not key[1] or (key[0], key[1]) not in self.polls.polls:
            return
        replaced = any(scale_in_key(p) == key and not is_terminating(p) for p in self.pods.values())
        try:
            slurm = await self.slurm.client(controller)
            node = await slurm.get_node(key[2])
            if slurm_state.forgettable(node.state, node.reason, replaced=replaced):
                await slurm.delete_node(key[2])
                logger.info("deleted Slurm node %s: its pod %s/%s is gone", key[2], key[0], pod["metadata"]["name"])
        except (SlurmNotFound, ControllerProblem):
            return
        except (SlurmError, KubeError) as err:
            logger.warning("could not forget Slurm node %s of a deleted pod: %s", key[2], err)

    def event(self, pod: Obj, reason: str, message: str, type_: str = "Normal") -> None:
        meta = pod["metadata"]
        event = pod_event(meta["namespace"], meta["name"], meta["uid"], reason, message, type_)
        event["source"] = {"component": COMPONENT}
        event["reportingComponent"] = COMPONENT
        self.runtime.events.record(event)
