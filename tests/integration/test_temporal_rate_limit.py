"""Temporal's rate limits met by the bridge: a real dev server (its own, in memory) whose frontend allows 2
requests a second in the namespace; 30 pending pods seen at once by the pod watcher all get their lifecycle, the
bridge backing off (never giving a pod up) and counting the calls Temporal refused in its metrics."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
from temporalio.client import Client

from slinky import telemetry, wellknown
from slinky.bridge.models.jobspec import TranslateDefaults
from slinky.clients.kube import KubeClient, KubeConfig
from slinky.clients.temporal import data_converter
from slinky.dev.stack import temporal_cli
from tests.builders import make_pod
from workers.bridge.pod_watcher import PodWatcher

pytestmark = pytest.mark.integration
PODS = 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def limited_temporal() -> Iterator[str]:
    """A Temporal dev server whose namespace may make 2 requests a second (burst 2)."""
    port = _free_port()
    argv = [
        str(temporal_cli()), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port), "--headless",
        "--log-level", "error",
        "--dynamic-config-value", "frontend.enableServerVersionCheck=false",
        "--dynamic-config-value", "frontend.namespaceRPS=2",
        "--dynamic-config-value", "frontend.namespaceBurstRatio=1",
    ]  # fmt: skip
    for name, kind in wellknown.SEARCH_ATTRIBUTES.items():
        argv += ["--search-attribute", f"{name}={kind}"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the rate-limited Temporal did not start"
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _refused() -> float:
    value = telemetry.REGISTRY.get_sample_value(
        "slinky_bridge_temporal_call_retries_total", {"call": "start", "status": "RESOURCE_EXHAUSTED"}
    )
    return value or 0.0


async def _count(client: Client) -> int:
    while True:  # the count is rate-limited too
        try:
            return (await client.count_workflows("WorkflowType = 'WorkloadWorkflow'")).count
        except Exception:
            await asyncio.sleep(1)


@pytest.mark.timeout(240)
async def test_pending_pods_all_get_their_lifecycle_while_temporal_rate_limits(limited_temporal: str) -> None:
    client = await Client.connect(limited_temporal, data_converter=data_converter)
    kube = KubeClient(KubeConfig(server="https://127.0.0.1:1", ssl_context=False))  # single pods read nothing
    watcher = PodWatcher(
        kube, client, task_queue="rate-limited", scheduler_name="slurm-bridge-scheduler",
        defaults=TranslateDefaults(partition="slurm-bridge"),
    )  # fmt: skip
    before = _refused()
    started = time.monotonic()
    for i in range(PODS):
        watcher.observe("ADDED", make_pod(f"p{i}", uid=f"rate-{i}", cpu="1"))
    while watcher._tasks:
        assert time.monotonic() - started < 200, f"{watcher.started}/{PODS} lifecycles started"
        await asyncio.sleep(0.5)
    took = time.monotonic() - started
    assert watcher.started == PODS
    assert await _count(client) == PODS, "every pod has its lifecycle in Temporal"
    refused = _refused() - before
    print(f"{PODS} starts in {took:.1f}s; {refused:.0f} refused after the SDK's retries and tried again")
    assert refused > 0, "Temporal refused calls (the SDK alone did not absorb the limit), and they were counted"
    assert took > PODS / 2 / 2, "the starts were paced by the limit, not all let through"
