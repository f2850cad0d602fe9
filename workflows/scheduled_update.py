"""NodeSetScheduledUpdateWorkflow: one window of a NodeSet's ScheduledUpdate, kept as a Slurm MAINT reservation.

    reserve (create SlurmOperatorMaint-<nodeset> over the NodeSet's nodes, MAINT,IGNORE_JOBS + flags)
    -> wait for startTime (a durable timer) -> the window is open until startTime + duration (a timer)
    -> the window ended: Slurm removes a one-off reservation (the workflow makes sure), a recurring one moves
       to its next occurrence (the workflow goes on with it: continue-as-new)

While it waits, the `nodes` signal (the operator saw the NodeSet's Slurm nodes change) updates the reservation's
node list, the one change Slurm takes on an active reservation. The pods are not replaced here: while the
window is open Slurm marks the reserved nodes `MAINTENANCE`, the operator's shared node poll sees it, and the
NodeSet reconcile condemns the old-revision pods on those nodes to the drain-first `NodeSetScaleInWorkflow`
(so no job is killed: `IGNORE_JOBS` lets the reservation start over running jobs, the drain waits for them).

Its timers live in the history, so an operator restart (or `kill -9`) mid-window loses nothing. Cancel
(`temporal workflow cancel`, or the operator when the NodeSet is deleted, its strategy or schedule changes, or
it is scaled to 0) deletes the reservation before the workflow ends. A start time already past is skipped
(upstream's rule) unless the flags hold `FORCE_START`; a reservation Slurm refuses ends the workflow with
Slurm's words, which the `status` query and the NodeSet's `ReservationCreated` condition carry.
Workflow ID: `nodeset-scheduledupdate/<namespace>/<nodeset>/<nodeset uid>/<schedule key>`.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from slinky.operator import slurm_state
from slinky.operator.models import (
    ReservationRef,
    ReservationSpec,
    ReservationView,
    ScheduledUpdateInput,
    ScheduledUpdatePhase,
    ScheduledUpdateResult,
    ScheduledUpdateStatus,
)
from workflows import retry
from workflows.nodeset import SA_NAMESPACE, SA_NODESET, SA_PHASE

CALL_FAILED = (ActivityError, ApplicationError)
_when = slurm_state.utc_text


def _cause(err: BaseException) -> str:
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err)


@workflow.defn(name="NodeSetScheduledUpdate")
class NodeSetScheduledUpdateWorkflow:
    def __init__(self) -> None:
        self._phase: ScheduledUpdatePhase = "reserving"
        self._spec: ReservationSpec | None = None
        self._want: list[str] | None = None
        """A node list signalled and not yet sent to Slurm."""
        self._message = ""

    # ------------------------------------------------------------------------------------ interface
    @workflow.signal
    def nodes(self, names: list[str]) -> None:
        """The NodeSet's Slurm nodes now (the operator signals a change)."""
        self._want = sorted(set(names))

    @workflow.query
    def status(self) -> ScheduledUpdateStatus:
        spec = self._spec
        if spec is None:
            return ScheduledUpdateStatus(phase=self._phase, reservation="", start=0, end=0)
        return ScheduledUpdateStatus(
            phase=self._phase,
            reservation=spec.ref.name,
            start=spec.start,
            end=spec.start + spec.minutes * 60,
            nodes=spec.nodes,
            message=self._message,
        )

    # ------------------------------------------------------------------------------------ lifecycle
    @workflow.run
    async def run(self, inp: ScheduledUpdateInput) -> ScheduledUpdateResult:
        self._spec = inp.reservation
        workflow.upsert_search_attributes([SA_NAMESPACE.value_set(inp.namespace), SA_NODESET.value_set(inp.nodeset)])
        try:
            return await self._window(inp)
        except asyncio.CancelledError:
            # The NodeSet is deleted, or no longer wants this window: the reservation goes first.
            await self._release(inp.reservation.ref, "the operator (or a person) cancelled this window")
            raise

    async def _window(self, inp: ScheduledUpdateInput) -> ScheduledUpdateResult:
        spec = inp.reservation
        now = workflow.now().timestamp()
        end = spec.start + spec.minutes * 60
        if now >= end or (spec.start <= now and "FORCE_START" not in spec.flags):
            message = (
                f"startTime {_when(spec.start)} is past: no reservation is made (set a future startTime, or add "
                "FORCE_START to scheduledUpdate.flags to start one now)"
            )
            return self._end("skipped", message)
        try:
            view = await self._reserve(spec)
        except CALL_FAILED as err:
            return self._end("refused", f"Slurm refused reservation {spec.ref.name}: {_cause(err)}")
        self._message = f"reservation {view.name} over {','.join(view.nodes)}"
        self._set_phase("waiting")
        await self._hold_until(spec.start)
        self._set_phase("open")
        want, self._want = self._want, None  # at the opening, make sure Slurm still holds it, over today's nodes
        await self._keep_nodes(want or (self._spec.nodes if self._spec else spec.nodes))
        await self._hold_until(end)
        self._set_phase("ended")
        return await self._ended(inp)

    async def _ended(self, inp: ScheduledUpdateInput) -> ScheduledUpdateResult:
        """A recurring reservation moves to its next occurrence: follow it. A one-off one is gone (or goes)."""
        spec = inp.reservation
        view = await self._read(spec.ref)
        if (
            view is not None
            and view.exists
            and slurm_state.RECURRING_RESERVATION & set(spec.flags)
            and (view.start or 0) > spec.start
        ):
            nxt = spec.model_copy(update={"start": view.start, "nodes": self._spec.nodes if self._spec else []})
            workflow.continue_as_new(inp.model_copy(update={"reservation": nxt}))
        if view is not None and view.exists:
            await self._release(spec.ref, "")
        return self._end(
            "ended", f"the window from {_when(spec.start)} to {_when(spec.start + spec.minutes * 60)} ended"
        )

    # ------------------------------------------------------------------------------------ steps
    async def _hold_until(self, epoch: int) -> None:
        """Wait until `epoch` (a durable timer), keeping the reservation's node list in step meanwhile."""
        while True:
            left = epoch - workflow.now().timestamp()
            if left <= 0:
                return
            try:
                await workflow.wait_condition(lambda: self._want is not None, timeout=timedelta(seconds=left))
            except TimeoutError:
                return
            want, self._want = self._want, None
            if want and self._spec is not None and want != self._spec.nodes:
                await self._keep_nodes(want)

    async def _keep_nodes(self, want: list[str]) -> None:
        """Update the reservation's node list (or make it again: Slurm drops one whose nodes all left)."""
        spec = self._spec
        if spec is None or not want:
            return
        try:
            view = await self._reserve(spec.model_copy(update={"nodes": want, "full": False}))
        except CALL_FAILED as err:
            workflow.logger.warning("node list of %s not updated: %s", spec.ref.name, err)
            return
        self._spec = spec.model_copy(update={"nodes": view.nodes or want})
        self._message = f"reservation {view.name} over {','.join(view.nodes)}"

    async def _reserve(self, spec: ReservationSpec) -> ReservationView:
        """Retried while Slurm is away (slurmctld restarting is not a refusal); Slurm's refusal is not retried."""
        view: ReservationView = await workflow.execute_activity(
            "nodeset_reserve",
            spec,
            result_type=ReservationView,
            start_to_close_timeout=retry.CALL_TIMEOUT,
            retry_policy=retry.SLURM,
        )
        return view

    async def _read(self, ref: ReservationRef) -> ReservationView | None:
        try:
            view: ReservationView = await workflow.execute_activity(
                "nodeset_read_reservation",
                ref,
                result_type=ReservationView,
                start_to_close_timeout=retry.CALL_TIMEOUT,
                retry_policy=retry.SLURM_CLEANUP,
            )
        except CALL_FAILED:
            return None
        return view

    async def _release(self, ref: ReservationRef, why: str) -> None:
        try:
            await workflow.execute_activity(
                "nodeset_release_reservation",
                ref,
                start_to_close_timeout=retry.CALL_TIMEOUT,
                retry_policy=retry.SLURM_CLEANUP,
            )
        except CALL_FAILED as err:
            workflow.logger.warning("reservation %s not deleted: %s", ref.name, err)
            self._message = f"could not delete reservation {ref.name}: {_cause(err)}"
            return
        if why:
            self._set_phase("released")
            self._message = f"reservation {ref.name} deleted: {why}"

    def _end(self, phase: ScheduledUpdatePhase, message: str) -> ScheduledUpdateResult:
        self._set_phase(phase)
        self._message = message
        return ScheduledUpdateResult(phase=phase, message=message)

    def _set_phase(self, phase: ScheduledUpdatePhase) -> None:
        self._phase = phase
        workflow.upsert_search_attributes([SA_PHASE.value_set(phase)])
