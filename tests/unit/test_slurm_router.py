"""``workers.slurm_router``: which job changes become ``job_event`` signals to the owning workflow."""

from __future__ import annotations

from typing import Any

from slinky.clients.slurm import JobDescMsg, JobInfo
from slinky.models.workload import job_comment_for
from tests.unit.slurm.helpers import fake_cluster
from workers.slurm_router import SlurmJobRouter

WID = "workload/ns/uid"


class _Handle:
    def __init__(self, sent: list[tuple[str, str, Any]], workflow_id: str) -> None:
        self.sent, self.workflow_id = sent, workflow_id

    async def signal(self, name: str, arg: Any) -> None:
        self.sent.append((self.workflow_id, name, arg))


class _Temporal:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    def get_workflow_handle(self, workflow_id: str) -> _Handle:
        return _Handle(self.sent, workflow_id)


def _job() -> JobDescMsg:
    return JobDescMsg(name="j", partition="p", flags=["EXTERNAL_JOB"], comment=job_comment_for(WID))


async def _poll(router: SlurmJobRouter) -> None:
    await router.watcher.poll_once()
    for task in list(router._tasks):
        await task


async def test_an_immediate_allocation_is_not_signalled_but_its_end_is() -> None:
    fake, temporal = fake_cluster(), _Temporal()
    router = SlurmJobRouter(fake, temporal)  # type: ignore[arg-type]
    await _poll(router)
    job_id = await fake.allocate_job(_job())
    router.expect(await fake.get_job(job_id))
    assert router.live_job_of(WID) is not None and router.live_job_of(WID).job_id == job_id  # type: ignore[union-attr]
    await _poll(router)
    assert temporal.sent == [], "the submit result gave the workflow its nodes"
    await fake.cancel_job(job_id)
    await _poll(router)
    assert [(w, n, e.state) for w, n, e in temporal.sent] == [(WID, "job_event", "CANCELLED")]
    assert router.live_job_of(WID) is None


async def test_a_queued_job_is_signalled_when_it_starts() -> None:
    fake, temporal = fake_cluster(), _Temporal()
    router = SlurmJobRouter(fake, temporal)  # type: ignore[arg-type]
    await _poll(router)
    job_id = await fake.submit_job(_job())
    router.expect(JobInfo(job_id=job_id, name="j", job_state=["PENDING"], comment=job_comment_for(WID)))
    await _poll(router)
    assert temporal.sent == [], "pending, not evaluated yet: nothing to tell"
    fake.tick()
    await _poll(router)
    assert [(n, e.state, e.nodes) for _, n, e in temporal.sent] == [("job_event", "RUNNING", ["n-1"])]
