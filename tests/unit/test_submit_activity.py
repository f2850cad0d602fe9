"""``submit_placeholder_job``: immediate allocation when the capacity gate opens, else (or when refused) queue."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection, Iterator, Mapping

import pytest
from temporalio.testing import ActivityEnvironment

from activities.slurm import SlurmActivities
from slinky import telemetry
from slinky.bridge.models.jobspec import SlurmJobSpec
from slinky.bridge.models.workload import SubmitInput, SubmitResult, owns_job
from slinky.clients.slurm import JobDescMsg, JobInfo, JobWatcher, Node
from slinky.clients.slurm.client import map_error
from tests.unit.slurm.helpers import fake_cluster
from workers.bridge.capacity import FreeNodes
from workers.bridge.worker import NoJobIndex

SPEC = SlurmJobSpec(pods=("ns/p",), partition="p", min_nodes=1, max_nodes=1)
GANG = SlurmJobSpec(pods=("ns/a", "ns/b"), partition="p", min_nodes=2, max_nodes=2)


class Index(NoJobIndex):
    """A follower's index (no watcher: a retry reads Slurm's job list, a cancel reads its job) that remembers
    what the submit announced."""

    def __init__(self) -> None:
        self.expected: list[JobInfo] = []

    def live_job_of(self, workflow_id: str, submission: int | None = None) -> JobInfo | None:
        live = [j for j in self.expected if not j.is_finished and owns_job(j.comment, workflow_id, submission)]
        return live[-1] if live else None

    def expect(self, job: JobInfo) -> None:
        self.expected.append(job)


class Gate:
    def __init__(self, open_: bool) -> None:
        self.open = open_
        self.asked: list[tuple[str | None, int]] = []
        self.in_flight = 0

    def may_start_now(self, partition: str | None, node_count: int, excluded: Collection[str] = ()) -> bool:
        self.asked.append((partition, node_count))
        return self.open

    @contextlib.contextmanager
    def allocating(self, node_count: int) -> Iterator[None]:
        self.in_flight += node_count
        yield
        self.in_flight -= node_count

    @contextlib.asynccontextmanager
    async def queueing(self) -> AsyncIterator[None]:
        yield


async def _submit(acts: SlurmActivities, spec: SlurmJobSpec = SPEC) -> SubmitResult:
    result: SubmitResult = await ActivityEnvironment().run(
        acts.submit_placeholder_job, SubmitInput(workflow_id="workload/ns/uid", spec=spec)
    )
    return result


def _count(name: str, **labels: str) -> float:
    return telemetry.REGISTRY.get_sample_value(name, labels) or 0.0


async def test_an_open_gate_allocates_at_once_and_returns_the_nodes() -> None:
    fake, index, gate = fake_cluster(), Index(), Gate(open_=True)
    seen = _count("slinky_bridge_job_submit_to_running_seen_seconds_count")
    allocated = _count("slinky_bridge_job_submits_total", outcome="allocated")
    result = await _submit(SlurmActivities(fake, index, gate), GANG)
    assert _count("slinky_bridge_job_submit_to_running_seen_seconds_count") == seen + 1, "started at the submit"
    assert _count("slinky_bridge_job_submits_total", outcome="allocated") == allocated + 1
    assert result.nodes == ["n-1", "n-2"] and result.job_id is not None
    assert fake.calls == ["allocate_job", "get_job"], "no submit, no wait for a scheduler tick"
    assert gate.asked == [("p", 2)] and gate.in_flight == 0
    assert [j.job_id for j in index.expected] == [result.job_id] and index.expected[0].is_running


async def test_a_refused_allocation_queues_the_job_and_leaves_slurms_failed_record() -> None:
    fake, index = fake_cluster(nodes=1), Index()
    await fake.allocate_job(JobDescMsg(name="holder", partition="p", flags=["EXTERNAL_JOB"]))  # the only node
    fake.calls.clear()
    result = await _submit(SlurmActivities(fake, index, Gate(open_=True)))
    assert result.nodes == [] and result.job_id is not None
    assert fake.calls == ["allocate_job", "submit_job"]
    states = {j.job_id: j.state for j in (await fake.list_jobs()).jobs}
    assert states[result.job_id] == "PENDING"
    assert sorted(states.values()) == ["FAILED", "PENDING", "RUNNING"]
    assert index.expected[-1].is_pending


@pytest.mark.parametrize("gate", [Gate(open_=False), None], ids=["gate-closed", "immediate-allocation-off"])
async def test_a_closed_gate_or_no_gate_queues_without_asking_slurm_to_allocate(gate: Gate | None) -> None:
    fake = fake_cluster()
    result = await _submit(SlurmActivities(fake, Index(), gate))
    assert fake.calls == ["submit_job"] and result.nodes == []


async def test_a_rejection_comes_from_the_queue_path_as_a_result() -> None:
    fake = fake_cluster()
    result = await _submit(SlurmActivities(fake, Index(), Gate(open_=True)), SPEC.model_copy(update={"partition": "x"}))
    assert (result.job_id, result.error_number) == (None, 2000)
    assert fake.calls == ["allocate_job", "submit_job"]


async def test_a_retry_reuses_the_running_job_with_its_nodes() -> None:
    fake, index = fake_cluster(), Index()
    acts = SlurmActivities(fake, index, Gate(open_=True))
    first = await _submit(acts)
    again = await _submit(acts)
    assert (again.job_id, again.reused, again.nodes) == (first.job_id, True, first.nodes)


async def test_a_slurmrestd_without_job_allocate_queues_the_job() -> None:
    fake = fake_cluster()
    fake.fail_next("allocate_job", map_error("POST", "/slurm/v0.0.44/job/allocate", 404, []), times=1)
    result = await _submit(SlurmActivities(fake, Index(), Gate(open_=True)))
    assert result.job_id is not None and result.nodes == []
    assert fake.calls == ["allocate_job", "submit_job"]


async def test_a_burst_larger_than_the_free_nodes_leaves_no_failed_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten submits at once on six free nodes, each allocation taking a while on the wire: the four that queue
    wait until the six allocations are answered, because a queued job that reached Slurm first is a PENDING job
    of the partition and Slurm refuses every immediate allocation behind it (2013), leaving FAILED records
    (seen in make test before the capacity's queue gate)."""
    fake = fake_cluster(nodes=6)
    watcher = JobWatcher(fake)
    await watcher.poll_once()
    nodes = {n.name: n for n in await fake.list_nodes()}

    class Snapshot:
        def slurm_nodes(self) -> Mapping[str, Node] | None:
            return nodes

    class WatchedIndex(Index):
        def expect(self, job: JobInfo) -> None:
            super().expect(job)
            watcher.expect(job)

    allocate = fake.allocate_job

    async def on_the_wire(job: JobDescMsg) -> int:
        await asyncio.sleep(0.02)
        return await allocate(job)

    monkeypatch.setattr(fake, "allocate_job", on_the_wire)
    acts = SlurmActivities(fake, WatchedIndex(), FreeNodes(watcher, Snapshot()))
    results = await asyncio.gather(
        *(acts.submit(SubmitInput(workflow_id=f"workload/ns/uid-{i}", spec=SPEC), 1) for i in range(10))
    )
    states = sorted(j.state for j in (await fake.list_jobs()).jobs)
    assert states == ["PENDING"] * 4 + ["RUNNING"] * 6, "no FAILED record: every allocation was granted"
    assert sum(1 for r in results if r.nodes) == 6 and all(r.job_id is not None for r in results)
