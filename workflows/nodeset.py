"""NodeSetScaleInWorkflow: one condemned NodeSet pod, drained in Slurm before it is deleted.

    cordon the pod -> DRAIN its Slurm node (operator-owned reason) -> wait until DRAINED -> delete the pod
    -> wait until it is gone -> make sure the Slurm node left Slurm

It never kills a job: it waits for the node's jobs to end. "Drained" comes as a `node_state` signal from
the operator's one shared Slurm node poll; a durable timer re-reads the node only as a fallback (default
every 60 s), never a poll per pod. A node that vanished from Slurm is not taken as drained until a fresh
read confirms that it is gone and that no job still names it (upstream slurm-operator #79).

Operator actions: the `keep` signal (the NodeSet scaled back up before the pod was deleted: undrain,
uncordon, end cleanly); the `abort` update (the same, asked by a person); the `force` update (cancel the
node's jobs now, recorded in the history). A cancel (`temporal workflow cancel`) before the pod is deleted
also undrains and uncordons, then ends the workflow as cancelled. The `status` query says which jobs hold
the node and until when.
Workflow ID: `nodeset-scalein/<namespace>/<pod>/<pod uid>`, so each pod is drained at most once at a time.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, Literal, TypeVar

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError

from slinky.operator import slurm_state
from slinky.operator.models import (
    DrainInput,
    NodeRef,
    NodeSetEventInput,
    PodRef,
    ScaleInInput,
    ScaleInOutcome,
    ScaleInPhase,
    ScaleInResult,
    ScaleInStatus,
    SlurmNodeView,
)
from workflows import retry

T = TypeVar("T")
WaitOutcome = Literal["drained", "stopped", "gone"]

SA_NAMESPACE = SearchAttributeKey.for_keyword("SlinkyNamespace")
SA_NODESET = SearchAttributeKey.for_keyword("SlinkyNodeSet")
SA_SLURM_NODE = SearchAttributeKey.for_keyword("SlinkySlurmNode")
SA_PHASE = SearchAttributeKey.for_keyword("SlinkyPhase")
CALL_FAILED = (ActivityError, ApplicationError)
POD_GONE_CHECK = timedelta(seconds=10)
PATCH_POD_CHECK = "fallback-checks-the-pod"
PATCH_EVENTS_BESIDE = "events-beside-the-path"
"""Histories from before Events ran beside the wait and the delete replay with them awaited in line."""
"""Histories from before the fallback also checked the pod replay without that call."""


def workflow_id(namespace: str, pod: str, uid: str) -> str:
    return f"nodeset-scalein/{namespace}/{pod}/{uid}"


@workflow.defn(name="NodeSetScaleIn")
class NodeSetScaleInWorkflow:
    def __init__(self) -> None:
        self._phase: ScaleInPhase = "cordoning"
        self._view: SlurmNodeView | None = None
        self._fresh = False
        self._signalled = 0
        """How many node_state signals arrived: a view signalled while a read ran is newer than its answer."""
        self._keep = False
        self._abort = False
        self._force = False
        self._pod_gone = False
        self._cancelled: list[int] = []
        self._forced = False
        """The force was carried out (the cancel ran, with or without jobs to cancel)."""
        self._inp: ScaleInInput | None = None
        self._pending: list[asyncio.Task[None]] = []
        self._beside = False
        """Events run in a lane of their own, in order, off the scale-in's path (patched)."""
        self._outcome: ScaleInOutcome = ""

    # ------------------------------------------------------------------------------------ interface
    @workflow.signal
    def node_state(self, view: SlurmNodeView) -> None:
        """The shared node poll saw this node change."""
        self._view = view
        self._fresh = True
        self._signalled += 1

    @workflow.signal
    def keep(self) -> None:
        """The pod is wanted again (scaled back up) before it was deleted: undrain and end."""
        self._keep = True

    @workflow.signal
    def pod_gone(self) -> None:
        """The pod watch saw the pod deleted."""
        self._pod_gone = True

    @workflow.update
    def abort(self) -> ScaleInStatus:
        """Stop this scale-in: the node is undrained and the pod stays (until the next reconcile condemns it)."""
        self._abort = True
        return self.status()

    @abort.validator
    def _abort_allowed(self) -> None:
        if self._phase not in ("cordoning", "draining"):
            raise ApplicationError(f"too late to abort: the pod is already {self._phase}", non_retryable=True)

    @workflow.update
    def force(self) -> ScaleInStatus:
        """Cancel the jobs that hold the node now instead of waiting for them."""
        self._force = True
        return self.status()

    @force.validator
    def _force_allowed(self) -> None:
        if self._phase not in ("cordoning", "draining"):
            raise ApplicationError(f"nothing to force: the pod is already {self._phase}", non_retryable=True)

    @workflow.query
    def status(self) -> ScaleInStatus:
        inp = self._inp
        view = self._view or SlurmNodeView(name=inp.node if inp else "")
        waiting = ""
        if self._phase == "draining":
            waiting = f"jobs {view.jobs} on node {view.name}" if view.jobs else f"node {view.name} to drain"
        elif self._phase == "deleting":
            waiting = "the pod to be deleted"
        return ScaleInStatus(
            phase=self._phase,
            pod=inp.pod.name if inp else "",
            node=view.name,
            cause=inp.cause if inp else "scale-in",
            states=view.states,
            reason=view.reason,
            jobs=view.jobs,
            deadline=view.deadline,
            waiting_for=waiting,
            forced=self._force,
            cancelled_jobs=self._cancelled,
            outcome=self._outcome,
        )

    # ------------------------------------------------------------------------------------ lifecycle
    @workflow.run
    async def run(self, inp: ScaleInInput) -> ScaleInResult:
        try:
            return await self._scale_in(inp)
        except asyncio.CancelledError:
            # `temporal workflow cancel`: leave the pod and its node as they were, unless it is already going.
            if self._phase in ("cordoning", "draining"):
                await self._release(inp, self._drain_input(inp))
                await self._note(inp.pod, "ScaleInStopped", f"scale-in cancelled: Slurm node {inp.node} undrained")
            await self._flush()
            raise

    @staticmethod
    def _drain_input(inp: ScaleInInput) -> DrainInput:
        reason = (slurm_state.scale_in_reason if inp.cause == "scale-in" else slurm_state.update_reason)(
            inp.pod.namespace, inp.pod.name
        )
        return DrainInput(controller=inp.controller, node=inp.node, reason=reason)

    async def _scale_in(self, inp: ScaleInInput) -> ScaleInResult:
        self._inp = inp
        workflow.upsert_search_attributes(
            [
                SA_NAMESPACE.value_set(inp.pod.namespace),
                SA_NODESET.value_set(inp.nodeset),
                SA_SLURM_NODE.value_set(inp.node),
            ]
        )
        self._set_phase("cordoning")
        if not await self._call("nodeset_cordon_pod", inp.pod, bool):
            return await self._finish("gone", inp)
        self._set_phase("draining")
        drain = self._drain_input(inp)
        await self._probe("nodeset_drain_node", drain)
        draining = f"Slurm node {inp.node} drains before the pod is deleted ({inp.cause})"
        # Events off the critical path: recorded beside the wait and the delete, awaited before the end.
        self._beside = workflow.patched(PATCH_EVENTS_BESIDE)
        await self._note(inp.pod, "Draining", draining)
        waited = await self._wait_drained(inp, drain)
        if waited == "gone":
            # Deleted under us (a person, the NodeSet or the namespace): its preStop took the node out of Slurm.
            self._set_phase("forgetting")
            await self._forget(inp)
            return await self._finish("gone", inp)
        if waited == "stopped":
            await self._release(inp, drain)
            outcome: ScaleInOutcome = "aborted" if self._abort else "kept"
            await self._note(inp.pod, "ScaleInStopped", f"scale-in {outcome}: Slurm node {inp.node} undrained")
            return await self._finish(outcome, inp)
        self._set_phase("deleting")
        drained = f"Slurm node {inp.node} is drained; deleting the pod"
        await self._note(inp.pod, "Drained", drained)
        await self._do("nodeset_delete_pod", inp.pod)
        while not self._pod_gone:
            await self._wait(lambda: self._pod_gone, POD_GONE_CHECK)
            if not self._pod_gone:
                self._pod_gone = await self._call("nodeset_pod_gone", inp.pod, bool)
        self._set_phase("forgetting")
        await self._forget(inp)
        return await self._finish("deleted", inp)

    async def _release(self, inp: ScaleInInput, drain: DrainInput) -> None:
        """Undrain (an operator reason only) and uncordon. The undrain is bounded: a Slurm that stays away never
        holds the workflow, the pod is uncordoned anyway, and the operator's cordon step undrains the node
        (operator-owned reason, pod not cordoned) once Slurm answers."""
        try:
            await self._do("nodeset_undrain_node", drain, retry.SLURM_CLEANUP)
        except CALL_FAILED:
            message = f"could not undrain Slurm node {inp.node} now; the operator undrains it when Slurm answers"
            await self._note(inp.pod, "UndrainDeferred", message, "Warning")
        await self._do("nodeset_uncordon_pod", inp.pod)

    async def _forget(self, inp: ScaleInInput) -> None:
        """Make sure the Slurm node left Slurm (the preStop normally did); bounded, then a Warning."""
        try:
            await self._do(
                "nodeset_forget_node", NodeRef(controller=inp.controller, node=inp.node), retry.SLURM_CLEANUP
            )
        except CALL_FAILED:
            message = f"could not make sure Slurm node {inp.node} left Slurm; check `sinfo -n {inp.node}`"
            await self._note(inp.pod, "ForgetFailed", message, "Warning")

    async def _wait_drained(self, inp: ScaleInInput, drain: DrainInput) -> WaitOutcome:
        """ "drained" once the node is drained (or confirmed gone); "stopped" when asked to keep or abort;
        "gone" when the pod was deleted by someone else meanwhile."""
        ref = NodeRef(controller=inp.controller, node=inp.node)
        fallback = timedelta(seconds=inp.fallback_check_seconds)
        while True:
            if self._pod_gone:
                return "gone"
            if self._keep or self._abort:
                return "stopped"
            self._fresh = False  # a signal from here on (during a call below, too) wakes the wait
            if self._force_pending():
                self._cancelled = await self._call("nodeset_cancel_node_jobs", ref, list[int], retry.SLURM)
                self._forced = True
                await self._note(inp.pod, "ForcedScaleIn", f"cancelled jobs {self._cancelled} on {inp.node}")
            view = self._view
            if view is not None and not view.exists:
                confirmed = await self._probe("nodeset_read_node", ref)
                if confirmed is not None and not confirmed.exists and not confirmed.jobs:
                    return "drained"
                view = confirmed
            if view is not None and view.exists:
                if slurm_state.is_drained(view.states):
                    return "drained"
                if not slurm_state.is_draining_or_drained(view.states):
                    # Undrained under us (a slurmd that re-registered, a person's RESUME): drain again.
                    again = await self._probe("nodeset_drain_node", drain)
                    if again is not None and slurm_state.is_draining_or_drained(again.states):
                        continue  # look again at once; a drain that did not take waits for the next news
            woke = await self._wait(
                lambda: self._fresh or self._keep or self._abort or self._pod_gone or self._force_pending(), fallback
            )
            if not woke:
                # No news for a whole fallback period: is the pod still there (a deleted namespace sends no
                # signal), then read the node.
                if workflow.patched(PATCH_POD_CHECK) and await self._call("nodeset_pod_gone", inp.pod, bool):
                    self._pod_gone = True
                    continue
                await self._probe("nodeset_read_node", ref)

    async def _probe(self, name: str, arg: Any) -> SlurmNodeView | None:
        """Run an activity that answers with the node's view (a few tries; None when Slurm or the Controller
        does not answer: the wait loop tries again at its next wake-up). The answer is kept unless the shared
        poll signalled a view while it ran: that one is newer, and the loop looks at it next."""
        signalled = self._signalled
        try:
            view = await self._call(name, arg, SlurmNodeView, retry.SLURM_PROBE)
        except CALL_FAILED as err:
            workflow.logger.warning("%s failed, trying again at the next wake-up: %s", name, err)
            return None
        if self._signalled == signalled or self._view is None:
            self._view = view
        return view

    def _force_pending(self) -> bool:
        return self._force and not self._forced

    # ------------------------------------------------------------------------------------ plumbing
    def _set_phase(self, phase: ScaleInPhase) -> None:
        self._phase = phase
        workflow.upsert_search_attributes([SA_PHASE.value_set(phase)])

    async def _finish(self, outcome: ScaleInOutcome, inp: ScaleInInput) -> ScaleInResult:
        await self._flush()
        self._outcome = outcome
        self._set_phase("done")
        return ScaleInResult(outcome=outcome, node=inp.node, cancelled_jobs=self._cancelled)

    @staticmethod
    async def _wait(condition: Any, timeout: timedelta) -> bool:
        try:
            await workflow.wait_condition(condition, timeout=timeout)
        except TimeoutError:
            return False
        return True

    async def _call(self, name: str, arg: Any, result_type: type[T], policy: Any = retry.KUBE) -> T:
        result: T = await workflow.execute_activity(
            name, arg, result_type=result_type, start_to_close_timeout=retry.CALL_TIMEOUT, retry_policy=policy
        )
        return result

    async def _do(self, name: str, arg: Any, policy: Any = retry.KUBE) -> None:
        await workflow.execute_activity(name, arg, start_to_close_timeout=retry.CALL_TIMEOUT, retry_policy=policy)

    async def _note(
        self, pod: PodRef, reason: str, message: str, type_: Literal["Normal", "Warning"] = "Normal"
    ) -> None:
        """An Event: in the Events' own lane (after the one before it, never in the scale-in's way), or, for
        histories from before that lane, awaited in line."""
        if not self._beside:
            await self._event(pod, reason, message, type_)
            return
        before = self._pending[-1] if self._pending else None

        async def lane() -> None:
            if before is not None:
                await before
            await self._event(pod, reason, message, type_)

        self._pending.append(asyncio.create_task(lane()))

    async def _flush(self) -> None:
        """Wait for the Events still in their lane (each is best effort and never raises)."""
        if self._pending:
            await asyncio.gather(*self._pending)

    async def _event(
        self, pod: PodRef, reason: str, message: str, type_: Literal["Normal", "Warning"] = "Normal"
    ) -> None:
        """An Event on the pod: best effort, never the end of a scale-in."""
        try:
            await self._do(
                "nodeset_record_event",
                NodeSetEventInput(pod=pod, reason=reason, message=message, type=type_),
                retry.BEST_EFFORT,
            )
        except CALL_FAILED:
            workflow.logger.warning("event %s on %s/%s not recorded", reason, pod.namespace, pod.name)
