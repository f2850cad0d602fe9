"""``WorkloadWorkflow`` against scripted fake activities on the time-skipping test server.

Each scenario drives the workflow with the signals the bridge's watchers would send and asserts the order
of the calls that matter (cancel only after the pod is gone, finalizer last, ...). Time moves only while a
test awaits the result or calls ``env.sleep``, so the long safety re-check never fires by accident.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import WorkflowEnvironment

from slinky.bridge.models.jobspec import SlurmJobSpec
from slinky.bridge.models.workload import (
    BindPodsResult,
    BuildSpecResult,
    JobEvent,
    Phase,
    PodBinding,
    PodEvent,
    PodEventKind,
    PodStateResult,
    SubmitResult,
)
from tests.workflows.conftest import (
    EVENTS,
    JOB_ID,
    POD,
    SIGNALED,
    SPEC,
    FakeActivities,
    job_event,
    marker_types,
    pod_event,
    running_on,
    signal_applied,
    step_is,
    workload_input,
)
from workflows.workload import WorkloadWorkflow


# ---------------------------------------------------------------------------------------- happy path
async def test_happy_path_binds_on_the_first_slurm_node_and_cleans_up_in_order(
    run_workload: Any, fakes: FakeActivities
) -> None:
    async with run_workload() as handle:
        why = await step_is(handle, "wait_allocation")
        assert (why.phase, why.job_id, why.submit_attempts, why.pods) == (
            Phase.PENDING,
            JOB_ID,
            1,
            [POD.key],
        )

        await job_event(handle, "PENDING", "Resources")
        await fakes.called("set_pod_condition")
        why = await handle.query(WorkloadWorkflow.why_pending)
        assert (why.phase, why.step, why.job_id, why.slurm_state, why.reason) == (
            Phase.PENDING,
            "wait_allocation",
            JOB_ID,
            "PENDING",
            "Resources",
        )
        [condition] = fakes.args("set_pod_condition")
        assert condition.reason == "Unschedulable"
        assert "Resources" in condition.message and str(JOB_ID) in condition.message
        assert why.message == condition.message

        # The same reason again is not worth another condition update.
        await job_event(handle, "PENDING", "Resources")
        await job_event(handle, "RUNNING", "None", "slurm-3", "slurm-4")
        await step_is(handle, "running")
        assert (await handle.query(WorkloadWorkflow.why_pending)).phase == Phase.RUNNING

        await pod_event(handle, PodEventKind.TERMINAL)
        assert await handle.result() == "the workload ended"
        why = await handle.query(WorkloadWorkflow.why_pending)
        assert (why.phase, why.step) == (Phase.FINISHED, "done")

    assert fakes.names() == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "record_event",
        "set_pod_condition",
        "bind_pods",
        "record_event",
        "cancel_job",
        "remove_finalizers",
        "record_event",
    ]
    [submit] = fakes.args("submit_placeholder_job")
    assert submit.spec == SPEC and submit.workflow_id == handle.id
    [label] = fakes.args("label_pods")
    assert (label.pods, label.job_id, label.workflow_id) == ([POD], JOB_ID, handle.id)
    [bind] = fakes.args("bind_pods")
    assert bind.job_id == JOB_ID
    assert bind.bindings == [PodBinding(pod=POD, slurm_node="slurm-3")]
    [cancel] = fakes.args("cancel_job")
    # Never an id alone: the job is named with its owner (workflow and submission), checked before the cancel.
    assert (cancel.job_id, cancel.workflow_id, cancel.submission) == (JOB_ID, handle.id, 1)
    assert submit.submission == 1
    assert fakes.events() == [
        ("Normal", "SlurmJobSubmitted"),
        ("Normal", "Scheduled"),
        ("Normal", "SlurmJobCleanedUp"),
    ]
    scheduled = fakes.args("record_event")[1]
    assert "k8s-slurm-3" in scheduled.messages[POD.uid]


async def test_an_immediate_allocation_binds_without_a_start_signal_then_labels(
    run_workload: Any, fakes: FakeActivities
) -> None:
    """The submit got the nodes at once: bind in the same step, label after, no waiting for a job_event."""
    fakes.submit = [SubmitResult(job_id=JOB_ID, nodes=["slurm-7"])]
    async with run_workload() as handle:
        why = await step_is(handle, "running")
        assert (why.phase, why.job_id) == (Phase.RUNNING, JOB_ID)
        await pod_event(handle, PodEventKind.TERMINAL)
        assert await handle.result() == "the workload ended"
    assert fakes.names() == [
        "build_job_spec",
        "submit_placeholder_job",
        "bind_pods",
        "label_pods",
        "record_event",
        "record_event",
        "cancel_job",
        "remove_finalizers",
        "record_event",
    ]
    [bind] = fakes.args("bind_pods")
    assert bind.bindings == [PodBinding(pod=POD, slurm_node="slurm-7")]
    [label] = fakes.args("label_pods")
    assert (label.pods, label.job_id) == ([POD], JOB_ID)
    assert fakes.events() == [
        ("Normal", "SlurmJobSubmitted"),
        ("Normal", "Scheduled"),
        ("Normal", "SlurmJobCleanedUp"),
    ]
    assert not fakes.args("set_pod_condition"), "never pending: no Unschedulable condition"


async def test_an_allocated_pod_costs_five_local_activities(run_workload: Any, fakes: FakeActivities) -> None:
    """Binding, labelling and their two Events are one activity (place_pods), the finalizer and the cleanup Event
    another (release_pods): 5 markers in the history instead of 9, and two patch markers (that one, and the one
    re-check timer)."""
    fakes.submit = [SubmitResult(job_id=JOB_ID, nodes=["slurm-7"])]
    async with run_workload() as handle:
        await step_is(handle, "running")
        await pod_event(handle, PodEventKind.TERMINAL)
        assert await handle.result() == "the workload ended"
        history = [e async for e in handle.fetch_history_events()]
    assert [kind for _, kind in marker_types(history)] == [
        "build_job_spec",
        "submit_placeholder_job",
        "place_pods",
        "cancel_job",
        "release_pods",
    ]
    patches = [
        e.marker_recorded_event_attributes.details["patch_data"]
        for e in history
        if e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]
    assert len(patches) == 2
    [placed] = fakes.args("place_pods")
    assert placed.label and placed.workflow_id == handle.id and placed.scheduled_reason == "Scheduled"
    [released] = fakes.args("release_pods")
    assert released.pods == [POD] and released.event is not None and released.event.reason == "SlurmJobCleanedUp"


async def test_a_pod_deleted_between_binding_and_labelling_ends_the_lifecycle_and_cancels_its_job(
    run_workload: Any, fakes: FakeActivities
) -> None:
    """Allocated at once and bound, but gone before the label (no finalizer yet): cancel the job, clean up."""
    fakes.submit = [SubmitResult(job_id=JOB_ID, nodes=["slurm-7"])]
    fakes.label_gone = {POD.uid}
    async with run_workload() as handle:
        assert await handle.result() == "the workload ended"
    names = fakes.names(skip=EVENTS)
    assert names == ["build_job_spec", "submit_placeholder_job", "bind_pods", "label_pods", "cancel_job",
                     "remove_finalizers"]  # fmt: skip
    assert fakes.args("cancel_job")[0].job_id == JOB_ID


async def test_an_immediate_allocation_reported_again_by_the_watcher_binds_once(
    run_workload: Any, fakes: FakeActivities
) -> None:
    fakes.submit = [SubmitResult(job_id=JOB_ID, nodes=["slurm-7"])]
    async with run_workload() as handle:
        await step_is(handle, "running")
        await job_event(handle, "RUNNING", "None", "slurm-7")
        await pod_event(handle, PodEventKind.TERMINAL)
        assert await handle.result() == "the workload ended"
    assert len(fakes.args("bind_pods")) == 1
    assert fakes.names().count("cancel_job") == 1


async def test_job_event_before_the_submit_result_is_recorded_still_binds(
    run_workload: Any, fakes: FakeActivities
) -> None:
    """The Slurm watcher can report the job while the submit call is still running (a slow slurmrestd)."""
    fakes.submit_gate = asyncio.Event()
    # A short workflow task timeout makes the worker heartbeat the task during the slow local activity,
    # which is when a signal is applied before the activity's result.
    async with run_workload(task_timeout=timedelta(seconds=1)) as handle:
        await fakes.called("submit_placeholder_job")
        await job_event(handle, "RUNNING", "None", "slurm-1")

        await signal_applied(handle)
        fakes.submit_gate.set()

        await step_is(handle, "running")
        await pod_event(handle, PodEventKind.TERMINAL)
        assert await handle.result() == "the workload ended"

        history = [e async for e in handle.fetch_history_events()]
    signal_id = next(e.event_id for e in history if e.event_type == SIGNALED)
    submit_marker = next(i for i, kind in marker_types(history) if kind == "submit_placeholder_job")
    assert signal_id < submit_marker, "the job event must reach the workflow before the submit result"
    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "bind_pods",
        "cancel_job",
        "remove_finalizers",
    ]
    assert fakes.args("bind_pods")[0].bindings == [PodBinding(pod=POD, slurm_node="slurm-1")]


# ---------------------------------------------------------------------------------------- bad input
async def test_translation_error_waits_for_a_fix_then_submits(run_workload: Any, fakes: FakeActivities) -> None:
    message = "slurmjob.slinky.slurm.net/node-count: 'two' is not an integer"
    fakes.build = [
        BuildSpecResult(error_reason="SlurmJobInvalid", error_message=message),
        BuildSpecResult(spec=SPEC),
    ]
    async with run_workload() as handle:
        why = await step_is(handle, "wait_for_fix")
        assert why.phase == Phase.INVALID and why.job_id is None and why.message == message
        assert fakes.names() == ["build_job_spec", "record_event", "set_pod_condition"]
        assert fakes.events() == [("Warning", "SlurmJobInvalid")]
        [condition] = fakes.args("set_pod_condition")
        assert (condition.reason, condition.message) == ("SlurmJobInvalid", message)

        await pod_event(handle, PodEventKind.CHANGED)
        why = await step_is(handle, "wait_allocation")
        assert why.phase == Phase.PENDING and why.job_id == JOB_ID

        await pod_event(handle, PodEventKind.GONE)
        await handle.result()
    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "cancel_job",
        "remove_finalizers",
    ]


async def test_pods_ending_before_the_submit_cancel_a_submission_the_history_never_recorded(
    run_workload: Any, fakes: FakeActivities
) -> None:
    """A worker killed after its submit ran but before the workflow task was recorded: the replayed lifecycle
    has no job id, but the watcher reports the job (its comment names this workflow). When the pods then end
    before a submit is recorded, that job is cancelled by owner, not left to the 60 s garbage collection
    (seen in the chaos run: an orphan job after a kill -9 of the bridge worker)."""
    fakes.build = [BuildSpecResult(error_reason="SlurmJobInvalid", error_message="bad")]
    async with run_workload() as handle:
        await step_is(handle, "wait_for_fix")
        await handle.signal(WorkloadWorkflow.job_event, JobEvent(job_id=900, state="PENDING", submission=1))
        await handle.signal(WorkloadWorkflow.job_event, JobEvent(job_id=901, state="CANCELLED", submission=2))
        await pod_event(handle, PodEventKind.GONE)
        assert await handle.result() == "the pods ended before a Slurm job was submitted"
    assert fakes.names(skip=EVENTS) == ["build_job_spec", "cancel_job", "remove_finalizers"]
    [cancel] = fakes.args("cancel_job")
    assert (cancel.job_id, cancel.workflow_id, cancel.submission) == (900, handle.id, 1)


async def test_change_during_a_failing_translation_is_not_lost(run_workload: Any, fakes: FakeActivities) -> None:
    """The user fixes the pod while the failing translation's Event is being written: re-translate at once."""
    fakes.build = [BuildSpecResult(error_reason="SlurmJobInvalid", error_message="bad"), BuildSpecResult(spec=SPEC)]
    fakes.event_gate = asyncio.Event()
    async with run_workload(task_timeout=timedelta(seconds=1)) as handle:
        await fakes.called("record_event")
        await pod_event(handle, PodEventKind.CHANGED)
        await signal_applied(handle)
        fakes.event_gate.set()
        await fakes.called("submit_placeholder_job")
        await step_is(handle, "wait_allocation")
        await pod_event(handle, PodEventKind.GONE)
        await handle.result()
    assert fakes.names(skip=EVENTS)[:3] == ["build_job_spec", "build_job_spec", "submit_placeholder_job"]


