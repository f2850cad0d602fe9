"""``workers.bridge.gc``: a pass at the interval, or soon after ``collect_soon``."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload, SearchAttributes, WorkflowExecution
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest, ListWorkflowExecutionsResponse
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from slinky import telemetry
from workers.bridge.gc import GarbageCollector


async def test_collect_soon_runs_a_pass_before_the_interval() -> None:
    gc = GarbageCollector(None, None, None, interval_seconds=3600)  # type: ignore[arg-type]
    gc.soon_seconds = 0.01
    passes: list[int] = []

    async def run_once(*_: Any) -> None:
        passes.append(1)

    gc.run_once = run_once  # type: ignore[method-assign]
    task = asyncio.create_task(gc.run())
    await asyncio.sleep(0.05)
    assert passes == [], "nothing before the interval"
    gc.collect_soon()
    gc.collect_soon()
    before = telemetry.REGISTRY.get_sample_value("slinky_bridge_gc_pass_seconds_count") or 0.0
    await asyncio.sleep(0.1)
    task.cancel()
    assert passes == [1], "one pass for both calls"
    assert telemetry.REGISTRY.get_sample_value("slinky_bridge_gc_pass_seconds_count") == before + 1, "timed"


async def test_a_long_pass_spaces_the_next_regular_one_but_not_the_confirming_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 10,000 open workloads a pass took 10-30 s: the next waits five times that, not the 60 s interval."""
    gc = GarbageCollector(None, None, None, interval_seconds=60)  # type: ignore[arg-type]
    clock = [1000.0]
    monkeypatch.setattr("workers.bridge.gc.time", SimpleNamespace(monotonic=lambda: clock[0]))
    waits: list[float] = []
    real_wait_for = asyncio.wait_for

    async def wait_for(awaitable: Any, timeout: float) -> None:
        waits.append(timeout)
        if len(waits) > 4:
            await real_wait_for(awaitable, None)  # no more passes: wait for the cancel
        awaitable.close()
        raise TimeoutError

    took = [30.0, 2.0, 300.0, 30.0]

    async def run_once(*_: Any) -> None:
        clock[0] += took[len(waits) - 1]
        # As _recheck_lost decides: the interval, or soon when this pass found lifecycles whose job is missing.
        gc._next_wait = 10.0 if len(waits) == 4 else gc.interval_seconds

    monkeypatch.setattr("workers.bridge.gc.asyncio.wait_for", wait_for)
    gc.run_once = run_once  # type: ignore[method-assign]
    task = asyncio.create_task(gc.run())
    for _ in range(100):
        await asyncio.sleep(0)
        if len(waits) > 4:
            break
    task.cancel()
    assert waits == [10.0, 150.0, 60.0, 600.0, 10.0], "soon; 5 x 30 s; 60 s after a short pass; at most 600 s"


def _json_payload(value: Any) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode())


class _Temporal:
    """Visibility lists ``listed`` as running; describe answers from ``running`` and counts the calls."""

    def __init__(
        self, listed: set[str], running: set[str], fail_listing: bool = False, jobs: dict[str, int] | None = None
    ) -> None:
        self.listed, self.running, self.fail_listing = listed, running, fail_listing
        self.as_lists = False
        """Search attributes as one-element lists (how the SDK's untyped API writes them) instead of plain values."""
        self.pages = 0
        self.jobs = jobs or {}
        """Listed lifecycles in phase Pending with this SlinkySlurmJobId."""
        self.described: list[str] = []
        self.signalled: list[tuple[str, str]] = []

    namespace = "default"

    @property
    def service_client(self) -> Any:
        """The frontend's ``ListWorkflowExecutions``, answered with the service's own messages in pages of 1,000
        (search attributes as the SDK writes them: JSON, a keyword as a plain string)."""
        temporal = self

        async def list_workflow_executions(req: ListWorkflowExecutionsRequest, retry: bool = False) -> Any:
            assert "ExecutionStatus = 'Running'" in req.query
            if temporal.fail_listing:
                raise RPCError("unavailable", RPCStatusCode.UNAVAILABLE, b"")
            ids = sorted(temporal.listed)
            start = int(req.next_page_token or b"0")
            page = ids[start : start + req.page_size]
            infos = []
            for workflow_id in page:
                attributes: dict[str, Any] = (
                    {"SlinkyPhase": "Pending", "SlinkySlurmJobId": temporal.jobs[workflow_id]}
                    if workflow_id in temporal.jobs
                    else {"SlinkyPhase": "Submitting"}
                )
                fields = {k: _json_payload([v] if temporal.as_lists else v) for k, v in attributes.items()}
                infos.append(
                    WorkflowExecutionInfo(
                        execution=WorkflowExecution(workflow_id=workflow_id, run_id="r"),
                        search_attributes=SearchAttributes(indexed_fields=fields),
                    )
                )
            temporal.pages += 1
            more = start + req.page_size < len(ids)
            return ListWorkflowExecutionsResponse(
                executions=infos, next_page_token=str(start + req.page_size).encode() if more else b""
            )

        return SimpleNamespace(workflow_service=SimpleNamespace(list_workflow_executions=list_workflow_executions))

    def get_workflow_handle(self, workflow_id: str) -> Any:
        temporal = self

        class _Handle:
            async def signal(self, name: str, *args: Any) -> None:
                assert not args, "recheck takes no argument"
                temporal.signalled.append((workflow_id, name))

            async def describe(self) -> Any:
                temporal.described.append(workflow_id)
                status = WorkflowExecutionStatus.RUNNING if workflow_id in temporal.running else None
                return type("Desc", (), {"status": status})()

        return _Handle()


