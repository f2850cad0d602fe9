"""The operator's Prometheus endpoint: its counters and gauges follow real work, and promtool accepts them; its
health endpoint answers the kubelet's probes."""

from __future__ import annotations

import random
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from slinky.dev import stack
from tests.integration.cluster import Kube, Slurm
from tests.integration.metrics_text import sample
from tests.integration.nodeset_jobs import nodeset_up
from tests.integration.operator_fixtures import scale, start_operator, stop_operator
from tests.integration.waiting import eventually

pytestmark = pytest.mark.integration


def free_ports(count: int = 3) -> int:
    """The first of `count` consecutive free ports (metrics, the SDK's, health), below the ephemeral range, so
    that no client connection takes one of them meanwhile (a port from bind(0) is ephemeral: its neighbour was
    taken in a CI run)."""
    for base in random.sample(range(20000, 30000, count), 200):
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise AssertionError(f"no {count} consecutive free ports in 20000-30000")


@pytest.fixture
def metrics_operator(dev_env: dict[str, str], controller_ns: str, tmp_path: Path) -> Iterator[int]:
    """An operator of its own for `controller_ns` only, serving its metrics on a free port (the SDK's on the next)."""
    port = free_ports()
    proc = start_operator(
        dev_env,
        tmp_path / "operator.log",
        SLINKY_TELEMETRY__METRICS_PORT=str(port),
        SLINKY_TELEMETRY__HEALTH_PORT=str(port + 2),
        SLINKY_OPERATOR__NAMESPACES=f'["{controller_ns}"]',
        SLINKY_OPERATOR__TASK_QUEUE=f"metrics-{controller_ns}",
    )
    yield port
    stop_operator(proc)


def scrape(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).raise_for_status().text
    except httpx.HTTPError:
        return ""


def test_operator_metrics_follow_a_nodeset_and_pass_promtool(
    kube: Kube, slurm: Slurm, controller_ns: str, metrics_operator: int
) -> None:
    ns, port, name = controller_ns, metrics_operator, "m"
    nodeset_up(kube, slurm, ns, name, 2)
    key = f"{ns}/{name}"

    def counts() -> tuple[float, float, float]:
        text = scrape(port)
        return (
            sample(text, f'slinky_operator_nodeset_replicas{{kind="ready",nodeset="{key}"}}', default=-1),
            sample(text, f'slinky_operator_nodeset_slurm_nodes{{nodeset="{key}",state="idle"}}', default=-1),
            sample(text, f'slinky_operator_slurm_up{{controller="{ns}/slurm"}}', default=-1),
        )

    eventually(lambda: counts() == (2, 2, 1), 20, "ready, idle and up gauges")
    text = scrape(port)
    assert sample(text, 'slinky_operator_reconciles_total{kind="NodeSet",result="ok"}') > 0
    assert sample(text, f'slinky_operator_slurm_polls_total{{controller="{ns}/slurm",result="ok"}}') > 0
    assert sample(text, 'slinky_operator_reconciles_total{kind="NodeSet",result="error"}') == 0
    lint = subprocess.run([str(stack.promtool()), "check", "metrics"], input=text, text=True, capture_output=True)
    assert lint.returncode == 0, lint.stderr

    scale(kube, ns, name, 0)
    eventually(lambda: counts()[0] == 0 and not kube.pods(ns), 40, "scaled to zero, gauges follow")
    deadline = time.monotonic() + 5
    while sample(scrape(port), f'slinky_operator_pods_held_by_scale_in{{nodeset="{key}"}}', default=-1) != 0:
        assert time.monotonic() < deadline, "no scale-in holds a pod once all are gone"
        time.sleep(0.2)
    sdk = scrape(port + 1)
    assert "temporal_" in sdk, "the Temporal SDK's metrics on the next port"
    for path, body in (("/healthz", "ok"), ("/readyz", "leading")):
        answer = httpx.get(f"http://127.0.0.1:{port + 2}{path}", timeout=5)
        assert (answer.status_code, answer.text) == (200, body), path
