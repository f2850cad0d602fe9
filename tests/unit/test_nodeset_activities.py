"""NodeSet scale-in activities against the fake Slurm: who owns a reason, what a read sees, what forget removes."""

from __future__ import annotations

from typing import Any

import pytest

from activities.nodeset import NodeSetActivities
from slinky.clients.slurm import JobDescMsg
from slinky.clients.slurm.fake import FakeSlurmClient
from slinky.clients.slurm.joblist import JobList
from slinky.operator.models import ControllerKey, DrainInput, NodeRef

CTL = ControllerKey(namespace="hpc", name="slurm")
OURS = "slurm-operator: Pod (hpc/gpu-0) is pending termination for scale-in"


class Clients:
    def __init__(self, fake: FakeSlurmClient) -> None:
        self.fake = fake
        self.jobs = JobList(fake)

    async def client(self, controller: ControllerKey) -> Any:
        return self.fake

    async def job_list(self, controller: ControllerKey) -> JobList:
        return self.jobs


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


async def test_busy_drains_share_one_job_list_and_a_forced_scale_in_reads_it_fresh(fake: FakeSlurmClient) -> None:
    """Drains of busy nodes read the Controller's shared list (``update_time``: nothing comes back when no job
    changed); the forced scale-in cancels what a list asked for after it began names, never an older list."""
    fake.add_node("gpu-1", partitions=["p"])
    clients = Clients(fake)
    activities = NodeSetActivities(kube=None, slurm=clients, events=None)  # type: ignore[arg-type]
    first = await fake.allocate_job(JobDescMsg(name="a", partition="p", flags=["EXTERNAL_JOB"], minimum_nodes=1))
    second = await fake.allocate_job(JobDescMsg(name="b", partition="p", flags=["EXTERNAL_JOB"], minimum_nodes=1))
    views = [
        await activities.drain_node(DrainInput(controller=CTL, node=node, reason=OURS)) for node in ("gpu-0", "gpu-1")
    ]
    assert sorted(j for v in views for j in v.jobs) == sorted([first, second])
    assert fake.calls.count("list_jobs") <= 2 and clients.jobs.full_lists == 1, "one full list for both drains"

    clients.jobs.spacing = 1e9  # a list that took ages: not asked again unless fresh
    await fake.cancel_job(first)
    await fake.resume_node("gpu-0")
    again = await fake.allocate_job(JobDescMsg(name="c", partition="p", flags=["EXTERNAL_JOB"], minimum_nodes=1))
    assert again != first
    cancelled = await activities.cancel_node_jobs(NodeRef(controller=CTL, node="gpu-0"))
    assert cancelled == [again], "the forced scale-in saw the job that started after the cached list"
