"""Node sync on the real stack: kube-apiserver Node objects ↔ slurmctld nodes through slurmrestd.

The reconciler runs in this test process (refresh every second), beside the bridge worker's own
instance if that one runs: both are idempotent. Only the ``ext-node-*`` nodes these tests create are
cordoned, drifted and removed; the shared ``slinky-node-*`` nodes are only read.

A new IDLE node in the shared ``slurm-bridge`` partition is taken at once by whatever job other
engineers' tests have pending there (seen: a bridge test's ``late-1`` job). So each ``ext-node-*`` gets
a private partitions annotation ``nodesync-<id>`` (a Feature no partition selects), and the one test
that needs a job on it creates a private partition naming just that node with ``scontrol``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import pytest

from slinky import wellknown
from slinky.bridge import nodesync
from slinky.clients.errors import KubeError, KubeNotFound, SlurmError, SlurmNotFound
from slinky.clients.kube import KubeClient
from slinky.clients.slurm import JobDescMsg, SlurmClient
from slinky.clients.slurm import Node as SlurmNode
from slinky.config import SlurmSettings
from tests.integration.devstack import scontrol
from tests.integration.waiting import eventually_async as eventually
from workers.bridge.node_sync import NodeSyncer

pytestmark = pytest.mark.integration

T = TypeVar("T")
DEV_NODES = [f"slinky-node-{i}" for i in range(1, 5)]
KEEP_OFF_TAINT = {"key": "test.slinky.slurm.net/node-sync", "value": "keep-off", "effect": "NoSchedule"}
SCHED = wellknown.SCHEDULER_NAME


def private_feature(node: str) -> str:
    return node.replace("ext-node-", "nodesync-")


class Stack:
    def __init__(self, kube: KubeClient, slurm: SlurmClient, syncer: NodeSyncer) -> None:
        self.kube = kube
        self.slurm = slurm
        self.syncer = syncer

    async def slurm_node(self, name: str) -> SlurmNode | None:
        try:
            return await self.slurm.get_node(name)
        except SlurmNotFound:
            return None

    async def kube_node(self, name: str) -> dict[str, Any]:
        return await self.kube.get(f"/api/v1/nodes/{name}")

    async def create_ext_node(self, *, cpu: str = "4", memory: str = "8Gi") -> str:
        """An ``ext-node-<id>`` whose partitions annotation is the private Feature ``nodesync-<id>``."""
        name = f"ext-node-{uuid.uuid4().hex[:8]}"
        capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        await self.kube.create(
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {wellknown.LABEL_EXTERNAL_NODE: "true", "kubernetes.io/hostname": name},
                    "annotations": {wellknown.ANNOTATION_EXTERNAL_NODE_PARTITIONS: private_feature(name)},
                },
                "spec": {"taints": [KEEP_OFF_TAINT]},
                "status": {
                    "capacity": capacity,
                    "allocatable": dict(capacity),
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "lastHeartbeatTime": now,
                            "lastTransitionTime": now,
                        }
                    ],
                    "addresses": [
                        {"type": "InternalIP", "address": "127.0.0.1"},
                        {"type": "Hostname", "address": name},
                    ],
                },
            },
        )
        return name

    async def cleanup(self, name: str) -> None:
        """Delete both sides, tolerating a slow or busy stack (a stalled slurmctld answers late)."""
        for _ in range(5):
            try:
                await self.kube.delete(f"/api/v1/nodes/{name}")
            except KubeNotFound:
                break
            except KubeError:
                await asyncio.sleep(1)
            else:
                break
        for _ in range(40):
            try:
                await self.slurm.delete_node(name)
            except SlurmNotFound:
                return
            except SlurmError:
                await asyncio.sleep(0.5)  # busy: a test job is still ending
            else:
                return

    async def cordon(self, name: str, on: bool) -> None:
        await self.kube.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True if on else None}})


@pytest.fixture(scope="module")
async def stack(dev_env: dict[str, str]) -> AsyncIterator[Stack]:
    kube = KubeClient.from_kubeconfig(dev_env["KUBECONFIG"])
    slurm = SlurmClient.from_settings(
        SlurmSettings(rest_url=dev_env["SLURM_REST_URL"], jwt_file=dev_env["SLURM_JWT_FILE"])
    )
    syncer = NodeSyncer(kube, slurm, scheduler_name=SCHED, refresh_seconds=1.0)
    task = asyncio.create_task(syncer.run(), name="test-node-sync")
    try:
        await asyncio.wait_for(syncer.synced.wait(), timeout=30)
        yield Stack(kube, slurm, syncer)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await kube.aclose()
        await slurm.aclose()


@pytest.fixture
async def ext_node(stack: Stack) -> AsyncIterator[str]:
    name = await stack.create_ext_node()
    try:
        yield name
    finally:
        await stack.cleanup(name)


async def registered(stack: Stack, name: str, cpus: int = 4) -> SlurmNode:
    async def probe() -> SlurmNode | None:
        node = await stack.slurm_node(name)
        return node if node and node.cpus == cpus and nodesync.registered_by_bridge(node) else None

    return await eventually(probe, what=f"Slurm node {name} registered with {cpus} CPUs")


# ------------------------------------------------------------------------------------------------ tests
async def test_dev_nodes_carry_the_managed_node_taint(stack: Stack) -> None:
    for name in DEV_NODES:

        async def probe(name: str = name) -> bool:
            return nodesync.has_taint(await stack.kube_node(name), SCHED) is True

        await eventually(probe, what=f"{wellknown.TAINT_MANAGED_NODE}={SCHED}:NoExecute on {name}")
        assert await stack.slurm_node(name) is not None


async def test_external_node_is_registered(stack: Stack, ext_node: str) -> None:
    node = await registered(stack, ext_node)
    assert node.real_memory == 8192
    assert node.features == [private_feature(ext_node)]
    assert {"IDLE", "EXTERNAL"} <= node.states and not node.is_drain and node.partitions == []
    assert node.address == "127.0.0.1"

    async def tainted() -> bool:
        return nodesync.has_taint(await stack.kube_node(ext_node), SCHED) is True

    await eventually(tainted, what="managed-node taint on the new node")
    taints = (await stack.kube_node(ext_node))["spec"]["taints"]
    assert KEEP_OFF_TAINT in taints  # other taints survive our read-modify-write


async def test_cordon_drains_and_uncordon_undrains(stack: Stack, ext_node: str) -> None:
    await registered(stack, ext_node)
    await stack.cordon(ext_node, True)

    async def drained() -> SlurmNode | None:
        node = await stack.slurm_node(ext_node)
        return node if node and node.is_drain else None

    node = await eventually(drained, what="DRAIN after cordon")
    assert node.reason == f"slurm-bridge: Corresponding Kubernetes node ({ext_node}) is unschedulable"

    await stack.cordon(ext_node, False)

    async def undrained() -> SlurmNode | None:
        node = await stack.slurm_node(ext_node)
        return node if node and not node.is_drain else None

    await eventually(undrained, what="undrain after uncordon")


async def test_foreign_drain_is_left_untouched(stack: Stack, ext_node: str) -> None:
    await registered(stack, ext_node)
    await stack.slurm.drain_node(ext_node, "admin: maintenance")
    await stack.cordon(ext_node, True)
    await asyncio.sleep(0.5)
    await stack.cordon(ext_node, False)
    # Several full passes (1 s each) and the watch events of both patches.
    await asyncio.sleep(3)
    node = await stack.slurm_node(ext_node)
    assert node is not None and node.is_drain and node.reason == "admin: maintenance"
    await stack.slurm.resume_node(ext_node)


async def test_drift_recreates_after_jobs_leave(stack: Stack, ext_node: str) -> None:
    await registered(stack, ext_node)
    partition = private_feature(ext_node)
    scontrol("create", f"PartitionName={partition}", f"Nodes={ext_node}", "State=UP")
    try:
        await drift_while_busy(stack, ext_node, partition)
    finally:
        scontrol("delete", f"PartitionName={partition}")
    node = await registered(stack, ext_node, cpus=6)
    assert not node.is_drain and node.real_memory == 8192


async def drift_while_busy(stack: Stack, ext_node: str, partition: str) -> None:
    job_id = await stack.slurm.submit_job(
        JobDescMsg.model_validate(
            {
                "name": f"node-sync-{ext_node}",
                "partition": partition,
                "flags": ["EXTERNAL_JOB"],
                "required_nodes": [ext_node],
                "tasks_per_node": 1,
                "cpus_per_task": 1,
                "memory_per_node": 100,
                "time_limit": 5,
                "current_working_directory": "/tmp",
            }
        )
    )
    try:

        async def running() -> bool:
            return (await stack.slurm.get_job(job_id)).is_running

        await eventually(running, what="pinned job running")
        await stack.kube.patch(f"/api/v1/nodes/{ext_node}/status", {"status": {"capacity": {"cpu": "6"}}})

        async def draining() -> SlurmNode | None:
            node = await stack.slurm_node(ext_node)
            return node if node and node.is_drain and node.is_busy else None

        node = await eventually(draining, what="drift drains the busy node")
        assert node.reason.startswith("slurm-bridge:") and "CPUs 4->6" in node.reason
        await asyncio.sleep(2.5)  # a busy node is waited on, never deleted
        still = await stack.slurm_node(ext_node)
        assert still is not None and still.cpus == 4 and still.is_busy
    finally:
        await stack.slurm.cancel_job(job_id)
    await registered(stack, ext_node, cpus=6)


async def test_label_removed_drains_and_deletes(stack: Stack, ext_node: str) -> None:
    await registered(stack, ext_node)
    await stack.kube.patch(f"/api/v1/nodes/{ext_node}", {"metadata": {"labels": {wellknown.LABEL_EXTERNAL_NODE: None}}})

    async def gone() -> bool:
        return await stack.slurm_node(ext_node) is None

    await eventually(gone, what="Slurm node deleted after the label went")

    async def untainted() -> bool:
        return nodesync.has_taint(await stack.kube_node(ext_node), SCHED) is False

    await eventually(untainted, what="managed-node taint removed")


async def test_deleted_kubernetes_node_retires_its_slurm_node(stack: Stack, ext_node: str) -> None:
    await registered(stack, ext_node)
    await stack.kube.delete(f"/api/v1/nodes/{ext_node}")

    async def gone() -> bool:
        return await stack.slurm_node(ext_node) is None

    await eventually(gone, what="Slurm node of a deleted Kubernetes node retired")
    for name in DEV_NODES:  # unregistered EXTERNAL nodes are never retired
        assert await stack.slurm_node(name) is not None
