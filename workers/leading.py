"""What the bridge's and the operator's processes share: the Temporal client, and running a body only while
this replica holds a Lease."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import signal
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping

from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from slinky.clients.kube import KubeClient
from slinky.clients.leader import LeaderElector, LeadershipLost
from slinky.clients.temporal import data_converter
from slinky.clients.temporal_rpc import exit_without_finalizing
from slinky.config import Settings
from slinky.telemetry import configure_logging
from workers.health import Health, serve

logger = logging.getLogger("workers.leading")
Body = Callable[[Settings, asyncio.Event], Awaitable[None]]


async def connect_temporal(settings: Settings) -> Client:
    runtime = None
    if settings.telemetry.metrics_port:
        # The SDK's own metrics (task latencies, slots, polls) on the next port.
        address = f"{settings.telemetry.metrics_address}:{settings.telemetry.metrics_port + 1}"
        runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=address)))
    return await Client.connect(
        settings.temporal.address,
        namespace=settings.temporal.namespace,
        data_converter=data_converter,
        runtime=runtime,
    )


def default_identity() -> str:
    """A replica's name for leader election: the pod's hostname and a random suffix (a restart is new)."""
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"


async def run_as_leader(
    settings: Settings,
    lease_name: str,
    body: Body,
    stop: asyncio.Event,
    health: Health | None = None,
    *,
    annotations: Mapping[str, str] | None = None,
    on_elector: Callable[[LeaderElector], None] | None = None,
) -> None:
    """`body` until `stop`; with leader election on, only after acquiring Lease `lease_name` and while held.

    `annotations` are written on the Lease while this replica holds it; `on_elector` is handed the elector before
    it first tries (a standby reads the leader's annotations from it).

    Raises:
        LeadershipLost: The lease slipped away while leading. Everything was stopped first; the process
            should exit, so that it comes back as a standby.
    """
    health = health or Health()
    election = settings.leader_election
    if not election.enabled:
        health.state = "leading"
        await body(settings, stop)
        return
    async with KubeClient.from_kubeconfig(settings.kube.kubeconfig) as kube:
        elector = LeaderElector(
            kube,
            namespace=election.namespace,
            name=lease_name,
            identity=election.identity or default_identity(),
            lease_seconds=election.lease_seconds,
            renew_deadline_seconds=election.renew_deadline_seconds,
            retry_seconds=election.retry_seconds,
            annotations=annotations,
        )
        if on_elector is not None:
            on_elector(elector)
        logger.info("leader election: %s waits for lease %s/%s", elector.identity, election.namespace, lease_name)
        health.state = "standby"
        if not await elector.acquire(stop):
            return
        health.state = "leading"
        lost: list[LeadershipLost] = []

        async def keep_leading() -> None:
            try:
                await elector.hold()
            except LeadershipLost as err:
                logger.error("leader election: %s; stopping", err)
                lost.append(err)
                stop.set()

        keeper = asyncio.create_task(keep_leading(), name="leader-election")
        try:
            await body(settings, stop)
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            if not lost:
                await elector.release()
        if lost:
            raise lost[0]


def main(body: Body, lease_name: Callable[[Settings], str]) -> None:
    """A process entry point: settings from the environment, logging, SIGTERM/SIGINT stop `body`, which runs
    only while this replica leads; a lost lease exits 1 so that the replica comes back as a standby."""
    serve_process(lambda settings, stop, health: run_as_leader(settings, lease_name(settings), body, stop, health))


def serve_process(run: Callable[[Settings, asyncio.Event, Health], Awaitable[None]]) -> None:
    """A process entry point around ``run``, which elects (or not) by itself: settings, logging, the health
    endpoint, SIGTERM/SIGINT set ``stop``; a lost lease exits 1."""
    settings = Settings()
    configure_logging(settings.telemetry)
    faulthandler.enable()  # a fatal error, in any thread, prints every thread's stack to stderr

    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        health = Health()
        server = None
        if settings.telemetry.health_port:
            server = await serve(health, settings.telemetry.health_port, settings.telemetry.metrics_address)
        try:
            await run(settings, stop, health)
        finally:
            if server is not None:
                server.close()

    code = 0
    try:
        asyncio.run(_main())
    except LeadershipLost:
        code = 1
    exit_without_finalizing(code)
