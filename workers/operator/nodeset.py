"""The NodeSet reconciler: level-triggered from Kubernetes watches and one shared Slurm node poll.

Inputs, each feeding one per-object work queue (a NodeSet is reconciled by one worker at a time; a failing
one is retried with its own backoff and never blocks the others):

* a watch on NodeSets, and one on NodeSet pods (label `app.kubernetes.io/name=slurmd`);
* one Slurm node poll per Controller (`GET nodes`, every `node_poll_seconds`), shared by every NodeSet and
  every scale-in of that Controller: a node that changed wakes its NodeSet and signals its scale-in workflow.

Reconcile (StatefulSet mode): delete failed pods; create the missing ordinals (lowest first, slow-start
batches); condemn the extra pods in upstream's order and start one `NodeSetScaleInWorkflow` each (its ID comes
from the pod UID, so a restart starts nothing twice); tell a scale-in whose pod is wanted again to `keep` it;
write the status (replica and Slurm counts, selector, revision) and the `SpecValid` and `ControllerReady`
conditions. A problem becomes a condition and a Warning Event naming what to fix (docs/operator.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from slinky import wellknown
from slinky.clients.errors import KubeConflict, KubeError, KubeNotFound, KubeRejected, SlurmError, SlurmNotFound
from slinky.clients.events import EventRecorder, pod_event
from slinky.clients.kube import KubeClient, rfc3339
from slinky.clients.slurm import SlurmApi
from slinky.operator import daemonset, pod_sync, slurm_state, updates, victims
from slinky.operator import pods as builder
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.models import ControllerKey, PodRef, ScaleInInput, SlurmNodeView
from slinky.operator.validation import nodeset_problems, not_built
from workers.operator.scoping import replace_synced, watch_paths
from workers.operator.slurm_clients import ControllerProblem, SlurmClients
from workers.operator.workqueue import Key, WorkQueue
from workflows.nodeset import NodeSetScaleInWorkflow, workflow_id

logger = logging.getLogger(__name__)
Obj = dict[str, Any]

NODESETS = "/apis/slinky.slurm.net/v1beta1/nodesets"
PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
CONTROLLER_RETRY_SECONDS = 2.0
DRIFT_GRACE_SECONDS = 15.0
"""A Ready pod whose Slurm node has been missing this long is deleted and made again (drift repair)."""
POD_SELECTOR = f"{wellknown.LABEL_APP}={wellknown.APP_SLURMD}"
COMPONENT = "slurm-operator"
START_OPTIONS: dict[str, Any] = {
    "id_conflict_policy": WorkflowIDConflictPolicy.USE_EXISTING,
    "id_reuse_policy": WorkflowIDReusePolicy.ALLOW_DUPLICATE,
}
"""A running scale-in of the pod is joined (a restart starts nothing twice); a closed one (kept, because the
NodeSet was scaled back up) may run again when the pod is condemned again."""


def nodeset_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/apis/slinky.slurm.net/v1beta1/namespaces/{namespace}/nodesets/{name}"
    return f"{path}/{sub}" if sub else path


def owner_of(pod: Obj) -> Key | None:
    for ref in pod.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == "NodeSet" and ref.get("controller"):
            return (pod["metadata"]["namespace"], ref["name"])
    return None


def is_terminating(pod: Obj) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in pod.get("status", {}).get("conditions") or []
    )


def scale_in_key(pod: Obj) -> tuple[str, str, str]:
    """(namespace, Controller, Slurm node name) of a NodeSet pod: the node poll that may signal its scale-in."""
    meta = pod["metadata"]
    return (meta["namespace"], (meta.get("labels") or {}).get(wellknown.LABEL_CLUSTER, ""), hostname_of(pod))


def _placement_view(node: Obj) -> tuple[Any, Any, Any]:
    """What decides whether a DaemonSet-mode pod belongs on the node."""
    meta = node["metadata"]
    return (
        meta.get("labels"),
        (node.get("spec") or {}).get("taints"),
        (meta.get("annotations") or {}).get(wellknown.ANNOTATION_NODE_HOSTNAME_OVERRIDE),
    )


def _cordon_view(node: Obj) -> tuple[Any, Any]:
    return (
        (node.get("spec") or {}).get("unschedulable"),
        (node["metadata"].get("annotations") or {}).get(wellknown.ANNOTATION_NODE_CORDON_REASON),
    )


def hostname_of(pod: Obj) -> str:
    return str(pod.get("spec", {}).get("hostname") or pod["metadata"]["name"])


@dataclass
class ControllerPoll:
    """The node view of one Controller's Slurm, refreshed by one poll loop."""

    nodes: dict[str, SlurmNodeView] = field(default_factory=dict)
    synced: bool = False
    error: str = ""
    polls: int = 0
    job_lists: int = 0
    missing_since: dict[str, float] = field(default_factory=dict)
    """NodeSet pod hostnames absent from Slurm, since when (monotonic): drift repair waits a grace period."""


