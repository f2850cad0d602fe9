"""``WorkloadWorkflow`` for a gang (a PodGroup of two) against scripted fake activities.

One Slurm job for the whole gang, one member per allocated node. The first member starts the lifecycle;
the others arrive as ``pod_event`` ADDED signals (the pod watcher's signal-with-start). Before the job
starts a lost member cancels it and the gang gathers again; after the start the gang lives and dies
together.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from slinky.bridge.models.jobspec import SlurmJobSpec
from slinky.bridge.models.workload import (
    BuildSpecResult,
    JobEvent,
    Phase,
    PodBinding,
    PodEvent,
    PodEventKind,
    PodRef,
    SubmitResult,
)
from slinky.clients.temporal import data_converter
from tests.workflows.conftest import (
    EVENTS,
    GANG_SPEC,
    GROUP,
    JOB_ID,
    POD,
    POD2,
    POD3,
    FakeActivities,
    gang_input,
    job_event,
    pod_event,
    running_on,
    signal_applied,
    step_is,
)
from workflows.workload import SA_JOB_ID, SA_PHASE, WorkloadWorkflow

NEXT_JOB_ID = JOB_ID + 1
RESUBMIT_SPEC = SlurmJobSpec(pods=(POD.key, POD3.key), partition="debug", min_nodes=2, max_nodes=2)


async def gang_running(handle: WorkflowHandle[Any, Any]) -> None:
    """Gather the second member, then let Slurm start the job on two nodes."""
    await step_is(handle, "wait_members")
    await pod_event(handle, PodEventKind.ADDED, POD2)
    await step_is(handle, "wait_allocation")
    await job_event(handle, "RUNNING", "None", "slurm-1", "slurm-2")
    await step_is(handle, "running")


async def replays(handle: WorkflowHandle[Any, Any]) -> None:
    replayer = Replayer(workflows=[WorkloadWorkflow], data_converter=data_converter)
    await replayer.replay_workflow(await handle.fetch_history())


def gang_fakes(fakes: FakeActivities) -> FakeActivities:
    fakes.build = [BuildSpecResult(spec=GANG_SPEC, kind="PodGroup", workload_name=GROUP.name)]
    return fakes


# ---------------------------------------------------------------------------------------- gathering
async def test_gang_waits_for_min_member_then_submits_one_job_for_both(
    run_workload: Any, fakes: FakeActivities
) -> None:
    gang_fakes(fakes)
    async with run_workload(gang_input()) as handle:
        why = await step_is(handle, "wait_members")
        assert (why.min_member, why.missing_members, why.job_id, why.pods) == (2, 1, None, [POD.key])
        assert why.message == "waiting for 1 of 2 members of PodGroup gang"
        assert fakes.names() == []  # nothing is translated or submitted for half a gang

        # A change of the one member present does not submit half a gang either.
        await pod_event(handle, PodEventKind.CHANGED)
        why = await step_is(handle, "wait_members")
        assert why.missing_members == 1 and fakes.names() == []

        await pod_event(handle, PodEventKind.ADDED, POD2)
        why = await step_is(handle, "wait_allocation")
        assert (why.missing_members, why.job_id, why.submit_attempts) == (0, JOB_ID, 1)
        assert why.pods == [POD.key, POD2.key]
        assert fakes.group_phases() == ["Scheduling"]

        await job_event(handle, "RUNNING", "None", "slurm-1", "slurm-2")
        await step_is(handle, "running")
        assert fakes.group_phases() == ["Scheduling", "Running"]

        await pod_event(handle, PodEventKind.TERMINAL, POD, "Succeeded")
        await pod_event(handle, PodEventKind.TERMINAL, POD2, "Succeeded")
        assert await handle.result() == "the workload ended"

    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "set_group_phase",
        "bind_pods",
        "set_group_phase",
        "set_group_phase",
        "cancel_job",
        "remove_finalizers",
    ]
    assert fakes.group_phases() == ["Scheduling", "Running", "Finished"]
    assert all(g.group == GROUP for g in fakes.args("set_group_phase"))
    [build] = fakes.args("build_job_spec")
    assert (build.pods, build.group) == ([POD, POD2], GROUP)
    [submit] = fakes.args("submit_placeholder_job")
    assert submit.spec == GANG_SPEC
    [label] = fakes.args("label_pods")
    assert (label.pods, label.job_id, label.workflow_id) == ([POD, POD2], JOB_ID, handle.id)
    assert fakes.args("remove_finalizers")[0].pods == [POD, POD2]
    assert fakes.events()[0] == ("Normal", "SlurmJobSubmitted")
    assert fakes.args("record_event")[0].pods == [POD, POD2]


async def test_an_immediately_allocated_gang_binds_every_member_then_labels_them(
    run_workload: Any, fakes: FakeActivities
) -> None:
    """Nodes in the submit result: no Scheduling phase, bind first, then label and the Events."""
    gang_fakes(fakes).submit = [SubmitResult(job_id=JOB_ID, nodes=["slurm-1", "slurm-2"])]
    async with run_workload(gang_input()) as handle:
        await step_is(handle, "wait_members")
        await pod_event(handle, PodEventKind.ADDED, POD2)
        await step_is(handle, "running")
        assert fakes.group_phases() == ["Running"]
        await pod_event(handle, PodEventKind.TERMINAL, POD, "Succeeded")
        await pod_event(handle, PodEventKind.TERMINAL, POD2, "Succeeded")
        assert await handle.result() == "the workload ended"
        await replays(handle)
    assert fakes.names(skip=EVENTS)[:5] == [
        "build_job_spec",
        "submit_placeholder_job",
        "bind_pods",
        "label_pods",
        "set_group_phase",
    ]
    [bind] = fakes.args("bind_pods")
    assert sorted((b.pod.uid, b.slurm_node) for b in bind.bindings) == sorted(
        [(POD.uid, "slurm-1"), (POD2.uid, "slurm-2")]
    )
    [label] = fakes.args("label_pods")
    assert sorted(p.uid for p in label.pods) == sorted([POD.uid, POD2.uid])
    assert fakes.events()[:2] == [("Normal", "SlurmJobSubmitted"), ("Normal", "Scheduled")]
    assert fakes.group_phases() == ["Running", "Finished"]


async def test_bind_assigns_one_member_per_allocated_node(run_workload: Any, fakes: FakeActivities) -> None:
    gang_fakes(fakes)
    async with run_workload(gang_input()) as handle:
        await gang_running(handle)
        why = await handle.query(WorkloadWorkflow.why_pending)
        assert why.message == f"bound to k8s-slurm-1, k8s-slurm-2 by Slurm job {JOB_ID}"
    [bind] = fakes.args("bind_pods")
    assert bind.job_id == JOB_ID
    assert bind.bindings == [PodBinding(pod=POD, slurm_node="slurm-1"), PodBinding(pod=POD2, slurm_node="slurm-2")]
    # One Scheduled Event per member, each naming its own node, recorded by ONE activity.
    [scheduled] = [e for e in fakes.args("record_event") if e.reason == "Scheduled"]
    assert scheduled.pods == [POD, POD2]
    assert {uid: m.split(" to ")[1].split(" ")[0] for uid, m in scheduled.messages.items()} == {
        POD.uid: "k8s-slurm-1",
        POD2.uid: "k8s-slurm-2",
    }


async def test_gang_timeout_warns_once_and_keeps_waiting(
    env: WorkflowEnvironment, run_workload: Any, fakes: FakeActivities
) -> None:
    gang_fakes(fakes)
    async with run_workload(gang_input(gang_timeout_seconds=120.0)) as handle:
        await step_is(handle, "wait_members")
        await env.sleep(60)
        # Quiet for 2 s: the member's PodScheduled condition says what the gang waits for, once.
        [condition] = fakes.args("set_pod_condition")
        assert (condition.pods, condition.reason) == ([POD], "WaitingForGang")
        assert condition.message == "waiting for 1 of 2 members of PodGroup gang"
        assert fakes.names() == ["set_pod_condition"]

        await env.sleep(61)  # past the gang timeout
        await fakes.called("record_event")
        [warning] = fakes.args("record_event")
        assert (warning.type, warning.reason, warning.pods) == ("Warning", "GangIncomplete", [POD])
        assert "1 of 2 members" in warning.message and "gang" in warning.message
        why = await step_is(handle, "wait_members")
        assert why.missing_members == 1 and why.job_id is None

        await env.sleep(600)  # still waiting, and warned only once
        assert fakes.events() == [("Warning", "GangIncomplete")]
        assert "submit_placeholder_job" not in fakes.names()

        await pod_event(handle, PodEventKind.ADDED, POD2)
        why = await step_is(handle, "wait_allocation")
        assert why.job_id == JOB_ID
        for pod in (POD, POD2):
            await pod_event(handle, PodEventKind.GONE, pod)
        await handle.result()
    assert fakes.names(skip=EVENTS)[:3] == ["build_job_spec", "submit_placeholder_job", "label_pods"]


async def test_members_arriving_in_the_first_workflow_task_all_count(run_workload: Any, fakes: FakeActivities) -> None:
    """Two members' signal-with-start land before the workflow's first task: neither ADDED may be lost."""
    gang_fakes(fakes)
    early = [
        PodEvent(uid=POD.uid, name=POD.name, kind=PodEventKind.ADDED),
        PodEvent(uid=POD2.uid, name=POD2.name, kind=PodEventKind.ADDED),
    ]
    async with run_workload(gang_input(), early=early) as handle:
        why = await step_is(handle, "wait_allocation")
        assert why.pods == [POD.key, POD2.key] and why.missing_members == 0
        for pod in (POD, POD2):
            await pod_event(handle, PodEventKind.GONE, pod)
        await handle.result()
        await replays(handle)  # the fix is behind workflow.patched(): its own history must replay
    assert fakes.args("build_job_spec")[0].pods == [POD, POD2]


async def test_members_batched_in_one_signal_count_and_leave_together(run_workload: Any, fakes: FakeActivities) -> None:
    """The pod watcher sends a lifecycle's burst as one ``pod_events`` signal (a gang created or deleted at once):
    every member counts, as with one ``pod_event`` each, and the history has one event per burst."""
    gang_fakes(fakes)
    joined = [PodEvent(uid=p.uid, name=p.name, kind=PodEventKind.ADDED) for p in (POD, POD2)]
    async with run_workload(gang_input(), start_signal="pod_events", start_signal_args=[joined]) as handle:
        why = await step_is(handle, "wait_allocation")
        assert why.pods == [POD.key, POD2.key] and why.missing_members == 0
        await job_event(handle, "RUNNING", "None", "slurm-1", "slurm-2")
        await step_is(handle, "running")
        gone = [PodEvent(uid=p.uid, name=p.name, kind=PodEventKind.TERMINAL, phase="Succeeded") for p in (POD, POD2)]
        await handle.signal(WorkloadWorkflow.pod_events, gone)
        assert await handle.result() == "the workload ended"
        history = await handle.fetch_history()
        await replays(handle)
    assert fakes.args("build_job_spec")[0].pods == [POD, POD2]
    signals = [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history.events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    assert signals.count("pod_events") == 2 and "pod_event" not in signals


# ---------------------------------------------------------------------------------------- lost before start
async def test_member_deleted_while_pending_cancels_and_resubmits_with_a_new_member(
    run_workload: Any, fakes: FakeActivities
) -> None:
    fakes.build = [BuildSpecResult(spec=GANG_SPEC), BuildSpecResult(spec=RESUBMIT_SPEC)]
    fakes.submit = [SubmitResult(job_id=JOB_ID), SubmitResult(job_id=NEXT_JOB_ID)]
    async with run_workload(gang_input()) as handle:
        await step_is(handle, "wait_members")
        await pod_event(handle, PodEventKind.ADDED, POD2)
        await step_is(handle, "wait_allocation")
        await job_event(handle, "PENDING", "Resources")

        await pod_event(handle, PodEventKind.DELETING, POD2)
        await fakes.called("cancel_job")
        why = await step_is(handle, "wait_members")
        assert (why.phase, why.job_id, why.missing_members) == (Phase.SUBMITTING, None, 1)
        assert fakes.args("cancel_job")[0].job_id == JOB_ID
        # The departed member's finalizer goes now; the one staying keeps its own for the next job.
        assert fakes.args("remove_finalizers")[0].pods == [POD2]
        assert ("Warning", "GangMemberLost") in fakes.events()

        # The departed member's end, and the end of the cancelled job, change nothing.
        await pod_event(handle, PodEventKind.GONE, POD2)
        await job_event(handle, "CANCELLED", "None")
        why = await step_is(handle, "wait_members")
        assert why.missing_members == 1 and fakes.names().count("submit_placeholder_job") == 1

        await pod_event(handle, PodEventKind.ADDED, POD3)
        why = await step_is(handle, "wait_allocation")
        assert (why.job_id, why.submit_attempts) == (NEXT_JOB_ID, 2)

        await job_event(handle, "RUNNING", "None", "slurm-1", "slurm-2", job_id=NEXT_JOB_ID)
        await step_is(handle, "running")
        for pod in (POD, POD3):
            await pod_event(handle, PodEventKind.TERMINAL, pod, "Succeeded")
        assert await handle.result() == "the workload ended"

    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "set_group_phase",
        "cancel_job",
        "remove_finalizers",
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "set_group_phase",
        "bind_pods",
        "set_group_phase",
        "set_group_phase",
        "cancel_job",
        "remove_finalizers",
    ]
    assert [b.pods for b in fakes.args("build_job_spec")] == [[POD, POD2], [POD, POD3]]
    assert [s.spec for s in fakes.args("submit_placeholder_job")] == [GANG_SPEC, RESUBMIT_SPEC]
    assert [(lbl.pods, lbl.job_id) for lbl in fakes.args("label_pods")] == [
        ([POD, POD2], JOB_ID),
        ([POD, POD3], NEXT_JOB_ID),
    ]
    assert [c.job_id for c in fakes.args("cancel_job")] == [JOB_ID, NEXT_JOB_ID]
    assert fakes.args("bind_pods")[0].bindings == [
        PodBinding(pod=POD, slurm_node="slurm-1"),
        PodBinding(pod=POD3, slurm_node="slurm-2"),
    ]
    assert fakes.group_phases() == ["Scheduling", "Scheduling", "Running", "Finished"]


async def test_replacement_added_while_the_lost_member_is_released_joins_the_resubmission(
    run_workload: Any, fakes: FakeActivities
) -> None:
    """A controller recreates a deleted member at once: its ADDED may arrive while the old job is cancelled."""
    fakes.build = [BuildSpecResult(spec=GANG_SPEC), BuildSpecResult(spec=RESUBMIT_SPEC)]
    fakes.submit = [SubmitResult(job_id=JOB_ID), SubmitResult(job_id=NEXT_JOB_ID)]
    fakes.cancel_gate = asyncio.Event()
    async with run_workload(gang_input(), task_timeout=timedelta(seconds=1)) as handle:
        await step_is(handle, "wait_members")
        await pod_event(handle, PodEventKind.ADDED, POD2)
        await step_is(handle, "wait_allocation")
        await pod_event(handle, PodEventKind.DELETING, POD2)
        await fakes.called("cancel_job")

        await pod_event(handle, PodEventKind.ADDED, POD3)  # while the old job is still being cancelled
        await signal_applied(handle, last=True)
        fakes.cancel_gate.set()

        why = await step_is(handle, "wait_allocation")
        assert (why.job_id, why.submit_attempts) == (NEXT_JOB_ID, 2)
        for pod in (POD, POD2, POD3):
            await pod_event(handle, PodEventKind.GONE, pod)
        await handle.result()
        await replays(handle)
    assert [b.pods for b in fakes.args("build_job_spec")] == [[POD, POD2], [POD, POD3]]


# ---------------------------------------------------------------------------------------- after start
async def test_member_failed_after_start_deletes_the_rest_and_cancels_after_both_stopped(
    run_workload: Any, fakes: FakeActivities
) -> None:
    gang_fakes(fakes)
    async with run_workload(gang_input()) as handle:
        await gang_running(handle)
        await pod_event(handle, PodEventKind.TERMINAL, POD, "Failed")
        await fakes.called("delete_pods")
        assert fakes.args("delete_pods")[0].pods == [POD2]
        await step_is(handle, "wait_pod_gone")
        assert fakes.group_phases() == ["Scheduling", "Running", "Failed"]

        # The other member is terminating on its node: the allocation stays until it stopped.
        await pod_event(handle, PodEventKind.DELETING, POD2)
        await step_is(handle, "wait_pod_gone")
        assert "cancel_job" not in fakes.names()

        await pod_event(handle, PodEventKind.GONE, POD2)
        assert await handle.result() == f"member {POD.key} failed"
    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "set_group_phase",
        "bind_pods",
        "set_group_phase",
        "delete_pods",
        "set_group_phase",
        "cancel_job",
        "remove_finalizers",
    ]
    lost = next(e for e in fakes.args("record_event") if e.reason == "GangMemberLost")
    assert (lost.type, lost.pods) == ("Warning", [POD2])
    assert fakes.args("remove_finalizers")[0].pods == [POD, POD2]


async def test_member_deleted_after_start_deletes_the_rest(run_workload: Any, fakes: FakeActivities) -> None:
    gang_fakes(fakes)
    async with run_workload(gang_input()) as handle:
        await gang_running(handle)
        await pod_event(handle, PodEventKind.DELETING, POD2)
        await fakes.called("delete_pods")
        assert fakes.args("delete_pods")[0].pods == [POD]
        for pod in (POD, POD2):
            await step_is(handle, "wait_pod_gone")
            assert "cancel_job" not in fakes.names()
            await pod_event(handle, PodEventKind.GONE, pod)
        assert await handle.result() == f"member {POD2.key} was deleted"
    assert fakes.group_phases() == ["Scheduling", "Running", "Failed"]
    assert fakes.names(skip=EVENTS)[-2:] == ["cancel_job", "remove_finalizers"]


async def test_all_members_succeeded_finishes_the_group(run_workload: Any, fakes: FakeActivities) -> None:
    gang_fakes(fakes)
    async with run_workload(gang_input()) as handle:
        await gang_running(handle)
        await pod_event(handle, PodEventKind.TERMINAL, POD2, "Succeeded")
        why = await step_is(handle, "running")  # one member done: the gang still runs
        assert "cancel_job" not in fakes.names() and "delete_pods" not in fakes.names()
        assert why.job_id == JOB_ID

        await pod_event(handle, PodEventKind.TERMINAL, POD, "Succeeded")
        assert await handle.result() == "the workload ended"
    assert fakes.group_phases() == ["Scheduling", "Running", "Finished"]
    assert "delete_pods" not in fakes.names()
    assert fakes.names(skip=EVENTS)[-3:] == ["set_group_phase", "cancel_job", "remove_finalizers"]


async def test_job_ending_first_deletes_every_member(run_workload: Any, fakes: FakeActivities) -> None:
    gang_fakes(fakes)
    async with run_workload(gang_input()) as handle:
        await gang_running(handle)
        await job_event(handle, "TIMEOUT", "None", "slurm-1", "slurm-2")
        await fakes.called("delete_pods")
        assert fakes.args("delete_pods")[0].pods == [POD, POD2]
        for pod in (POD, POD2):
            await pod_event(handle, PodEventKind.GONE, pod)
        assert await handle.result() == "the Slurm job ended (TIMEOUT)"
    assert "cancel_job" not in fakes.names()
    assert fakes.group_phases() == ["Scheduling", "Running", "Failed"]


# ---------------------------------------------------------------------------------------- the next lifecycle
POD4 = PodRef(namespace="team-a", name="pod-d", uid="0b7c7d4e-0000-4000-8000-00000000000d")
NEXT_SPEC = SlurmJobSpec(pods=(POD3.key, POD4.key), partition="debug", min_nodes=2, max_nodes=2)


async def next_run(env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any], run_id: str) -> WorkflowHandle[Any, Any]:
    """The lifecycle's run after ``run_id`` (a continue-as-new), once it exists, as a handle bound to that run."""
    for _ in range(500):
        latest = (await handle.describe()).run_id
        if latest != run_id:
            return env.client.get_workflow_handle(handle.id, run_id=latest)
        await asyncio.sleep(0.01)
    raise AssertionError("the lifecycle did not continue as new")


