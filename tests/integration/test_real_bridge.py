"""The bridge on the real nodes (issue 30): the seed PodGroup of two nginx pods (deploy/examples/
podgroup-nginx-real-nodes.yaml, applied unchanged) runs as ONE 2-node Slurm job on the bridge's real nodes
(slinky-real-5 and -6, external Slurm nodes of the stack's Slurm in partition real-nodes), and its pods run as
containers of the nginx image the stack's registry serves as docker.io's `library/nginx`.

First with the stack's bridge worker (a host process), then with the bridge installed in-cluster by `helm install`
of deploy/charts/slinky-bridge: its worker and its admission webhook in containers on the real nodes, reaching the
API server by in-cluster config, Temporal and slurmrestd through their Services; the lifecycle's Temporal history
names the in-cluster worker as the one that ran it. For that test the stack's own
bridge worker is stopped and its webhook registration removed (one bridge per scheduler name), and both come back
with `slinky dev up` afterwards, on error too.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from slinky import hostlist
from slinky.dev import in_cluster, real_nodes
from slinky.dev import stack as dev_stack
from slinky.dev.procs import ProcessTable
from tests.integration.cluster import Slurm, pods_of
from tests.integration.devstack import REPO, kubectl
from tests.integration.operator_fixtures import wait_for

pytestmark = pytest.mark.integration

EXAMPLE = REPO / "deploy" / "examples" / "podgroup-nginx-real-nodes.yaml"
CHART = REPO / "deploy" / "charts" / "slinky-bridge"
NS = "slurm-bridge"
SELECTOR = ("-n", NS, "-l", "app=nginx-real")


def bridge_nodes(env: dict[str, str]) -> set[str]:
    listed = json.loads(kubectl(env, "get", "nodes", "-l", real_nodes.BRIDGE_NODE_LABEL, "-o", "json"))
    return {n["metadata"]["name"] for n in listed["items"]}


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def gang_pods(env: dict[str, str]) -> list[dict[str, Any]]:
    return list(json.loads(kubectl(env, "get", "pods", *SELECTOR, "-o", "json"))["items"])


def job_of(slurm: Slurm, pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    keys = {f"{NS}/{p['metadata']['name']}" for p in pods}
    jobs = [j for j in slurm.jobs() if keys & set(pods_of(j)) and "RUNNING" in j["job_state"]]
    return jobs[0] if jobs else None


@contextlib.contextmanager
def gang(env: dict[str, str]) -> Iterator[list[dict[str, Any]]]:
    """The example applied; its two pods once Ready. Deleted afterwards: the pods go, and so does the job."""
    kubectl(env, "delete", "-f", str(EXAMPLE), "--ignore-not-found", "--wait=true")
    slurm = Slurm(env)
    job_id = None
    try:
        kubectl(env, "apply", "-f", str(EXAMPLE))

        def both_ready() -> list[dict[str, Any]] | None:
            pods = [p for p in gang_pods(env) if not p["metadata"].get("deletionTimestamp")]
            return pods if len(pods) == 2 and all(map(ready, pods)) else None

        pods = wait_for(both_ready, 120, "the nginx gang's two pods Ready")
        job_id = wait_for(lambda: job_of(slurm, pods), 30, "the gang's RUNNING Slurm job")["job_id"]
        yield pods
    finally:
        kubectl(env, "delete", "-f", str(EXAMPLE), "--ignore-not-found", "--wait=true")
        wait_for(lambda: not gang_pods(env), 90, "the gang's pods gone")
        if job_id is not None:
            wait_for(lambda: "RUNNING" not in (slurm.job(job_id) or {}).get("job_state", []), 60, "the job ended")
        slurm.http.close()


def check_gang(env: dict[str, str], pods: list[dict[str, Any]]) -> None:
    """Two containers of the registry's nginx, one per bridge node, answering HTTP; one 2-node job for both."""
    nodes = bridge_nodes(env)
    assert len(nodes) == 2, nodes
    assert {p["spec"]["nodeName"] for p in pods} == nodes
    for pod in pods:
        (status,) = pod["status"]["containerStatuses"]
        assert status["containerID"].startswith("containerd://"), status
        assert status["imageID"].startswith("docker.io/library/nginx@sha256:"), status
        with urllib.request.urlopen(f"http://{pod['status']['podIP']}/", timeout=10) as resp:
            assert "Welcome to nginx!" in resp.read().decode()
    slurm = Slurm(env)
    with slurm.http:
        job = job_of(slurm, pods)
    assert job is not None
    assert job["partition"] == real_nodes.BRIDGE_PARTITION
    assert set(hostlist.expand(job["nodes"])) == nodes
    assert set(pods_of(job)) == {f"{NS}/{p['metadata']['name']}" for p in pods}


def test_a_podgroup_runs_as_containers_on_the_bridges_real_nodes(dev_env: dict[str, str]) -> None:
    with gang(dev_env) as pods:
        check_gang(dev_env, pods)
        for pod in pods:  # the container's own log: nginx's access log on stdout, the kubelet's probes in it
            log = kubectl(dev_env, "logs", "-n", NS, pod["metadata"]["name"])
            assert "kube-probe" in log, log[-500:]


@pytest.fixture
def in_cluster_bridge() -> Iterator[str]:
    with in_cluster.bridge_in_cluster(print) as namespace:
        yield namespace


def test_the_bridge_chart_runs_the_worker_and_the_webhook_in_cluster(
    dev_env: dict[str, str], in_cluster_bridge: str
) -> None:
    ns = in_cluster_bridge
    pods = json.loads(kubectl(dev_env, "get", "pods", "-n", ns, "-o", "json"))["items"]
    listed = json.loads(kubectl(dev_env, "get", "nodes", "-l", real_nodes.NODE_LABEL, "-o", "json"))["items"]
    clusters_nodes = {n["metadata"]["name"] for n in listed}
    for pod in pods:  # the namespace's annotations send them to the clusters' real nodes
        (status,) = pod["status"]["containerStatuses"]
        assert status["containerID"].startswith("containerd://"), status
        assert pod["spec"]["nodeName"] in clusters_nodes, pod["spec"]["nodeName"]
    assert ProcessTable(dev_stack.STATE / "pids").running("bridge-worker") is None
    with gang(dev_env) as gang_members:
        check_gang(dev_env, gang_members)
        # The chart's webhook set the scheduler (the stack's registration is gone), its worker bound the pods.
        assert {p["spec"]["schedulerName"] for p in gang_members} == {"slurm-bridge-scheduler"}
        # The lifecycle's history in Temporal: every task of it ran on the in-cluster worker (identity pid@pod).
        bridge_pod = next(p["metadata"]["name"] for p in pods if "-bridge-" in p["metadata"]["name"])
        assert in_cluster.workers_of(f"workload/{NS}/podgroup/nginx-real/") == {f"1@{bridge_pod}"}
