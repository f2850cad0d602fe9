"""Phantom allocations against the real slurmctld: what the check leaves alone, and how it finishes a clearing.

slurmctld cannot be made to strand an allocation on demand (it took four crashes within a minute in a chaos run,
docs/bridge.md): the unit tests drive a stranded node through the fake. Here the real Slurm answers what the fake
cannot: a node with a real job on it, even one the job watcher has not seen, is never sent ``DOWN`` (Slurm counts its
CPUs); the ``RESUME``/``DRAIN`` steps with the reasons the bridge writes are accepted; and the stack's own worker runs
the check (a clearing cut after its ``DOWN`` is finished by it).
Each test registers its own ``phantom-<id>`` external node (no comment: the node sync leaves it alone) and a
private partition naming only that node.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import cast

import pytest

from slinky.bridge.phantoms import down_reason
from slinky.clients.slurm import JobDescMsg, JobWatcher, NodeUpdate, SlurmClient
from slinky.config import SlurmSettings
from tests.integration.devstack import scontrol
from tests.integration.waiting import eventually_async as eventually
from tests.unit.slurm.helpers import NodeSnapshot
from workers.bridge.phantom_nodes import PhantomNodes

pytestmark = pytest.mark.integration


class Blind:
    """A job watcher that has seen no job: the worst case the check must survive."""

    answered_since = float("inf")

    def running_nodes(self) -> frozenset[str]:
        return frozenset()


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def slurm(dev_env: dict[str, str]) -> AsyncIterator[SlurmClient]:
    settings = SlurmSettings(rest_url=dev_env["SLURM_REST_URL"], jwt_file=dev_env["SLURM_JWT_FILE"])
    async with SlurmClient.from_settings(settings) as client:
        yield client


@pytest.fixture
async def node(slurm: SlurmClient) -> AsyncIterator[str]:
    name = f"phantom-{uuid.uuid4().hex[:8]}"
    await slurm.create_node(f"NodeName={name} CPUs=2 RealMemory=1000 State=EXTERNAL Feature={name}")
    scontrol("create", f"PartitionName={name}", f"Nodes={name}", "State=UP")
    try:
        yield name
    finally:
        for job in (await slurm.list_jobs()).jobs:
            if job.partition == name and not job.is_finished:
                await slurm.cancel_job(job.job_id)
        scontrol("delete", f"PartitionName={name}")

        async def gone() -> bool:
            try:
                await slurm.delete_node(name)
            except Exception:
                return False
            return True

        await eventually(gone, what=f"{name} deleted")


async def test_a_node_with_a_real_job_is_counted_busy_but_never_sent_down(slurm: SlurmClient, node: str) -> None:
    job_id = await slurm.submit_job(
        JobDescMsg.model_validate(
            {
                "name": f"real-{node}",
                "partition": node,
                "flags": ["EXTERNAL_JOB"],
                "required_nodes": [node],
                "tasks_per_node": 1,
                "cpus_per_task": 1,
                "memory_per_node": 100,
                "time_limit": 5,
                "current_working_directory": "/tmp",
            }
        )
    )

    async def running() -> bool:
        return (await slurm.get_job(job_id)).is_running

    await eventually(running, what="the job on the node running")
    view, clock = NodeSnapshot(slurm), Clock()
    seeing = JobWatcher(slurm)
    sees = PhantomNodes(slurm, seeing, view, None, clock=clock)
    blind = PhantomNodes(slurm, cast(JobWatcher, Blind()), view, None, clock=clock)
    for at in (0.0, 31.0, 45.0):
        clock.now = at
        await view.refresh()
        await seeing.poll_once()
        await sees.check_once()
        await blind.check_once()
    assert sees.held() == frozenset(), "the watcher sees the job: no suspect"
    assert node in blind.held(), "without the job view it is counted busy (Slurm holds it)"
    for name in blind.held():  # other tests' jobs on the shared nodes count too
        assert "DOWN" not in (await slurm.get_node(name)).state, f"{name} was sent DOWN"
    real = await slurm.get_node(node)
    assert {"ALLOCATED", "MIXED"} & set(real.state) and real.alloc_cpus > 0, "Slurm counts CPUs on it: DOWN kept off"
    assert (await slurm.get_job(job_id)).is_running
    assert sees.cleared == blind.cleared == 0


async def test_a_clearing_cut_after_its_down_is_finished_with_the_drain_it_had(slurm: SlurmClient, node: str) -> None:
    await slurm.drain_node(node, "admin: maintenance")
    reason = down_reason(await slurm.get_node(node))
    await slurm.update_node(node, NodeUpdate(state=["DOWN"], reason=reason))
    down = await slurm.get_node(node)
    assert "DOWN" in down.state and down.is_drain and down.reason == reason, "26.05 keeps the reason as written"
    view = NodeSnapshot(slurm)
    await view.refresh()
    phantoms = PhantomNodes(slurm, JobWatcher(slurm), view, None)
    await phantoms.check_once()
    after = await slurm.get_node(node)
    assert after.state[0] == "IDLE" and after.is_drain and after.reason == "admin: maintenance"
    assert phantoms.cleared == 1


async def test_the_dev_workers_leader_finishes_a_clearing_cut_after_its_down(slurm: SlurmClient, node: str) -> None:
    """The stack's own bridge worker (its node cache every 5 s, its check every 10 s), not an instance of the test's:
    a leader killed between DOWN and RESUME left the node so; the next leader finishes it from Slurm's state alone."""
    await slurm.drain_node(node, "admin: maintenance")
    reason = down_reason(await slurm.get_node(node))
    await slurm.update_node(node, NodeUpdate(state=["DOWN"], reason=reason))

    async def finished() -> bool:
        after = await slurm.get_node(node)
        return after.state[0] == "IDLE" and after.is_drain and after.reason == "admin: maintenance"

    await eventually(finished, timeout=60, what="the worker's RESUME and drain")
