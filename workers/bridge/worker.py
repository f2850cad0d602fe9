"""The bridge worker process: Temporal worker + node cache on every replica; pod watcher + Slurm job router + GC
+ node sync on the leader.

Every replica polls the task queue, so N replicas share the lifecycles (workflow tasks and their local
activities). The watchers run once, on the replica that holds the Lease (``SLINKY_LEADER_ELECTION__ENABLED=true``,
the chart's default); without election the one replica runs everything. On the leader the activities read the
watchers' views: the submit activity the router's job index (and the free-node estimate that lets it allocate
at once), the translation the pod watcher's cache. A follower's activities ask the API servers instead; its
submits go through the leader when the submit relay is on (``workers/bridge/submit_relay.py``), else its jobs are
queued (``job/submit``), since it has no view of free nodes. The leader's watcher routes every job's events to the
lifecycle wherever it runs (docs/bridge.md, "Several replicas").
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
from slinky import telemetry, wellknown
from slinky.bridge.models.jobspec import TranslateDefaults
from slinky.bridge.models.workload import JobRef
from slinky.clients.events import EventRecorder
from slinky.clients.kube import KubeClient
from slinky.clients.leader import LeaderElector
from slinky.clients.slurm import SlurmClient
from slinky.clients.slurm.auth import TokenProvider, token_from_settings
from slinky.clients.slurm.models import JobInfo
from slinky.config import Settings
from workers import leading
from workers.bridge import submit_relay
from workers.bridge.capacity import FreeNodes
from workers.bridge.gc import GarbageCollector
from workers.bridge.node_cache import NodeCache
from workers.bridge.node_sync import NodeSyncer
from workers.bridge.phantom_nodes import PhantomNodes
from workers.bridge.pod_watcher import PodWatcher
from workers.bridge.slurm_router import SlurmJobRouter
from workers.bridge.submit_relay import SubmitRelayClient
from workers.health import Health
from workers.leading import connect_temporal, run_as_leader
from workflows.workload import WorkloadWorkflow

logger = logging.getLogger("workers.bridge")


class NoJobIndex:
    """A follower's job index: it has no watcher. The submit activity then asks Slurm itself on a retry, the
    one case where a job of the same submission may exist already (as the leader does when its index has not
    seen the job yet)."""

    async def wait_synced(self) -> None:
        return None

    async def caught_up(self, since: float, timeout: float) -> bool:
        return False

    async def confirmed(self, since: float, timeout: float, job_id: int | None = None) -> bool:
        return False

    def job(self, job_id: int) -> JobInfo | None:
        return None

    def seen_within(self, seconds: float) -> bool:
        return False

    def live_job_of(self, workflow_id: str, submission: int | None = None) -> JobInfo | None:
        return None

    def expect(self, job: JobInfo) -> None:
        return None

    def cancelling(self, ref: JobRef) -> None:
        return None


async def run(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Run the bridge replica until ``stop``.

    Raises:
        LeadershipLost: The lease slipped away while leading (``main`` exits 1 and comes back as a follower).
    """
    await run_bridge(settings, stop or asyncio.Event(), Health())


