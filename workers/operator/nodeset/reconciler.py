"""The NodeSet reconciler: level-triggered from the runtime's watches and one shared Slurm node poll.

It runs on the operator's controller runtime, whose work queue reconciles a NodeSet on one worker at a time (a
failing one is retried with its own backoff and never blocks the others). Inputs:

* the watch on NodeSets, and one on NodeSet pods (label `app.kubernetes.io/name=slurmd`): a pod's event wakes
  its NodeSet, and a deleted pod signals its scale-in (`pod_gone`) and forgets its Slurm node (``pods``);
* the watch on Kubernetes nodes: a (un)cordoned node wakes the NodeSets with pods on it (cordon propagation),
  a node that comes, goes or changes labels or taints wakes every DaemonSet-mode NodeSet;
* one Slurm node poll per Controller (``poll``), shared by every NodeSet and every scale-in of that
  Controller: a node that changed wakes its NodeSet and signals its scale-in workflow.

Reconcile (StatefulSet mode): delete failed pods; create the missing ordinals (lowest first, slow-start
batches); condemn the extra pods in upstream's order and start one `NodeSetScaleInWorkflow` each (its ID comes
from the pod UID, so a restart starts nothing twice); tell a scale-in whose pod is wanted again to `keep` it;
keep each pod in step with its Slurm node (``pods``); write the status (``status``). A problem becomes a
condition and a Warning Event naming what to fix (docs/operator.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from slinky import wellknown
from slinky.clients.errors import KubeConflict, KubeNotFound, KubeRejected, SlurmNotFound
from slinky.operator import daemonset, pod_sync, registration, updates, victims
from slinky.operator import pods as builder
from slinky.operator import scheduled_update as su
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.models import ControllerKey, PodRef, ScaleInCause, ScaleInInput
from slinky.operator.validation import nodeset_problems
from workers.operator.apply import ensure
from workers.operator.nodeset.claims import CLAIMS, Claims, owner_of_claim
from workers.operator.nodeset.pods import DRIFT_GRACE_SECONDS, PodSteps, is_terminating
from workers.operator.nodeset.poll import ControllerPoll, NodePolls, hostname_of, owner_of
from workers.operator.nodeset.scheduled import STOP_CHECK_SECONDS, ScheduledUpdates
from workers.operator.nodeset.status import Condition, write_status
from workers.operator.runtime import Runtime, Watch
from workers.operator.slurm_clients import ControllerProblem, SlurmClients
from workers.operator.workqueue import Key
from workflows.nodeset import NodeSetScaleInWorkflow, workflow_id

logger = logging.getLogger(__name__)
Obj = dict[str, Any]

NODESETS = "/apis/slinky.slurm.net/v1beta1/nodesets"
PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
POD_SELECTOR = f"{wellknown.LABEL_APP}={wellknown.APP_SLURMD}"
CONTROLLER_RETRY_SECONDS = 2.0
START_OPTIONS: dict[str, Any] = {
    "id_conflict_policy": WorkflowIDConflictPolicy.USE_EXISTING,
    "id_reuse_policy": WorkflowIDReusePolicy.ALLOW_DUPLICATE,
}
"""A running scale-in of the pod is joined (a restart starts nothing twice); a closed one (kept, because the
NodeSet was scaled back up) may run again when the pod is condemned again."""


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


class NodeSetReconciler:
    kind = "NodeSet"
    primary = NODESETS

    def __init__(
        self,
        runtime: Runtime,
        slurm: SlurmClients,
        temporal: Client,
        *,
        task_queue: str,
        node_poll_seconds: float = 1.0,
        metrics_poll_seconds: float = 0.0,
        fallback_seconds: float = 60.0,
        registration_grace: float = registration.GRACE_SECONDS,
    ) -> None:
        self.runtime = runtime
        self.kube = runtime.kube
        self.slurm = slurm
        self.temporal = temporal
        self.task_queue = task_queue
        self.fallback_seconds = fallback_seconds
        self.registration_grace = registration_grace
        pods = Watch(PODS, label_selector=POD_SELECTOR, on_change=self._pod_changed)
        claims = Watch(CLAIMS, label_selector=POD_SELECTOR, keys=lambda c: [k] if (k := owner_of_claim(c)) else [])
        nodes = Watch(NODES, cluster_scoped=True, on_change=self._node_changed)
        self.watches: Sequence[Watch] = (pods, nodes, claims)
        self.nodesets = runtime.caches.of(NODESETS)
        self.pods = runtime.caches.of(pods.collection)
        self.kube_nodes = runtime.caches.of(NODES)
        self.node_polls = NodePolls(
            runtime,
            slurm,
            temporal,
            self.pods,
            self.wake,
            interval=node_poll_seconds,
            metrics_interval=metrics_poll_seconds,
            partitions=self.partitions_of,
        )
        self.steps = PodSteps(runtime, slurm, self.node_polls, self.pods, self.kube_nodes)
        self.scheduled = ScheduledUpdates(self.kube, slurm, temporal, task_queue)
        self.claims = Claims(self.kube, runtime.caches.of(claims.collection))
        self._pdbs: set[Key] = set()
        self._unregistered: dict[Key, dict[str, tuple[float, float, str]]] = {}
        """Per NodeSet: Slurm node name -> (since, last seen) its running slurmd has not registered (monotonic)."""

    # ------------------------------------------------------------------------------------ what the rest reads
    @property
    def polls(self) -> dict[Key, ControllerPoll]:
        """The shared Slurm poll of each Controller (the operator's metrics and bench/operator.py read them)."""
        return self.node_polls.polls

    @property
    def synced(self) -> asyncio.Event:
        """Set once the NodeSets were listed (bench/operator.py waits for it)."""
        return self.runtime.synced(NODESETS)

    @property
    def reconciles(self) -> int:
        return self.runtime.queues[self.kind].runs

    def partitions_of(self, controller: ControllerKey) -> dict[str, str]:
        """{Slurm partition: NodeSet} of the Controller's NodeSets (a NodeSet's partition is its Slurm name)."""
        out = {}
        for (ns, name), raw in sorted(self.nodesets.items()):
            ref = ((raw.get("spec") or {}).get("controllerRef") or {}).get("name")
            if ns == controller.namespace and ref == controller.name:
                with contextlib.suppress(ValueError):
                    out[builder.slurm_nodeset_name(NodeSet.model_validate(raw))] = name
        return out

    def wake(self, key: Key) -> None:
        self.runtime.queues[self.kind].add(key)

    # ------------------------------------------------------------------------------------ watch events
    def _pod_changed(self, kind: str, pod: Obj, before: Obj | None) -> Iterable[Key]:
        if kind == "DELETED":
            if wf := updates.held_by(pod):
                self.runtime.spawn(self.node_polls.signal(wf, "pod_gone"))
            self.runtime.spawn(self.steps.forget_deleted(pod))
        owner = owner_of(pod)
        return (owner,) if owner else ()

    def _node_changed(self, kind: str, node: Obj, before: Obj | None) -> Iterable[Key]:
        """A node that comes, goes or changes placement wakes every DaemonSet-mode NodeSet; one (un)cordoned,
        the NodeSets of the pods on it."""
        keys: set[Key] = set()
        gone = kind == "DELETED"
        if before is None or gone or _placement_view(before) != _placement_view(node):
            keys.update(
                k for k, raw in self.nodesets.items() if (raw.get("spec") or {}).get("scalingMode") == "DaemonSet"
            )
        if before is None or gone or _cordon_view(before) != _cordon_view(node):
            name = node["metadata"]["name"]
            keys.update(
                owner
                for pod in self.pods.values()
                if (pod.get("spec") or {}).get("nodeName") == name and (owner := owner_of(pod))
            )
        return keys

    # ------------------------------------------------------------------------------------ reconcile
    async def reconcile(self, key: Key) -> None:
        raw = self.nodesets.get(key)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            self._unregistered.pop(key, None)
            if raw is not None and (self.scheduled.has_finalizer(raw) or self.scheduled.running(raw)):
                ref = ((raw.get("spec") or {}).get("controllerRef") or {}).get("name") or ""
                if not await self.scheduled.stop(key, raw, ControllerKey(namespace=key[0], name=ref)):
                    self.runtime.requeue_later(self.kind, key, STOP_CHECK_SECONDS)
            return  # being deleted: the garbage collector takes its pods; making new ones would fight it
        nodeset = NodeSet.model_validate(raw)
        problems = nodeset_problems(nodeset)
        if problems:
            first = problems[0]
            message = "; ".join(p.message for p in problems)
            await self._status(raw, nodeset, [], condition=("SpecValid", "False", first.reason, message))
            return
        controller = ControllerKey(namespace=key[0], name=nodeset.spec.controller_ref.name)
        try:
            ctl = await self.slurm.controller(controller)
            await self.slurm.client(controller)
        except ControllerProblem as err:
            await self._status(
                raw, nodeset, self._owned(key, raw), condition=("ControllerReady", "False", err.reason, str(err))
            )
            # Nothing watched here says when it is fixed (a Controller, its key Secret, a RestApi's pod): look again.
            self.runtime.requeue_later(self.kind, key, CONTROLLER_RETRY_SECONDS)
            return
        poll = self.node_polls.ensure(controller)
        if not poll.synced and not poll.error:
            # No decision on an unread Slurm (upstream's RefreshNodeCache).
            self.runtime.requeue_later(self.kind, key, 0.2)
            return
        if poll.error:
            condition = ("ControllerReady", "False", "SlurmUnreachable", f"slurmrestd: {poll.error}")
            await self._status(raw, nodeset, self._owned(key, raw), condition=condition)
            self.runtime.requeue_later(self.kind, key, 2.0)
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
                await self.steps.delete(pod)
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
            nodes = list(self.kube_nodes.values())
            missing_nodes, extra = daemonset.plan(nodeset, nodes, current)
            desired = len(current) - len(extra) + len(missing_nodes)
            scale_in = [*stale, *extra]
        else:
            desired = nodeset.spec.replicas if nodeset.spec.replicas is not None else 1
            scale_in = [*stale, *victims.condemned(current, desired, self._node_cordoned(current))]
        maintenance = self._in_maintenance(key, nodeset, active, poll)
        held = await self._condemn(nodeset, controller, active, scale_in, desired, revision, maintenance)
        slurm = await self.slurm.client(controller)
        for pod in active:
            view = poll.nodes.get(hostname_of(pod))
            await self.steps.sync(pod, view, protect=nodeset.spec.workload_disruption_protection)
            if pod["metadata"]["uid"] not in held:  # a scale-in workflow drains it, and undrains it if kept
                await self.steps.cordon(slurm, pod, view)
                await self.steps.repair_drift(pod, poll)
        try:
            new: list[Obj] = []
            if mode == "DaemonSet":
                new = [builder.build_daemon_pod(nodeset, ctl, n, revision) for n in missing_nodes]
            elif (missing := desired - len(current)) > 0:
                # A terminating pod's ordinal is free: its name is made again once it is gone (the watch's DELETED
                # event requeues), so the new pod's slurmd takes over the same Slurm node name, as a StatefulSet's.
                used = {o for p in current if (o := builder.ordinal_of(key[1], p["metadata"]["name"])) is not None}
                ordinals = builder.free_ordinals(used, missing)
                pins = self._pins(nodeset, raw, active) if nodeset.spec.pin_to_node else {}
                new = [builder.build_pod(nodeset, ctl, o, revision, pin=pins.get(str(o))) for o in ordinals]
            if new and nodeset.spec.ssh is not None and nodeset.spec.ssh.enabled:
                await ensure(self.kube, builder.ssh_config(nodeset))  # sshd_config, before the pods mount it
            await self.claims.ensure(nodeset, [p["metadata"]["name"] for p in new])
            await self.steps.slow_start(new)
        except KubeRejected as err:  # the apiserver refuses the pod the spec makes: say which field
            message = f"the pod this spec makes is refused: {err}"
            await self._status(raw, nodeset, owned, condition=("SpecValid", "False", "FailedCreate", message))
            return
        await self.claims.prune_scaled(key, nodeset, desired, {p["metadata"]["name"] for p in owned})
        if mode == "DaemonSet" and nodeset.spec.prune_slurm_node_records == "NodeNotFound":
            await self._prune_defunct(nodeset, controller, poll, owned)
        if poll.missing_since:
            self.runtime.requeue_later(self.kind, key, DRIFT_GRACE_SECONDS / 2)
        self._requeue_when_available(key, nodeset, active)
        more = [await self._registration(key, owned, poll)]
        # Every pod of the NodeSet, a terminating one too: its node stays reserved while it is replaced.
        more.extend(await self._scheduled_update(key, raw, nodeset, controller, poll, owned, desired))
        await self._status(
            raw,
            nodeset,
            self._owned(key, raw),
            revision=revision,
            poll=poll,
            condition=("ControllerReady", "True", "Reachable", "slurmrestd answers"),
            desired=desired,
            more=more,
        )

    async def _prune_defunct(
        self, nodeset: NodeSet, controller: ControllerKey, poll: ControllerPoll, owned: list[Obj]
    ) -> None:
        """`pruneSlurmNodeRecords: NodeNotFound`: delete the NodeSet's Slurm nodes that no pod holds and no
        Kubernetes node maps to (its node was deleted while no operator watched its pod go)."""
        feature = builder.slurm_nodeset_name(nodeset)
        hostnames = [hostname_of(p) for p in owned]
        defunct = daemonset.defunct_nodes(feature, poll.nodes, hostnames, self.kube_nodes.values())
        if not defunct:
            return
        slurm = await self.slurm.client(controller)
        for name in defunct:
            with contextlib.suppress(SlurmNotFound):
                await slurm.delete_node(name)
                logger.info("pruned Slurm node %s of NodeSet %s: no pod, no Kubernetes node", name, feature)

    @staticmethod
    def _in_maintenance(key: Key, nodeset: NodeSet, active: list[Obj], poll: ControllerPoll) -> frozenset[str]:
        """Uids of the pods whose Slurm nodes a ScheduledUpdate's open window holds (Slurm says MAINTENANCE)."""
        if not su.is_scheduled(nodeset):
            return frozenset()
        names = su.under_maintenance(poll.nodes, su.reservation_name(key[1]))
        return frozenset(p["metadata"]["uid"] for p in active if hostname_of(p) in names)

    async def _scheduled_update(
        self,
        key: Key,
        raw: Obj,
        nodeset: NodeSet,
        controller: ControllerKey,
        poll: ControllerPoll,
        pods: list[Obj],
        desired: int,
    ) -> list[Condition]:
        """Keep the ScheduledUpdate's window (``ReservationCreated``), or stop one no longer wanted."""
        if su.is_scheduled(nodeset) and desired > 0:
            reservation, again = await self.scheduled.sync(key, raw, nodeset, controller, poll, pods)
            if again is not None:
                self.runtime.requeue_later(self.kind, key, again)
            return [reservation] if reservation is not None else []
        if self.scheduled.has_finalizer(raw) or self.scheduled.running(raw):
            if not await self.scheduled.stop(key, raw, controller):
                self.runtime.requeue_later(self.kind, key, STOP_CHECK_SECONDS)
        return []

    def _requeue_when_available(self, key: Key, nodeset: NodeSet, active: list[Obj]) -> None:
        """With ``minReadySeconds``, look again when the next Ready pod becomes available: the status counts it
        and a rolling update goes on (nothing else would wake the reconcile then)."""
        if not nodeset.spec.min_ready_seconds:
            return
        now = dt.datetime.now(dt.UTC)
        waits = [w for p in active if (w := updates.available_in(p, nodeset.spec.min_ready_seconds, now))]
        if waits:
            self.runtime.requeue_later(self.kind, key, min(waits) + 0.1)

    async def _registration(self, key: Key, owned: list[Obj], poll: ControllerPoll) -> Condition:
        """``SlurmdRegistered``: the pods whose running slurmd has not joined Slurm for a while, quoting slurmd."""
        since = self._unregistered.setdefault(key, {})
        hostnames = {p["metadata"]["name"]: hostname_of(p) for p in owned}
        grace = self.registration_grace
        found = registration.track(owned, hostnames, poll.nodes, since, time.monotonic(), grace=grace)
        if since:  # look again when the grace period of the earliest ends, and while it lasts
            self.runtime.requeue_later(self.kind, key, grace / 3)
        quotes = {u.pod: await self.steps.last_words(key[0], u.pod) for u in found[: registration.SHOWN]}
        return registration.condition(found, quotes, grace)

    async def _status(
        self,
        raw: Obj,
        nodeset: NodeSet,
        owned: list[Obj],
        *,
        condition: Condition,
        revision: str = "",
        poll: ControllerPoll | None = None,
        desired: int | None = None,
        more: Sequence[Condition] = (),
    ) -> None:
        pins = None
        if nodeset.spec.pin_to_node and nodeset.spec.scaling_mode == "StatefulSet":
            pins = self._pins(nodeset, raw, [p for p in owned if not is_terminating(p)])
        await write_status(
            self.runtime,
            raw,
            nodeset,
            owned,
            revision=revision,
            poll=poll,
            condition=condition,
            desired=desired,
            pins=pins,
            more=more,
        )

    def _pins(self, nodeset: NodeSet, raw: Obj, pods: list[Obj]) -> dict[str, str]:
        previous = (raw.get("status") or {}).get("ordinalToNode") or {}
        return builder.ordinal_to_node(nodeset, pods, previous, {name for _, name in self.kube_nodes})

    def _node_cordoned(self, pods: list[Obj]) -> frozenset[str]:
        """Uids of the pods whose Kubernetes node is cordoned (they count as cordoned in the scale-in order)."""
        return frozenset(p["metadata"]["uid"] for p in pods if pod_sync.node_cordoned(self.steps.node_of(p)))

    async def _condemn(
        self,
        nodeset: NodeSet,
        controller: ControllerKey,
        active: list[Obj],
        scale_in: list[Obj],
        desired: int,
        revision: str,
        maintenance: frozenset[str] = frozenset(),
    ) -> set[str]:
        """Start (or join) a scale-in workflow for each pod to remove (`scale_in`, then the rolling update's);
        tell the scale-ins of pods wanted again to keep them. Returns the uids a scale-in holds."""
        gone = {p["metadata"]["uid"] for p in scale_in}
        update = updates.update_victims(
            nodeset, [p for p in active if p["metadata"]["uid"] not in gone], revision, desired, None, maintenance
        )
        cause: ScaleInCause = "scheduled-update" if su.is_scheduled(nodeset) else "update"
        condemned: list[tuple[Obj, ScaleInCause]] = [(p, "scale-in") for p in scale_in] + [(p, cause) for p in update]
        uids = {p["metadata"]["uid"] for p, _ in condemned}
        held = set(uids)
        for pod in active:
            if pod["metadata"]["uid"] not in uids and updates.in_flight(pod):
                await self._keep(pod)  # its workflow undrains and uncordons it; until then it is the workflow's
                held.add(pod["metadata"]["uid"])
        for pod, why in condemned:
            await self._scale_in(nodeset, controller, pod, why)
        return held

    def _owned(self, key: Key, raw: Obj) -> list[Obj]:
        uid = raw["metadata"].get("uid")
        return [
            pod
            for pod in self.pods.values()
            if owner_of(pod) == key and any(r.get("uid") == uid for r in pod["metadata"].get("ownerReferences") or [])
        ]

    async def _scale_in(self, nodeset: NodeSet, controller: ControllerKey, pod: Obj, cause: ScaleInCause) -> None:
        meta = pod["metadata"]
        ref = PodRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
        wf = workflow_id(ref.namespace, ref.name, ref.uid)
        inp = ScaleInInput(
            pod=ref,
            nodeset=str(nodeset.metadata.get("name")),
            node=hostname_of(pod),
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
        annotations = {wellknown.ANNOTATION_POD_CORDON: None, wellknown.ANNOTATION_SCALE_IN_WORKFLOW: None}
        with contextlib.suppress(KubeNotFound, KubeConflict):
            await self.kube.patch(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {"metadata": {"uid": meta["uid"], "annotations": annotations}},
            )

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