async def test_slurm_rejection_waits_then_a_recheck_resubmits(run_workload: Any, fakes: FakeActivities) -> None:
    fakes.submit = [
        SubmitResult(error_number=2000, error_message="Invalid partition name specified"),
        SubmitResult(job_id=JOB_ID),
    ]
    async with run_workload() as handle:
        why = await step_is(handle, "wait_for_fix")
        assert why.phase == Phase.INVALID and why.job_id is None and why.submit_attempts == 1
        assert fakes.events() == [("Warning", "SlurmJobRejected")]
        [condition] = fakes.args("set_pod_condition")
        assert condition.reason == "SlurmJobRejected"
        assert "Invalid partition name specified" in condition.message
        assert "label_pods" not in fakes.names()

        await handle.signal(WorkloadWorkflow.recheck)
        why = await step_is(handle, "wait_allocation")
        assert (why.job_id, why.submit_attempts, why.rechecks) == (JOB_ID, 2, 1)

        await pod_event(handle, PodEventKind.GONE)
        await handle.result()
    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "submit_placeholder_job",
        "get_pod_states",
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "cancel_job",
        "remove_finalizers",
    ]


# ---------------------------------------------------------------------------------------- pod ends
async def test_pod_deleted_while_pending_cancels_after_gone(run_workload: Any, fakes: FakeActivities) -> None:
    """An unbound pod being deleted runs nowhere: the watcher reports it GONE (``pods.is_gone``)."""
    async with run_workload() as handle:
        await step_is(handle, "wait_allocation")
        assert "cancel_job" not in fakes.names()

        await pod_event(handle, PodEventKind.GONE)
        assert await handle.result() == "the pods ended while their job was pending"
    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "cancel_job",
        "remove_finalizers",
    ]
    assert fakes.names()[-2:] == ["remove_finalizers", "record_event"]


