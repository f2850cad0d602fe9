"""NodeSet pods run as real slurmd processes on the dev stack's worker nodes (docs/dev-stack.md, "NodeSet pods").

Two pods with a ``slurmd`` container, as slurm-operator makes them, are placed by kube-scheduler (anti-affinity:
one per worker node); the node agent runs each as ``slurmd -D`` in a network namespace of its own, configless
from the dev slurmctld. Once both are Ready and idle in Slurm, a real batch job submitted through slurmrestd
runs on one of them; deleting that pod runs its preStop (the Slurm node is deleted), stops slurmd and deletes
its namespace.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from typing import Any

import pytest

from slinky.dev import slurmd_runtime, stack
from slinky.dev import slurmd_spec as spec
from tests.integration.cluster import REST, Kube, Slurm, condition, node_of
from tests.integration.nodeset_jobs import slurm_node
from tests.integration.waiting import eventually

pytestmark = pytest.mark.integration

PRESTOP = [
    "/usr/bin/sh",
    "-c",
    "scontrol update nodename=$(hostname) state=down reason='slurm-operator: Pod is terminating'; "
    "scontrol delete nodename=$(hostname)",
]
WORKER_TAINT = "nodeset.slinky.slurm.net/worker"


def nodeset_pod(name: str, app: str, feature: str) -> dict[str, Any]:
    """A pod as slurm-operator builds one for a NodeSet (the parts the dev stack acts on)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "hostname": name,
            "tolerations": [{"key": WORKER_TAINT, "operator": "Exists", "effect": "NoExecute"}],
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
                    ]
                }
            },
            "containers": [
                {
                    "name": "slurmd",
                    "image": "ghcr.io/slinkyproject/slurmd:25.11-ubuntu24.04",
                    "args": [
                        "-Z",
                        "--conf-server",
                        f"{stack.SLURM_CTL_HOST}:{stack.PORTS.slurmctld}",
                        "--conf",
                        f"Features={feature} Weight=10",
                    ],
                    "env": [{"name": "POD_CPUS", "value": "2"}, {"name": "POD_MEMORY", "value": "1024"}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                    "lifecycle": {"preStop": {"exec": {"command": PRESTOP}}},
                }
            ],
        },
    }


def ready(pod: dict[str, Any] | None) -> bool:
    return condition(pod, "Ready").get("status") == "True"