class NodeSetController:
    """Watches, the node polls, the work queue and the reconcile."""

    def __init__(
        self,
        kube: KubeClient,
        slurm: SlurmClients,
        temporal: Client,
        events: EventRecorder,
        *,
        task_queue: str,
        node_poll_seconds: float = 1.0,
        fallback_seconds: float = 60.0,
        workers: int = 4,
        namespaces: Sequence[str] = (),
    ) -> None:
        self.kube = kube
        self.namespaces = tuple(namespaces)
        self.slurm = slurm
        self.temporal = temporal
        self.events = events
        self.task_queue = task_queue
        self.node_poll_seconds = node_poll_seconds
        self.fallback_seconds = fallback_seconds
        self.workers = workers
        self.queue = WorkQueue()
        self.nodesets: dict[Key, Obj] = {}
        self.pods: dict[Key, Obj] = {}
        self.kube_nodes: dict[str, Obj] = {}
        self.polls: dict[Key, ControllerPoll] = {}
        self._poll_tasks: dict[Key, asyncio.Task[None]] = {}
        self._pdbs: set[Key] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._conditions_seen: dict[tuple[Key, str], str] = {}
        self.synced = asyncio.Event()
        """Set once the NodeSets were listed (bench/operator.py waits for it)."""

    @property
    def reconciles(self) -> int:
        """NodeSet reconciles so far (the work queue counts them)."""
        return self.queue.runs

    # ------------------------------------------------------------------------------------ run
    async def run(self) -> None:
        tasks = [
            *(
                asyncio.create_task(self._watch_nodesets(ns, path), name=f"watch-nodesets-{ns or 'all'}")
                for ns, path in watch_paths(NODESETS, self.namespaces)
            ),
            *(
                asyncio.create_task(self._watch_pods(ns, path), name=f"watch-nodeset-pods-{ns or 'all'}")
                for ns, path in watch_paths(PODS, self.namespaces)
            ),
            asyncio.create_task(self._watch_nodes(), name="watch-kube-nodes"),
            *(
                asyncio.create_task(self.queue.serve(self.reconcile, "NodeSet"), name=f"nodeset-worker-{i}")
                for i in range(self.workers)
            ),
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in [*tasks, *self._poll_tasks.values(), *self._background]:
                task.cancel()
            for task in [*tasks, *self._poll_tasks.values(), *self._background]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _watch_nodesets(self, namespace: str | None, path: str) -> None:
        async for kind, obj in self.kube.list_watch(path):
            if kind == "SYNC":
                replace_synced(self.nodesets, obj["items"], namespace)
                for key in self.nodesets:
                    if namespace is None or key[0] == namespace:
                        self.queue.add(key)
                self.synced.set()
                continue
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if kind == "DELETED":
                self.nodesets.pop(key, None)
            else:
                self.nodesets[key] = obj
                self.queue.add(key)

    async def _watch_pods(self, namespace: str | None, path: str) -> None:
        async for kind, obj in self.kube.list_watch(path, {"labelSelector": POD_SELECTOR}):
            if kind == "SYNC":
                replace_synced(self.pods, obj["items"], namespace)
                for pod in obj["items"]:
                    if owner := owner_of(pod):
                        self.queue.add(owner)
                continue
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if kind == "DELETED":
                self.pods.pop(key, None)
                if wf := updates.held_by(obj):
                    self._spawn(self._signal(wf, "pod_gone"))
                self._spawn(self._forget_deleted(obj))
            else:
                self.pods[key] = obj
            if owner := owner_of(obj):
                self.queue.add(owner)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _forget_deleted(self, pod: Obj) -> None:
        """A NodeSet pod is gone for good (its containers stopped): delete its Slurm node unless a new pod of the
        same name runs or the node may not be forgotten (slurm_state.forgettable). This catches what a preStop
        leaves: a slurmd that re-registered while stopping, a NodeSet or a pod deleted by hand."""
        key = scale_in_key(pod)
        controller = ControllerKey(namespace=key[0], name=key[1])
        if not key[1] or (key[0], key[1]) not in self.polls:
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

    async def _watch_nodes(self) -> None:
        """Kubernetes nodes: a (un)cordoned node requeues the NodeSets with pods on it (cordon propagation); a
        node that comes, goes or changes labels or taints requeues every DaemonSet-mode NodeSet."""
        async for kind, obj in self.kube.list_watch(NODES):
            if kind == "SYNC":
                self.kube_nodes = {o["metadata"]["name"]: o for o in obj["items"]}
                self._queue_daemonsets()
                continue
            name = obj["metadata"]["name"]
            before = self.kube_nodes.get(name)
            if kind == "DELETED":
                self.kube_nodes.pop(name, None)
            else:
                self.kube_nodes[name] = obj
            if before is None or kind == "DELETED" or _placement_view(before) != _placement_view(obj):
                self._queue_daemonsets()
            if before is not None and kind != "DELETED" and _cordon_view(before) == _cordon_view(obj):
                continue
            for pod in self.pods.values():
                if (pod.get("spec") or {}).get("nodeName") == name and (owner := owner_of(pod)):
                    self.queue.add(owner)

    def _queue_daemonsets(self) -> None:
        for key, raw in self.nodesets.items():
            if (raw.get("spec") or {}).get("scalingMode") == "DaemonSet":
                self.queue.add(key)

    # ------------------------------------------------------------------------------------ node poll
    def _ensure_poll(self, controller: ControllerKey) -> ControllerPoll:
        key = (controller.namespace, controller.name)
        if key not in self.polls:
            self.polls[key] = ControllerPoll()
            self._poll_tasks[key] = asyncio.create_task(self._poll(controller), name=f"node-poll-{key[1]}")
        return self.polls[key]

    async def _poll(self, controller: ControllerKey) -> None:
        state = self.polls[(controller.namespace, controller.name)]
        while True:
            started = time.monotonic()
            try:
                slurm = await self.slurm.client(controller)
                listed = await slurm.list_nodes()
                state.polls += 1
                ours = self._hostnames(controller)
                jobs: dict[str, slurm_state.NodeJobs] = {}
                # The job list only while a node of ours is busy (or was, to see its jobs end): idle, one call.
                if any(n.name in ours and slurm_state.is_busy(n.state) for n in listed) or any(
                    v.jobs for v in state.nodes.values()
                ):
                    jobs = slurm_state.jobs_by_node((await slurm.list_jobs()).jobs)
                    state.job_lists += 1
                fresh = {}
                for n in listed:
                    held = jobs.get(n.name) if n.name in ours else None
                    fresh[n.name] = SlurmNodeView(
                        name=n.name,
                        states=list(n.state),
                        reason=n.reason,
                        jobs=held.ids if held else [],
                        deadline=held.deadline_text() if held else "",
                    )
                changed = [n for n in fresh if n not in state.nodes or state.nodes[n] != fresh[n]]
                vanished = [n for n in state.nodes if n not in fresh]
                state.nodes, state.synced, state.error = fresh, True, ""
                await self._node_changes(controller, changed, vanished, fresh)
            except (SlurmError, ControllerProblem, KubeError) as err:
                state.error = str(err)
            await asyncio.sleep(max(self.node_poll_seconds - (time.monotonic() - started), 0.05))

    async def _node_changes(
        self, controller: ControllerKey, changed: list[str], vanished: list[str], fresh: dict[str, SlurmNodeView]
    ) -> None:
        """Wake the NodeSets of the pods on changed nodes, and signal each scale-in that holds one of this
        Controller's pods (found on the pod: a restarted operator signals the scale-ins it did not start; a
        node `cpu-0` of another Controller is never mistaken for it)."""
        touched = {name: fresh[name] for name in changed}
        touched.update({name: SlurmNodeView(name=name, exists=False) for name in vanished})
        if not touched:
            return
        for pod in list(self.pods.values()):
            view = touched.get(hostname_of(pod))
            if view is None:
                continue
            if owner := owner_of(pod):
                self.queue.add(owner)
            if (wf := updates.held_by(pod)) and scale_in_key(pod)[:2] == (controller.namespace, controller.name):
                await self._signal(wf, "node_state", view)

    def _hostnames(self, controller: ControllerKey) -> set[str]:
        """The Slurm node names of the NodeSet pods of this Controller."""
        return {
            hostname_of(p)
            for p in self.pods.values()
            if p["metadata"]["namespace"] == controller.namespace
            and p["metadata"].get("labels", {}).get(wellknown.LABEL_CLUSTER) == controller.name
        }

    async def _signal(self, wf: str, signal: str, arg: Any = None) -> None:
        """Signal a scale-in; one that already ended (or a Temporal hiccup) is left to its fallback check."""
        handle: WorkflowHandle[Any, Any] = self.temporal.get_workflow_handle(wf)
        with contextlib.suppress(RPCError):
            if arg is None:
                await handle.signal(signal)
            else:
                await handle.signal(signal, arg)

    # ------------------------------------------------------------------------------------ reconcile
    async def reconcile(self, key: Key) -> None:
        raw = self.nodesets.get(key)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            return  # being deleted: the garbage collector takes its pods; making new ones would fight it
        nodeset = NodeSet.model_validate(raw)
        problems = nodeset_problems(nodeset)
        if problems:
            first = problems[0]
            message = "; ".join(p.message for p in problems)
            await self._status(key, nodeset, [], condition=("SpecValid", "False", first.reason, message))
            return
        controller = ControllerKey(namespace=key[0], name=nodeset.spec.controller_ref.name)
        try:
            ctl = await self.slurm.controller(controller)
            await self.slurm.client(controller)
        except ControllerProblem as err:
            await self._status(
                key, nodeset, self._owned(key, raw), condition=("ControllerReady", "False", err.reason, str(err))
            )
            # Nothing watched here says when it is fixed (a Controller, its key Secret, a RestApi's pod): look again.
            self.queue.add_later(key, CONTROLLER_RETRY_SECONDS)
            return
        poll = self._ensure_poll(controller)
        if not poll.synced and not poll.error:
            self.queue.add_later(key, 0.2)  # no decision on an unread Slurm (upstream's RefreshNodeCache)
            return
        if poll.error:
            await self._status(
                key,
                nodeset,
                self._owned(key, raw),
                condition=("ControllerReady", "False", "SlurmUnreachable", f"slurmrestd: {poll.error}"),
            )
            self.queue.add_later(key, 2.0)
            return
        await self._sync(key, raw, nodeset, controller, ctl, poll)

    async def _sync(
        self, key: Key, raw: Obj, nodeset: NodeSet, controller: ControllerKey, ctl: Any, poll: ControllerPoll
    ) -> None:
        """Scale, update, keep each pod in step with its Slurm node, then write the status."""
        key_ref = ctl.spec.slurm_key_ref
        slurm_key = f"{key_ref.name}/{key_ref.key}" if key_ref is not None and key_ref.name else ""
        revision = builder.revision_hash(nodeset, builder.conf_server(ctl), slurm_key)
        owned = self._owned(key, raw)
        for pod in owned:
            if pod.get("status", {}).get("phase") in ("Failed", "Succeeded") and not is_terminating(pod):
                await self._delete_pod(pod)
        active = [
            p
            for p in owned
            if not is_terminating(p) and p.get("status", {}).get("phase") not in ("Failed", "Succeeded")
        ]
        await self._ensure_pdb(controller)
        # Pods of the other scaling mode go (through the same drain), as upstream does on a mode change.
        mode = nodeset.spec.scaling_mode
        stale = [p for p in active if p["metadata"].get("labels", {}).get(wellknown.LABEL_NODESET_SCALING_MODE) != mode]
        current = [p for p in active if p not in stale]
        missing_nodes: list[Obj] = []
        if mode == "DaemonSet":
            missing_nodes, extra = daemonset.plan(nodeset, list(self.kube_nodes.values()), current)
            desired = len(current) - len(extra) + len(missing_nodes)
            scale_in = [*stale, *extra]
        else:
            desired = nodeset.spec.replicas if nodeset.spec.replicas is not None else 1
            scale_in = [*stale, *victims.condemned(current, desired, self._node_cordoned(current))]
        held = await self._condemn(nodeset, controller, active, scale_in, desired, revision)
        slurm = await self.slurm.client(controller)
        for pod in active:
            view = poll.nodes.get(hostname_of(pod))
            await self._sync_pod(pod, view, protect=nodeset.spec.workload_disruption_protection)
            if pod["metadata"]["uid"] not in held:  # a scale-in workflow drains it, and undrains it if kept
                await self._cordon(slurm, pod, view)
                await self._repair_drift(pod, poll)
        try:
            if mode == "DaemonSet":
                await self._slow_start([builder.build_daemon_pod(nodeset, ctl, n, revision) for n in missing_nodes])
            elif (missing := desired - len(current)) > 0:
                # A terminating pod's ordinal is free: its name is made again once it is gone (the watch's DELETED
                # event requeues), so the new pod's slurmd takes over the same Slurm node name, as a StatefulSet's.
                used = {o for p in current if (o := builder.ordinal_of(key[1], p["metadata"]["name"])) is not None}
                ordinals = builder.free_ordinals(used, missing)
                pins = self._pins(nodeset, raw, active) if nodeset.spec.pin_to_node else {}
                await self._slow_start(
                    [builder.build_pod(nodeset, ctl, o, revision, pin=pins.get(str(o))) for o in ordinals]
                )
        except KubeRejected as err:  # the apiserver refuses the pod the spec makes: say which field
            message = f"the pod this spec makes is refused: {err}"
            await self._status(key, nodeset, owned, condition=("SpecValid", "False", "FailedCreate", message))
            return
        if poll.missing_since:
            self.queue.add_later(key, DRIFT_GRACE_SECONDS / 2)
        await self._status(
            key,
            nodeset,
            self._owned(key, raw),
            revision=revision,
            poll=poll,
            condition=("ControllerReady", "True", "Reachable", "slurmrestd answers"),
            desired=desired,
        )

    def _pins(self, nodeset: NodeSet, raw: Obj, pods: list[Obj]) -> dict[str, str]:
        previous = (raw.get("status") or {}).get("ordinalToNode") or {}
        return builder.ordinal_to_node(nodeset, pods, previous, set(self.kube_nodes))

    def _node_cordoned(self, pods: list[Obj]) -> frozenset[str]:
        """Uids of the pods whose Kubernetes node is cordoned (they count as cordoned in the scale-in order)."""
        return frozenset(
            p["metadata"]["uid"]
            for p in pods
            if pod_sync.node_cordoned(self.kube_nodes.get((p.get("spec") or {}).get("nodeName") or ""))
        )

    async def _condemn(
        self,
        nodeset: NodeSet,
        controller: ControllerKey,
        active: list[Obj],
        scale_in: list[Obj],
        desired: int,
        revision: str,
    ) -> set[str]:
        """Start (or join) a scale-in workflow for each pod to remove (`scale_in`, then the rolling update's);
        tell the scale-ins of pods wanted again to keep them. Returns the uids a scale-in holds."""
        gone = {p["metadata"]["uid"] for p in scale_in}
        update = updates.update_victims(
            nodeset, [p for p in active if p["metadata"]["uid"] not in gone], revision, desired
        )
        condemned = [(p, "scale-in") for p in scale_in] + [(p, "update") for p in update]
        uids = {p["metadata"]["uid"] for p, _ in condemned}
        held = set(uids)
        for pod in active:
            if pod["metadata"]["uid"] not in uids and updates.in_flight(pod):
                await self._keep(pod)  # its workflow undrains and uncordons it; until then it is the workflow's
                held.add(pod["metadata"]["uid"])
        for pod, cause in condemned:
            await self._scale_in(nodeset, controller, pod, cause)
        return held

    def _owned(self, key: Key, raw: Obj) -> list[Obj]:
        uid = raw["metadata"].get("uid")
        out = []
        for pod in self.pods.values():
            if owner_of(pod) != key:
                continue
            refs = pod["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == uid for r in refs):
                out.append(pod)
        return out

    async def _slow_start(self, pods: list[Obj]) -> None:
        """Create pods in batches of 1, 2, 4... and stop at the first failure (as kube's SlowStartBatch)."""
        batch, i = 1, 0
        while i < len(pods):
            chunk = pods[i : i + batch]
            results = await asyncio.gather(*(self._create_pod(p) for p in chunk), return_exceptions=True)
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:
                raise failed[0]
            i += len(chunk)
            batch *= 2

    async def _create_pod(self, pod: Obj) -> None:
        namespace = pod["metadata"]["namespace"]
        with contextlib.suppress(KubeConflict):  # already exists: the watch has not shown it yet
            await self.kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)
            logger.info("created pod %s/%s", namespace, pod["metadata"]["name"])

    async def _delete_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(KubeNotFound, KubeConflict):
            await self.kube.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", uid=meta["uid"])

    async def _scale_in(self, nodeset: NodeSet, controller: ControllerKey, pod: Obj, cause: str) -> None:
        meta = pod["metadata"]
        ref = PodRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
        node = hostname_of(pod)
        wf = workflow_id(ref.namespace, ref.name, ref.uid)
        inp = ScaleInInput(
            pod=ref,
            nodeset=str(nodeset.metadata.get("name")),
            node=node,
            controller=controller,
            cause=cause,
            fallback_check_seconds=self.fallback_seconds,
        )
        await self.temporal.start_workflow(
            NodeSetScaleInWorkflow.run, inp, id=wf, task_queue=self.task_queue, **START_OPTIONS
        )

    async def _keep(self, pod: Obj) -> None:
        """The pod is wanted again: its scale-in undrains and uncordons it. A scale-in that is no longer running
        (terminated by hand) left its annotations behind: take them off here; the cordon step then undrains."""
        meta = pod["metadata"]
        wf = (meta.get("annotations") or {}).get(wellknown.ANNOTATION_SCALE_IN_WORKFLOW) or workflow_id(
            meta["namespace"], meta["name"], meta["uid"]
        )
        handle: WorkflowHandle[Any, Any] = self.temporal.get_workflow_handle(wf)
        try:
            await handle.signal("keep")
            return
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        logger.info("scale-in %s of %s/%s is not running: uncordoning the pod", wf, meta["namespace"], meta["name"])
        with contextlib.suppress(KubeNotFound, KubeConflict):
            await self.kube.patch(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {
                    "metadata": {
                        "uid": meta["uid"],
                        "annotations": {
                            wellknown.ANNOTATION_POD_CORDON: None,
                            wellknown.ANNOTATION_SCALE_IN_WORKFLOW: None,
                        },
                    }
                },
            )

    # ------------------------------------------------------------------------------------ per pod
    async def _sync_pod(self, pod: Obj, view: SlurmNodeView | None, *, protect: bool = True) -> None:
        """pod-deadline, pod-protect (unless `workloadDisruptionProtection: false`) and the SlurmNodeState*
        conditions, written only when they change."""
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        with contextlib.suppress(KubeNotFound, KubeConflict):
            if (patch := pod_sync.metadata_patch(pod, view, protect=protect)) is not None:
                patch["metadata"]["uid"] = meta["uid"]
                self._remember(await self.kube.patch(path, patch))
            if (conditions := pod_sync.conditions_patch(pod, view, rfc3339())) is not None:
                body = {"metadata": {"uid": meta["uid"]}, "status": {"conditions": conditions}}
                self._remember(await self.kube.patch(path + "/status", body, "strategic"))

    def _remember(self, pod: Obj) -> None:
        """Keep what the apiserver answered, so the next reconcile does not write the same thing again."""
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        current = self.pods.get(key)
        if current is None or int(current["metadata"].get("resourceVersion", 0)) <= int(
            pod["metadata"].get("resourceVersion", 0)
        ):
            self.pods[key] = pod

    async def _cordon(self, slurm: SlurmApi, pod: Obj, view: SlurmNodeView | None) -> None:
        """Cordon propagation, Kubernetes -> Slurm (upstream's syncCordon; a foreign reason is never touched)."""
        node = self.kube_nodes.get((pod.get("spec") or {}).get("nodeName") or "")
        action = pod_sync.cordon_action(pod, view, node)
        if action.kind == "none" or view is None:
            return
        try:
            # The poll's view may be a second old: decide again on a fresh read, so an admin's DRAIN that
            # landed meanwhile is never overwritten (one read, only when the step would write).
            fresh = await slurm.get_node(view.name)
            view = SlurmNodeView(name=view.name, states=list(fresh.state), reason=fresh.reason, jobs=view.jobs)
            action = pod_sync.cordon_action(pod, view, node)
            if action.kind == "none":
                return
            if action.kind == "drain":
                await slurm.drain_node(view.name, action.reason)
                self._pod_event(pod, "Cordoned", f"Slurm node {view.name} drains: {action.reason}")
            else:
                await slurm.resume_node(view.name)
                self._pod_event(pod, "Uncordoned", f"Slurm node {view.name} resumed ({action.why})")
        except SlurmNotFound:
            return
        except SlurmError as err:  # e.g. 2180 "Invalid node state transition" while slurmd re-registers
            logger.warning("cordon step on Slurm node %s: %s (again at the next change)", view.name, err)

    async def _repair_drift(self, pod: Obj, poll: ControllerPoll) -> bool:
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
        self._pod_event(pod, "SlurmNodeMissing", message, "Warning")
        await self._delete_pod(pod)
        return True

    def _pod_event(self, pod: Obj, reason: str, message: str, type_: str = "Normal") -> None:
        meta = pod["metadata"]
        event = pod_event(meta["namespace"], meta["name"], meta["uid"], reason, message, type_)
        event["source"] = {"component": COMPONENT}
        event["reportingComponent"] = COMPONENT
        self.events.record(event)

    async def _ensure_pdb(self, controller: ControllerKey) -> None:
        """The shared PodDisruptionBudget of a Controller's NodeSet pods: `maxUnavailable: 0` over the pods
        labelled `pod-protect` (a job runs on their node), so an eviction waits for the job."""
        key = (controller.namespace, controller.name)
        if key in self._pdbs:
            return
        body = builder.workers_pdb(controller.namespace, controller.name)
        with contextlib.suppress(KubeConflict):
            await self.kube.create(f"/apis/policy/v1beta1/namespaces/{controller.namespace}/poddisruptionbudgets", body)
        self._pdbs.add(key)

    # ------------------------------------------------------------------------------------ status
    async def _status(
        self,
        key: Key,
        nodeset: NodeSet,
        owned: Iterable[Obj],
        *,
        revision: str = "",
        poll: ControllerPoll | None = None,
        condition: tuple[str, str, str, str] | None = None,
        desired: int | None = None,
    ) -> None:
        live = [p for p in owned if not is_terminating(p)]
        nodes = poll.nodes if poll else {}
        extra = []
        if poll is not None:
            held = [(p["metadata"]["name"], nodes.get(hostname_of(p))) for p in live if updates.in_flight(p)]
            extra.append(pod_sync.scale_in_condition(held))
            ignored = not_built(nodeset)
            extra.append(
                ("FieldsSupported", "False", "NotBuilt", "ignored: " + "; ".join(ignored))
                if ignored
                else ("FieldsSupported", "True", "Supported", "every field set is reconciled")
            )
        states = [nodes[h].states for p in live if (h := hostname_of(p)) in nodes]
        status: Obj = {
            "replicas": len(live),
            "readyReplicas": sum(1 for p in live if is_ready(p)),
            "availableReplicas": sum(1 for p in live if is_ready(p)),
            "updatedReplicas": sum(
                1
                for p in live
                if revision
                and p["metadata"].get("labels", {}).get(wellknown.LABEL_CONTROLLER_REVISION_HASH) == revision
            ),
            "desired": desired
            if desired is not None
            else (nodeset.spec.replicas if nodeset.spec.replicas is not None else 1),
            "selector": builder.selector_string(nodeset),
            "observedGeneration": nodeset.metadata.get("generation", 0),
            **slurm_state.counts(states),
        }
        status["unavailableReplicas"] = max(status["desired"] - status["readyReplicas"], 0)
        if revision:
            status["nodeSetHash"] = revision
        if nodeset.spec.pin_to_node and nodeset.spec.scaling_mode == "StatefulSet":
            status["ordinalToNode"] = self._pins(nodeset, self.nodesets.get(key, {}), live)
        conditions = self._conditions(key, nodeset, condition, extra)
        if conditions is not None:
            status["conditions"] = conditions
        current = self.nodesets.get(key, {}).get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        with contextlib.suppress(KubeNotFound):
            await self.kube.patch(nodeset_path(key[0], key[1], "status"), {"status": status})

    def _conditions(
        self,
        key: Key,
        nodeset: NodeSet,
        condition: tuple[str, str, str, str] | None,
        extra: list[tuple[str, str, str, str]] | None = None,
    ) -> list[Obj] | None:
        """The NodeSet's conditions with `condition` (and `extra`, informational) set, each keeping its time
        while its status does not change; a problem condition that turns False posts a Warning Event."""
        old = list((self.nodesets.get(key, {}).get("status") or {}).get("conditions") or [])
        wanted: list[tuple[str, str, str, str]] = list(extra or [])
        if condition:
            wanted.append(condition)
            if condition[0] == "ControllerReady" or condition[1] == "True":
                wanted.append(("SpecValid", "True", "Valid", "the spec is valid"))
        if not wanted:
            return None
        by_type = {c["type"]: c for c in old}
        for type_, status, reason, message in wanted:
            prev = by_type.get(type_)
            changed = prev is None or prev.get("status") != status or prev.get("reason") != reason
            by_type[type_] = {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message[:32768],
                "lastTransitionTime": prev["lastTransitionTime"] if prev and not changed else rfc3339(),
                "observedGeneration": nodeset.metadata.get("generation", 0),
            }
            seen_key = (key, type_)
            if type_ == pod_sync.SCALE_IN_CONDITION:
                continue
            if status == "False" and self._conditions_seen.get(seen_key) != f"{reason}:{message}":
                self._event(key, nodeset, reason, message)
            self._conditions_seen[seen_key] = f"{reason}:{message}" if status == "False" else ""
        return sorted(by_type.values(), key=lambda c: c["type"])

    def _event(self, key: Key, nodeset: NodeSet, reason: str, message: str) -> None:
        self.events.record(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{key[1]}.", "namespace": key[0]},
                "involvedObject": {
                    "apiVersion": "slinky.slurm.net/v1beta1",
                    "kind": "NodeSet",
                    "namespace": key[0],
                    "name": key[1],
                    "uid": nodeset.metadata.get("uid", ""),
                },
                "reason": reason,
                "message": message[:1024],
                "type": "Warning",
                "source": {"component": COMPONENT},
                "firstTimestamp": rfc3339(),
                "lastTimestamp": rfc3339(),
                "reportingComponent": COMPONENT,
                "count": 1,
            }
        )
