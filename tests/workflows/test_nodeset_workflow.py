"""NodeSetScaleInWorkflow against scripted fakes: drain first, wait for the jobs, delete, forget the node."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from slinky.operator.models import (
    ControllerKey,
    DrainInput,
    NodeRef,
    NodeSetEventInput,
    PodRef,
    ScaleInInput,
    ScaleInResult,
    ScaleInStatus,
    SlurmNodeView,
)
from tests.workflows.conftest import eventually
from workflows.nodeset import NodeSetScaleInWorkflow, workflow_id

POD = PodRef(namespace="hpc", name="gpu-2", uid="u-2")
CTL = ControllerKey(namespace="hpc", name="slurm")


@dataclass
class FakeNodeSet:
    """Kubernetes and Slurm as the scale-in sees them: one pod, one node, the jobs on it."""

    pod_exists: bool = True
    states: list[str] = field(default_factory=lambda: ["IDLE"])
    reason: str = ""
    jobs: list[int] = field(default_factory=list)
    node_exists: bool = True
    finalizer: bool = False
    calls: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    read_failures: int = 0
    undrain_fails: bool = False
    """The next reads that fail (Slurm or the Controller away)."""
    drain_gate: asyncio.Event | None = None
    """When set, the drain's answer waits for it (its view read before the wait)."""

    def view(self) -> SlurmNodeView:
        if not self.node_exists:
            return SlurmNodeView(name="gpu-2", exists=False, jobs=self.jobs)
        return SlurmNodeView(name="gpu-2", states=self.states, reason=self.reason, jobs=self.jobs)

    @staticmethod
    def slurm_answers(away: bool) -> None:
        if away:
            raise ApplicationError("slurmrestd does not answer", non_retryable=True)

    def activities(self) -> list[Any]:
        @activity.defn(name="nodeset_cordon_pod")
        async def cordon(pod: PodRef) -> bool:
            self.calls.append("cordon")
            return self.pod_exists

        @activity.defn(name="nodeset_uncordon_pod")
        async def uncordon(pod: PodRef) -> bool:
            self.calls.append("uncordon")
            return True

        @activity.defn(name="nodeset_drain_node")
        async def drain(inp: DrainInput) -> SlurmNodeView:
            self.calls.append("drain")
            if self.node_exists:
                self.states = [*self.states, "DRAIN"]
                self.reason = inp.reason
            view = self.view()
            if self.drain_gate is not None:
                await self.drain_gate.wait()
            return view

        @activity.defn(name="nodeset_undrain_node")
        async def undrain(inp: DrainInput) -> None:
            self.calls.append("undrain")
            self.slurm_answers(self.undrain_fails)
            self.states = [s for s in self.states if s != "DRAIN"]

        @activity.defn(name="nodeset_read_node")
        async def read(ref: NodeRef) -> SlurmNodeView:
            self.calls.append("read")
            if self.read_failures > 0:
                self.read_failures -= 1
                raise ApplicationError("Controller hpc/slurm does not exist", non_retryable=True)
            return self.view()

        @activity.defn(name="nodeset_cancel_node_jobs")
        async def cancel(ref: NodeRef) -> list[int]:
            self.calls.append("cancel")
            cancelled, self.jobs = self.jobs, []
            return cancelled

        @activity.defn(name="nodeset_delete_pod")
        async def delete(pod: PodRef) -> None:
            self.calls.append("delete")
            self.pod_exists = self.finalizer  # a finalizer holds a deleted pod

        @activity.defn(name="nodeset_pod_gone")
        async def gone(pod: PodRef) -> bool:
            self.calls.append("pod_gone?")
            return not self.pod_exists

        @activity.defn(name="nodeset_forget_node")
        async def forget(ref: NodeRef) -> None:
            self.calls.append("forget")
            self.node_exists = False

        @activity.defn(name="nodeset_record_event")
        async def event(inp: NodeSetEventInput) -> None:
            self.events.append(inp.reason)

        return [cordon, uncordon, drain, undrain, read, cancel, delete, gone, forget, event]