async def test_unbound_pod_deleting_counts_as_stopped(run_workload: Any, fakes: FakeActivities) -> None:
    """A DELETING pod that was never bound has no containers: its pending job is cancelled without a GONE."""
    async with run_workload() as handle:
        await step_is(handle, "wait_allocation")
        await pod_event(handle, PodEventKind.DELETING)
        assert await handle.result() == "the pods ended while their job was pending"
        assert (await handle.query(WorkloadWorkflow.why_pending)).phase == Phase.FINISHED
    assert fakes.names(skip=EVENTS)[-2:] == ["cancel_job", "remove_finalizers"]


async def test_pod_deleting_while_running_keeps_the_job_until_gone(run_workload: Any, fakes: FakeActivities) -> None:
    """Upstream bug #16: the allocation was released while the pod's containers still ran."""
    async with run_workload() as handle:
        await running_on(handle, fakes, "slurm-1")
        await pod_event(handle, PodEventKind.DELETING)
        await step_is(handle, "wait_pod_gone")
        # The workflow is parked; a recheck that still sees the pod terminating changes nothing.
        fakes.pod_state = PodStateResult(exists=True, phase="Running", deleting=True)
        fakes.job = JobEvent(job_id=JOB_ID, state="RUNNING", nodes=["slurm-1"])
        await handle.signal(WorkloadWorkflow.recheck)
        await fakes.called("get_pod_states")
        await step_is(handle, "wait_pod_gone")
        assert "cancel_job" not in fakes.names()

        await pod_event(handle, PodEventKind.GONE)
        assert await handle.result() == "the workload ended"
    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "bind_pods",
        "get_pod_states",
        "get_job",
        "cancel_job",
        "remove_finalizers",
    ]