async def test_replacements_that_come_while_the_gang_is_cleaned_up_start_its_next_lifecycle(
    env: WorkflowEnvironment, run_workload: Any, fakes: FakeActivities
) -> None:
    """A ReplicaSet replaces a deleted member: the bridge deletes the other (all or nothing), and the replacements
    (here POD3, POD4) arrive while the ended lifecycle still waits for the old pods to stop. They are in no job:
    once the old one is cleaned up, they start the gang's next lifecycle, linked to the old run, with a job of
    its own (a new submission number: the old job's identity is never taken)."""
    fakes.build = [BuildSpecResult(spec=GANG_SPEC), BuildSpecResult(spec=NEXT_SPEC)]
    fakes.submit = [SubmitResult(job_id=JOB_ID), SubmitResult(job_id=NEXT_JOB_ID)]
    async with run_workload(gang_input()) as started:
        first_run = started.result_run_id
        handle = env.client.get_workflow_handle(started.id, run_id=first_run)
        await gang_running(handle)
        await pod_event(handle, PodEventKind.DELETING, POD2)
        await fakes.called("delete_pods")
        await step_is(handle, "wait_pod_gone")
        for pod in (POD3, POD4):
            await pod_event(handle, PodEventKind.ADDED, pod)
        why = await step_is(handle, "wait_pod_gone")
        assert why.waiting_members == [POD3.key, POD4.key]
        assert fakes.args("delete_pods")[0].pods == [POD]  # the replacements are not the old gang's to delete
        for pod in (POD, POD2):
            await pod_event(handle, PodEventKind.GONE, pod)

        latest = await next_run(env, started, first_run)
        why = await step_is(latest, "wait_allocation")
        assert (why.job_id, why.previous_run_id, why.pods) == (NEXT_JOB_ID, first_run, [POD3.key, POD4.key])
        description = await latest.describe()
        memo = await description.memo()
        assert memo["previous_run_id"] == first_run and memo["restarts"] == 1
        assert memo["previous_result"] == f"member {POD2.key} was deleted"
        attributes = description.typed_search_attributes
        assert attributes.get(SA_PHASE) == "Pending" and attributes.get(SA_JOB_ID) == NEXT_JOB_ID

        await job_event(latest, "RUNNING", "None", "slurm-3", "slurm-4", job_id=NEXT_JOB_ID)
        await step_is(latest, "running")
        for pod in (POD3, POD4):
            await pod_event(latest, PodEventKind.TERMINAL, pod, "Succeeded")
        assert await latest.result() == "the workload ended"
        await replays(handle)
        await replays(latest)

    # The old job is cancelled and its pods released; the new pods get none of that.
    cancels = fakes.args("cancel_job")
    assert [(c.job_id, c.submission) for c in cancels] == [(JOB_ID, 1), (NEXT_JOB_ID, 2)]
    assert fakes.args("remove_finalizers")[0].pods == [POD, POD2]
    cleaned = fakes.events_with("SlurmJobCleanedUp")[0]
    assert cleaned.pods == [POD, POD2]
    [restarted] = fakes.events_with("GangRestarted")
    assert restarted.pods == [POD3, POD4] and f"member {POD2.key} was deleted" in restarted.message
    [first, second] = fakes.args("submit_placeholder_job")
    assert (first.submission, second.submission) == (1, 2) and second.spec == NEXT_SPEC
    assert [b.pods for b in fakes.args("build_job_spec")] == [[POD, POD2], [POD3, POD4]]
    assert fakes.group_phases() == ["Scheduling", "Running", "Failed", "Pending", "Scheduling", "Running", "Finished"]