@pytest.fixture
async def started(env: WorkflowEnvironment) -> AsyncIterator[Any]:
    fake = FakeNodeSet()
    queue = f"nodeset-{uuid.uuid4().hex[:6]}"
    handles: list[WorkflowHandle[Any, ScaleInResult]] = []
    async with Worker(env.client, task_queue=queue, workflows=[NodeSetScaleInWorkflow], activities=fake.activities()):

        async def start(**kw: Any) -> WorkflowHandle[Any, ScaleInResult]:
            inp = ScaleInInput(pod=POD, nodeset="gpu", node="gpu-2", controller=CTL, **kw)
            handle = await env.client.start_workflow(
                NodeSetScaleInWorkflow.run,
                inp,
                id=workflow_id(POD.namespace, POD.name, uuid.uuid4().hex),
                task_queue=queue,
            )
            handles.append(handle)
            return handle

        try:
            yield fake, start
        finally:
            await terminate_running(handles)


async def terminate_running(handles: list[WorkflowHandle[Any, ScaleInResult]]) -> None:
    """A workflow a failed test leaves running holds the shared time-skipping server's clock still, and every
    later test that waits on a timer then fails with 'Timeout expired'."""
    for handle in handles:
        if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            await handle.terminate("test ended")


async def draining(handle: WorkflowHandle[Any, ScaleInResult], timeout: float = 5.0) -> ScaleInStatus:
    """Wait until the workflow has the drain's answer (the activity ran *and* the workflow took its result:
    a signal sent between the two would race the answer)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        status: ScaleInStatus = await handle.query(NodeSetScaleInWorkflow.status)
        if status.phase == "draining" and "DRAIN" in status.states:
            return status
        if loop.time() > deadline:
            raise AssertionError(f"the workflow never took the drain's answer: {status}")
        await asyncio.sleep(0.01)


async def test_an_idle_node_drains_and_the_pod_goes(started: Any) -> None:
    fake, start = started
    result = await (await start()).result()
    assert result.outcome == "deleted"
    assert fake.calls[:3] == ["cordon", "drain", "delete"] and fake.calls[-1] == "forget"
    assert "read" not in fake.calls, "the drain's answer said drained: no extra read"
    assert fake.reason == "slurm-operator: Pod (hpc/gpu-2) is pending termination for scale-in"
    assert fake.events[:2] == ["Draining", "Drained"]


async def test_a_busy_node_waits_for_its_job_then_the_signal_ends_the_wait(started: Any) -> None:
    fake, start = started
    fake.states, fake.jobs = ["ALLOCATED"], [77]
    handle = await start()
    status = await draining(handle)
    assert status.phase == "draining" and status.jobs == [77] and "77" in status.waiting_for
    assert "delete" not in fake.calls
    fake.states, fake.jobs = ["IDLE", "DRAIN"], []
    await handle.signal(NodeSetScaleInWorkflow.node_state, fake.view())
    assert (await handle.result()).outcome == "deleted"
    assert "cancel" not in fake.calls, "a scale-in never kills a job unless forced"


async def test_a_drained_view_signalled_while_the_drain_ran_is_not_lost(started: Any) -> None:
    """The poll's view that arrives while the drain call runs is newer than the drain's answer: the workflow
    acts on it at once instead of waiting for the next change or the fallback timer."""
    fake, start = started
    fake.states, fake.jobs, fake.drain_gate = ["ALLOCATED"], [8], asyncio.Event()
    handle = await start()
    await eventually(lambda: "drain" in fake.calls, what="drain")
    await handle.signal(NodeSetScaleInWorkflow.node_state, SlurmNodeView(name="gpu-2", states=["IDLE", "DRAIN"]))
    fake.drain_gate.set()  # the drain answers with its older view: ALLOCATED+DRAIN, job 8
    assert (await asyncio.wait_for(handle.result(), 10)).outcome == "deleted"
    assert "read" not in fake.calls, "the signalled view was acted on; no fallback read"


async def test_without_signals_the_fallback_timer_reads_the_node(started: Any, env: WorkflowEnvironment) -> None:
    fake, start = started
    fake.states, fake.jobs = ["MIXED"], [5]
    handle = await start(fallback_check_seconds=30)
    await draining(handle)
    fake.states, fake.jobs = ["IDLE", "DRAIN"], []
    await env.sleep(31)
    assert (await handle.result()).outcome == "deleted" and "read" in fake.calls


async def test_a_vanished_node_is_drained_only_once_confirmed_jobless(started: Any) -> None:
    fake, start = started
    fake.states, fake.jobs = ["ALLOCATED"], [9]
    handle = await start()
    await draining(handle)
    fake.node_exists = False  # Slurm says no such node, but job 9 still names it
    await handle.signal(NodeSetScaleInWorkflow.node_state, SlurmNodeView(name="gpu-2", exists=False))
    await eventually(lambda: "read" in fake.calls, what="confirming read")
    assert "delete" not in fake.calls
    fake.jobs = []
    await handle.signal(NodeSetScaleInWorkflow.node_state, SlurmNodeView(name="gpu-2", exists=False))
    assert (await handle.result()).outcome == "deleted"


async def test_scaled_back_up_before_deletion_keeps_the_pod(started: Any) -> None:
    fake, start = started
    fake.states, fake.jobs = ["ALLOCATED"], [3]
    handle = await start()
    await draining(handle)
    await handle.signal(NodeSetScaleInWorkflow.keep)
    result = await handle.result()
    assert result.outcome == "kept" and fake.calls[-2:] == ["undrain", "uncordon"]
    assert fake.pod_exists and "DRAIN" not in fake.states


async def test_force_cancels_the_jobs_and_abort_is_refused_once_deleting(started: Any) -> None:
    fake, start = started
    fake.states, fake.jobs, fake.finalizer = ["ALLOCATED"], [11, 12], True
    handle = await start()
    await draining(handle)
    forced = await handle.execute_update(NodeSetScaleInWorkflow.force)
    assert forced.forced
    await eventually(lambda: "cancel" in fake.calls, what="cancel")
    fake.states = ["IDLE", "DRAIN"]
    await handle.signal(NodeSetScaleInWorkflow.node_state, fake.view())
    await eventually(lambda: "delete" in fake.calls, what="delete")
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update(NodeSetScaleInWorkflow.abort)
    assert (await handle.query(NodeSetScaleInWorkflow.status)).waiting_for == "the pod to be deleted"
    await handle.signal(NodeSetScaleInWorkflow.pod_gone)
    result = await handle.result()
    assert result.outcome == "deleted" and result.cancelled_jobs == [11, 12]


async def test_abort_undrains(started: Any) -> None:
    fake, start = started
    fake.states, fake.jobs = ["ALLOCATED"], [3]
    handle = await start()
    await draining(handle)
    await handle.execute_update(NodeSetScaleInWorkflow.abort)
    assert (await handle.result()).outcome == "aborted" and "undrain" in fake.calls


async def test_a_pod_already_gone_ends_at_once(started: Any) -> None:
    fake, start = started
    fake.pod_exists = False
    assert (await (await start()).result()).outcome == "gone" and fake.calls == ["cordon"]


async def test_a_node_undrained_under_the_scale_in_is_drained_again(started: Any) -> None:
    fake, start = started
    fake.states, fake.jobs = ["ALLOCATED"], [4]
    handle = await start()
    await draining(handle)
    fake.states, fake.jobs = ["IDLE"], []  # slurmd re-registered: the node came back without DRAIN
    await handle.signal(NodeSetScaleInWorkflow.node_state, fake.view())
    assert (await handle.result()).outcome == "deleted"
    assert fake.calls.count("drain") == 2 and fake.calls.index("delete") > 2


async def test_force_without_jobs_cancels_once(started: Any) -> None:
    fake, start = started
    fake.states = ["COMPLETING"]
    handle = await start()
    await draining(handle)
    await handle.execute_update(NodeSetScaleInWorkflow.force)
    await eventually(lambda: "cancel" in fake.calls, what="cancel")
    fake.states = ["IDLE", "DRAIN"]
    await handle.signal(NodeSetScaleInWorkflow.node_state, fake.view())
    result = await handle.result()
    assert result.cancelled_jobs == [] and fake.calls.count("cancel") == 1


async def test_a_pod_condemned_again_after_a_kept_scale_in_gets_a_new_run(env: WorkflowEnvironment) -> None:
    """The operator's start options: join a running scale-in, start a new one after a closed one."""
    from workers.operator.nodeset.reconciler import START_OPTIONS

    fake = FakeNodeSet(states=["ALLOCATED"], jobs=[3])
    queue = f"nodeset-{uuid.uuid4().hex[:6]}"
    wf = workflow_id(POD.namespace, POD.name, uuid.uuid4().hex)
    inp = ScaleInInput(pod=POD, nodeset="gpu", node="gpu-2", controller=CTL)
    async with Worker(env.client, task_queue=queue, workflows=[NodeSetScaleInWorkflow], activities=fake.activities()):
        start = env.client.start_workflow
        first = await start(NodeSetScaleInWorkflow.run, inp, id=wf, task_queue=queue, **START_OPTIONS)
        joined = await start(NodeSetScaleInWorkflow.run, inp, id=wf, task_queue=queue, **START_OPTIONS)
        assert joined.result_run_id == first.result_run_id, "a restart joins the running scale-in"
        try:
            await draining(first)
            await first.signal(NodeSetScaleInWorkflow.keep)
            assert (await first.result()).outcome == "kept"
            fake.states, fake.jobs = ["IDLE"], []
            again = await start(NodeSetScaleInWorkflow.run, inp, id=wf, task_queue=queue, **START_OPTIONS)
            assert again.result_run_id != first.result_run_id
            assert (await again.result()).outcome == "deleted"
        finally:
            await terminate_running([env.client.get_workflow_handle(wf)])


