"""The fake's ``allocate_job`` behaves as slurmrestd 26.05 did (tests/fixtures/slurm/allocate_immediate.json)."""

from __future__ import annotations

import pytest

from slinky.clients.errors import SlurmRejected
from slinky.clients.slurm.models import JobDescMsg, NodeUpdate
from tests.unit.slurm.helpers import fake_cluster, sample

RECORDED = sample("allocate_immediate.json")


def _job(name: str, nodes: int = 1) -> JobDescMsg:
    return JobDescMsg(
        name=name,
        partition="p",
        flags=["EXTERNAL_JOB"],
        shared=["none"],
        minimum_nodes=nodes,
        maximum_nodes=nodes,
        admin_comment=f'{{"pods": ["ns/{name}"]}}',
    )


def _matches_recording(err: SlurmRejected, case: str) -> None:
    [entry] = RECORDED[case]["body"]["errors"]
    [got] = err.errors
    assert (got.error_number, got.error, got.description, got.source) == (
        entry["error_number"],
        entry["error"],
        entry["description"],
        entry["source"],
    )
    assert err.status_code == RECORDED[case]["status"]


async def test_free_nodes_give_a_running_job_at_once() -> None:
    fake = fake_cluster()
    job_id = await fake.allocate_job(_job("now"))
    job = await fake.get_job(job_id)
    assert job.is_running and job.nodes == "n-1"
    assert fake.calls == ["allocate_job", "get_job"]


async def test_busy_nodes_are_refused_2016_and_leave_a_failed_record() -> None:
    fake = fake_cluster(nodes=1)
    await fake.allocate_job(_job("first"))
    with pytest.raises(SlurmRejected) as caught:
        await fake.allocate_job(_job("busy"))
    _matches_recording(caught.value, "nodes_busy")
    [record] = [j for j in (await fake.list_jobs()).jobs if j.name == "busy"]
    recorded = RECORDED["failed_record"]
    assert (record.job_state, record.state_reason, record.nodes) == (
        recorded["job_state"],
        recorded["state_reason"],
        recorded["nodes"],
    )


async def test_an_older_pending_job_is_refused_2013_for_priority_even_with_free_nodes() -> None:
    fake = fake_cluster(nodes=2)
    await fake.submit_job(_job("big", nodes=2))  # pending: never ticked
    with pytest.raises(SlurmRejected) as caught:
        await fake.allocate_job(_job("behind"))
    _matches_recording(caught.value, "insufficient_priority")
    assert [j.state for j in (await fake.list_jobs()).jobs] == ["PENDING", "FAILED"]


async def test_a_stranded_node_refuses_allocations_until_down_and_resume_and_down_kills_its_job() -> None:
    """As 26.05 did: a node left ALLOCATED with no job (alloc_cpus 0) refuses with 2016; ``DOWN`` of a node with a
    running job ends it NODE_FAIL (reason NodeDown), and no job counter moves (all measured on the dev stack)."""
    fake = fake_cluster(nodes=2)
    fake.strand_allocation("n-1")
    node = await fake.get_node("n-1")
    assert (node.state[0], node.alloc_cpus) == ("ALLOCATED", 0)
    job_id = await fake.allocate_job(_job("elsewhere"))
    assert (await fake.get_job(job_id)).nodes == "n-2"
    with pytest.raises(SlurmRejected) as caught:
        await fake.allocate_job(_job("refused"))
    _matches_recording(caught.value, "nodes_busy")
    counters = dict(fake.counters)
    await fake.update_node("n-2", NodeUpdate(state=["DOWN"], reason="test"))
    job = await fake.get_job(job_id)
    assert (job.job_state, job.state_reason) == (["NODE_FAIL"], "NodeDown") and fake.counters == counters
    await fake.update_node("n-1", NodeUpdate(state=["DOWN"], reason="test"))
    await fake.update_node("n-1", NodeUpdate(state=["RESUME"]))
    assert (await fake.get_node("n-1")).state[0] == "IDLE"
    assert (await fake.get_job(await fake.allocate_job(_job("after")))).is_running
