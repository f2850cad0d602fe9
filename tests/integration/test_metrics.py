"""The bridge worker's Prometheus endpoint: real counters after real work, and promtool accepts the output."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from slinky import wellknown
from slinky.dev import stack
from tests.integration.metrics_text import sample

pytestmark = pytest.mark.integration


def scrape(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).raise_for_status().text


def slurm_is_idle(env: dict[str, str]) -> bool:
    """No job waits and a node of the bridge's partition is idle: the next bridge job is allocated at once."""
    headers = {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": Path(env["SLURM_JWT_FILE"]).read_text().strip()}
    base = f"{env['SLURM_REST_URL']}/slurm/v0.0.44"
    jobs = httpx.get(f"{base}/jobs/state", headers=headers, timeout=10).raise_for_status().json()["jobs"]
    nodes = httpx.get(f"{base}/nodes", headers=headers, timeout=10).raise_for_status().json()["nodes"]
    idle = [n for n in nodes if wellknown.DEFAULT_PARTITION in n["partitions"] and n["state"][0] == "IDLE"]
    return bool(idle) and not any("PENDING" in j["state"] for j in jobs)


@pytest.fixture
def namespace(dev_env: dict[str, str]) -> Iterator[str]:
    name = f"metrics-{uuid.uuid4().hex[:6]}"
    kubectl = ["kubectl", "--kubeconfig", dev_env["KUBECONFIG"]]
    subprocess.run([*kubectl, "create", "namespace", name], check=True, capture_output=True)
    yield name
    subprocess.run([*kubectl, "delete", "namespace", name, "--wait=false"], check=False, capture_output=True)


def test_bridge_metrics_count_real_bindings_and_pass_promtool(dev_env: dict[str, str], namespace: str) -> None:
    port = stack.PORTS.bridge_metrics
    deadline = time.monotonic() + 60
    while not slurm_is_idle(dev_env):  # jobs of earlier tests may still wait for nodes
        assert time.monotonic() < deadline, "Slurm did not become idle within 60 s"
        time.sleep(0.5)
    first = scrape(port)
    before = sample(first, "slinky_bridge_pods_bound_total")
    seen_before = sample(first, "slinky_bridge_job_submit_to_running_seen_seconds_count")
    signals_before = sample(first, 'slinky_bridge_signal_seconds_count{kind="pod_event"}', default=0)
    allocated_before = sample(first, 'slinky_bridge_job_submits_total{outcome="allocated"}', default=0)
    pod = f"""
apiVersion: v1
kind: Pod
metadata: {{name: m, namespace: {namespace}, annotations: {{"{wellknown.ANNOTATION_SIM_RUN_SECONDS}": "1"}}}}
spec:
  schedulerName: {wellknown.SCHEDULER_NAME}
  containers: [{{name: c, image: busybox, resources: {{requests: {{cpu: 100m}}}}}}]
"""
    subprocess.run(
        ["kubectl", "--kubeconfig", dev_env["KUBECONFIG"], "apply", "-f", "-"],
        input=pod,
        text=True,
        check=True,
        capture_output=True,
    )
    deadline = time.monotonic() + 60
    while sample(scrape(port), "slinky_bridge_pods_bound_total") <= before:
        assert time.monotonic() < deadline, "no binding counted within 60 s"
        time.sleep(0.2)
    text = scrape(port)
    assert sample(text, "slinky_bridge_pod_create_to_bound_seconds_count") >= 1
    assert sample(text, "slinky_bridge_workflows_started_total") >= 1
    assert sample(text, 'slinky_bridge_slurm_job_polls_total{result="ok"}') > 0
    # Free nodes: the job was allocated at once, and the watcher saw it running after the submit.
    assert sample(text, 'slinky_bridge_job_submits_total{outcome="allocated"}') > allocated_before
    assert sample(text, "slinky_bridge_job_submit_to_running_seen_seconds_count") > seen_before
    # The pod ends after 1 s (simulated run): the pod watcher's signal is delivered and timed.
    while sample(scrape(port), 'slinky_bridge_signal_seconds_count{kind="pod_event"}', default=0) <= signals_before:
        assert time.monotonic() < deadline, "no pod_event signal timed within 60 s"
        time.sleep(0.2)
    assert sample(text, "slinky_bridge_events_dropped_total") == 0
    lint = subprocess.run([str(stack.promtool()), "check", "metrics"], input=text, text=True, capture_output=True)
    assert lint.returncode == 0, lint.stderr
    sdk = scrape(port + 1)
    assert "temporal_workflow_task_execution_latency" in sdk or "temporal_request" in sdk