async def test_one_replacement_waits_in_the_next_lifecycle_and_its_condition_says_for_what(
    env: WorkflowEnvironment, run_workload: Any, fakes: FakeActivities
) -> None:
    """A member that came while the gang's job ran (a late pod) is kept across a continue-as-new for length, and
    starts the next lifecycle when the gang ends: alone, it waits for the rest, and its condition says so."""
    fakes.build = [BuildSpecResult(spec=GANG_SPEC), BuildSpecResult(spec=NEXT_SPEC)]
    fakes.job = JobEvent(job_id=JOB_ID, state="RUNNING", nodes=["slurm-1", "slurm-2"])  # what the re-checks read
    inp = gang_input(safety_recheck_seconds=60.0, continue_as_new_after_rechecks=2)
    async with run_workload(inp) as started:
        handle = env.client.get_workflow_handle(started.id, run_id=started.result_run_id)
        await gang_running(handle)
        await pod_event(handle, PodEventKind.ADDED, POD3)
        why = await step_is(handle, "running")
        assert why.waiting_members == [POD3.key]
        await env.sleep(125)  # two re-checks: the next wait continues as new, POD3 carried along
        long_run = await next_run(env, started, started.result_run_id or "")
        why = await step_is(long_run, "running")
        assert why.waiting_members == [POD3.key] and why.job_id == JOB_ID and why.previous_run_id == ""

        for pod in (POD, POD2):
            await pod_event(long_run, PodEventKind.TERMINAL, pod, "Succeeded")
        latest = await next_run(env, started, long_run.run_id or "")
        why = await step_is(latest, "wait_members")
        assert (why.pods, why.missing_members, why.job_id) == ([POD3.key], 1, None)
        assert why.message == "waiting for 1 of 2 members of PodGroup gang"
        await env.sleep(3)  # quiet for 2 s: the pod is told
        [condition] = [c for c in fakes.args("set_pod_condition") if c.reason == "WaitingForGang"]
        assert (condition.pods, condition.message) == ([POD3], "waiting for 1 of 2 members of PodGroup gang")

        await pod_event(latest, PodEventKind.ADDED, POD4)
        why = await step_is(latest, "wait_allocation")
        assert why.pods == [POD3.key, POD4.key] and why.submit_attempts == 2
        await pod_event(latest, PodEventKind.GONE, POD3)
        await pod_event(latest, PodEventKind.GONE, POD4)
        await latest.result()
        await replays(long_run)
        await replays(latest)
    assert "delete_pods" not in fakes.names()  # the gang ended well: nothing was deleted, POD3 was kept waiting


async def test_a_single_pod_workload_never_starts_again(run_workload: Any, fakes: FakeActivities) -> None:
    """Another pod's ADDED is no member of a single-pod workload: its lifecycle ends as before."""
    async with run_workload() as handle:
        await running_on(handle, fakes, "slurm-1")
        await pod_event(handle, PodEventKind.ADDED, POD2)
        await pod_event(handle, PodEventKind.GONE, POD)
        assert await handle.result() == "the workload ended"
        assert (await handle.describe()).run_id == handle.result_run_id
