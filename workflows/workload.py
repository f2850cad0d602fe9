"""``WorkloadWorkflow``: one durable lifecycle per Kubernetes workload (here: one pod, one Slurm job).

Steps: translate → submit the EXTERNAL_JOB → label the pod → wait for the allocation → bind → wait for
the end → clean up (cancel the job only once the pod really stopped; remove the finalizer last).

The workflow never polls Slurm or Kubernetes on its own: the worker's pod watcher and its single
incremental Slurm poll deliver ``pod_event`` and ``job_event`` signals. A slow durable re-check
(``safety_recheck_seconds``) covers a missed event. Short calls are local activities (markers, not
separate tasks) because every history event costs throughput on a single-shard server.

Operator actions: ``temporal workflow cancel`` tears the workload down (pod deleted, job cancelled,
finalizer removed); the ``recheck`` signal re-reads Slurm and the pod at once (re-drives a stuck step);
the ``why_pending`` query says where it stands. Activities are referenced by name, so this module
imports no I/O code at all.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

with workflow.unsafe.imports_passed_through():
    from slinky.models.jobspec import SlurmJobSpec
    from slinky.models.workload import (
        BindPodInput,
        BindPodResult,
        BuildSpecInput,
        BuildSpecResult,
        DeletePodInput,
        EventInput,
        JobEvent,
        JobRef,
        LabelPodInput,
        Phase,
        PodConditionInput,
        PodEvent,
        PodEventKind,
        PodStateResult,
        SubmitInput,
        SubmitResult,
        UpdateJobInput,
        UpdateJobResult,
        WhyPending,
        WorkloadInput,
    )
    from workflows import retry

T = TypeVar("T")

SA_PHASE = SearchAttributeKey.for_keyword("SlinkyPhase")
SA_JOB_ID = SearchAttributeKey.for_int("SlinkySlurmJobId")
SA_PARTITION = SearchAttributeKey.for_keyword("SlinkyPartition")

ENDED_STATES = frozenset(
    {
        "CANCELLED",
        "COMPLETED",
        "FAILED",
        "TIMEOUT",
        "PREEMPTED",
        "NODE_FAIL",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "VANISHED",
    }
)
QUIET_REASONS = frozenset({"", "None"})
"""Pending reasons not worth a pod condition: the job was just submitted and has not been evaluated."""

# Event reasons (PascalCase, shown by `kubectl describe pod`).
REASON_SUBMITTED = "SlurmJobSubmitted"
REASON_BOUND = "Scheduled"
REASON_CLEANED = "SlurmJobCleanedUp"
REASON_JOB_ENDED = "SlurmJobEnded"
REASON_DEPRECATED = "DeprecatedAnnotation"
REASON_UPDATE_FAILED = "SlurmJobUpdateFailed"


class Ended(Exception):
    """Internal: the lifecycle reached its end; carries the summary."""


@workflow.defn(name="WorkloadWorkflow")
class WorkloadWorkflow:
    def __init__(self) -> None:
        self.inp: WorkloadInput | None = None
        self.phase = Phase.SUBMITTING
        self.step = "start"
        self.job_id: int | None = None
        self.spec: SlurmJobSpec | None = None
        self.jobs_seen: dict[int, JobEvent] = {}
        self.job: JobEvent | None = None
        self.reason_shown = ""
        self.message = ""
        self.submit_attempts = 0
        self.rechecks = 0
        self.pod_terminal = False
        self.pod_deleting = False
        self.pod_gone = False
        self.pod_changed = False
        self.recheck_requested = False
        self.dirty = False

    # ------------------------------------------------------------------------------------ messages
    @workflow.signal
    def pod_event(self, event: PodEvent) -> None:
        if self.inp is not None and event.uid != self.inp.pod.uid:
            return
        if event.kind == PodEventKind.TERMINAL:
            self.pod_terminal = True
        elif event.kind == PodEventKind.DELETING:
            self.pod_deleting = True
        elif event.kind == PodEventKind.GONE:
            self.pod_gone = True
        elif event.kind == PodEventKind.CHANGED:
            self.pod_changed = True
        self.dirty = True

    @workflow.signal
    def job_event(self, event: JobEvent) -> None:
        # Kept by id: the watcher may report the job before the submit result is recorded here.
        self.jobs_seen[event.job_id] = event
        if event.job_id == self.job_id:
            self.job = event
        self.dirty = True

    @workflow.signal
    def recheck(self) -> None:
        """Operator action: re-read Slurm and the pod now instead of at the next safety re-check."""
        self.recheck_requested = True
        self.dirty = True

    @workflow.query
    def why_pending(self) -> WhyPending:
        job = self.job
        return WhyPending(
            phase=self.phase,
            step=self.step,
            job_id=self.job_id,
            slurm_state=job.state if job else "",
            reason=job.reason if job else "",
            message=self.message,
            submit_attempts=self.submit_attempts,
            rechecks=self.rechecks,
            pods=[self.inp.pod.key] if self.inp else [],
        )

    # ------------------------------------------------------------------------------------ plumbing
    async def _call(self, name: str, arg: Any, result_type: type[T], policy: Any = retry.KUBE) -> T:
        result: T = await workflow.execute_local_activity(
            name,
            arg,
            result_type=result_type,
            start_to_close_timeout=retry.CALL_TIMEOUT,
            retry_policy=policy,
        )
        return result

    async def _do(self, name: str, arg: Any, policy: Any = retry.KUBE) -> None:
        await workflow.execute_local_activity(name, arg, start_to_close_timeout=retry.CALL_TIMEOUT, retry_policy=policy)

    async def _event(self, reason: str, message: str, type_: str = "Normal") -> None:
        assert self.inp is not None
        await self._do(
            "record_event",
            EventInput(pod=self.inp.pod, reason=reason, message=message, type=type_),
            retry.BEST_EFFORT,
        )

    async def _condition(self, reason: str, message: str) -> None:
        assert self.inp is not None
        self.message = message
        await self._do(
            "set_pod_condition",
            PodConditionInput(pod=self.inp.pod, reason=reason, message=message),
            retry.BEST_EFFORT,
        )

    def _set_phase(self, phase: Phase, *extra: SearchAttributeUpdate[Any]) -> None:
        self.phase = phase
        workflow.upsert_search_attributes([SA_PHASE.value_set(phase.value), *extra])

    async def _wait(self, limit: timedelta | None = None) -> None:
        """Wait for a signal, or re-check Slurm and the pod after ``safety_recheck_seconds`` (or ``limit``)."""
        assert self.inp is not None
        timeout = timedelta(seconds=self.inp.safety_recheck_seconds)
        if limit is not None:
            timeout = max(min(timeout, limit), timedelta(milliseconds=1))
        try:
            await workflow.wait_condition(lambda: self.dirty, timeout=timeout)
        except TimeoutError:
            self.recheck_requested = True
        self.dirty = False
        if self.recheck_requested:
            self.recheck_requested = False
            await self._recheck()

    async def _recheck(self) -> None:
        assert self.inp is not None
        self.rechecks += 1
        state = await self._call("get_pod_state", self.inp.pod, PodStateResult)
        self.pod_gone |= state.gone
        self.pod_deleting |= state.deleting
        self.pod_terminal |= state.phase in ("Succeeded", "Failed")
        if self.job_id is not None:
            wid = workflow.info().workflow_id
            self.job = await self._call("get_job", JobRef(job_id=self.job_id, workflow_id=wid), JobEvent, retry.SLURM)

    def _job_ended(self) -> bool:
        return self.job is not None and self.job.state in ENDED_STATES

    # ------------------------------------------------------------------------------------ lifecycle
    @workflow.run
    async def run(self, inp: WorkloadInput) -> str:
        self.inp = inp
        try:
            return await self._lifecycle()
        except Ended as end:
            return str(end)
        except asyncio.CancelledError:
            # Operator cancel: tear everything down, then report the cancellation.
            self.step = "cancelled"
            await self._teardown("the workflow was cancelled")
            raise

    async def _lifecycle(self) -> str:
        await self._submit()
        await self._await_allocation()
        await self._bind()
        await self._await_end()
        return await self._cleanup("the workload ended")

    async def _translate(self, *, wait_for_fix: bool = True) -> SlurmJobSpec | None:
        """The pod's job spec, or None (pod gone, or invalid: reported, then waited on if ``wait_for_fix``)."""
        assert self.inp is not None
        self.step = "translate"
        res = await self._call(
            "build_job_spec", BuildSpecInput(pod=self.inp.pod, defaults=self.inp.defaults), BuildSpecResult
        )
        if res.pod_gone:
            self.pod_gone = True
            return None
        for warning in res.warnings:
            await self._event(REASON_DEPRECATED, warning, "Warning")
        if res.error_reason:
            if wait_for_fix:
                await self._invalid(res.error_reason, res.error_message)
            else:
                await self._report_invalid(res.error_reason, res.error_message)
            return None
        return res.spec

    async def _report_invalid(self, reason: str, message: str) -> None:
        """Tell the user where they look: a Warning Event and the pod condition."""
        await self._event(reason, message, "Warning")
        await self._condition(reason, message)

    async def _invalid(self, reason: str, message: str) -> None:
        """Report the problem, then wait for a fix or the pod's end."""
        self.phase = Phase.INVALID
        await self._report_invalid(reason, message)
        self.step = "wait_for_fix"
        # pod_changed is NOT reset here: a fix that arrived while translating or reporting must count.
        rechecks = self.rechecks
        # A fix is a change of the pod, or of the cluster (nodes, partitions): retry at each re-check.
        while not (self.pod_changed or self.pod_gone or self.pod_deleting or self.pod_terminal):
            await self._wait()
            if self.rechecks != rechecks:
                break

    async def _submit(self) -> None:
        assert self.inp is not None
        wid = workflow.info().workflow_id
        while self.job_id is None:
            if self.pod_gone or self.pod_deleting or self.pod_terminal:
                raise Ended("the pod ended before a Slurm job was submitted")
            self.pod_changed = False
            spec = await self._translate()
            if spec is None:
                continue
            self.step = "submit"
            self.submit_attempts += 1
            res = await self._call(
                "submit_placeholder_job", SubmitInput(workflow_id=wid, spec=spec), SubmitResult, retry.SLURM
            )
            if res.job_id is None:
                await self._invalid("SlurmJobRejected", f"Slurm rejected the job: {res.error_message}")
                continue
            self.spec = spec
            self.job_id = res.job_id
            self.job = self.jobs_seen.get(res.job_id)
        partition = (self.spec.partition if self.spec else None) or self.inp.defaults.partition
        self._set_phase(Phase.PENDING, SA_JOB_ID.value_set(self.job_id), SA_PARTITION.value_set(partition))
        self.step = "label"
        labeled = await self._call("label_pod", LabelPodInput(pod=self.inp.pod, job_id=self.job_id), bool)
        if not labeled:
            self.pod_gone = True
            await self._cleanup("the pod was deleted before it was labelled")
            raise Ended("pod gone after submit")
        await self._event(REASON_SUBMITTED, f"Submitted Slurm job {self.job_id}")

    async def _await_allocation(self) -> None:
        assert self.inp is not None
        self.step = "wait_allocation"
        while True:
            if self.pod_gone or self.pod_deleting or self.pod_terminal:
                raise Ended(await self._cleanup("the pod ended while its job was pending"))
            if self._job_ended():
                raise Ended(await self._end_by_job())
            if self.job is not None and self.job.state == "RUNNING" and self.job.nodes:
                return
            if self.pod_changed:
                self.pod_changed = False
                await self._apply_pod_change()
                continue
            if self.job is not None and self.job.state == "PENDING" and self.job.reason not in QUIET_REASONS:
                if self.job.reason != self.reason_shown:
                    self.reason_shown = self.job.reason
                    await self._condition("Unschedulable", f"Slurm job {self.job_id} is pending: {self.job.reason}")
            await self._wait()

    async def _apply_pod_change(self) -> None:
        """Annotations changed on the pending pod: re-translate and update the pending job.

        A bad edit is reported but does not block: the job already queued in Slurm keeps its place, and
        its allocation is still bound when it comes.
        """
        spec = await self._translate(wait_for_fix=False)
        self.step = "wait_allocation"
        if spec is None or spec == self.spec or self.job_id is None:
            return
        res = await self._call(
            "update_pending_job", UpdateJobInput(job_id=self.job_id, spec=spec), UpdateJobResult, retry.SLURM
        )
        if res.updated:
            self.spec = spec
        else:
            await self._event(
                REASON_UPDATE_FAILED, f"Slurm job {self.job_id} not updated: {res.error_message}", "Warning"
            )

    async def _bind(self) -> None:
        assert self.inp is not None and self.job is not None and self.job_id is not None
        self.step = "bind"
        self._set_phase(Phase.BINDING)
        res = await self._call(
            "bind_pod",
            BindPodInput(pod=self.inp.pod, slurm_node=self.job.nodes[0], job_id=self.job_id),
            BindPodResult,
        )
        if res.pod_gone:
            self.pod_gone = True
            raise Ended(await self._cleanup("the pod ended before it was bound"))
        self.message = f"bound to {res.node} by Slurm job {self.job_id}"
        self._set_phase(Phase.RUNNING)
        await self._event(
            REASON_BOUND, f"Successfully assigned {self.inp.pod.key} to {res.node} (Slurm job {self.job_id})"
        )

    async def _await_end(self) -> None:
        self.step = "running"
        while not (self.pod_gone or self.pod_terminal or self.pod_deleting or self._job_ended()):
            await self._wait()
        if self._job_ended() and not (self.pod_gone or self.pod_terminal):
            raise Ended(await self._end_by_job())

    async def _end_by_job(self) -> str:
        """The Slurm job ended first (cancelled, preempted, timed out, vanished): delete the pod."""
        assert self.inp is not None and self.job is not None
        state = self.job.state
        self.step = "delete_pod"
        await self._event(REASON_JOB_ENDED, f"Slurm job {self.job_id} is {state}; deleting the pod", "Warning")
        await self._do("delete_pod", DeletePodInput(pod=self.inp.pod))
        return await self._cleanup(f"the Slurm job ended ({state})", cancel=False)

    async def _await_gone(self) -> None:
        """Wait until the pod really stopped (deleted, terminal, or its node confirmed), bounded."""
        assert self.inp is not None
        self.step = "wait_pod_gone"
        deadline = workflow.now() + timedelta(seconds=self.inp.gone_timeout_seconds)
        while not (self.pod_gone or self.pod_terminal):
            if workflow.now() >= deadline:
                workflow.logger.warning("pod %s did not stop in time; cancelling its job anyway", self.inp.pod.key)
                return
            await self._wait(deadline - workflow.now())

    async def _cleanup(self, why: str, *, cancel: bool = True) -> str:
        """Cancel the job once the pod really stopped, then remove the finalizer (always last)."""
        assert self.inp is not None
        self.phase = Phase.CLEANING_UP
        await self._await_gone()
        if cancel and self.job_id is not None and not self._job_ended():
            self.step = "cancel_job"
            await self._do("cancel_job", JobRef(job_id=self.job_id), retry.SLURM)
        self.step = "remove_finalizer"
        await self._do("remove_finalizer", self.inp.pod)
        if self.job_id is not None:
            await self._event(REASON_CLEANED, f"Slurm job {self.job_id} cleaned up: {why}")
        self._set_phase(Phase.FINISHED)
        self.step = "done"
        return why

    async def _teardown(self, why: str) -> None:
        """Operator cancel: delete the pod, wait for it to stop, cancel the job, remove the finalizer."""
        assert self.inp is not None
        if not (self.pod_gone or self.pod_terminal):
            await self._do("delete_pod", DeletePodInput(pod=self.inp.pod))
        await self._cleanup(why)