async def test_a_pass_lists_running_lifecycles_once_and_describes_only_the_others() -> None:
    """10,000 pending workloads were 10,000 describes a pass; now one listing, and a describe only for an id the
    listing lacks (visibility may lag a start: the describe has the last word)."""
    temporal = _Temporal(listed={"a", "b"}, running={"a", "b", "just-started"})
    gc = GarbageCollector(None, None, temporal)  # type: ignore[arg-type]
    gc._running, _ = await gc._running_lifecycles()
    assert [await gc._workflow_running(w) for w in ("a", "b", "just-started", "closed")] == [True, True, True, False]
    assert temporal.described == ["just-started", "closed"]


@pytest.mark.parametrize("as_lists", [False, True])
async def test_the_listing_reads_every_page_and_the_job_ids_of_the_waiting_ones(as_lists: bool) -> None:
    """2,500 running lifecycles in pages of 1,000, read from the service's JSON whatever form an attribute has."""
    listed = {f"w-{i:04d}" for i in range(2_500)}
    temporal = _Temporal(listed=listed, running=set(), jobs={f"w-{i:04d}": 100 + i for i in range(0, 2_500, 7)})
    temporal.as_lists = as_lists
    gc = GarbageCollector(None, None, temporal)  # type: ignore[arg-type]
    running, waiting = await gc._running_lifecycles()
    assert running == listed and temporal.pages == 3
    assert waiting == temporal.jobs, "Pending with a job id; Submitting ones have none"


async def test_without_the_listing_every_lifecycle_is_described() -> None:
    temporal = _Temporal(listed={"a"}, running={"a"}, fail_listing=True)
    gc = GarbageCollector(None, None, temporal)  # type: ignore[arg-type]
    gc._running, _ = await gc._running_lifecycles()
    assert await gc._workflow_running("a")
    assert temporal.described == ["a"]


class _Slurm:
    def __init__(self) -> None:
        self.lists = 0

    async def list_jobs(self) -> Any:
        self.lists += 1
        return type("Jobs", (), {"jobs": ["listed"]})()


async def test_a_pass_reads_the_watchers_view_while_it_is_fresh_and_lists_slurm_otherwise() -> None:
    """A full GET jobs at 10,000 pending jobs is 33 MB: the leader's watcher already holds every job."""
    fresh = {"yes": True}
    asked: list[float] = []

    def view(seconds: float) -> Any:
        asked.append(seconds)
        return (["from-view"], 1.0) if fresh["yes"] else None

    slurm = _Slurm()
    gc = GarbageCollector(None, slurm, None, job_view=view)  # type: ignore[arg-type]
    assert await gc._jobs() == (["from-view"], 1.0) and slurm.lists == 0
    fresh["yes"] = False
    before = time.monotonic()
    jobs, listed_at = await gc._jobs()
    assert jobs == ["listed"] and before <= listed_at <= time.monotonic() and slurm.lists == 1 == gc.lists
    assert asked == [30.0, 30.0]
    follower = GarbageCollector(None, slurm, None)  # type: ignore[arg-type]
    assert (await follower._jobs())[0] == ["listed"]


