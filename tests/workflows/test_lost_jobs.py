"""``WorkloadWorkflow`` when Slurm loses its job (a slurmctld crash: slurm.md §9) or reuses its id.

A job lost before it started is resubmitted with the same pods; a job lost while its pods run is re-adopted on
the very nodes they run on; only when Slurm gave those nodes away are the pods deleted. Events of an earlier
submission whose id Slurm reused never touch the current job. Every Slurm verb names the job with its owner.
"""

from __future__ import annotations

from typing import Any

from slinky.bridge.models.workload import BuildSpecResult, JobEvent, PodEventKind, SubmitResult
from tests.workflows.conftest import (
    EVENTS,
    GANG_SPEC,
    JOB_ID,
    POD,
    POD2,
    FakeActivities,
    gang_input,
    job_event,
    pod_event,
    running_on,
    step_is,
)
from workflows.workload import WorkloadWorkflow

NEW_JOB = JOB_ID + 1


async def vanished(handle: Any, job_id: int = JOB_ID, submission: int | None = 1, cause: str = "") -> None:
    """The router's signal for a job the watcher no longer sees (``cause`` after a controller restart)."""
    await handle.signal(
        WorkloadWorkflow.job_event, JobEvent(job_id=job_id, state="VANISHED", submission=submission, cause=cause)
    )


async def test_a_pending_job_lost_in_a_controller_restart_is_resubmitted_and_the_pod_kept(
    run_workload: Any, fakes: FakeActivities
) -> None:
    fakes.submit = [SubmitResult(job_id=JOB_ID), SubmitResult(job_id=NEW_JOB)]
    async with run_workload() as handle:
        await step_is(handle, "wait_allocation")
        await vanished(handle, cause="controller restart")
        why = await step_is(handle, "wait_allocation")
        assert (why.job_id, why.submit_attempts) == (NEW_JOB, 2)
        await job_event(handle, "RUNNING", "None", "slurm-2", job_id=NEW_JOB)
        await step_is(handle, "running")
        await pod_event(handle, PodEventKind.TERMINAL)
        assert await handle.result() == "the workload ended"
    assert "delete_pods" not in fakes.names()
    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "bind_pods",
        "cancel_job",
        "remove_finalizers",
    ]
    first, second = fakes.args("submit_placeholder_job")
    assert (first.submission, second.submission) == (1, 2)
    # The lost job is never cancelled (its id may be another workload's now); the new one is, by its owner.
    [cancel] = fakes.args("cancel_job")
    assert (cancel.job_id, cancel.submission) == (NEW_JOB, 2)
    lost = fakes.events_with("SlurmJobLost")
    assert [(e.type, e.message) for e in lost] == [
        ("Warning", f"Slurm lost job {JOB_ID} (controller restart); resubmitted as {NEW_JOB}")
    ]
    assert fakes.args("label_pods")[1].job_id == NEW_JOB


async def test_a_running_job_lost_in_a_controller_restart_is_readopted_on_the_same_nodes(
    run_workload: Any, fakes: FakeActivities
) -> None:
    fakes.submit = [SubmitResult(job_id=JOB_ID), SubmitResult(job_id=NEW_JOB, nodes=["slurm-3"])]
    async with run_workload() as handle:
        await running_on(handle, fakes, "slurm-3")
        await vanished(handle, cause="controller restart")
        await fakes.called("submit_placeholder_job", 2)
        assert (await step_is(handle, "running")).job_id == NEW_JOB
        await pod_event(handle, PodEventKind.TERMINAL)
        assert await handle.result() == "the workload ended"
    assert "delete_pods" not in fakes.names()
    assert fakes.names(skip=EVENTS) == [
        "build_job_spec",
        "submit_placeholder_job",
        "label_pods",
        "bind_pods",
        "submit_placeholder_job",
        "label_pods",
        "cancel_job",
        "remove_finalizers",
    ]
    readopt = fakes.args("submit_placeholder_job")[1]
    assert (readopt.nodes, readopt.submission) == (["slurm-3"], 2)
    assert fakes.args("label_pods")[1].job_id == NEW_JOB
    [cancel] = fakes.args("cancel_job")
    assert (cancel.job_id, cancel.submission) == (NEW_JOB, 2)
    [lost] = fakes.events_with("SlurmJobLost")
    assert lost.type == "Warning"
    assert lost.message == f"Slurm lost job {JOB_ID} (controller restart); re-adopted as job {NEW_JOB} on slurm-3"


async def test_a_job_back_to_pending_after_a_crash_is_released_then_readopted(
    run_workload: Any, fakes: FakeActivities
) -> None:
    """slurm.md §9: a job saved while starting comes back PENDING. It is still ours: cancel it, then re-adopt."""
    fakes.submit = [SubmitResult(job_id=JOB_ID), SubmitResult(job_id=NEW_JOB, nodes=["slurm-1"])]
    async with run_workload() as handle:
        await running_on(handle, fakes, "slurm-1")
        await job_event(handle, "PENDING", "BeginTime")
        await fakes.called("submit_placeholder_job", 2)
        await step_is(handle, "running")
        await pod_event(handle, PodEventKind.TERMINAL)
        await handle.result()
    names = fakes.names(skip=EVENTS)
    assert names[3:] == [
        "bind_pods",
        "cancel_job",
        "submit_placeholder_job",
        "label_pods",
        "cancel_job",
        "remove_finalizers",
    ]
    released, cleaned = fakes.args("cancel_job")
    assert (released.job_id, released.submission) == (JOB_ID, 1)
    assert (cleaned.job_id, cleaned.submission) == (NEW_JOB, 2)
    assert "delete_pods" not in names