async def test_pod_that_never_stops_gets_its_job_cancelled_at_the_gone_timeout(
    run_workload: Any, fakes: FakeActivities
) -> None:
    """The fallback of bug #16's fix: a pod stuck terminating does not hold its allocation forever."""
    inp = workload_input(safety_recheck_seconds=300.0, gone_timeout_seconds=120.0)
    fakes.pod_state = PodStateResult(exists=True, phase="Running", deleting=True)
    fakes.job = JobEvent(job_id=JOB_ID, state="RUNNING", nodes=["slurm-1"])
    async with run_workload(inp) as handle:
        await running_on(handle, fakes, "slurm-1")
        await pod_event(handle, PodEventKind.DELETING)
        await step_is(handle, "wait_pod_gone")
        assert "cancel_job" not in fakes.names()

        assert await handle.result() == "the workload ended"  # time skips to the fallback
        history = [e async for e in handle.fetch_history_events()]
    deleting_at = max(e.event_time.ToDatetime() for e in history if e.event_type == SIGNALED)
    ended_at = history[-1].event_time.ToDatetime()
    waited = (ended_at - deleting_at).total_seconds()
    assert 120 <= waited < 121, f"the job was cancelled {waited}s after the pod began deleting, not at 120s"
    # One last look at the pod right at the deadline, then cancel, then the finalizer.
    assert fakes.names(skip=EVENTS)[-4:] == ["get_pod_states", "get_job", "cancel_job", "remove_finalizers"]