async def test_a_pod_deleted_by_someone_else_while_draining_ends_the_scale_in(started: Any) -> None:
    fake, start = started
    fake.states, fake.jobs = ["ALLOCATED"], [6]
    handle = await start()
    await draining(handle)
    fake.pod_exists = False
    await handle.signal(NodeSetScaleInWorkflow.pod_gone)
    assert (await handle.result()).outcome == "gone"
    assert "delete" not in fake.calls and fake.calls[-1] == "forget"


async def test_a_failing_read_is_no_news_and_the_wait_goes_on(started: Any, env: WorkflowEnvironment) -> None:
    """A Controller or slurmrestd that does not answer never fails the scale-in nor keeps it deaf to signals."""
    fake, start = started
    fake.states, fake.jobs, fake.read_failures = ["MIXED"], [5], 1
    handle = await start(fallback_check_seconds=30)
    await draining(handle)
    await env.sleep(31)  # the fallback read fails: no news
    await eventually(lambda: "read" in fake.calls, what="the failed read")
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    fake.states, fake.jobs = ["IDLE", "DRAIN"], []
    await handle.signal(NodeSetScaleInWorkflow.node_state, fake.view())
    assert (await handle.result()).outcome == "deleted"


async def test_a_pod_gone_without_a_signal_is_found_at_the_fallback(started: Any, env: WorkflowEnvironment) -> None:
    """A deleted namespace sends no pod_gone signal (no operator watches it any more): the fallback looks."""
    fake, start = started
    fake.states, fake.jobs = ["ALLOCATED"], [2]
    handle = await start(fallback_check_seconds=30)
    await draining(handle)
    fake.pod_exists = False
    await env.sleep(31)
    assert (await handle.result()).outcome == "gone" and "pod_gone?" in fake.calls and "delete" not in fake.calls


async def test_a_cancel_while_draining_undrains_and_uncordons(started: Any) -> None:
    """`temporal workflow cancel` leaves the pod and its node as they were before the scale-in."""
    fake, start = started
    fake.states, fake.jobs = ["ALLOCATED"], [1]
    handle = await start()
    await draining(handle)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    assert fake.calls[-2:] == ["undrain", "uncordon"] and "delete" not in fake.calls
    assert "DRAIN" not in fake.states and "ScaleInStopped" in fake.events


async def test_a_keep_while_slurm_is_away_still_uncordons_and_ends(started: Any) -> None:
    """The undrain is bounded: the pod is uncordoned, the workflow ends kept, and a Warning says the operator
    undrains the node once Slurm answers (its cordon step does: an operator reason on an uncordoned pod)."""
    fake, start = started
    fake.states, fake.jobs, fake.undrain_fails = ["ALLOCATED"], [3], True
    handle = await start()
    await draining(handle)
    await handle.signal(NodeSetScaleInWorkflow.keep)
    assert (await handle.result()).outcome == "kept"
    assert fake.calls[-2:] == ["undrain", "uncordon"] and "UndrainDeferred" in fake.events
