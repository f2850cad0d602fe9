"""The submit relay: a follower's submit runs on the leader, with the leader's free-node view; anything that
surely did not reach the leader falls back to submitting here, anything that may have is retried."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.slurm import SlurmActivities
from slinky import telemetry
from slinky.bridge.models.workload import SubmitInput, SubmitResult
from tests.unit.slurm.helpers import fake_cluster
from tests.unit.test_submit_activity import SPEC, Gate, Index
from workers.bridge import submit_relay
from workers.bridge.submit_relay import SubmitRelayClient

KEY = "a.slurm.jwt"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _input(wid: str = "workload/ns/uid") -> SubmitInput:
    return SubmitInput(workflow_id=wid, spec=SPEC, submission=1)


@contextlib.asynccontextmanager
async def leader(handler: submit_relay.Handler, key: str = KEY) -> AsyncIterator[str]:
    port = _free_port()
    server = await submit_relay.serve(handler, lambda: key, "127.0.0.1", port)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


def _relay_count(result: str) -> float:
    return telemetry.REGISTRY.get_sample_value("slinky_bridge_submit_relay_total", {"result": result}) or 0.0


async def test_a_followers_submit_is_allocated_at_once_by_the_leader() -> None:
    """The leader's gate is open and its index hears of the job; the follower's activity gets the nodes without
    ever calling Slurm itself."""
    fake, index, gate = fake_cluster(), Index(), Gate(open_=True)
    leading = SlurmActivities(fake, index, gate)
    relayed, local = _relay_count("relayed"), _relay_count("local")
    async with leader(leading.submit) as address:
        own = fake_cluster()
        follower = SlurmActivities(own, Index(), None)
        follower.relay = SubmitRelayClient(lambda: address, lambda: KEY)
        result: SubmitResult = await ActivityEnvironment().run(follower.submit_placeholder_job, _input())
    assert own.calls == [], "the follower never called Slurm itself"
    assert result.job_id is not None and result.nodes, "allocated at once, with its nodes"
    assert (await fake.get_job(result.job_id)).is_running
    assert [j.job_id for j in index.expected] == [result.job_id], "the leader's job view announced it"
    assert gate.asked == [("p", 1)]
    assert (_relay_count("relayed") - relayed, _relay_count("local") - local) == (1, 0)


async def test_each_result_is_counted_for_the_metrics() -> None:
    before = {r: _relay_count(r) for r in ("relayed", "local", "failed")}

    async def handler(data: SubmitInput, attempt: int) -> SubmitResult:
        if attempt == 2:
            raise RuntimeError("no")
        return SubmitResult(job_id=1)

    async with leader(handler) as address:
        client = SubmitRelayClient(lambda: address, lambda: KEY)
        await client.submit(_input(), 1)
        with pytest.raises(ApplicationError):
            await client.submit(_input(), 2)
    await SubmitRelayClient(lambda: None, lambda: KEY).submit(_input(), 1)
    assert {r: _relay_count(r) - n for r, n in before.items()} == {"relayed": 1, "local": 1, "failed": 1}


async def test_the_attempt_reaches_the_leader_and_a_retry_finds_the_first_attempts_job() -> None:
    fake, index = fake_cluster(), Index()
    leading = SlurmActivities(fake, index, Gate(open_=True))
    attempts: list[int] = []

    async def handler(data: SubmitInput, attempt: int) -> SubmitResult:
        attempts.append(attempt)
        return await leading.submit(data, attempt)

    async with leader(handler) as address:
        client = SubmitRelayClient(lambda: address, lambda: KEY)
        first = await client.submit(_input(), 1)
        again = await client.submit(_input(), 2)
    assert attempts == [1, 2]
    assert first is not None and again is not None
    assert again.job_id == first.job_id and again.reused
    assert [c for c in fake.calls if c in ("allocate_job", "submit_job")] == ["allocate_job"], "one job"


@pytest.mark.parametrize("case", ["no leader", "refused", "wrong key"])
async def test_what_surely_did_not_reach_the_leader_is_submitted_here(case: str) -> None:
    """None from the relay: the activity submits itself, as a follower did before the relay (queued)."""
    called: list[SubmitInput] = []

    async def handler(data: SubmitInput, attempt: int) -> SubmitResult:
        called.append(data)
        return SubmitResult(job_id=1)

    relayed, local = _relay_count("relayed"), _relay_count("local")
    async with leader(handler, key="another.jwt" if case == "wrong key" else KEY) as address:
        where = {"no leader": None, "refused": f"127.0.0.1:{_free_port()}", "wrong key": address}[case]
        follower = SlurmActivities(fake := fake_cluster(), Index(), None)
        follower.relay = SubmitRelayClient(lambda: where, lambda: KEY)
        result: SubmitResult = await ActivityEnvironment().run(follower.submit_placeholder_job, _input())
    assert called == [], "the leader did nothing"
    assert result.job_id is not None and (await fake.get_job(result.job_id)).is_pending, "queued here"
    assert (_relay_count("relayed") - relayed, _relay_count("local") - local) == (0, 1)


async def test_a_failed_submit_on_the_leader_is_retried_not_submitted_here() -> None:
    """A 500 may follow a job the leader made (Slurm answered too late): the activity fails, and its retry looks
    for that job before submitting."""

    async def handler(data: SubmitInput, attempt: int) -> SubmitResult:
        raise RuntimeError("slurmrestd went away")

    async with leader(handler) as address:
        client = SubmitRelayClient(lambda: address, lambda: KEY)
        with pytest.raises(ApplicationError) as err:
            await client.submit(_input(), 1)
    assert err.value.type == "SubmitRelayFailed" and not err.value.non_retryable
    assert "slurmrestd went away" in str(err.value)


async def test_a_leader_gone_mid_request_fails_the_attempt_for_a_retry() -> None:
    """The request was sent and no answer came (the leader killed): unknown outcome, so no local submit."""
    started = asyncio.Event()

    async def handler(data: SubmitInput, attempt: int) -> SubmitResult:
        started.set()
        await asyncio.sleep(3600)
        raise AssertionError

    port = _free_port()
    connections: list[asyncio.StreamWriter] = []

    async def dying(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        await reader.readline()
        writer.transport.abort()  # as a kill -9 would: the connection resets with no answer

    server = await asyncio.start_server(dying, "127.0.0.1", port)
    try:
        client = SubmitRelayClient(lambda: f"127.0.0.1:{port}", lambda: KEY)
        with pytest.raises(ApplicationError) as err:
            await client.submit(_input(), 1)
    finally:
        server.close()
    assert err.value.type == "SubmitRelayUnanswered" and not err.value.non_retryable
    assert not started.is_set() and connections


async def test_one_submit_per_lifecycle_at_a_time_on_the_leader() -> None:
    """A retry that arrives while its first attempt still runs waits for it; other lifecycles do not wait."""
    running: list[str] = []
    overlaps: list[tuple[str, ...]] = []
    release = asyncio.Event()

    async def handler(data: SubmitInput, attempt: int) -> SubmitResult:
        running.append(data.workflow_id)
        overlaps.append(tuple(running))
        if attempt == 1 and data.workflow_id == "workload/ns/a":
            await release.wait()
        running.remove(data.workflow_id)
        return SubmitResult(job_id=attempt)

    async with leader(handler) as address:
        client = SubmitRelayClient(lambda: address, lambda: KEY)
        first = asyncio.create_task(client.submit(_input("workload/ns/a"), 1))
        await asyncio.sleep(0.1)
        retry = asyncio.create_task(client.submit(_input("workload/ns/a"), 2))
        other = await client.submit(_input("workload/ns/b"), 1)
        await asyncio.sleep(0.1)
        assert not retry.done(), "the retry waits for the first attempt"
        release.set()
        results = [await first, await retry]
    assert other is not None and other.job_id == 1
    assert [r.job_id for r in results if r is not None] == [1, 2]
    assert ("workload/ns/a", "workload/ns/b") in overlaps, "another lifecycle ran beside the held one"
    assert ("workload/ns/a", "workload/ns/a") not in overlaps


async def test_a_request_that_is_not_a_signed_submit_changes_nothing() -> None:
    called: list[int] = []

    async def handler(data: SubmitInput, attempt: int) -> SubmitResult:
        called.append(attempt)
        return SubmitResult(job_id=1)

    async with leader(handler) as address:
        host, _, port = address.rpartition(":")
        for request in (
            b"GET /submit HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            b"POST /submit HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
            b"POST /submit HTTP/1.1\r\nContent-Length: 2\r\n"
            + f"x-slinky-signature: {submit_relay.sign(KEY, b'{}')}\r\n\r\n".encode()
            + b"{}",
        ):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(request)
            status = (await reader.readline()).split()[1]
            writer.close()
            assert status in (b"404", b"401", b"400"), status
    assert called == []
