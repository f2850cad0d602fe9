"""NodeSet scale-in activities against the fake Slurm: who owns a reason, what a read sees, what forget removes."""

from __future__ import annotations

from typing import Any

import pytest

from activities.nodeset import NodeSetActivities
from slinky.clients.slurm import JobDescMsg
from slinky.clients.slurm.fake import FakeSlurmClient
from slinky.operator.models import ControllerKey, DrainInput, NodeRef

CTL = ControllerKey(namespace="hpc", name="slurm")
OURS = "slurm-operator: Pod (hpc/gpu-0) is pending termination for scale-in"


class Clients:
    def __init__(self, fake: FakeSlurmClient) -> None:
        self.fake = fake

    async def client(self, controller: ControllerKey) -> Any:
        return self.fake


@pytest.fixture
def fake() -> FakeSlurmClient:
    f = FakeSlurmClient()
    f.add_node("gpu-0", partitions=["p"])
    return f


def acts(fake: FakeSlurmClient) -> NodeSetActivities:
    return NodeSetActivities(kube=None, slurm=Clients(fake), events=None)  # type: ignore[arg-type]


async def test_drain_sets_our_reason_and_reports_the_jobs(fake: FakeSlurmClient) -> None:
    job = await fake.allocate_job(JobDescMsg(name="w", partition="p", flags=["EXTERNAL_JOB"], minimum_nodes=1))
    view = await acts(fake).drain_node(DrainInput(controller=CTL, node="gpu-0", reason=OURS))
    assert "DRAIN" in view.states and view.reason == OURS and view.jobs == [job]
    assert fake.calls.count("list_jobs") == 1, "one job list per drain"
    await fake.cancel_job(job)
    view = await acts(fake).read_node(NodeRef(controller=CTL, node="gpu-0"))
    assert view.jobs == [] and "DRAIN" in view.states


async def test_an_admins_drain_is_kept_and_never_resumed(fake: FakeSlurmClient) -> None:
    await fake.drain_node("gpu-0", "bad DIMM, ticket 42")
    view = await acts(fake).drain_node(DrainInput(controller=CTL, node="gpu-0", reason=OURS))
    assert view.reason == "bad DIMM, ticket 42"
    await acts(fake).undrain_node(DrainInput(controller=CTL, node="gpu-0", reason=OURS))
    assert "DRAIN" in (await fake.get_node("gpu-0")).state
    await fake.resume_node("gpu-0")
    await acts(fake).drain_node(DrainInput(controller=CTL, node="gpu-0", reason=OURS))
    await acts(fake).undrain_node(DrainInput(controller=CTL, node="gpu-0", reason=OURS))
    assert "DRAIN" not in (await fake.get_node("gpu-0")).state


async def test_an_unknown_node_reads_as_absent(fake: FakeSlurmClient) -> None:
    view = await acts(fake).drain_node(DrainInput(controller=CTL, node="nope", reason=OURS))
    assert not view.exists and view.jobs == []


async def test_forget_removes_only_a_node_we_took_down(fake: FakeSlurmClient) -> None:
    ref = NodeRef(controller=CTL, node="gpu-0")
    await acts(fake).forget_node(ref)
    assert (await fake.get_node("gpu-0")).name == "gpu-0", "an IDLE node (a new pod registered it) stays"
    await fake.drain_node("gpu-0", "bad DIMM")
    await acts(fake).forget_node(ref)
    assert (await fake.get_node("gpu-0")).name == "gpu-0", "an admin's reason stays"
    await fake.drain_node("gpu-0", "slurm-operator: Pod is terminating")
    await acts(fake).forget_node(ref)
    assert [n.name for n in await fake.list_nodes()] == []
    await acts(fake).forget_node(ref)  # already gone: fine


async def test_an_idle_node_is_read_without_a_job_list(fake: FakeSlurmClient) -> None:
    """A job list per drain grows with every job record slurmctld holds: an idle node needs none."""
    view = await acts(fake).drain_node(DrainInput(controller=CTL, node="gpu-0", reason=OURS))
    assert "DRAIN" in view.states and view.jobs == []
    await acts(fake).read_node(NodeRef(controller=CTL, node="gpu-0"))
    await acts(fake).read_node(NodeRef(controller=CTL, node="gone"))
    assert fake.calls.count("list_jobs") == 0
