"""bench/bridge.py leaves nothing on any exit, and will not start where other work holds its nodes (issue 29).

A run stopped mid-measurement (SIGTERM, as Ctrl-C) removes its raw Slurm jobs, its pods, its Slurm nodes and its
node agent's Node objects; a run on a stack whose ``bench-node-*`` nodes run someone else's job refuses, and
touches neither that job nor that node.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.common import slurm_rest
from slinky import wellknown
from tests.integration.waiting import eventually

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
LIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING"}


@pytest.fixture
def rest(dev_env: dict[str, str]) -> Iterator[httpx.Client]:
    async_client = slurm_rest(dev_env, timeout=30)
    client = httpx.Client(base_url=str(async_client.base_url), headers=dict(async_client.headers), timeout=30)
    yield client
    client.close()


def bench(dev_env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, **{k: v for k, v in dev_env.items() if k != "PATH"}}
    return subprocess.Popen(
        [sys.executable, "-m", "bench.bridge", *args],
        cwd=REPO,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def bench_jobs(rest: httpx.Client) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = rest.get("/jobs").raise_for_status().json()["jobs"]
    return [j for j in jobs if str(j["name"]).startswith("bench-raw") and LIVE & set(j["job_state"])]


def bench_nodes(rest: httpx.Client) -> list[str]:
    nodes = rest.get("/nodes").raise_for_status().json()["nodes"]
    return [str(n["name"]) for n in nodes if str(n["name"]).startswith("bench-node-")]


def kube_bench_nodes(dev_env: dict[str, str]) -> list[str]:
    out = subprocess.run(
        ["kubectl", "--kubeconfig", dev_env["KUBECONFIG"], "get", "nodes", "-o", "json"],
        text=True,
        capture_output=True,
        check=True,
    ).stdout
    return [n["metadata"]["name"] for n in json.loads(out)["items"] if n["metadata"]["name"].startswith("bench-node-")]


def test_a_run_stopped_mid_measurement_leaves_no_job_node_or_pod(dev_env: dict[str, str], rest: httpx.Client) -> None:
    # Slow paced raw rounds: raw jobs run on the stack when the run is stopped.
    proc = bench(dev_env, "--nodes", "4", "--pods", "4", "--rate", "0.5", "--rounds", "3", "--bursts", "0",
                 "--only", "raw", "--settle", "0", "--idle-seconds", "0")  # fmt: skip
    try:
        eventually(lambda: [j for j in bench_jobs(rest) if "RUNNING" in j["job_state"]], 120, "a raw job running")
        assert bench_nodes(rest), "the run's Slurm nodes exist"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "stopped; what it made was removed" in err, err[-2000:]
    assert not bench_jobs(rest), err[-2000:]
    assert not bench_nodes(rest), err[-2000:]
    eventually(lambda: not kube_bench_nodes(dev_env), 30, "the bench node agent's Node objects gone")


def test_a_run_refuses_where_other_work_holds_its_nodes(dev_env: dict[str, str], rest: httpx.Client) -> None:
    conf = "NodeName=bench-node-1 NodeAddr=127.27.0.2 CPUs=8 RealMemory=16384 State=External"
    r = rest.post("/new/node", json={"node_conf": f"{conf} Feature={wellknown.DEFAULT_PARTITION}"})
    assert r.status_code == 200 or "already exists" in r.text, r.text
    job_id = None
    try:
        job = {
            "name": "someone-else",
            "partition": wellknown.DEFAULT_PARTITION,
            "flags": ["EXTERNAL_JOB"],
            "required_nodes": ["bench-node-1"],
            "minimum_nodes": 1,
            "current_working_directory": "/tmp",
            "immediate": True,
        }
        job_id = rest.post("/job/allocate", json={"job": job}).raise_for_status().json()["job_id"]
        proc = bench(dev_env, "--nodes", "2", "--pods", "2", "--only", "raw", "--settle", "0")
        _, err = proc.communicate(timeout=60)
        assert proc.returncode != 0
        assert "not started" in err and str(job_id) in err and "someone-else" in err, err[-2000:]
        [state] = rest.get(f"/job/{job_id}").raise_for_status().json()["jobs"][0]["job_state"][:1]
        assert state == "RUNNING", "the other work is left alone"
        assert "bench-node-1" in bench_nodes(rest)
    finally:
        if job_id is not None:
            rest.delete(f"/job/{job_id}")
        eventually(lambda: rest.delete("/node/bench-node-1").status_code == 200, 30, "bench-node-1 removed")
    assert not bench_nodes(rest)
