"""A NodeSet's ScheduledUpdate, as the reconcile sees it: start (or join) the window's workflow, tell it the
NodeSet's Slurm nodes, read its `status` for the `ReservationCreated` condition, and stop it when the NodeSet
no longer wants it (deleted, another strategy or schedule, scaled to 0).

The finalizer `nodeset.slinky.slurm.net/reservation` goes on before the first window starts and comes off only
when no window runs and Slurm holds no `SlurmOperatorMaint-<nodeset>`. The ID of the running window is kept on
the NodeSet (annotation `nodeset.slinky.slurm.net/scheduled-update-workflow`), so a restarted operator finds the
window it must stop when the schedule changed meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from slinky import wellknown
from slinky.clients.errors import KubeConflict, KubeNotFound, SlurmError, SlurmNotFound
from slinky.clients.kube import KubeClient
from slinky.operator import scheduled_update as su
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.models import ControllerKey, ScheduledUpdateInput, ScheduledUpdateStatus
from workers.operator.nodeset.poll import ControllerPoll, hostname_of
from workers.operator.nodeset.status import Condition, nodeset_path
from workers.operator.slurm_clients import ControllerProblem, SlurmClients
from workers.operator.workqueue import Key
from workflows.scheduled_update import NodeSetScheduledUpdateWorkflow

logger = logging.getLogger(__name__)
Obj = dict[str, Any]
STOP_CHECK_SECONDS = 1.0
CLOSED_PHASES = frozenset({"ended", "skipped", "refused"})
"""The phases a window's workflow returns in (`released` is a cancelled one's)."""


class ScheduledUpdates:
    def __init__(self, kube: KubeClient, slurm: SlurmClients, temporal: Client, task_queue: str) -> None:
        self.kube = kube
        self.slurm = slurm
        self.temporal = temporal
        self.task_queue = task_queue
        self._sent: dict[str, list[str]] = {}
        """Per window workflow: the node list last signalled (after a restart: none, so it is sent once)."""
        self._closed: dict[str, ScheduledUpdateStatus] = {}
        """The last status of each window that ended (its workflow returned)."""

    def running(self, raw: Obj) -> str:
        return str((raw["metadata"].get("annotations") or {}).get(wellknown.ANNOTATION_SCHEDULED_UPDATE_WORKFLOW) or "")

    @staticmethod
    def has_finalizer(raw: Obj) -> bool:
        return wellknown.FINALIZER_NODESET_RESERVATION in (raw["metadata"].get("finalizers") or [])

    async def sync(
        self, key: Key, raw: Obj, nodeset: NodeSet, controller: ControllerKey, poll: ControllerPoll, pods: list[Obj]
    ) -> tuple[Condition | None, float | None]:
        """The condition to show and when to look again (seconds), for a NodeSet that wants a window now; `pods`:
        all of its pods, terminating ones too (a node being replaced stays in the reservation)."""
        name = su.reservation_name(key[1])
        wf_id = su.workflow_id(key[0], key[1], raw["metadata"]["uid"], su.schedule_key(nodeset))
        current = self.running(raw)
        if current and current != wf_id and not await self._stopped(current):
            return (su.CONDITION, "False", "Rescheduling", "the previous window is being stopped"), STOP_CHECK_SECONDS
        nodes = sorted({h for p in pods if (v := poll.nodes.get(h := hostname_of(p))) is not None and v.exists})
        if not nodes and current != wf_id:
            return su.condition(None, name), None
        if not self.has_finalizer(raw):
            await self._add_finalizer(raw)
        handle: WorkflowHandle[Any, Any] = self.temporal.get_workflow_handle(wf_id)
        if current != wf_id:
            inp = ScheduledUpdateInput(
                namespace=key[0], nodeset=key[1], reservation=su.spec_for(nodeset, controller, nodes)
            )
            with contextlib.suppress(WorkflowAlreadyStartedError):  # this window ran to its end already
                await self.temporal.start_workflow(
                    NodeSetScheduledUpdateWorkflow.run,
                    inp,
                    id=wf_id,
                    task_queue=self.task_queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                )
            self._sent[wf_id] = nodes
            await self._annotate(raw, wf_id)
        status = await self._status(handle)
        if status is None:
            return None, 2.0
        if status.phase in ("waiting", "open") and nodes and self._sent.get(wf_id) != nodes:
            with contextlib.suppress(RPCError):
                await handle.signal(NodeSetScheduledUpdateWorkflow.nodes, nodes)
                self._sent[wf_id] = nodes
        again = None
        now = time.time()
        if status.phase in ("reserving", "waiting", "open"):
            edge = status.start if status.phase != "open" else status.end
            again = max(min(edge - now + 1.0, 60.0), 1.0)  # the condition's message moves at each edge
        return su.condition(status, name), again

    async def stop(self, key: Key, raw: Obj, controller: ControllerKey) -> bool:
        """Stop the window (its workflow deletes the reservation), make sure Slurm holds no reservation of the
        NodeSet, then take the finalizer off. False while the window is still stopping (look again soon)."""
        current = self.running(raw)
        if current and not await self._stopped(current):
            return False
        with contextlib.suppress(ControllerProblem):  # no Controller: no Slurm to hold a reservation
            slurm = await self.slurm.client(controller)
            try:
                await slurm.delete_reservation(su.reservation_name(key[1]))
            except SlurmNotFound:
                pass
            except SlurmError as err:
                if raw["metadata"].get("deletionTimestamp") is None:
                    raise
                logger.warning("reservation of NodeSet %s/%s not deleted: %s", key[0], key[1], err)
        if current:
            await self._annotate(raw, None)
        if self.has_finalizer(raw):
            await self.kube.remove_finalizer(
                nodeset_path(*key), raw["metadata"]["uid"], wellknown.FINALIZER_NODESET_RESERVATION
            )
        return True

    # ------------------------------------------------------------------------------------ plumbing
    async def _stopped(self, wf_id: str) -> bool:
        """True once the workflow is closed; asks it to cancel (once is enough, again is harmless) otherwise."""
        handle: WorkflowHandle[Any, Any] = self.temporal.get_workflow_handle(wf_id)
        try:
            described = await handle.describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return True
            raise
        if described.status != WorkflowExecutionStatus.RUNNING:
            self._sent.pop(wf_id, None)
            return True
        await handle.cancel()
        return False

    async def _status(self, handle: WorkflowHandle[Any, Any]) -> ScheduledUpdateStatus | None:
        """The window's `status` query; a closed window's is kept (a query of a closed workflow replays its
        whole history, and its answer no longer changes)."""
        if (done := self._closed.get(handle.id)) is not None:
            return done
        try:
            status: ScheduledUpdateStatus = await handle.query(NodeSetScheduledUpdateWorkflow.status)
        except RPCError as err:
            logger.warning("status of %s: %s", handle.id, err)
            return None
        if status.phase in CLOSED_PHASES and (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            self._closed[handle.id] = status  # (a recurring window says `ended` while it hands over to its next run)
        return status

    async def _add_finalizer(self, raw: Obj) -> None:
        meta = raw["metadata"]
        finalizers = [*(meta.get("finalizers") or []), wellknown.FINALIZER_NODESET_RESERVATION]
        body = {"metadata": {"resourceVersion": meta["resourceVersion"], "finalizers": finalizers}}
        await self.kube.patch(nodeset_path(meta["namespace"], meta["name"]), body)

    async def _annotate(self, raw: Obj, wf_id: str | None) -> None:
        meta = raw["metadata"]
        body = {
            "metadata": {"uid": meta["uid"], "annotations": {wellknown.ANNOTATION_SCHEDULED_UPDATE_WORKFLOW: wf_id}}
        }
        with contextlib.suppress(KubeNotFound, KubeConflict):
            await self.kube.patch(nodeset_path(meta["namespace"], meta["name"]), body)
