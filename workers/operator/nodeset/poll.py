"""The shared Slurm node poll: one loop per Controller (``GET nodes?update_time=`` every ``node_poll_seconds``;
the job list only while a node of ours is busy, or was), for every NodeSet and every scale-in of that Controller.
A node that changed wakes the NodeSets of its pods and signals the scale-in workflow that holds its pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from slinky import wellknown
from slinky.clients.errors import KubeError, SlurmError
from slinky.clients.slurm import SlurmApi
from slinky.clients.slurm.models import JobInfo, Node
from slinky.operator import slurm_metrics, slurm_state, updates
from slinky.operator.models import ControllerKey, SlurmNodeView
from workers.operator.runtime import Runtime
from workers.operator.slurm_clients import ControllerProblem, SlurmClients
from workers.operator.workqueue import Key

Obj = dict[str, Any]
logger = logging.getLogger(__name__)


def hostname_of(pod: Obj) -> str:
    return str(pod.get("spec", {}).get("hostname") or pod["metadata"]["name"])


def scale_in_key(pod: Obj) -> tuple[str, str, str]:
    """(namespace, Controller, Slurm node name) of a NodeSet pod: the node poll that may signal its scale-in."""
    meta = pod["metadata"]
    return (meta["namespace"], (meta.get("labels") or {}).get(wellknown.LABEL_CLUSTER, ""), hostname_of(pod))


def owner_of(pod: Obj) -> Key | None:
    """The NodeSet that controls the pod."""
    for ref in pod.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == "NodeSet" and ref.get("controller"):
            return (pod["metadata"]["namespace"], ref["name"])
    return None


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
    errors: int = 0
    """Polls that failed (slurmrestd unreachable or refusing)."""
    polled_at: float = 0.0
    """Wall-clock time of the last poll that answered."""
    metrics: list[slurm_metrics.Family] = field(default_factory=list)
    """Slurm's state as metric families, from the last metrics round (every ``metrics_interval``)."""
    metrics_at: float = 0.0
    """Monotonic time of the last metrics round."""


class NodePolls:
    """The poll loops, one per Controller, started on first use and stopped with the runtime."""

    def __init__(
        self,
        runtime: Runtime,
        slurm: SlurmClients,
        temporal: Client,
        pods: dict[Key, Obj],
        wake: Callable[[Key], None],
        *,
        interval: float = 1.0,
        metrics_interval: float = 0.0,
        partitions: Callable[[ControllerKey], dict[str, str]] | None = None,
    ) -> None:
        self.runtime = runtime
        self.slurm = slurm
        self.temporal = temporal
        self.pods = pods
        self.wake = wake
        self.interval = interval
        self.metrics_interval = metrics_interval
        """Seconds between metrics rounds (jobs, partitions, diag besides the nodes); 0: none."""
        self.partitions = partitions or (lambda _: {})
        """Controller -> {Slurm partition: NodeSet}, the metrics' ``nodeset`` label."""
        self.polls: dict[Key, ControllerPoll] = {}

    def ensure(self, controller: ControllerKey) -> ControllerPoll:
        key = (controller.namespace, controller.name)
        if key not in self.polls:
            self.polls[key] = ControllerPoll()
            self.runtime.spawn(self._poll(controller), name=f"node-poll-{key[1]}")
        return self.polls[key]

    async def _poll(self, controller: ControllerKey) -> None:
        state = self.polls[(controller.namespace, controller.name)]
        while True:
            started = time.monotonic()
            try:
                slurm = await self.slurm.client(controller)
                # Asked with update_time: with 1,000 idle nodes a 304 instead of 3 MB every second (NodeList).
                listed, _ = await (await self.slurm.node_list(controller)).read()
                state.polls += 1
                ours = self._hostnames(controller)
                jobs: dict[str, slurm_state.NodeJobs] = {}
                # The job list only while a node of ours is busy (or was, to see its jobs end): idle, one call.
                # It is the Controller's shared list: asked with update_time, spaced by its cost (JobList).
                listed_jobs = None
                if any(n.name in ours and slurm_state.is_busy(n.state) for n in listed) or any(
                    v.jobs for v in state.nodes.values()
                ):
                    listed_jobs = await (await self.slurm.job_list(controller)).read()
                    jobs = slurm_state.jobs_by_node(listed_jobs)
                    state.job_lists += 1

                fresh = {}
                for n in listed:
                    held = jobs.get(n.name) if n.name in ours else None
                    fresh[n.name] = SlurmNodeView(
                        name=n.name,
                        states=list(n.state),
                        reason=n.reason,
                        reservation=n.reservation,
                        features=list(n.active_features or n.features),
                        jobs=held.ids if held else [],
                        deadline=held.deadline_text() if held else "",
                    )
                changed = [n for n in fresh if n not in state.nodes or state.nodes[n] != fresh[n]]
                vanished = [n for n in state.nodes if n not in fresh]
                state.nodes, state.synced, state.error = fresh, True, ""
                state.polled_at = time.time()
                await self._node_changes(controller, changed, vanished, fresh)
                if self.metrics_interval > 0 and time.monotonic() - state.metrics_at >= self.metrics_interval:
                    await self._metrics(controller, state, slurm, listed, listed_jobs)
            except (SlurmError, ControllerProblem, KubeError) as err:
                state.error = str(err)
                state.errors += 1
            await asyncio.sleep(max(self.interval - (time.monotonic() - started), 0.05))

    async def _metrics(
        self,
        controller: ControllerKey,
        state: ControllerPoll,
        slurm: SlurmApi,
        nodes: list[Node],
        jobs: list[JobInfo] | None,
    ) -> None:
        """A metrics round: partitions and diag (and jobs, unless this round listed them) besides the nodes. It
        runs after the round's node changes went out, and a failure of it only counts: the scale-ins never wait
        on metrics."""
        state.metrics_at = time.monotonic()
        try:
            if jobs is None:
                jobs = await (await self.slurm.job_list(controller)).read()
            snapshot = await slurm_metrics.read_snapshot(slurm, nodes, jobs)
        except SlurmError as err:
            state.errors += 1
            logger.warning("metrics of Controller %s/%s: %s", controller.namespace, controller.name, err)
            return
        labels = {"namespace": controller.namespace, "controller": controller.name}
        state.metrics = slurm_metrics.families(snapshot, labels, self.partitions(controller))

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
                self.wake(owner)
            if (wf := updates.held_by(pod)) and scale_in_key(pod)[:2] == (controller.namespace, controller.name):
                await self.signal(wf, "node_state", view)

    def _hostnames(self, controller: ControllerKey) -> set[str]:
        """The Slurm node names of the NodeSet pods of this Controller."""
        return {
            hostname_of(p) for p in self.pods.values() if scale_in_key(p)[:2] == (controller.namespace, controller.name)
        }

    async def signal(self, wf: str, signal: str, arg: Any = None) -> None:
        """Signal a scale-in; one that already ended (or a Temporal hiccup) is left to its fallback check."""
        handle: WorkflowHandle[Any, Any] = self.temporal.get_workflow_handle(wf)
        with contextlib.suppress(RPCError):
            if arg is None:
                await handle.signal(signal)
            else:
                await handle.signal(signal, arg)