# ---------------------------------------------------------------------------------------- job ends
async def test_job_ending_first_deletes_the_pod_and_does_not_cancel(run_workload: Any, fakes: FakeActivities) -> None:
    async with run_workload() as handle:
        await running_on(handle, fakes, "slurm-1")
        await job_event(handle, "CANCELLED", "None", "slurm-1")
        await fakes.called("delete_pods")
        await step_is(handle, "wait_pod_gone")
        assert "remove_finalizers" not in fakes.names()

        await pod_event(handle, PodEventKind.GONE)
        assert await handle.result() == "the Slurm job ended (CANCELLED)"
    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "bind_pods",
        "delete_pods",
        "remove_finalizers",
    ]
    assert ("Warning", "SlurmJobEnded") in fakes.events()


# ---------------------------------------------------------------------------------------- changes
async def test_annotation_change_while_pending_updates_the_pending_job(
    run_workload: Any, fakes: FakeActivities
) -> None:
    changed = SlurmJobSpec(pods=(POD.key,), partition="debug", cpus_per_task=1, time_limit_minutes=30)
    fakes.build = [BuildSpecResult(spec=SPEC), BuildSpecResult(spec=changed)]
    async with run_workload() as handle:
        await step_is(handle, "wait_allocation")
        await pod_event(handle, PodEventKind.CHANGED)
        await fakes.called("update_pending_job")
        [update] = fakes.args("update_pending_job")
        assert (update.job.job_id, update.job.workflow_id, update.job.submission, update.spec) == (
            JOB_ID,
            handle.id,
            1,
            changed,
        )

        # The same annotations again: nothing to update.
        await pod_event(handle, PodEventKind.CHANGED)
        await fakes.called("build_job_spec", 3)
        await job_event(handle, "RUNNING", "None", "slurm-2")
        await step_is(handle, "running")
        await pod_event(handle, PodEventKind.TERMINAL)
        await handle.result()
    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "build_job_spec",
        "update_pending_job",
        "build_job_spec",
        "bind_pods",
        "cancel_job",
        "remove_finalizers",
    ]