async def test_a_pod_listed_before_its_lifecycle_ended_is_looked_at_again(caplog: Any) -> None:
    """A pass at thousands of pods takes minutes: a pod listed running whose lifecycle has ended since (the pod was
    deleted, its job cancelled) is read again instead of being reported as running without a lifecycle."""
    import httpx

    from slinky import wellknown
    from slinky.bridge.models.workload import JobRef
    from slinky.clients.kube import KubeClient, KubeConfig

    listed = {
        "metadata": {
            "name": "w1", "namespace": "ns", "uid": "u1",
            "labels": {wellknown.LABEL_SLURM_JOB_ID: "7"},
            "annotations": {wellknown.ANNOTATION_WORKFLOW_ID: "wf"},
        },
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }  # fmt: skip
    now = {**listed, "metadata": {**listed["metadata"], "deletionTimestamp": "2026-11-26T00:00:00Z"}}

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.method == "GET" and request.url.path == "/api/v1/namespaces/ns/pods/w1"
        return httpx.Response(200, json=now)

    kube = KubeClient(KubeConfig(server="https://kube.test", ssl_context=False), transport=httpx.MockTransport(handler))

    class _Finished:
        cancelled: list[int] = []

        async def get_job(self, job_id: int) -> Any:
            from slinky.bridge.models.workload import job_comment_for
            from slinky.clients.slurm import JobInfo

            return JobInfo(job_id=job_id, job_state=["CANCELLED"], comment=job_comment_for("wf"))

        async def cancel_job(self, job_id: int) -> None:
            self.cancelled.append(job_id)

    slurm = _Finished()
    gc = GarbageCollector(kube, slurm, _Temporal(listed=set(), running=set()))  # type: ignore[arg-type]
    await gc._collect_pod(listed, {"wf": JobRef(job_id=7, workflow_id="wf", submission=1)})
    assert "no lifecycle" not in caplog.text
    assert slurm.cancelled == [], "its lifecycle had cancelled it"
    await kube.aclose()


async def test_a_lifecycle_waiting_on_a_job_slurm_lost_is_asked_to_recheck_once_a_later_list_lacks_it_too() -> None:
    """slurmctld lost the job in a crash and the worker restarted too: no watcher saw it go, and the lifecycle
    waited 300 s for its own re-check (chaos suite). The GC sends ``recheck`` when a job list asked after the job
    was first found missing still lacks it (or names another workload's job under its id); the next pass comes in
    10 s while that is pending."""
    from slinky.bridge.models.workload import job_comment_for
    from slinky.clients.slurm import JobInfo

    temporal = _Temporal(
        listed={"lost", "fine", "reused", "submitting"},
        running=set(),
        jobs={"lost": 7, "fine": 8, "reused": 9},
    )
    jobs = [
        JobInfo(job_id=8, job_state=["PENDING"], comment=job_comment_for("fine")),
        JobInfo(job_id=9, job_state=["PENDING"], comment=job_comment_for("another")),
    ]
    gc = GarbageCollector(None, None, temporal, interval_seconds=60)  # type: ignore[arg-type]
    gc._running, waiting = await gc._running_lifecycles()
    assert waiting == {"lost": 7, "fine": 8, "reused": 9}, "a lifecycle still submitting has no job to miss"
    await gc._recheck_lost(waiting, jobs, asked=0.0)
    assert temporal.signalled == [], "one list lacking it proves nothing: it may lag the submit"
    assert gc._next_wait == 10.0
    await gc._recheck_lost(waiting, jobs, asked=0.0)
    assert temporal.signalled == [], "the same list again (asked before the job was found missing)"
    await gc._recheck_lost(waiting, jobs, asked=time.monotonic())
    assert sorted(temporal.signalled) == [("lost", "recheck"), ("reused", "recheck")]
    assert gc.rechecks_sent == 2 and gc._next_wait == 60


async def test_a_lifecycle_whose_pods_are_being_deleted_is_not_asked_to_recheck() -> None:
    """Deleting 10,000 workloads at once: each lifecycle cancels its job, which leaves Slurm's list while the
    lifecycle finishes its cleanup with its last published phase still Pending. Only a lifecycle with a live pod is
    waiting on its job: the others were sent 400 needless re-checks in one such run."""
    import httpx

    from slinky import wellknown
    from slinky.clients.kube import KubeClient, KubeConfig

    def pod(name: str, workflow_id: str, deleting: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": name, "namespace": "ns", "uid": f"uid-{name}",
            "labels": {wellknown.LABEL_SLURM_JOB_ID: "1"},
            "annotations": {wellknown.ANNOTATION_WORKFLOW_ID: workflow_id},
        }  # fmt: skip
        if deleting:
            meta["deletionTimestamp"] = "2026-11-26T00:00:00Z"
        return {"metadata": meta, "spec": {}, "status": {"phase": "Pending"}}

    items = [pod("a", "lost", False), pod("b", "leaving", True)]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/pods"
        return httpx.Response(200, json={"items": items})

    kube = KubeClient(KubeConfig(server="https://kube.test", ssl_context=False), transport=httpx.MockTransport(handler))
    temporal = _Temporal(listed={"lost", "leaving"}, running=set(), jobs={"lost": 7, "leaving": 8})
    clock = {"asked": 0.0}
    gc = GarbageCollector(kube, None, temporal, job_view=lambda _: ([], clock["asked"]))  # type: ignore[arg-type]
    await gc.run_once()
    clock["asked"] = time.monotonic() + 1
    await gc.run_once()
    await kube.aclose()
    assert temporal.signalled == [("lost", "recheck")]
