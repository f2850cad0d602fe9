"""The operator's Prometheus endpoint: its counters and gauges follow real work, and promtool accepts them; its
health endpoint answers the kubelet's probes."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from slinky.dev import stack
from tests.integration.cluster import Kube, Slurm
from tests.integration.metrics_text import sample
from tests.integration.nodeset_jobs import nodeset_up
from tests.integration.operator_fixtures import scale, start_operator, stop_operator
from tests.integration.waiting import eventually

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


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
        SLINKY_OPERATOR__METRICS_POLL_SECONDS="1",
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


def series(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition by (name, labels)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def test_slurm_metrics_equal_what_slurmrestd_reports(
    kube: Kube, slurm: Slurm, dev_env: dict[str, str], controller_ns: str, metrics_operator: int
) -> None:
    """Jobs by state and reason, nodes by state, CPUs and memory per partition: the scraped values equal the
    same counts made from slurmrestd's own answers (GET jobs, nodes, partitions) at that moment; the poll's age
    and errors are there; promtool accepts the exposition."""
    ns, port = controller_ns, metrics_operator
    nodeset_up(kube, slurm, ns, "m", 2)
    jwt = Path(dev_env["SLURM_JWT_FILE"]).read_text().strip()
    rest = httpx.Client(
        base_url=dev_env["SLURM_REST_URL"],
        timeout=30,
        headers={"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": jwt},
    )
    submitted = []
    for hold, script in ((True, "sleep 1"), (True, "sleep 1"), (False, "sleep 60")):
        desc = {"partition": "nodesets", "nodes": "1", "hold": hold, "current_working_directory": "/tmp",
                "environment": ["PATH=/usr/bin:/bin"], "name": "metrics"}  # fmt: skip
        answer = rest.post("/slurm/v0.0.44/job/submit", json={"job": desc, "script": f"#!/bin/sh\n{script}\n"})
        submitted.append(answer.raise_for_status().json()["job_id"])
    base = {("namespace", ns), ("controller", "slurm")}

    def expected() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        jobs = rest.get("/slurm/v0.0.44/jobs").json()["jobs"]
        nodes = rest.get("/slurm/v0.0.44/nodes").json()["nodes"]
        parts = [p["name"] for p in rest.get("/slurm/v0.0.44/partitions").json()["partitions"]]
        out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for part in parts:
            # An external Slurm's partitions are its own: none is named as a NodeSet (a managed one's are).
            labels = frozenset({*base, ("partition", part), ("nodeset", "m" if part == "m" else "")})
            mine = [j for j in jobs if part in j["partition"].split(",")]
            pending = [j for j in mine if j["job_state"][0] == "PENDING"]
            out[("slurm_partition_jobs_pending", labels)] = len(pending)
            out[("slurm_partition_jobs_running", labels)] = sum(j["job_state"][0] == "RUNNING" for j in mine)
            held = sum(j["state_reason"] == "JobHeldUser" for j in pending)
            if held:
                out[("slurm_partition_jobs_pending_reason", labels | {("reason", "JobHeldUser")})] = held
            on = [n for n in nodes if part in n["partitions"]]
            out[("slurm_partition_nodes", labels)] = len(on)
            out[("slurm_partition_nodes_idle", labels)] = sum(n["state"][0] == "IDLE" for n in on)
            out[("slurm_partition_nodes_alloc", labels)] = sum(n["state"][0] == "ALLOCATED" for n in on)
            out[("slurm_partition_cpus", labels)] = sum(n["cpus"] for n in on)
            out[("slurm_partition_nodes_cpus_alloc", labels)] = sum(n["alloc_cpus"] for n in on)
            out[("slurm_partition_nodes_mem_tot", labels)] = sum(n["real_memory"] for n in on) * 2**20
        return out

    last: dict[str, Any] = {}
    mine = frozenset({*base, ("partition", "nodesets"), ("nodeset", "")})

    def agree() -> bool:
        want = expected()
        got = series(scrape(port))
        last["wrong"] = {k: (v, got.get(k)) for k, v in want.items() if got.get(k) != v}
        return not last["wrong"] and want[("slurm_partition_jobs_running", mine)] == 1

    try:
        deadline = time.monotonic() + 30
        while not agree():
            assert time.monotonic() < deadline, f"scraped values differ from slurmrestd's (want, got): {last['wrong']}"
            time.sleep(0.3)
        text = scrape(port)
        got = series(text)
        assert got[("slinky_slurm_poll_age_seconds", frozenset(base))] < 5
        assert ("slinky_slurm_poll_errors_total", frozenset(base)) in got
        assert got[("slurm_sdiag_jobs_submitted", frozenset(base))] >= 3, "diag statistics"
        lint = subprocess.run([str(stack.promtool()), "check", "metrics"], input=text, text=True, capture_output=True)
        assert lint.returncode == 0, lint.stderr
    finally:
        for job in submitted:
            rest.delete(f"/slurm/v0.0.44/job/{job}")
        rest.close()


def test_the_exporter_on_its_own_against_slurmrestd(dev_env: dict[str, str], tmp_path: Path) -> None:
    """`python -m workers.exporter` with only SLURM_REST_URL and SLURM_JWT_FILE: the same families, without the
    operator's labels; node counts equal slurmrestd's; promtool accepts it."""
    port = free_ports(1)
    env = {**dev_env, "SLINKY_EXPORTER__PORT": str(port), "SLINKY_EXPORTER__POLL_SECONDS": "1"}
    with (tmp_path / "exporter.log").open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "workers.exporter"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        text = eventually(lambda: (t := scrape(port)) and "slurm_partition_nodes{" in t and t, 20, "exporter serves")
        got = series(text)
        jwt = Path(dev_env["SLURM_JWT_FILE"]).read_text().strip()
        headers = {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": jwt}
        nodes = httpx.get(f"{dev_env['SLURM_REST_URL']}/slurm/v0.0.44/nodes", headers=headers, timeout=30).json()
        assert got[("slurm_nodes", frozenset())] == len(nodes["nodes"])
        for part in {p for n in nodes["nodes"] for p in n["partitions"]}:
            count = sum(part in n["partitions"] for n in nodes["nodes"])
            assert got[("slurm_partition_nodes", frozenset({("partition", part)}))] == count
        assert got[("slinky_slurm_up", frozenset())] == 1
        lint = subprocess.run([str(stack.promtool()), "check", "metrics"], input=text, text=True, capture_output=True)
        assert lint.returncode == 0, lint.stderr
    finally:
        proc.terminate()
        assert proc.wait(10) == 0, "SIGTERM stops it cleanly"
