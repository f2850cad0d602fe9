"""Activities of the NodeSet scale-in: small idempotent verbs on one pod or one Slurm node.

Each treats "already done" as success: cordoning a pod that is gone says so (False), deleting a deleted pod
is fine, draining a drained node re-reads it. A Slurm reason that is not the operator's (no
`slurm-operator: ` prefix) belongs to an admin: draining keeps it, undraining never touches it.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from slinky import wellknown
from slinky.clients.errors import KubeConflict, KubeNotFound, SlurmNotFound, SlurmRejected
from slinky.clients.events import EventRecorder, pod_event
from slinky.clients.kube import KubeClient, pod_path
from slinky.clients.slurm import ReservationDesc, SlurmApi
from slinky.clients.slurm.joblist import JobList
from slinky.hostlist import expand as expand_hostlist
from slinky.operator import slurm_state
from slinky.operator.models import (
    ControllerKey,
    DrainInput,
    NodeRef,
    NodeSetEventInput,
    PodRef,
    ReservationRef,
    ReservationSpec,
    ReservationView,
    SlurmNodeView,
)

logger = logging.getLogger(__name__)
COMPONENT = "slurm-operator"
NODES_BUSY = 2016
"""ESLURM_NODES_BUSY: slurmctld refuses to delete a node that an active reservation holds."""
RESERVATION_USER = "slurm"
"""The reservation's one user (upstream's): nothing but the operator's own work runs in the window."""


class SlurmClients(Protocol):
    """The operator's Slurm client of each Controller (minted JWT, refreshed at 80 %), and its shared job list."""

    async def client(self, controller: ControllerKey) -> SlurmApi: ...

    async def job_list(self, controller: ControllerKey) -> JobList: ...


async def read_node(slurm: SlurmApi, name: str, jobs: JobList | None = None, *, fresh: bool = False) -> SlurmNodeView:
    """The node, with the running jobs that name it when ``jobs`` is given; `exists=False` when Slurm does not know it.

    The jobs come from the Controller's shared job list (:class:`JobList`): a full list's price grows with every
    job record slurmctld holds (80 MB and 8-20 s with 10,000 held jobs, issue 16), so it is asked for only when
    the node is busy (ALLOCATED, MIXED or COMPLETING: an idle or unknown node holds no job), with
    ``update_time`` (nothing comes back when no job changed), and shared by every drain and the node poll.
    The jobs of a drain's read are only shown (the drain waits on the node's own state); ``fresh`` (a forced
    scale-in, which cancels them) asks Slurm at least once after the call."""
    try:
        node = await slurm.get_node(name)
    except SlurmNotFound:
        node = None
    busy = node is not None and slurm_state.is_busy(node.state)
    listed = await jobs.read(fresh=fresh) if jobs is not None and busy else []
    on_node = slurm_state.jobs_by_node(listed).get(name, slurm_state.NodeJobs())
    if node is None:
        return SlurmNodeView(name=name, exists=False, jobs=on_node.ids)
    return SlurmNodeView(
        name=name,
        states=list(node.state),
        reason=node.reason,
        reservation=node.reservation,
        jobs=on_node.ids,
        deadline=on_node.deadline_text(),
    )


