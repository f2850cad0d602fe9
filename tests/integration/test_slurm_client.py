"""The Slurm client and watcher against the real slurmrestd 26.05 of the local stack."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from slinky.clients.errors import SlurmRejected, SlurmUnsupported
from slinky.clients.slurm.auth import TokenFile, clean_token
from slinky.clients.slurm.client import SlurmClient
from slinky.clients.slurm.models import JobDescMsg
from slinky.clients.slurm.watcher import JobEventType, JobWatcher
from slinky.config import SlurmSettings

pytestmark = pytest.mark.integration

PARTITION = "slurm-bridge"


def _settings(env: dict[str, str], **kwargs: object) -> SlurmSettings:
    return SlurmSettings.model_validate(
        {"rest_url": env["SLURM_REST_URL"], "jwt_file": env["SLURM_JWT_FILE"], **kwargs}
    )


@pytest.fixture
async def client(dev_env: dict[str, str]) -> AsyncIterator[SlurmClient]:
    async with SlurmClient.from_settings(_settings(dev_env)) as slurm:
        yield slurm


def _external(name: str, **kwargs: object) -> JobDescMsg:
    fields: dict[str, object] = {
        "name": name,
        "partition": PARTITION,
        "flags": ["EXTERNAL_JOB"],
        "nodes": "1",
        "cpus_per_task": 1,
        "memory_per_node": 100,
        "time_limit": 10,
        "shared": ["none"],
        "current_working_directory": "/tmp",
    }
    fields.update(kwargs)
    return JobDescMsg.model_validate(fields)


async def test_server_serves_all_four_versions(client: SlurmClient) -> None:
    assert await client.served_versions() == ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
    await client.check_version()


async def test_node_external_state_is_visible_from_v0044_only(dev_env: dict[str, str]) -> None:
    async with SlurmClient.from_settings(_settings(dev_env, api_version="v0.0.43")) as old:
        assert not any(node.is_external for node in await old.list_nodes())
        with pytest.raises(SlurmUnsupported):
            await old.create_node("NodeName=x State=EXTERNAL")
    async with SlurmClient.from_settings(_settings(dev_env, api_version="v0.0.45")) as new:
        nodes = [n for n in await new.list_nodes() if PARTITION in n.partitions]
        assert nodes and all(node.is_external for node in nodes)


async def test_v0042_refuses_external_job_before_the_server_answers_500(dev_env: dict[str, str]) -> None:
    async with SlurmClient.from_settings(_settings(dev_env, api_version="v0.0.42")) as old:
        with pytest.raises(SlurmUnsupported) as caught:
            await old.submit_job(_external("v42"))
    assert caught.value.minimum_version == "v0.0.43"


async def test_token_rotation_while_requests_are_in_flight(dev_env: dict[str, str], tmp_path: Path) -> None:
    real = clean_token(Path(dev_env["SLURM_JWT_FILE"]).read_text())
    token_file = tmp_path / "jwt"
    token_file.write_text(real)
    provider = TokenFile(token_file)
    settings = _settings(dev_env)
    async with SlurmClient(settings.rest_url, token=provider, read_retries=0) as slurm:
        # Requests in flight while the file is rewritten (prefixed form, different size).
        batch = [asyncio.create_task(slurm.list_jobs()) for _ in range(20)]
        await asyncio.sleep(0)
        token_file.write_text(f"SLURM_JWT={real}\n")
        results = await asyncio.gather(*batch)
        assert all(page.changed for page in results)
        await slurm.diag()
        assert provider.reads == 2
        # A token rotated to something invalid is refused by slurmrestd at the next request...
        token_file.write_text("SLURM_JWT=not-a-jwt-" + uuid.uuid4().hex)
        stat = token_file.stat()
        os.utime(token_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        with pytest.raises(SlurmRejected) as refused:
            await slurm.diag()
        assert "not-a-jwt" not in str(refused.value)
        # ...and the rotated-back valid one works again without a new client.
        token_file.write_text(real)
        await slurm.diag()


async def test_watcher_follows_a_job_through_its_life(client: SlurmClient) -> None:
    watcher = JobWatcher(client, interval_seconds=0.1)
    seen: list[JobEventType] = []
    name = f"watch-{uuid.uuid4().hex[:8]}"
    async with watcher.running():
        await watcher.wait_synced(timeout=10)
        polls_before = watcher.polls
        job_id = await client.submit_job(_external(name))
        watcher.add_callback(lambda event: seen.append(event.type) if event.job_id == job_id else None)
        running = await watcher.wait_for(job_id, lambda j: j.is_running, timeout=20)
        assert running.name == name and running.nodes
        await client.cancel_job(job_id)
        finished = await watcher.wait_for(job_id, lambda j: j.is_finished, timeout=10)
        assert finished.state == "CANCELLED"
        polls = watcher.polls - polls_before
    assert JobEventType.FINISHED in seen
    assert watcher.errors == 0
    # One request per interval: a few seconds at 0.1 s is tens of polls, not hundreds.
    assert polls < 200


async def test_watcher_keeps_going_across_a_slurmctld_restart(client: SlurmClient) -> None:
    """slurmctld stops and restarts underneath the watcher: it resyncs and reports what changed meanwhile."""
    from slinky.dev import stack

    watcher = JobWatcher(client, interval_seconds=0.1)
    name = f"restart-{uuid.uuid4().hex[:8]}"
    events: list[tuple[int, JobEventType]] = []
    async with watcher.running():
        await watcher.wait_synced(timeout=10)
        job_a = await client.submit_job(_external(name + "-a"))
        await watcher.wait_for(job_a, lambda j: j.is_running, timeout=20)
        watcher.add_callback(lambda e: events.append((e.job_id, e.type)))
        await asyncio.to_thread(stack.restart_slurmctld, down_seconds=2.0)
        # Changes made right after the restart must still reach subscribers of the same watcher.
        await client.cancel_job(job_a)
        job_b = await client.submit_job(_external(name + "-b"))
        finished = await watcher.wait_for(job_a, lambda j: j.is_finished, timeout=60)
        running_b = await watcher.wait_for(job_b, lambda j: j.is_running, timeout=60)
        polls_after = watcher.polls
        await asyncio.sleep(0.5)
        assert watcher.polls > polls_after, "still polling"
    await client.cancel_job(job_b)
    assert finished.state == "CANCELLED"
    assert running_b.nodes
    assert (job_b, JobEventType.ADDED) in events
    assert (job_a, JobEventType.FINISHED) in events


def test_cli_lists_nodes_and_jobs_as_json(dev_env: dict[str, str]) -> None:
    """`slinky slurm nodes|partitions|ping --json` read the real slurmrestd with the env file's settings."""
    import json
    import subprocess
    import sys

    env = {**os.environ, **{k: v for k, v in dev_env.items() if k != "PATH"}}

    def cli(*args: str) -> object:
        out = subprocess.run(
            [sys.executable, "-m", "slinky.cli", "slurm", *args, "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        return json.loads(out)

    nodes = cli("nodes")
    assert isinstance(nodes, list)
    names = {n["name"] for n in nodes}
    assert {"slinky-node-1", "slinky-node-2"} <= names
    partitions = cli("partitions")
    assert isinstance(partitions, list) and PARTITION in {p["name"] for p in partitions}
    missing = subprocess.run(
        [sys.executable, "-m", "slinky.cli", "slurm", "job", "999999999"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode != 0 and "999999999" in missing.stderr
