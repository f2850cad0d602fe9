"""The bridge worker process: Temporal worker + pod watcher + Slurm job router + node cache + GC.

One asyncio loop runs them all, so the submit activity reads the router's job index for free and the
pod watcher can start workflows eagerly on this very worker. For availability run several replicas with
leader election (``SLINKY_LEADER_ELECTION__ENABLED=true``, the chart's default): one leads and runs all of
this, the others wait for its Lease; the lifecycles live in Temporal, so a new leader picks them up. Without it
every replica runs everything, which is safe (workflow IDs derive from pod UIDs, every step is idempotent) but
repeats the watches and polls (docs/bridge.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.kube import KubeActivities
from activities.slurm import SlurmActivities
from slinky import telemetry
from slinky.bridge.models.jobspec import TranslateDefaults
from slinky.clients.events import EventRecorder
from slinky.clients.kube import KubeClient
from slinky.clients.slurm import SlurmClient
from slinky.config import Settings
from workers import leading
from workers.bridge.capacity import FreeNodes
from workers.bridge.gc import GarbageCollector
from workers.bridge.node_cache import NodeCache
from workers.bridge.node_sync import NodeSyncer
from workers.bridge.pod_watcher import PodWatcher
from workers.bridge.slurm_router import SlurmJobRouter
from workers.leading import connect_temporal, run_as_leader
from workflows.workload import WorkloadWorkflow

logger = logging.getLogger("workers.bridge")


async def run(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Run the bridge until ``stop``; with leader election, only while this replica leads.

    Raises:
        LeadershipLost: The lease slipped away while leading (``main`` exits 1 and comes back as a standby).
    """
    await run_as_leader(settings, settings.leader_election.name, run_bridge, stop or asyncio.Event())


async def run_bridge(settings: Settings, stop: asyncio.Event) -> None:
    """Every component of the bridge, in one loop, until ``stop``."""
    temporal = await connect_temporal(settings)
    kube = KubeClient.from_kubeconfig(settings.kube.kubeconfig)
    slurm = SlurmClient.from_settings(settings.slurm)
    nodes = NodeCache(kube, slurm)
    gc = GarbageCollector(kube, slurm, temporal)
    router = SlurmJobRouter(
        slurm,
        temporal,
        request_gc=gc.collect_soon,
        interval_seconds=settings.slurm.watch_interval_seconds,
        fast_interval_seconds=settings.slurm.watch_fast_interval_seconds,
        fast_window_seconds=settings.slurm.watch_fast_window_seconds,
    )
    defaults = TranslateDefaults(partition=settings.bridge.partition, mcs_label=settings.bridge.mcs_label)
    events = EventRecorder(kube)  # Events are posted in the background, like client-go's recorder
    pods = PodWatcher(
        kube,
        temporal,
        task_queue=settings.temporal.task_queue,
        scheduler_name=settings.bridge.scheduler_name,
        defaults=defaults,
        events=events,
    )
    if settings.telemetry.metrics_port:
        telemetry.REGISTRY.register(
            telemetry.PollCollector(
                lambda: (router.watcher.polls, router.watcher.errors, router.watcher.controller_restarts)
            )
        )
        telemetry.start_metrics_server(settings.telemetry.metrics_port, settings.telemetry.metrics_address)
    kube_acts = KubeActivities(kube, nodes, events, pods)
    capacity = FreeNodes(router.watcher, nodes) if settings.slurm.immediate_allocation else None
    slurm_acts = SlurmActivities(slurm, router, capacity)
    worker = Worker(
        temporal,
        task_queue=settings.temporal.task_queue,
        workflows=[WorkloadWorkflow],
        activities=[*kube_acts.all(), *slurm_acts.all()],
        # After a kill -9 the next worker picks the workflow up within seconds, not 10 s.
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=3),
        max_concurrent_local_activities=200,
        # The sandbox re-imports modules for every workflow run, which made the worker CPU-bound at a few
        # lifecycles per second on 2 cores. Determinism is guarded where it is cheap instead: the
        # workflow tests run sandboxed, replay tests replay recorded histories, and import-linter keeps
        # I/O libraries out of workflows/. SLINKY_WORKER__SANDBOX=true restores it.
        workflow_runner=SandboxedWorkflowRunner() if settings.worker.sandbox else UnsandboxedWorkflowRunner(),
        graceful_shutdown_timeout=timedelta(seconds=5),
    )
    background = [
        asyncio.create_task(nodes.run(), name="node-cache"),
        asyncio.create_task(router.run(), name="slurm-router"),
        asyncio.create_task(gc.run(), name="gc"),
        asyncio.create_task(NodeSyncer.from_settings(kube, slurm, settings).run(), name="node-sync"),
    ]
    try:
        await asyncio.wait_for(nodes.synced.wait(), timeout=30)
        async with worker:
            background.append(asyncio.create_task(pods.run(), name="pod-watcher"))
            logger.info("bridge worker running on task queue %s", settings.temporal.task_queue)
            await stop.wait()
    finally:
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await events.aclose()
        await kube.aclose()
        await slurm.aclose()


def main() -> None:
    leading.main(run_bridge, lambda settings: settings.leader_election.name)
