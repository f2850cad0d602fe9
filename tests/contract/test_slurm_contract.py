"""One contract suite for the Slurm client, run against the fake and against the real slurmrestd 26.05.

The real variant is marked ``integration`` and uses the ``dev_env`` fixture (the local stack's partition
``slurm-bridge`` with external nodes ``slinky-node-1..N``, 8 CPUs and 16384 MiB each). Other tests may use
the same stack at the same time, so assertions are about our own jobs and nodes only.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from slinky.clients.errors import (
    SlurmConflict,
    SlurmInvalidRequest,
    SlurmNotFound,
    SlurmRejected,
)
from slinky.clients.slurm.client import SlurmApi, SlurmClient
from slinky.clients.slurm.fake import FakeSlurmClient
from slinky.clients.slurm.models import JobDescMsg, JobInfo
from slinky.config import SlurmSettings

PARTITION = "slurm-bridge"


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.integration)])
async def slurm(request: pytest.FixtureRequest) -> AsyncIterator[SlurmApi]:
    if request.param == "fake":
        fake = FakeSlurmClient()
        fake.add_partition(PARTITION)
        for index in range(1, 5):
            fake.add_node(f"slinky-node-{index}", cpus=8, real_memory=16384, partitions=[PARTITION])
        yield fake
        return
    env: dict[str, str] = request.getfixturevalue("dev_env")
    settings = SlurmSettings(rest_url=env["SLURM_REST_URL"], jwt_file=env["SLURM_JWT_FILE"])
    client = SlurmClient.from_settings(settings)
    try:
        yield client
    finally:
        await client.aclose()


async def _until(slurm: SlurmApi, job_id: int, predicate: Callable[[JobInfo], bool], timeout: float = 20.0) -> JobInfo:
    """Poll a job until ``predicate`` holds; a scheduler tick for the fake, ~1 s ticks for the real one."""
    deadline = time.monotonic() + timeout
    while True:
        if isinstance(slurm, FakeSlurmClient):
            slurm.tick()
        job = await slurm.get_job(job_id)
        if predicate(job):
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} never matched; last state {job.job_state} {job.state_reason}")
        await asyncio.sleep(0.05)


def _external(name: str, **kwargs: object) -> JobDescMsg:
    fields: dict[str, object] = {
        "name": name,
        "partition": PARTITION,
        "flags": ["EXTERNAL_JOB"],
        "tasks_per_node": 1,
        "cpus_per_task": 4,
        "memory_per_node": 1000,
        "time_limit": 60,
        "shared": ["none"],
        "admin_comment": f'{{"pods": ["contract/{name}"]}}',
        "current_working_directory": "/tmp",
    }
    fields.update(kwargs)
    return JobDescMsg.model_validate(fields)


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_ping_and_partitions(slurm: SlurmApi) -> None:
    pings = await slurm.ping()
    assert pings and pings[0].responding
    partitions = {p.name: p for p in await slurm.list_partitions()}
    assert partitions[PARTITION].total_nodes >= 3
    assert (await slurm.diag()).jobs_submitted is not None


async def test_external_job_runs_then_cancel_frees_the_node(slurm: SlurmApi) -> None:
    name = _unique("ext")
    job_id = await slurm.submit_job(_external(name, minimum_nodes=1, maximum_nodes=1))
    job = await slurm.get_job(job_id)
    assert job.name == name and job.is_external and (job.is_pending or job.is_running)
    job = await _until(slurm, job_id, lambda j: j.is_running)
    assert job.nodes and job.admin_comment == f'{{"pods": ["contract/{name}"]}}'
    assert job.job_resources is not None and job.job_resources.nodes is not None
    assert job.job_resources.nodes.whole
    layout = await slurm.get_job_resources(job_id)
    assert [n.node for n in layout] == [job.nodes]
    node = await slurm.get_node(job.nodes)
    assert node.is_busy and node.is_external
    await slurm.cancel_job(job_id)
    job = await _until(slurm, job_id, lambda j: j.is_finished, timeout=5)
    assert job.state == "CANCELLED"
    await slurm.cancel_job(job_id)  # cancelling again is fine


async def test_immediate_allocation_is_running_on_return(slurm: SlurmApi) -> None:
    """``job/allocate`` with ``immediate``: no scheduler tick, the job runs when the call returns."""
    name = _unique("alloc")
    job_id = await slurm.allocate_job(_external(name, minimum_nodes=1, maximum_nodes=1))
    try:
        job = await slurm.get_job(job_id)
        assert job.is_running and job.nodes and job.is_external
        assert job.admin_comment == f'{{"pods": ["contract/{name}"]}}'
    finally:
        await slurm.cancel_job(job_id)
    job = await _until(slurm, job_id, lambda j: j.is_finished, timeout=5)
    assert job.state == "CANCELLED"


async def test_gang_job_of_three_nodes(slurm: SlurmApi) -> None:
    job_id = await slurm.submit_job(_external(_unique("gang"), nodes="3", cpus_per_task=8))
    try:
        job = await _until(slurm, job_id, lambda j: j.is_running)
        assert job.node_count == 3
        assert len(await slurm.get_job_resources(job_id)) == 3
    finally:
        await slurm.cancel_job(job_id)


async def test_update_pending_job_is_visible(slurm: SlurmApi) -> None:
    job_id = await slurm.submit_job(_external(_unique("held"), hold=True))
    try:
        await slurm.update_job(
            job_id,
            JobDescMsg(time_limit=30, comment="updated-by-bridge", admin_comment='{"pods": ["a", "b"]}'),
        )
        job = await slurm.get_job(job_id)
        assert job.is_pending
        assert (job.time_limit, job.comment, job.admin_comment) == (
            30,
            "updated-by-bridge",
            '{"pods": ["a", "b"]}',
        )
    finally:
        await slurm.cancel_job(job_id)


async def test_incremental_listing(slurm: SlurmApi) -> None:
    full = await slurm.list_jobs()
    assert full.changed and full.last_update
    again = await slurm.list_jobs(full.last_update)
    if not again.changed:  # others may be changing jobs on a shared stack
        assert again.jobs == [] and again.last_update == full.last_update
    if isinstance(slurm, SlurmClient):
        await asyncio.sleep(1.1)  # last_update has one-second resolution
    job_id = await slurm.submit_job(_external(_unique("inc"), hold=True))
    try:
        after = await slurm.list_jobs(again.last_update)
        assert after.changed and job_id in {j.job_id for j in after.jobs}
        assert after.last_update is not None and after.last_update > (full.last_update or 0)
    finally:
        await slurm.cancel_job(job_id)


@pytest.mark.parametrize(
    ("fields", "error_type", "number"),
    [
        ({"partition": "nope"}, SlurmRejected, 2000),
        ({"cpus_per_task": 16}, SlurmRejected, 2014),
        ({"memory_per_node": 64000}, SlurmRejected, 2014),
        ({"flags": []}, SlurmInvalidRequest, 9000),
    ],
    ids=["bad-partition-2000", "too-many-cpus-2014", "too-much-memory-2014", "no-script-9000"],
)
async def test_submit_errors(
    slurm: SlurmApi, fields: dict[str, object], error_type: type[SlurmRejected], number: int
) -> None:
    with pytest.raises(error_type) as caught:
        await slurm.submit_job(_external(_unique("err"), **fields))
    assert caught.value.error_number == number


async def test_not_found_answers(slurm: SlurmApi) -> None:
    with pytest.raises(SlurmNotFound) as job_error:
        await slurm.get_job(999_999)
    assert job_error.value.error_number == 2017
    await slurm.cancel_job(999_999)  # 200 from slurmrestd: success
    with pytest.raises(SlurmNotFound):
        await slurm.get_node("nope-" + uuid.uuid4().hex[:6])
    with pytest.raises(SlurmNotFound) as node_error:
        await slurm.delete_node("nope-" + uuid.uuid4().hex[:6])
    assert node_error.value.error_number == 2018


async def test_new_node_drain_resume_and_delete(slurm: SlurmApi) -> None:
    name = _unique("contract-node")
    # NodeAddr keeps slurmctld from stalling on an unresolvable name (slurm.md §4).
    conf = (
        f"NodeName={name} NodeAddr=127.0.0.1 Sockets=1 CoresPerSocket=8 ThreadsPerCore=1 CPUs=8 "
        f'RealMemory=16384 State=External Feature={PARTITION} Gres="" GresConf=""'
    )
    await slurm.create_node(conf)
    try:
        with pytest.raises(SlurmConflict) as duplicate:
            await slurm.create_node(conf)
        assert duplicate.value.error_number == 2168
        node = await slurm.get_node(name)
        assert node.is_external and node.cpus == 8 and node.real_memory == 16384
        job_id = await slurm.submit_job(_external(_unique("pin"), required_nodes=[name]))
        job = await _until(slurm, job_id, lambda j: j.is_running)
        assert job.nodes == name
        await slurm.drain_node(name, "contract: cordoned")
        node = await slurm.get_node(name)
        assert node.is_drain and node.is_busy and node.reason == "contract: cordoned"
        with pytest.raises(SlurmConflict) as busy:
            await slurm.delete_node(name)
        assert busy.value.error_number == 2016
        await slurm.cancel_job(job_id)
        deadline = time.monotonic() + 5
        while not (node := await slurm.get_node(name)).is_drained and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert node.is_drained
        await slurm.resume_node(name)
        node = await slurm.get_node(name)
        assert not node.is_drain
    finally:
        try:
            await slurm.delete_node(name)
        except SlurmNotFound:
            pass
    with pytest.raises(SlurmNotFound):
        await slurm.get_node(name)


async def test_bad_node_state_is_rejected(slurm: SlurmApi) -> None:
    with pytest.raises(SlurmRejected) as caught:
        await slurm.create_node(f"NodeName={_unique('bad')} CPUs=8 State=IDLE")
    assert type(caught.value) is SlurmRejected and caught.value.error_number == 2028