async def test_nodes_given_to_another_job_keep_the_pods_and_a_queued_job_waits_for_them(
    run_workload: Any, fakes: FakeActivities
) -> None:
    """Slurm gave the node to a job submitted right after its restart: the pods are not punished for it; the
    re-adopting job waits in the queue for that node (PENDING is expected), then holds it again."""
    fakes.submit = [
        SubmitResult(job_id=JOB_ID),
        SubmitResult(job_id=NEW_JOB, error_number=2016, error_message="Requested nodes are busy (2016)"),
    ]
    async with run_workload() as handle:
        await running_on(handle, fakes, "slurm-1")
        await vanished(handle, cause="controller restart")
        await fakes.called("submit_placeholder_job", 2)
        await step_is(handle, "running")
        await job_event(handle, "PENDING", "Resources", job_id=NEW_JOB)
        await job_event(handle, "RUNNING", "None", "slurm-1", job_id=NEW_JOB)
        await pod_event(handle, PodEventKind.TERMINAL)
        assert await handle.result() == "the workload ended"
    names = fakes.names(skip=EVENTS)
    assert "delete_pods" not in names
    assert names[-4:] == ["submit_placeholder_job", "label_pods", "cancel_job", "remove_finalizers"]
    assert fakes.args("cancel_job")[0].job_id == NEW_JOB
    [lost] = fakes.events_with("SlurmJobLost")
    assert "the pods keep running" in lost.message and f"job {NEW_JOB} waits for exactly those nodes" in lost.message


async def test_a_new_job_refused_on_the_nodes_deletes_the_pods_with_a_warning(
    run_workload: Any, fakes: FakeActivities
) -> None:
    fakes.submit = [
        SubmitResult(job_id=JOB_ID),
        SubmitResult(error_number=2004, error_message="Requested node configuration is not available (2004)"),
    ]
    async with run_workload() as handle:
        await running_on(handle, fakes, "slurm-1")
        await vanished(handle, cause="controller restart")
        await fakes.called("delete_pods")
        await pod_event(handle, PodEventKind.GONE)
        assert await handle.result() == "Slurm lost the job and refused a new one on its nodes"
    assert "cancel_job" not in fakes.names()
    [warning] = fakes.events_with("SlurmAllocationLost")
    assert warning.type == "Warning"
    assert f"Slurm lost job {JOB_ID} (controller restart)" in warning.message
    assert "slurm-1" in warning.message and "not available" in warning.message


async def test_an_event_of_an_earlier_submission_with_a_reused_id_is_ignored(
    run_workload: Any, fakes: FakeActivities
) -> None:
    """Slurm gave the resubmitted job the lost job's id again: a late VANISHED of submission 1 is old news."""
    fakes.submit = [SubmitResult(job_id=JOB_ID), SubmitResult(job_id=JOB_ID)]
    async with run_workload() as handle:
        await step_is(handle, "wait_allocation")
        await vanished(handle, cause="controller restart")
        await fakes.called("submit_placeholder_job", 2)
        await step_is(handle, "wait_allocation")
        await vanished(handle, submission=1)
        await job_event(handle, "RUNNING", "None", "slurm-4")
        await step_is(handle, "running")
        why = await handle.query(WorkloadWorkflow.why_pending)
        assert (why.job_id, why.submit_attempts) == (JOB_ID, 2)
        await pod_event(handle, PodEventKind.TERMINAL)
        await handle.result()
    assert fakes.names(skip=EVENTS).count("submit_placeholder_job") == 2
    assert [b.bindings[0].slurm_node for b in fakes.args("bind_pods")] == ["slurm-4"]


async def test_a_gang_whose_running_job_vanished_is_readopted_on_all_its_nodes(
    run_workload: Any, fakes: FakeActivities
) -> None:
    fakes.submit = [SubmitResult(job_id=JOB_ID), SubmitResult(job_id=NEW_JOB, nodes=["slurm-1", "slurm-2"])]
    fakes.build = [BuildSpecResult(spec=GANG_SPEC)]
    async with run_workload(gang_input()) as handle:
        await pod_event(handle, PodEventKind.ADDED, POD2)
        await running_on(handle, fakes, "slurm-2", "slurm-1")
        await vanished(handle, cause="controller restart")
        await fakes.called("label_pods", 2)
        await step_is(handle, "running")
        await pod_event(handle, PodEventKind.TERMINAL, POD)
        await pod_event(handle, PodEventKind.TERMINAL, POD2)
        assert await handle.result() == "the workload ended"
    readopt = fakes.args("submit_placeholder_job")[1]
    assert readopt.nodes == ["slurm-1", "slurm-2"]
    assert {p.uid for p in fakes.args("label_pods")[1].pods} == {POD.uid, POD2.uid}
    assert "delete_pods" not in fakes.names()
