"""The submit step after a worker crash, on the real slurmrestd: the job it allocated is found, not doubled.

A worker killed after ``job/allocate`` returned but before the workflow recorded the result leaves a RUNNING
job that no history names. The lifecycle's next worker runs the submit again with a fresh job index (built by
its own first Slurm poll); the submit must return that job, with its nodes, instead of allocating a second one.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Collection, Iterator

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment

from activities.slurm import SlurmActivities
from slinky import wellknown
from slinky.bridge.models.jobspec import SlurmJobSpec
from slinky.bridge.models.workload import SubmitInput, SubmitResult, job_comment_for
from slinky.clients.slurm import SlurmClient
from slinky.config import SlurmSettings
from workers.bridge.slurm_router import SlurmJobRouter

pytestmark = pytest.mark.integration


class OpenGate:
    """Always ask for an immediate allocation (the crash path is what is tested, not the estimate)."""

    def may_start_now(self, partition: str | None, node_count: int, excluded: Collection[str] = ()) -> bool:
        return True

    @contextlib.contextmanager
    def allocating(self, node_count: int) -> Iterator[None]:
        yield

    @contextlib.asynccontextmanager
    async def queueing(self) -> AsyncIterator[None]:
        yield


@contextlib.asynccontextmanager
async def worker_index(slurm: SlurmClient, temporal: Client) -> AsyncIterator[SlurmJobRouter]:
    """One worker process's job index: a router that has finished its first Slurm poll."""
    router = SlurmJobRouter(slurm, temporal)
    task = asyncio.create_task(router.run())
    try:
        await router.wait_synced()
        yield router
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def submit(slurm: SlurmClient, router: SlurmJobRouter, data: SubmitInput) -> SubmitResult:
    result: SubmitResult = await ActivityEnvironment().run(
        SlurmActivities(slurm, router, OpenGate()).submit_placeholder_job, data
    )
    return result


async def test_a_new_worker_finds_the_job_the_dead_one_allocated(dev_env: dict[str, str]) -> None:
    settings = SlurmSettings(rest_url=dev_env["SLURM_REST_URL"], jwt_file=dev_env["SLURM_JWT_FILE"])
    temporal = await Client.connect(dev_env["TEMPORAL_ADDRESS"], data_converter=pydantic_data_converter)
    name = f"recovery-{uuid.uuid4().hex[:6]}"
    data = SubmitInput(
        workflow_id=f"workload/{name}/{uuid.uuid4()}",
        spec=SlurmJobSpec(pods=(f"{name}/p",), partition=wellknown.DEFAULT_PARTITION, min_nodes=1, max_nodes=1),
        submission=1,
    )
    async with SlurmClient.from_settings(settings) as slurm:
        async with worker_index(slurm, temporal) as first:
            allocated = await submit(slurm, first, data)
        # The first worker is gone with its memory; the result was never recorded.
        try:
            assert allocated.job_id is not None and allocated.nodes, f"a node was free: {allocated}"
            async with worker_index(slurm, temporal) as second:
                again = await submit(slurm, second, data)
            assert (again.job_id, again.reused, again.nodes) == (allocated.job_id, True, allocated.nodes)
            ours = [j for j in (await slurm.list_jobs()).jobs if j.comment == job_comment_for(data.workflow_id, 1)]
            assert [(j.job_id, j.state) for j in ours] == [(allocated.job_id, "RUNNING")], "one job, no second"
        finally:
            for job in (await slurm.list_jobs()).jobs:
                if job.comment == job_comment_for(data.workflow_id, 1) and not job.is_finished:
                    await slurm.cancel_job(job.job_id)