async def run_bridge(settings: Settings, stop: asyncio.Event, health: Health) -> None:
    """One replica until ``stop``: the Temporal worker always, the watchers while it leads."""
    temporal = await connect_temporal(settings)
    kube = KubeClient.from_kubeconfig(settings.kube.kubeconfig)
    slurm = SlurmClient.from_settings(settings.slurm)
    nodes = NodeCache(kube, slurm)
    events = EventRecorder(kube)  # Events are posted in the background, like client-go's recorder
    kube_acts = KubeActivities(kube, nodes, events, None)
    slurm_acts = SlurmActivities(slurm, NoJobIndex(), None)
    relay = _submit_relay(settings)
    worker = Worker(
        temporal,
        task_queue=settings.temporal.task_queue,
        workflows=[WorkloadWorkflow],
        activities=[*kube_acts.all(), *slurm_acts.all()],
        # Not shorter: 3 s sent 1.4 tasks per pod of a 3,000-pod burst away from this busy worker to the shared
        # queue, each then replayed from its whole history (docs/benchmarks.md, "Many open workloads").
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=settings.worker.sticky_schedule_to_start_seconds),
        max_concurrent_local_activities=200,
        max_concurrent_workflow_tasks=settings.worker.max_concurrent_workflow_tasks,
        # The sandbox re-imports modules for every workflow run, which made the worker CPU-bound at a few
        # lifecycles per second on 2 cores. Determinism is guarded where it is cheap instead: the
        # workflow tests run sandboxed, replay tests replay recorded histories, and import-linter keeps
        # I/O libraries out of workflows/. SLINKY_WORKER__SANDBOX=true restores it.
        workflow_runner=SandboxedWorkflowRunner() if settings.worker.sandbox else UnsandboxedWorkflowRunner(),
        graceful_shutdown_timeout=timedelta(seconds=5),
    )

    async def lead(settings: Settings, stop: asyncio.Event) -> None:
        """The watchers, and the activities' views of them, while this replica leads."""
        gc = GarbageCollector(kube, slurm, temporal)
        router = SlurmJobRouter(
            slurm,
            temporal,
            request_gc=gc.collect_soon,
            interval_seconds=settings.slurm.watch_interval_seconds,
            fast_interval_seconds=settings.slurm.watch_fast_interval_seconds,
            fast_window_seconds=settings.slurm.watch_fast_window_seconds,
            quiet_jobs=settings.slurm.watch_quiet_jobs,
        )
        pods = PodWatcher(
            kube,
            temporal,
            task_queue=settings.temporal.task_queue,
            scheduler_name=settings.bridge.scheduler_name,
            defaults=TranslateDefaults(partition=settings.bridge.partition, mcs_label=settings.bridge.mcs_label),
            events=events,
            # A lifecycle started eagerly runs on this replica (and stays there); with followers it goes to
            # the task queue, so that whichever replica polls first takes it.
            eager_start=settings.worker.eager_start_or_default(settings.leader_election.enabled),
            batch_pod_events=settings.worker.batch_pod_events,
            rechecks_per_second=settings.worker.safety_rechecks_per_second,
        )
        if settings.telemetry.metrics_port:
            telemetry.REGISTRY.register(
                telemetry.PollCollector(
                    lambda: (router.watcher.polls, router.watcher.errors, router.watcher.controller_restarts),
                    lambda: {**router.watcher.requests, "job_read": router.watcher.details_read},
                )
            )
        gc.job_view = router.jobs_seen_within
        kube_acts.pods = pods
        slurm_acts.index = router
        phantoms = PhantomNodes(slurm, router.watcher, nodes, events, clear=settings.slurm.clear_phantom_allocations)
        slurm_acts.capacity = (
            FreeNodes(router.watcher, nodes, phantoms.held) if settings.slurm.immediate_allocation else None
        )
        slurm_acts.relay = None
        tasks = [
            asyncio.create_task(router.run(), name="slurm-router"),
            asyncio.create_task(gc.run(), name="gc"),
            asyncio.create_task(NodeSyncer.from_settings(kube, slurm, settings).run(), name="node-sync"),
            asyncio.create_task(pods.run(), name="pod-watcher"),
            asyncio.create_task(phantoms.run(), name="phantom-nodes"),
        ]
        server = None
        if relay is not None:
            try:
                server = await submit_relay.serve(slurm_acts.submit, relay.key, *relay.address)
            except OSError as err:  # the followers then submit themselves (connection refused)
                logger.error(
                    "submit relay: cannot listen on %s:%s (%s); followers submit themselves", *relay.address, err
                )
        logger.info("bridge replica leads: watchers running")
        try:
            await stop.wait()
        finally:
            if server is not None:
                server.close()
            kube_acts.pods, slurm_acts.index, slurm_acts.capacity = None, NoJobIndex(), None
            slurm_acts.relay = relay.client if relay is not None else None
            await _cancel(tasks)

    if settings.telemetry.metrics_port:
        telemetry.start_metrics_server(settings.telemetry.metrics_port, settings.telemetry.metrics_address)
    cache = asyncio.create_task(nodes.run(), name="node-cache")
    try:
        await asyncio.wait_for(nodes.synced.wait(), timeout=30)
        async with worker:
            logger.info("bridge worker running on task queue %s", settings.temporal.task_queue)
            slurm_acts.relay = relay.client if relay is not None else None
            await run_as_leader(
                settings,
                settings.leader_election.name,
                lead,
                stop,
                health,
                annotations=relay.annotations if relay is not None else None,
                on_elector=relay.follow if relay is not None else None,
            )
    finally:
        await _cancel([cache])
        await events.aclose()
        await kube.aclose()
        await slurm.aclose()


class _Relay:
    """This replica's side of the submit relay: its own address (served while it leads) and its client of the
    leader's (used while it follows)."""

    def __init__(self, host: str, port: int, token: TokenProvider) -> None:
        self.address = (host, port)
        self.key = token.token
        self.annotations = {wellknown.ANNOTATION_SUBMIT_RELAY: f"{host}:{port}"}
        self._elector: LeaderElector | None = None
        self.client = SubmitRelayClient(self._leader, self.key)

    def follow(self, elector: LeaderElector) -> None:
        self._elector = elector

    def _leader(self) -> str | None:
        return self._elector.holder_annotation(wellknown.ANNOTATION_SUBMIT_RELAY) if self._elector else None


def _submit_relay(settings: Settings) -> _Relay | None:
    """The relay, when configured: a port, leader election (one replica has no followers) and a Slurm JWT."""
    port = settings.worker.submit_relay_port
    if port is None or not settings.leader_election.enabled:
        return None
    token = token_from_settings(settings.slurm)
    if token is None:
        logger.warning("submit relay off: it signs with the Slurm JWT, and none is configured")
        return None
    return _Relay(settings.worker.submit_relay_host, port, token)


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


def main() -> None:
    leading.serve_process(run_bridge)
