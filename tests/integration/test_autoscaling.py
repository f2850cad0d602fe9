"""Autoscaling with Kubernetes' own HPA: the stack's operator serves Slurm's metrics through the aggregation
layer (external.metrics.k8s.io), kube-controller-manager's HPA controller scales a NodeSet of the demo's
managed cluster from zero and back, every scale-in drains first, and with the operator down the HPA holds."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from slinky.dev import aggregation, demo, stack
from slinky.dev.demo import NS
from slinky.dev.procs import ProcessTable
from slinky.operator.autoscaling import nodeset_hpa
from tests.integration.cluster import Kube
from tests.integration.operator_fixtures import GROUP, VERSION, wait_for

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def env_of(dev_env: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **{k: v for k, v in dev_env.items() if k != "PATH"}}


def kubectl(dev_env: dict[str, str], *args: str, stdin: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(
        ["kubectl", *args], input=stdin, env=env_of(dev_env), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 or not check, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def ready(kube: Kube, name: str) -> bool:
    pod = kube.pod(NS, name)
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in ((pod or {}).get("status") or {}).get("conditions") or []
    )


LOGIN = f"deploy/{demo.RELEASE}-login-login"


@pytest.fixture(scope="module")
def managed(kube: Kube, dev_env: dict[str, str]) -> Iterator[str]:
    """The demo's managed cluster in namespace `slinky`, the slurm chart's release as `make demo` installs it
    (installed or upgraded; it stays afterwards)."""
    demo.install_cluster({**os.environ, **dev_env})
    wait_for(lambda: ready(kube, "slurm-controller-0"), 180, "slurm-controller-0 ready")
    wait_for(lambda: kubectl(dev_env, "exec", "-n", NS, LOGIN, "--", "sinfo", check=False), 180, "login")
    yield NS


def hpa_condition(dev_env: dict[str, str], name: str, type_: str) -> dict[str, Any]:
    out = kubectl(dev_env, "get", "hpa", "-n", NS, name, "-o", "json")
    raw = json.loads(out)["metadata"]["annotations"].get("autoscaling.alpha.kubernetes.io/conditions", "[]")
    return next((c for c in json.loads(raw) if c["type"] == type_), {})


def replicas(kube: Kube, name: str) -> int:
    obj = cast(
        dict[str, Any],
        client.CustomObjectsApi(kube.api).get_namespaced_custom_object(GROUP, VERSION, NS, "nodesets", name),
    )
    return int(obj["spec"].get("replicas") or 0)


def test_the_api_answers_only_through_the_front_proxy(managed: str, dev_env: dict[str, str]) -> None:
    """Discovery and a value list through the apiserver; the server itself refuses a caller without the
    front proxy's client certificate (401), and another namespace's samples are not shown."""
    base = "/apis/external.metrics.k8s.io/v1beta1"
    names = [r["name"] for r in json.loads(kubectl(dev_env, "get", "--raw", base))["resources"]]
    assert {"slurm_partition_jobs_pending", "slurm_partition_nodes_wanted"} <= set(names)
    path = f"{base}/namespaces/{NS}/slurm_partition_nodes"
    # Values come with the operator's first metrics round of the Controller (a freshly applied one: seconds).
    wait_for(lambda: json.loads(kubectl(dev_env, "get", "--raw", path))["items"], 60, "a metrics round")
    listing = json.loads(kubectl(dev_env, "get", "--raw", path))
    assert listing["kind"] == "ExternalMetricValueList"
    assert listing["items"] and {i["metricLabels"]["namespace"] for i in listing["items"]} == {NS}
    other = json.loads(kubectl(dev_env, "get", "--raw", f"{base}/namespaces/default/slurm_partition_nodes"))
    assert other["items"] == []
    bad = kubectl(
        dev_env, "get", "--raw", f"{base}/namespaces/{NS}/slurm_partition_nodes?labelSelector=a%3D(", check=False
    )
    assert bad == ""
    ctx = ssl.create_default_context(cafile=str(stack.STATE / "kube" / "ca.crt"))
    url = f"https://{aggregation.address()}:{aggregation.PORT}{base}/namespaces/{NS}/slurm_partition_nodes"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, context=ctx, timeout=10)
    assert refused.value.code == 401
    refused.value.close()


@pytest.mark.timeout(300)  # the demo's cluster runs on the real nodes: each slurmd is a container start
def test_an_hpa_scales_a_nodeset_from_zero_and_back_draining_first(
    kube: Kube, managed: str, dev_env: dict[str, str]
) -> None:
    """6 two-node jobs pending in a NodeSet's partition: the stock HPA scales the NodeSet up from 0 on
    slurm_partition_nodes_wanted; with the operator (the API) down it holds; the jobs run to COMPLETED; idle, it
    scales back to 0, each pod going through a scale-in that drained its node first."""
    name = f"auto{uuid.uuid4().hex[:4]}"
    nodeset = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"controllerRef": {"name": "slurm"}, "replicas": 0, "partition": {"enabled": True},
                 "slurmd": {"image": "ghcr.io/slinkyproject/slurmd:26.05-ubuntu26.04"}},
    }  # fmt: skip
    hpa = nodeset_hpa(NS, name, max_replicas=2, scale_down_seconds=10)
    procs = ProcessTable(stack.STATE / "pids")
    kubectl(dev_env, "apply", "-f", "-", stdin=json.dumps(nodeset))
    try:
        wait_for(
            lambda: (
                f"{name} " in kubectl(dev_env, "exec", "-n", NS, LOGIN, "--", "sinfo", "-h", "-o", "%P ", check=False)
            ),
            60,
            f"partition {name} in slurm.conf",
        )
        jobs = [
            kubectl(dev_env, "exec", "-n", NS, LOGIN, "--", "sbatch", "--parsable", "-p", name, "-N2",
                    "--wrap", "sleep 6").strip()
            for _ in range(6)
        ]  # fmt: skip
        kubectl(dev_env, "apply", "-f", "-", stdin=json.dumps(hpa))
        started = time.monotonic()
        wait_for(lambda: replicas(kube, name) == 2, 60, "the HPA scales the NodeSet from 0 to 2")
        scaled_up = time.monotonic() - started

        # The API unavailable (operator down): the HPA cannot read the metric and holds the NodeSet.
        procs.stop("operator")
        try:
            cond = wait_for(
                lambda: (c := hpa_condition(dev_env, name, "ScalingActive")).get("status") == "False" and c,
                60,
                "ScalingActive=False while the API is down",
            )
            assert cond["reason"] == "FailedGetExternalMetric", cond
            time.sleep(6)  # an HPA sync or more
            assert replicas(kube, name) == 2, "nothing scaled while the metric is unknown"
        finally:
            stack.start_operator(procs)

        def states() -> list[str]:
            listing = ("sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(jobs))
            out = kubectl(dev_env, "exec", "-n", NS, LOGIN, "--", *listing, check=False)
            return [line.split("|")[1] for line in out.splitlines() if "|" in line]

        wait_for(lambda: states().count("COMPLETED") == 6, 180, "the 6 jobs COMPLETED")

        def gone() -> bool:
            return replicas(kube, name) == 0 and not [
                p for p in kube.pods(NS) if p["metadata"]["name"].startswith(f"{name}-")
            ]

        wait_for(gone, 90, "back to 0 once idle")
        assert states() == ["COMPLETED"] * 6, "no job was killed by a scale-in"

        def scale_ins() -> list[str]:
            listing = subprocess.run(
                [sys.executable, "-m", "slinky.cli", "nodesets", "scale-ins", "-n", NS, "--all"],
                env=env_of(dev_env), capture_output=True, text=True, timeout=60, cwd=REPO,
            ).stdout  # fmt: skip
            return [line for line in listing.splitlines() if f" {name} " in f" {line} "]

        # The pods are gone; each scale-in's last step (forgetting the Slurm node) may take a moment more.
        mine = wait_for(
            lambda: (lines := scale_ins()) and all(" done " in line and "deleted" in line for line in lines) and lines,
            30,
            "every scale-in of the NodeSet done, its pod deleted",
        )
        assert len(mine) >= 2, mine
        print(f"scaled 0 -> 2 in {scaled_up:.1f}s")
    finally:
        kubectl(dev_env, "delete", "hpa", "-n", NS, name, "--ignore-not-found", check=False)
        kubectl(dev_env, "delete", "nodeset", "-n", NS, name, "--ignore-not-found", check=False)


@pytest.mark.timeout(300)
def test_slinky_top_once_shows_the_clusters_partitions(managed: str, dev_env: dict[str, str]) -> None:
    """`slinky top --once`: each Controller's partitions as slurmrestd counts them, the NodeSets, the scale-ins."""

    def frame() -> str:
        out = subprocess.run(
            [sys.executable, "-m", "slinky.cli", "top", "-A", "--once"],
            env=env_of(dev_env),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    def cpu_nodes(text: str) -> int | None:
        """The `cpu` row of the demo cluster's own section (other clusters may have a `cpu` partition too); None
        when the section has none (`Slurm unreachable: ...` while its slurmrestd or slurmctld restarts)."""
        section = text.split(f"Cluster {NS}/slurm at ", 1)[1].split("\n\n", 1)[0]
        row = next((line.split() for line in section.splitlines() if line.split()[:1] == ["cpu"]), None)
        return int(row[1]) if row else None

    def agree() -> str | None:
        # slurmctld may be restarting (the NodeSet deleted above changed its config): then ask again.
        listing = ("sinfo", "-h", "-p", "cpu", "-o", "%D")
        sinfo = kubectl(dev_env, "exec", "-n", NS, LOGIN, "--", *listing, check=False)
        text = frame()
        if not sinfo.strip() or f"Cluster {NS}/slurm at " not in text:
            return None
        return text if cpu_nodes(text) == sum(int(n) for n in sinfo.split()) else None

    # On the real nodes the controller's new pod (the HPA test's NodeSet left its config) takes a minute or more.
    text = wait_for(agree, 180, "slinky top's cpu nodes equal sinfo's")
    assert f"Cluster {NS}/slurm at http://" in text and "Cluster slurm/slurm" in text
    assert "NodeSets" in text and f"{NS}/{demo.NODESET}" in text and "Scale-ins running" in text
