"""JobList: the shared job list, asked with update_time and spaced by its own cost."""

from __future__ import annotations

import asyncio
import time

from slinky.clients.slurm import JobDescMsg
from slinky.clients.slurm.client import JobsPage
from slinky.clients.slurm.fake import FakeSlurmClient
from slinky.clients.slurm.joblist import JobList


async def _submit(fake: FakeSlurmClient, name: str) -> int:
    return await fake.submit_job(JobDescMsg(name=name, partition="p", minimum_nodes=1), script="#!/bin/sh\ntrue\n")


async def test_unchanged_jobs_are_served_from_the_last_list() -> None:
    fake = FakeSlurmClient()
    fake.add_node("n0", partitions=["p"])
    await _submit(fake, "a")
    jobs = JobList(fake, spacing=0)
    assert [j.name for j in await jobs.read()] == ["a"]
    # last_update has one-second resolution: within the second of a change the list comes back whole.
    while time.time() < fake._jobs_changed + 2:
        await asyncio.sleep(0.1)
    assert [j.name for j in await jobs.read()] == ["a"]
    before = (jobs.full_lists, jobs.unchanged)
    assert [j.name for j in await jobs.read()] == ["a"]
    assert (jobs.full_lists, jobs.unchanged) == (before[0], before[1] + 1), "nothing changed: nothing came back"
    await _submit(fake, "b")
    assert sorted(j.name for j in await jobs.read()) == ["a", "b"]
    assert jobs.full_lists == before[0] + 1


async def test_concurrent_readers_share_one_request() -> None:
    fake = FakeSlurmClient()
    fake.add_node("n0", partitions=["p"])
    await _submit(fake, "a")
    jobs = JobList(fake)
    await asyncio.gather(*(jobs.read() for _ in range(16)))
    assert fake.calls.count("list_jobs") == 1


class SlowList(FakeSlurmClient):
    """A job list that takes ``seconds``, as 10,000 job records do."""

    seconds = 0.05

    async def list_jobs(self, update_time: int | None = None) -> JobsPage:
        await asyncio.sleep(self.seconds)
        return await super().list_jobs(update_time)


async def test_a_slow_list_is_asked_for_again_only_after_ten_times_its_duration_unless_fresh() -> None:
    fake = SlowList()
    fake.add_node("n0", partitions=["p"])
    await _submit(fake, "a")
    jobs = JobList(fake)
    await jobs.read()
    await _submit(fake, "b")
    assert [j.name for j in await jobs.read()] == ["a"], "within 10 x 50 ms: the cached list"
    assert fake.calls.count("list_jobs") == 1
    assert sorted(j.name for j in await jobs.read(fresh=True)) == ["a", "b"], "fresh: asked again"
    await asyncio.sleep(10 * SlowList.seconds + 0.2)
    await _submit(fake, "c")
    assert len(await jobs.read()) == 3, "past the spacing: asked again"


async def test_a_failed_request_keeps_the_list_for_the_next_reader() -> None:
    from slinky.clients.errors import SlurmUnavailable

    fake = FakeSlurmClient()
    fake.add_node("n0", partitions=["p"])
    await _submit(fake, "a")
    jobs = JobList(fake, spacing=0)
    await jobs.read()
    fake.fail_next("list_jobs", SlurmUnavailable("down"))
    try:
        await jobs.read(fresh=True)
    except SlurmUnavailable:
        pass
    else:
        raise AssertionError("the failure reaches the reader")
    assert [j.name for j in await jobs.read(fresh=True)] == ["a"]
