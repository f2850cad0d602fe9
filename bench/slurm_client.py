"""Benchmark: SlurmClient against a raw httpx loop on the same slurmrestd, plus the watcher's latency.

Run with the local stack up: ``source .slinky-dev/env && .venv/bin/python bench/slurm_client.py``.
Each round submits N external jobs sequentially on one connection, once through a bare
``httpx.AsyncClient`` and once through :class:`SlurmClient`, alternating to share the noise, then
cancels them. It prints the median latency, throughput, and the throughput ratio client/raw (goal >= 0.9).
Then it measures the watcher's added latency: from the moment a direct poll loop (2 ms) sees a job
RUNNING to the moment the watcher (0.25 s interval) emits the event for it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx

from slinky.clients.slurm.auth import TokenFile
from slinky.clients.slurm.client import SlurmClient
from slinky.clients.slurm.models import JobDescMsg
from slinky.clients.slurm.watcher import JobWatcher
from slinky.config import Settings

PARTITION = "slurm-bridge"


def _job(name: str) -> JobDescMsg:
    return JobDescMsg(
        name=name,
        partition=PARTITION,
        flags=["EXTERNAL_JOB"],
        nodes="1",
        cpus_per_task=1,
        memory_per_node=100,
        time_limit=5,
        shared=["none"],
        hold=True,  # keep the bench jobs off the nodes; we measure the REST path, not the scheduler
        current_working_directory="/tmp",
    )


async def _raw_round(url: str, headers: dict[str, str], n: int) -> tuple[list[float], list[int]]:
    latencies: list[float] = []
    ids: list[int] = []
    body = {"job": _job("bench-raw").to_request()}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as http:
        for _ in range(n):
            started = time.perf_counter()
            response = await http.post("/slurm/v0.0.44/job/submit", json=body)
            latencies.append(time.perf_counter() - started)
            ids.append(response.json()["job_id"])
    return latencies, ids


async def _client_round(client: SlurmClient, n: int) -> tuple[list[float], list[int]]:
    latencies: list[float] = []
    ids: list[int] = []
    job = _job("bench-client")
    for _ in range(n):
        started = time.perf_counter()
        ids.append(await client.submit_job(job))
        latencies.append(time.perf_counter() - started)
    return latencies, ids


async def _watcher_latency(client: SlurmClient, samples: int) -> list[float]:
    added: list[float] = []
    watcher = JobWatcher(client, interval_seconds=0.25)
    async with watcher.running():
        await watcher.wait_synced(timeout=10)
        for index in range(samples):
            job = _job(f"bench-watch-{index}").model_copy(update={"hold": None})
            job_id = await client.submit_job(job)
            seen = asyncio.create_task(watcher.wait_for(job_id, lambda j: j.is_running, timeout=30))
            while not (await client.get_job(job_id)).is_running:
                await asyncio.sleep(0.002)
            direct = time.monotonic()
            await seen
            event_at = time.monotonic()
            added.append(max(0.0, event_at - direct))
            await client.cancel_job(job_id)
    return added


async def main(jobs: int, rounds: int, watch_samples: int) -> None:
    settings = Settings().slurm
    token = TokenFile(settings.jwt_file).token() if settings.jwt_file else ""
    headers = {"X-SLURM-USER-NAME": settings.user_name, "X-SLURM-USER-TOKEN": token}
    raw_lat: list[float] = []
    cli_lat: list[float] = []
    raw_rates: list[float] = []
    cli_rates: list[float] = []
    async with SlurmClient.from_settings(settings, max_connections=1) as client:
        # The watcher first: every full job list costs slurmrestd ~0.4 ms per job, and the submit rounds
        # leave hundreds of cancelled jobs listed for MinJobAge.
        table = len((await client.list_jobs()).jobs)
        added = await _watcher_latency(client, watch_samples)
        for _ in range(rounds):
            started = time.perf_counter()
            lat, ids = await _raw_round(settings.rest_url, headers, jobs)
            raw_rates.append(jobs / (time.perf_counter() - started))
            raw_lat += lat
            started = time.perf_counter()
            lat, more = await _client_round(client, jobs)
            cli_rates.append(jobs / (time.perf_counter() - started))
            cli_lat += lat
            for job_id in ids + more:
                await client.cancel_job(job_id)

    def ms(values: list[float]) -> str:
        p90 = statistics.quantiles(values, n=10)[-1]
        return f"median {statistics.median(values) * 1000:.2f} ms, p90 {p90 * 1000:.2f} ms"

    print(f"submit, {rounds} rounds x {jobs} jobs, 1 connection")
    print(f"  raw httpx : {ms(raw_lat)}, {statistics.median(raw_rates):.0f} jobs/s")
    print(f"  SlurmClient: {ms(cli_lat)}, {statistics.median(cli_rates):.0f} jobs/s")
    ratio = statistics.median(cli_rates) / statistics.median(raw_rates)
    print(f"  throughput ratio client/raw: {ratio:.2f} (goal >= 0.9)")
    if added:
        print(f"watcher (0.25 s interval, {table} jobs listed at start)")
        print(f"watcher added latency RUNNING->event, n={len(added)}: {ms(added)}, max {max(added) * 1000:.0f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--watch-samples", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.jobs, args.rounds, args.watch_samples))