async def test_invalid_annotation_change_while_pending_keeps_the_job_and_still_binds(
    run_workload: Any, fakes: FakeActivities
) -> None:
    """A bad edit of a pending pod is reported, but the job already in Slurm keeps its place and runs."""
    fakes.build = [BuildSpecResult(spec=SPEC), BuildSpecResult(error_reason="SlurmJobInvalid", error_message="bad")]
    async with run_workload() as handle:
        await step_is(handle, "wait_allocation")
        await pod_event(handle, PodEventKind.CHANGED)
        await fakes.called("set_pod_condition")
        await job_event(handle, "RUNNING", "None", "slurm-2")
        await fakes.called("bind_pods")
        await pod_event(handle, PodEventKind.TERMINAL)
        await handle.result()
    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "build_job_spec",
        "bind_pods",
        "cancel_job",
        "remove_finalizers",
    ]
    assert ("Warning", "SlurmJobInvalid") in fakes.events()


# ---------------------------------------------------------------------------------------- operator
async def test_operator_cancel_while_running_tears_down_in_order(run_workload: Any, fakes: FakeActivities) -> None:
    async with run_workload() as handle:
        await running_on(handle, fakes, "slurm-1")
        await handle.cancel()
        await fakes.called("delete_pods")
        await step_is(handle, "wait_pod_gone")
        assert "cancel_job" not in fakes.names()

        await pod_event(handle, PodEventKind.GONE)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
    assert isinstance(failure.value.cause, CancelledError)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "bind_pods",
        "delete_pods",
        "cancel_job",
        "remove_finalizers",
    ]


async def test_safety_recheck_finds_a_missed_allocation_and_binds(
    env: WorkflowEnvironment, run_workload: Any, fakes: FakeActivities
) -> None:
    fakes.job = JobEvent(job_id=JOB_ID, state="RUNNING", nodes=["slurm-5"])
    fakes.bind = BindPodsResult(nodes={POD.uid: "worker-5"})
    async with run_workload(workload_input(safety_recheck_seconds=60.0)) as handle:
        await step_is(handle, "wait_allocation")
        assert "get_job" not in fakes.names()

        await env.sleep(61)  # no signal at all: only the durable re-check can notice the allocation
        await fakes.called("bind_pods")
        why = await step_is(handle, "running")
        assert why.rechecks == 1 and why.message == f"bound to worker-5 by Slurm job {JOB_ID}"

        await pod_event(handle, PodEventKind.TERMINAL)
        await handle.result()
    assert fakes.names(skip=EVENTS)[:6] == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "get_pod_states",
        "get_job",
        "bind_pods",
    ]
    assert fakes.args("get_job")[0].workflow_id == handle.id
    assert fakes.args("bind_pods")[0].bindings == [PodBinding(pod=POD, slurm_node="slurm-5")]