class NodeSetActivities:
    """The verbs, bound to the operator's clients."""

    def __init__(self, kube: KubeClient, slurm: SlurmClients, events: EventRecorder) -> None:
        self.kube = kube
        self.slurm = slurm
        self.events = events

    async def _annotate(self, pod: PodRef, cordon: bool) -> bool:
        """`pod-cordon` and the ID of the scale-in workflow that holds the pod (the operator finds its running
        scale-ins on the pods after a restart), both set or both removed."""
        workflow = activity.info().workflow_id if cordon and activity.in_activity() else None
        annotations = {
            wellknown.ANNOTATION_POD_CORDON: "true" if cordon else None,
            wellknown.ANNOTATION_SCALE_IN_WORKFLOW: workflow,
        }
        body: dict[str, Any] = {"metadata": {"uid": pod.uid, "annotations": annotations}}
        try:
            await self.kube.patch(pod_path(pod.namespace, pod.name), body)
        except (KubeNotFound, KubeConflict):
            return False  # gone, or a new pod with the same name (uid precondition)
        return True

    @activity.defn(name="nodeset_cordon_pod")
    async def cordon_pod(self, pod: PodRef) -> bool:
        """Annotate `pod-cordon=true`; False when the pod is gone."""
        return await self._annotate(pod, True)

    @activity.defn(name="nodeset_uncordon_pod")
    async def uncordon_pod(self, pod: PodRef) -> bool:
        return await self._annotate(pod, False)

    @activity.defn(name="nodeset_drain_node")
    async def drain_node(self, inp: DrainInput) -> SlurmNodeView:
        """DRAIN with the operator's reason, unless an admin's reason already drains it (kept as is)."""
        slurm = await self.slurm.client(inp.controller)
        view = await read_node(slurm, inp.node)
        if view.exists:
            draining = slurm_state.is_draining_or_drained(view.states)
            if not draining or (slurm_state.owns_reason(view.reason) and view.reason != inp.reason):
                try:
                    await slurm.drain_node(inp.node, inp.reason)
                except SlurmNotFound:
                    pass  # gone meanwhile: the read below says so
        return await read_node(slurm, inp.node, await self.slurm.job_list(inp.controller))

    @activity.defn(name="nodeset_undrain_node")
    async def undrain_node(self, inp: DrainInput) -> None:
        """RESUME, only if the current reason is the operator's."""
        slurm = await self.slurm.client(inp.controller)
        try:
            node = await slurm.get_node(inp.node)
        except SlurmNotFound:
            return
        if "DRAIN" in node.state and slurm_state.owns_reason(node.reason):
            await slurm.resume_node(inp.node)

    @activity.defn(name="nodeset_read_node")
    async def read_node(self, ref: NodeRef) -> SlurmNodeView:
        return await read_node(
            await self.slurm.client(ref.controller), ref.node, await self.slurm.job_list(ref.controller)
        )

    @activity.defn(name="nodeset_cancel_node_jobs")
    async def cancel_node_jobs(self, ref: NodeRef) -> list[int]:
        """Force: cancel every running job that holds the node; the ids go into the history."""
        slurm = await self.slurm.client(ref.controller)
        view = await read_node(slurm, ref.node, await self.slurm.job_list(ref.controller), fresh=True)
        for job_id in view.jobs:
            try:
                await slurm.cancel_job(job_id)
            except SlurmNotFound:
                continue
            logger.warning("force scale-in: cancelled job %s on %s", job_id, ref.node)
        return view.jobs

    @activity.defn(name="nodeset_delete_pod")
    async def delete_pod(self, pod: PodRef) -> None:
        """Delete the pod (uid precondition); its preStop takes the node out of Slurm."""
        try:
            await self.kube.delete(pod_path(pod.namespace, pod.name), uid=pod.uid)
        except (KubeNotFound, KubeConflict):
            return

    @activity.defn(name="nodeset_pod_gone")
    async def pod_gone(self, pod: PodRef) -> bool:
        try:
            current = await self.kube.get(pod_path(pod.namespace, pod.name))
        except KubeNotFound:
            return True
        return bool(current.get("metadata", {}).get("uid") != pod.uid)

    @activity.defn(name="nodeset_forget_node")
    async def forget_node(self, ref: NodeRef) -> None:
        """The pod is gone: delete its Slurm node if the preStop did not (a node a new pod registered is kept)."""
        slurm = await self.slurm.client(ref.controller)
        try:
            node = await slurm.get_node(ref.node)
        except SlurmNotFound:
            return
        states = set(node.state)
        # Neither DOWN nor DRAIN: registered again by a new pod of the same name.
        if not slurm_state.forgettable(states, node.reason, replaced=not ({"DOWN", "DRAIN"} & states)):
            return
        try:
            await slurm.delete_node(ref.node)
        except SlurmNotFound:
            return
        except SlurmRejected as err:
            if node.reservation and err.error_number == NODES_BUSY:
                # An active reservation (a ScheduledUpdate's window) holds the record: it stays, DOWN, and the
                # replacement pod's slurmd (same name) registers into it, still in the reservation.
                logger.info("Slurm node %s stays: reservation %s holds it", ref.node, node.reservation)
                return
            raise

    @activity.defn(name="nodeset_reserve")
    async def reserve(self, spec: ReservationSpec) -> ReservationView:
        """Create or update the ScheduledUpdate's reservation over the nodes Slurm knows (a node that left
        meanwhile is left out). Slurm's refusal (e.g. a flag it rejects) is not retried: its words end the window
        and show on the NodeSet's ReservationCreated condition."""
        slurm = await self.slurm.client(spec.ref.controller)
        known = {n.name for n in await slurm.list_nodes()}
        nodes = [n for n in spec.nodes if n in known]
        # Slurm drops a reservation whose nodes were all deleted: a node-list change then makes it again whole
        # (a POST of the name and nodes alone would make one that starts now and never ends).
        if spec.full or not (await self._view(slurm, spec.ref.name)).exists:
            desc = ReservationDesc(
                name=spec.ref.name,
                start_time=spec.start,
                duration=spec.minutes,
                flags=spec.flags,
                users=[RESERVATION_USER],
                node_list=nodes,
            )
        else:
            desc = ReservationDesc(name=spec.ref.name, node_list=nodes)
        if not nodes:
            raise ApplicationError(f"none of {spec.nodes} is a Slurm node", type="NoNodes", non_retryable=True)
        try:
            await slurm.upsert_reservation(desc)
        except SlurmRejected as err:
            raise ApplicationError(str(err), type="ReservationRefused", non_retryable=True) from None
        return await self._view(slurm, spec.ref.name)

    @activity.defn(name="nodeset_read_reservation")
    async def read_reservation(self, ref: ReservationRef) -> ReservationView:
        return await self._view(await self.slurm.client(ref.controller), ref.name)

    @activity.defn(name="nodeset_release_reservation")
    async def release_reservation(self, ref: ReservationRef) -> bool:
        """Delete the reservation; False when Slurm had none of that name (already ended or deleted)."""
        slurm = await self.slurm.client(ref.controller)
        try:
            await slurm.delete_reservation(ref.name)
        except SlurmNotFound:
            return False
        return True

    @staticmethod
    async def _view(slurm: SlurmApi, name: str) -> ReservationView:
        try:
            res = await slurm.get_reservation(name)
        except SlurmNotFound:
            return ReservationView(name=name, exists=False)
        return ReservationView(
            name=name,
            start=res.start_time,
            end=res.end_time,
            nodes=expand_hostlist(res.node_list),
            flags=list(res.flags),
        )

    @activity.defn(name="nodeset_record_event")
    async def record_event(self, inp: NodeSetEventInput) -> None:
        event = pod_event(inp.pod.namespace, inp.pod.name, inp.pod.uid, inp.reason, inp.message, inp.type)
        event["source"] = {"component": COMPONENT}
        event["reportingComponent"] = COMPONENT
        self.events.record(event)

    def all(self) -> list[Any]:
        return [
            self.cordon_pod,
            self.uncordon_pod,
            self.drain_node,
            self.undrain_node,
            self.read_node,
            self.cancel_node_jobs,
            self.delete_pod,
            self.pod_gone,
            self.forget_node,
            self.record_event,
            self.reserve,
            self.read_reservation,
            self.release_reservation,
        ]