def test_nodeset_pods_run_a_batch_job_and_leave_slurm_when_deleted(kube: Kube, slurm: Slurm, ns: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    app, feature = f"nodeset-{suffix}", f"slinky-{suffix}"
    names = [f"{app}-{i}" for i in range(2)]

    # Create both, then watch (by polling the API every 50 ms) when each is bound and when it is Ready.
    for name in names:
        kube.core.create_namespaced_pod(ns, nodeset_pod(name, app, feature))
    bound: dict[str, float] = {}
    became_ready: dict[str, float] = {}
    deadline = time.monotonic() + 30
    while len(became_ready) < len(names) and time.monotonic() < deadline:
        for name in names:
            pod = kube.pod(ns, name)
            now = time.monotonic()
            if node_of(pod):
                bound.setdefault(name, now)
            if ready(pod):
                became_ready.setdefault(name, now)
        time.sleep(0.05)
    assert set(became_ready) == set(names), f"not Ready within 30 s: {set(names) - set(became_ready)}"
    pods = {name: kube.pod(ns, name) or {} for name in names}
    workers = {node_of(p) for p in pods.values()}
    assert len(workers) == 2 and all(w.startswith(stack.WORKER_PREFIX + "-") for w in workers), workers
    for name, pod in pods.items():
        status = pod["status"]
        assert status["phase"] == "Running"
        assert spec.slot_of(status["podIP"]) is not None, status["podIP"]
        assert status["containerStatuses"][0]["ready"] is True
        print(f"{name}: bound -> Ready in {became_ready[name] - bound[name]:.2f}s")

    # Registered configless from the pods' addresses, with the resources of their env, idle.
    for name, pod in pods.items():
        node = eventually(lambda name=name: slurm_node(slurm, name), timeout=10, what=f"Slurm node {name}")
        assert node["address"] == pod["status"]["podIP"]
        assert (node["cpus"], node["real_memory"]) == (2, 1024)
        assert {feature, spec.POD_FEATURE} <= set(node["features"])
        assert stack.NODESET_PARTITION in node["partitions"]
        eventually(lambda name=name: "IDLE" in (slurm_node(slurm, name) or {}).get("state", []), timeout=10)

    # A real batch job on one of them, through slurmrestd.
    target = names[0]
    desc = {
        "name": f"on-{target}",
        "partition": stack.NODESET_PARTITION,
        "constraints": feature,
        "required_nodes": [target],
        "current_working_directory": "/tmp",
        "environment": ["PATH=/usr/bin:/bin"],
        "standard_output": "/dev/null",
    }
    script = '#!/bin/sh\ntest "$(hostname)" = "$SLURMD_NODENAME" && sleep 1\n'
    answer = slurm.http.post(f"{REST}/job/submit", headers=slurm._headers(), json={"job": desc, "script": script})
    job_id = answer.raise_for_status().json()["job_id"]
    job = eventually(
        # The end: a final state without the COMPLETING flag the epilog leaves for a moment.
        lambda: (
            (j := slurm.job(job_id))
            and j["job_state"][0] in ("COMPLETED", "FAILED", "CANCELLED")
            and "COMPLETING" not in j["job_state"]
            and j
        ),
        timeout=15,
        what=f"job {job_id} done",
    )
    assert (job["job_state"], job["nodes"], job["batch_flag"]) == (["COMPLETED"], target, True)
    assert job["exit_code"]["return_code"]["number"] == 0

    # Deleting the pod: preStop deletes the Slurm node, slurmd stops, the namespace goes.
    uid = pods[target]["metadata"]["uid"]
    records, _ = slurmd_runtime.read_state(stack.STATE / "slurmd-pods")
    record = records[uid]
    assert record.alive()
    kube.core.delete_namespaced_pod(target, ns)
    eventually(lambda: kube.pod(ns, target) is None, timeout=15, what=f"{target} deleted")
    assert slurm_node(slurm, target) is None
    assert not record.alive()
    assert uid not in slurmd_runtime.read_state(stack.STATE / "slurmd-pods")[0]
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert record.netns not in namespaces.split()
    assert slurm_node(slurm, names[1]) is not None  # the other one is untouched


def test_a_killed_agent_readopts_the_running_slurmd(kube: Kube, slurm: Slurm, ns: str) -> None:
    """kill -9 of the node agent leaves slurmd running; the restarted agent (as ``dev up`` restarts it, same
    arguments) re-adopts it: same process, pod still Ready, and a later deletion still runs the preStop."""
    from slinky.dev.procs import ProcessTable

    suffix = uuid.uuid4().hex[:6]
    name = f"nodeset-{suffix}-0"
    kube.core.create_namespaced_pod(ns, nodeset_pod(name, f"nodeset-{suffix}", f"slinky-{suffix}"))
    pod = eventually(lambda: (p := kube.pod(ns, name)) and ready(p) and p, timeout=20, what=f"{name} Ready")
    uid = pod["metadata"]["uid"]
    record = slurmd_runtime.read_state(stack.STATE / "slurmd-pods")[0][uid]

    procs = ProcessTable(stack.STATE / "pids")
    pid = procs.running("node-agent")
    assert pid is not None
    argv = stack._cmdline(pid)
    assert stack.kill("node-agent") == pid
    assert record.alive(), "slurmd died with the agent"
    log = stack.STATE / "logs" / "node-agent.log"
    offset = log.stat().st_size
    procs.start("node-agent", argv, log=log, cwd=stack.REPO)

    def adopted() -> bool:
        with log.open("rb") as f:
            f.seek(offset)
            return b"re-adopted" in f.read()

    eventually(adopted, timeout=20, what="the restarted agent re-adopts")
    assert record.alive() and ready(kube.pod(ns, name))
    assert slurm_node(slurm, name) is not None

    kube.core.delete_namespaced_pod(name, ns)
    eventually(lambda: kube.pod(ns, name) is None, timeout=15, what=f"{name} deleted")
    assert slurm_node(slurm, name) is None
    assert not record.alive()