async def test_signals_while_pending_start_no_timer_and_the_recheck_still_comes_each_period(
    env: WorkflowEnvironment, run_workload: Any, fakes: FakeActivities
) -> None:
    """One durable timer per re-check period, not one started and cancelled at each wait: three pending reasons
    and a pod deletion cost no timer events, and the re-check still comes when the period ends."""
    async with run_workload(workload_input(safety_recheck_seconds=60.0)) as handle:
        await step_is(handle, "wait_allocation")
        for reason in ("Priority", "Resources", "Priority"):
            await job_event(handle, "PENDING", reason)
            await signal_applied(handle)
        await env.sleep(30)
        await job_event(handle, "PENDING", "Resources")
        await env.sleep(31)  # 61 s after the first wait, 31 s after the last signal: the period, not the silence
        await fakes.called("get_job")
        assert (await step_is(handle, "wait_allocation")).rechecks == 1
        await pod_event(handle, PodEventKind.GONE)
        await handle.result()
        history = [e async for e in handle.fetch_history_events()]
    kinds = [e.event_type for e in history]
    assert kinds.count(EventType.EVENT_TYPE_TIMER_STARTED) == 2, "the first period's timer and the next one's"
    assert kinds.count(EventType.EVENT_TYPE_TIMER_FIRED) == 1
    assert EventType.EVENT_TYPE_TIMER_CANCELED not in kinds


async def test_the_recheck_interval_follows_what_the_last_recheck_was_given(
    env: WorkflowEnvironment, run_workload: Any, fakes: FakeActivities
) -> None:
    """The pod watcher's budget grows with the open workloads: a lifecycle started with 60 s that is told 600 s at
    its first re-check waits 600 s for the next one, and its history's timers say so (replays follow the result)."""
    fakes.recheck_seconds = 600.0
    async with run_workload(workload_input(safety_recheck_seconds=60.0)) as handle:
        await step_is(handle, "wait_allocation")
        await env.sleep(61)
        await fakes.called("get_job")
        assert (await step_is(handle, "wait_allocation")).rechecks == 1
        await env.sleep(300)  # five of the input's periods: no re-check, the new interval holds
        assert (await step_is(handle, "wait_allocation")).rechecks == 1
        await env.sleep(310)
        await fakes.called("get_job", times=2)
        assert (await step_is(handle, "wait_allocation")).rechecks == 2
        await pod_event(handle, PodEventKind.GONE)
        await handle.result()
        history = [e async for e in handle.fetch_history_events()]
    timers = [
        e.timer_started_event_attributes.start_to_fire_timeout.ToSeconds()
        for e in history
        if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    ]
    assert timers == [60, 600, 600]


async def test_events_for_another_pod_uid_are_ignored(run_workload: Any, fakes: FakeActivities) -> None:
    async with run_workload() as handle:
        await step_is(handle, "wait_allocation")
        await handle.signal(WorkloadWorkflow.pod_event, PodEvent(uid="some-other-uid", kind=PodEventKind.GONE))
        # Only a gang takes new members: an ADDED of another pod does not join a single-pod workload.
        await handle.signal(
            WorkloadWorkflow.pod_event, PodEvent(uid="some-other-uid", name="other", kind=PodEventKind.ADDED)
        )
        why = await step_is(handle, "wait_allocation")
        assert why.phase == Phase.PENDING and why.pods == [POD.key]
        await pod_event(handle, PodEventKind.GONE)
        await handle.result()
    assert fakes.args("remove_finalizers")[0].pods == [POD]


async def test_a_long_running_workload_continues_as_new_and_still_cleans_up(
    env: WorkflowEnvironment, run_workload: Any, fakes: FakeActivities
) -> None:
    """After ``continue_as_new_after_rechecks`` re-checks the running lifecycle continues as new with its
    state (job, members, nodes); the new run still cancels the job and removes the finalizer at the end."""
    inp = workload_input(safety_recheck_seconds=60.0, continue_as_new_after_rechecks=2)
    async with run_workload(inp) as handle:
        await running_on(handle, fakes, "slurm-2")
        first_run = (await handle.describe()).run_id
        fakes.job = JobEvent(job_id=JOB_ID, state="RUNNING", nodes=["slurm-2"])
        await env.sleep(125)  # two re-checks: the next wait continues as new
        latest = env.client.get_workflow_handle(handle.id)
        for _ in range(100):
            if (await latest.describe()).run_id != first_run:
                break
            await asyncio.sleep(0.05)
        why = await latest.query(WorkloadWorkflow.why_pending)
        assert (await latest.describe()).run_id != first_run
        assert (why.phase, why.step, why.job_id, why.rechecks) == (Phase.RUNNING, "running", JOB_ID, 2)
        await latest.signal(WorkloadWorkflow.pod_event, PodEvent(uid=POD.uid, kind=PodEventKind.TERMINAL))
        assert await latest.result() == "the workload ended"
    names = fakes.names()
    assert names.index("cancel_job") < names.index("remove_finalizers")
    assert names.count("submit_placeholder_job") == 1 and names.count("bind_pods") == 1


