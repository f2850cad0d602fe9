"""The Slurm exporter: Slurm's state from any slurmrestd as Prometheus metrics, without the operator
(`python -m workers.exporter`; docs/metrics.md).

One loop reads nodes, jobs, partitions and diag every ``SLINKY_EXPORTER__POLL_SECONDS`` and keeps the
families (``slinky.operator.slurm_metrics``, the operator's own); a scrape only reads what the last round
kept, so scrapes never add load on slurmctld. The poll's age, its errors and ``slinky_slurm_up`` say whether
the values are current.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from slinky import telemetry
from slinky.clients.errors import SlurmError
from slinky.clients.slurm import SlurmApi, SlurmClient
from slinky.config import Settings
from slinky.operator import slurm_metrics

logger = logging.getLogger(__name__)


class Exporter:
    """The poll loop and the collector over what it read."""

    def __init__(self, slurm: SlurmApi, poll_seconds: float) -> None:
        self.slurm = slurm
        self.poll_seconds = poll_seconds
        self.families: list[slurm_metrics.Family] = []
        self.polled_at = 0.0
        self.errors = 0
        self.up = False

    async def poll_once(self) -> None:
        try:
            snapshot = await slurm_metrics.read_snapshot(self.slurm)
        except SlurmError as err:
            self.errors += 1
            self.up = False
            logger.warning("slurmrestd: %s", err)
            return
        self.families = slurm_metrics.families(snapshot)
        self.polled_at, self.up = time.time(), True

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            await self.poll_once()
            await asyncio.sleep(max(self.poll_seconds - (time.monotonic() - started), 0.1))

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield from slurm_metrics.to_prometheus(self.families)
        up = GaugeMetricFamily("slinky_slurm_up", "1 when slurmrestd answered the last poll, else 0.")
        up.add_metric([], 1.0 if self.up else 0.0)
        yield up
        if self.polled_at:
            age = GaugeMetricFamily("slinky_slurm_poll_age_seconds", "Seconds since slurmrestd last answered a poll.")
            age.add_metric([], max(time.time() - self.polled_at, 0.0))
            yield age
        errors = CounterMetricFamily("slinky_slurm_poll_errors", "Polls of slurmrestd that failed.")
        errors.add_metric([], self.errors)
        yield errors


async def run(settings: Settings, stop: asyncio.Event) -> None:
    options = settings.exporter
    async with SlurmClient.from_settings(settings.slurm) as client:
        exporter = Exporter(client, options.poll_seconds)
        registry = CollectorRegistry(auto_describe=True)
        registry.register(exporter)
        telemetry.start_metrics_server(options.port, options.address, registry)
        logger.info("Slurm exporter of %s on %s:%d/metrics", settings.slurm.rest_url, options.address, options.port)
        loop = asyncio.create_task(exporter.run(), name="slurm-poll")
        try:
            await stop.wait()
        finally:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop


def main() -> None:
    settings = Settings()
    telemetry.configure_logging(settings.telemetry)

    async def serve() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await run(settings, stop)

    asyncio.run(serve())
