"""The garbage collector (``workers/bridge/gc.py``) on the real stack: what no lifecycle is left to handle.

Both cases name a workflow that never ran, so no lifecycle is in charge: a labelled pod with the bridge's
finalizer whose job is gone is deleted and its finalizer removed (the client's tested removal, which keeps
other finalizers); a live bridge job whose pods are gone is cancelled.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from slinky import wellknown
from slinky.bridge.models.workload import job_comment_for
from slinky.clients.errors import KubeNotFound
from slinky.clients.kube import KubeClient, pod_path
from slinky.clients.slurm import JobDescMsg, SlurmClient
from slinky.clients.slurm.watcher import JobWatcher
from slinky.config import SlurmSettings
from workers.bridge.gc import GarbageCollector

pytestmark = pytest.mark.integration
OTHER = "test.slinky.slurm.net/hold"


@pytest.fixture
async def gc(dev_env: dict[str, str]) -> AsyncIterator[tuple[GarbageCollector, KubeClient, SlurmClient]]:
    settings = SlurmSettings(rest_url=dev_env["SLURM_REST_URL"], jwt_file=dev_env["SLURM_JWT_FILE"])
    temporal = await Client.connect(dev_env["TEMPORAL_ADDRESS"], data_converter=pydantic_data_converter)
    async with KubeClient.from_kubeconfig(dev_env["KUBECONFIG"]) as kube, SlurmClient.from_settings(settings) as slurm:
        yield GarbageCollector(kube, slurm, temporal), kube, slurm


async def test_a_labelled_pod_without_job_or_lifecycle_is_deleted_and_released(
    gc: tuple[GarbageCollector, KubeClient, SlurmClient],
) -> None:
    collector, kube, _ = gc
    ns = f"gc-{uuid.uuid4().hex[:6]}"
    await kube.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    try:
        pod = await kube.create(
            pod_path(ns),
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "orphan",
                    "labels": {wellknown.LABEL_SLURM_JOB_ID: "999999"},
                    "annotations": {wellknown.ANNOTATION_WORKFLOW_ID: f"workload/{ns}/never-ran"},
                    "finalizers": [OTHER, wellknown.FINALIZER_SCHEDULER],
                },
                "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]},
            },
        )
        await collector.run_once()
        after = await kube.get(pod_path(ns, "orphan"))
        assert after["metadata"]["uid"] == pod["metadata"]["uid"]
        assert after["metadata"].get("deletionTimestamp"), "deleted"
        assert after["metadata"]["finalizers"] == [OTHER], "ours removed, the other kept"
        assert collector.pods_deleted >= 1
    finally:
        with contextlib.suppress(KubeNotFound):
            await kube.patch(pod_path(ns, "orphan"), {"metadata": {"finalizers": None}})
        await kube.delete(f"/api/v1/namespaces/{ns}")


@pytest.mark.parametrize("view", [False, True], ids=["slurm-list", "watcher-view"])
async def test_a_live_job_whose_pods_and_lifecycle_are_gone_is_cancelled(
    gc: tuple[GarbageCollector, KubeClient, SlurmClient], view: bool
) -> None:
    """With Slurm's job list (a follower, a stale view), and with the leader's job watcher's view (the job and its
    comments as the watcher read them; no GET jobs of the pass's own)."""
    collector, _, slurm = gc
    name = f"gc-{uuid.uuid4().hex[:6]}"
    job_id = await slurm.submit_job(
        JobDescMsg(
            name=name,
            partition=wellknown.DEFAULT_PARTITION,
            flags=["EXTERNAL_JOB"],
            current_working_directory="/tmp",
            admin_comment=json.dumps({"pods": [f"{name}/gone"]}),
            comment=job_comment_for(f"workload/{name}/never-ran"),
        )
    )
    try:
        if view:
            watcher = JobWatcher(slurm, state_probe=True)
            async with watcher.running():
                await watcher.wait_for(job_id, lambda job: True, timeout=30)
                collector.job_view = lambda seconds: (
                    (list(watcher.jobs.values()), watcher.answered_since) if watcher.seen_within(seconds) else None
                )
                await collector.run_once()
            assert collector.lists == 0, "the pass read the watcher's view, not Slurm's list"
        else:
            await collector.run_once()
            assert collector.lists == 1
        assert (await slurm.get_job(job_id)).state == "CANCELLED"
    finally:
        await slurm.cancel_job(job_id)
