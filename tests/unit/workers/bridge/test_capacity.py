"""``workers.bridge.capacity.FreeNodes``: the local gate of submit's immediate allocation."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from slinky.clients.slurm import FakeSlurmClient, JobDescMsg, JobWatcher, Node
from tests.unit.slurm.helpers import fake_cluster
from workers.bridge.capacity import FreeNodes


class Snapshot:
    def __init__(self, nodes: list[Node] | None) -> None:
        self.nodes = None if nodes is None else {n.name: n for n in nodes}

    def slurm_nodes(self) -> Mapping[str, Node] | None:
        return self.nodes


def _node(name: str, *states: str, partition: str = "p") -> Node:
    return Node(name=name, state=list(states or ("IDLE",)), partitions=[partition])


async def _setup(nodes: int) -> tuple[FakeSlurmClient, JobWatcher]:
    fake = fake_cluster(nodes)
    watcher = JobWatcher(fake)
    await watcher.poll_once()
    return fake, watcher


def _job(name: str) -> JobDescMsg:
    return JobDescMsg(name=name, partition="p", flags=["EXTERNAL_JOB"], shared=["none"])


async def test_free_nodes_are_the_usable_partition_nodes_without_a_running_job() -> None:
    fake, watcher = await _setup(nodes=3)
    snapshot = Snapshot([_node("n-1"), _node("n-2", "IDLE", "DRAIN"), _node("n-3"), _node("other-1", partition="q")])
    capacity = FreeNodes(watcher, snapshot)
    assert capacity.may_start_now("p", 2)  # n-1, n-3 (n-2 drained; other-1 elsewhere)
    assert not capacity.may_start_now("p", 3)
    assert capacity.may_start_now(None, 3), "no partition: every usable node counts"
    assert not capacity.may_start_now("p", 2, excluded=["n-3"]), "the pod does not fit n-3"
    job_id = await fake.allocate_job(_job("a"))
    watcher.expect(await fake.get_job(job_id))  # n-1 is busy from the announcement on
    assert capacity.may_start_now("p", 1) and not capacity.may_start_now("p", 2)


async def test_allocations_under_way_count_as_taken() -> None:
    _, watcher = await _setup(nodes=2)
    capacity = FreeNodes(watcher, Snapshot([_node("n-1"), _node("n-2")]))
    with capacity.allocating(1):
        assert capacity.may_start_now("p", 1) and not capacity.may_start_now("p", 2)
    assert capacity.may_start_now("p", 2)


async def test_a_queued_submit_waits_for_the_allocations_under_way_and_holds_new_ones_off() -> None:
    _, watcher = await _setup(nodes=2)
    capacity = FreeNodes(watcher, Snapshot([_node("n-1"), _node("n-2")]))
    entered = asyncio.Event()

    async def queue() -> None:
        async with capacity.queueing():
            entered.set()
            assert not capacity.may_start_now("p", 1), "no allocation starts while a job is being queued"

    with capacity.allocating(1):
        task = asyncio.create_task(queue())
        await asyncio.sleep(0.01)
        assert not entered.is_set(), "the queued job would reach Slurm before the allocation under way"
        assert not capacity.may_start_now("p", 1), "the waiting submit holds new allocations off"
    await asyncio.wait_for(task, 1)
    assert entered.is_set() and capacity.may_start_now("p", 2), "the gate opens again once the job is queued"


async def test_a_job_waiting_for_nodes_closes_the_gate_and_no_snapshot_opens_it() -> None:
    fake, watcher = await _setup(nodes=1)
    assert FreeNodes(watcher, Snapshot(None)).may_start_now("p", 5), "no node view yet: Slurm decides"
    too_big = await fake.submit_job(JobDescMsg(name="w", partition="p", flags=["EXTERNAL_JOB"], minimum_nodes=2))
    fake.tick()
    await watcher.poll_once()
    assert FreeNodes(watcher, Snapshot(None)).may_start_now("p", 1), "PartitionConfig never starts: not waiting"
    await fake.cancel_job(too_big)
    await fake.allocate_job(_job("holder"))
    await fake.submit_job(_job("w2"))
    fake.tick()
    await watcher.poll_once()
    assert not FreeNodes(watcher, Snapshot(None)).may_start_now("p", 1), "a job waits for Resources"