async def test_an_invalid_workload_is_retried_on_a_backoff_without_repeating_its_event(
    env: WorkflowEnvironment, run_workload: Any, fakes: FakeActivities
) -> None:
    """A fix no pod signal reports (a Job's or PodGroup's annotations) is found by the backoff re-translation;
    the same problem is reported once, not at every retry."""
    bad = BuildSpecResult(error_reason="SlurmJobInvalid", error_message="owner annotation is bad")
    fakes.build = [bad, bad, BuildSpecResult(spec=SPEC)]
    async with run_workload() as handle:
        await step_is(handle, "wait_for_fix")
        await env.sleep(31)  # first retry after 30 s: still invalid, nothing new to report
        await fakes.called("build_job_spec", 2)
        assert fakes.events() == [("Warning", "SlurmJobInvalid")]
        await env.sleep(61)  # second retry after 60 s: fixed
        why = await step_is(handle, "wait_allocation")
        assert why.job_id == JOB_ID
        await pod_event(handle, PodEventKind.GONE)
        await handle.result()
    assert fakes.names().count("build_job_spec") == 3
    assert fakes.names().count("set_pod_condition") == 1


async def test_the_same_allocation_reported_again_changes_nothing(run_workload: Any, fakes: FakeActivities) -> None:
    async with run_workload() as handle:
        await running_on(handle, fakes, "slurm-1")
        await job_event(handle, "RUNNING", "None", "slurm-1")
        await pod_event(handle, PodEventKind.TERMINAL)
        assert await handle.result() == "the workload ended"
    assert "delete_pods" not in fakes.names()


# ---------------------------------------------------------------------------------------- failing calls
async def test_events_and_conditions_that_keep_failing_do_not_end_the_lifecycle(
    run_workload: Any, fakes: FakeActivities
) -> None:
    """The apiserver down for longer than a best-effort call's tries (the chaos suite's kill -9 of it): the
    lifecycle goes on. A local activity whose retries ran out raises its ApplicationError, not an ActivityError."""
    down = ApplicationError("KubeUnavailable: PATCH ...: ConnectError", type="KubeUnavailable")
    fakes.fail = {"record_event": down, "set_pod_condition": down}
    async with run_workload() as handle:
        await step_is(handle, "wait_allocation")
        await job_event(handle, "PENDING", "Resources")
        await fakes.called("set_pod_condition", 3)
        await job_event(handle, "RUNNING", "None", "slurm-2")
        await step_is(handle, "running")
        await pod_event(handle, PodEventKind.TERMINAL)
        assert await handle.result() == "the workload ended"
    assert fakes.names(skip=EVENTS)[-2:] == ["cancel_job", "remove_finalizers"]


async def test_a_permanent_failure_releases_the_job_and_finalizers_then_fails_visibly(
    run_workload: Any, fakes: FakeActivities
) -> None:
    fakes.fail = {"bind_pods": ApplicationError("pod is bound to another node", type="AlreadyBound")}
    async with run_workload() as handle:
        await step_is(handle, "wait_allocation")
        await job_event(handle, "RUNNING", "None", "slurm-1")
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    assert fakes.names(skip=EVENTS)[-3:] == ["bind_pods", "cancel_job", "remove_finalizers"]
    assert fakes.events()[-1] == ("Warning", "SlurmBridgeFailed")
