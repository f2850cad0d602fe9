"""Gangs end to end on the real stack: a PodGroup, a LeaderWorkerSet group, a JobSet, each as Slurm jobs.

The PodGroup, LWS and JobSet controllers cannot run here; the ReplicaSet and Job controllers do. So the seed
PodGroup scenarios use a real ReplicaSet (its pods carry the pod-group label), and the LWS and JobSet tests
create the pods with the labels and ownerReferences those controllers would set.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from slinky import wellknown
from tests.integration.waiting import eventually

pytestmark = pytest.mark.integration


class Cluster:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        token = Path(env["SLURM_JWT_FILE"]).read_text().strip()
        self.rest = httpx.Client(
            base_url=env["SLURM_REST_URL"] + "/slurm/v0.0.44",
            headers={"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token},
            timeout=30,
        )

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            ["kubectl", "--kubeconfig", self.env["KUBECONFIG"], *args],
            input=stdin,
            text=True,
            capture_output=True,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr}")
        return proc.stdout

    def apply(self, manifest: str) -> None:
        self.kubectl("apply", "-f", "-", stdin=manifest)

    def pods(self, ns: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(self.kubectl("get", "pods", "-n", ns, "-o", "json"))["items"]
        return items

    def jobs_for(self, ns: str) -> list[dict[str, Any]]:
        """Slurm's own records of jobs whose admin_comment names a pod of ``ns``."""
        jobs = self.rest.get("/jobs").raise_for_status().json()["jobs"]
        return [j for j in jobs if f'"{ns}/' in (j.get("admin_comment") or "")]

    def free_nodes(self) -> int:
        """Nodes of the bridge's partition with nothing allocated (a demo may hold some)."""
        nodes = self.rest.get("/nodes").raise_for_status().json()["nodes"]
        busy = {"ALLOCATED", "MIXED", "DOWN", "DRAIN", "COMPLETING"}
        return sum(
            1 for n in nodes if wellknown.DEFAULT_PARTITION in n.get("partitions", []) and not busy & set(n["state"])
        )

    def block_all_but(self, ns: str, keep: int) -> None:
        """Bind blocker pods until exactly ``keep`` nodes stay free (re-counted: another test's job may end)."""
        placed = 0
        while (extra := self.free_nodes() - keep) > 0:
            self.apply(blockers(ns, extra, start=placed))
            placed += extra
            eventually(lambda n=placed: len(bound(self.pods(ns))) >= n, 60, f"{placed} blockers bound")
        assert self.free_nodes() == keep

    def podgroup_phase(self, ns: str, name: str) -> str:
        obj = json.loads(self.kubectl("get", "podgroup", "-n", ns, name, "-o", "json"))
        return str((obj.get("status") or {}).get("phase", ""))


@pytest.fixture(scope="module")
def cluster(dev_env: dict[str, str]) -> Iterator[Cluster]:
    c = Cluster(dev_env)
    yield c
    c.rest.close()


@pytest.fixture
def ns(cluster: Cluster) -> Iterator[str]:
    name = f"gang-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def pod_group(ns: str, name: str, min_member: int) -> str:
    return f"""
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {{name: {name}, namespace: {ns}}}
spec: {{minMember: {min_member}}}
"""


def blockers(ns: str, count: int, start: int = 0) -> str:
    """Pods that each take a whole node through the bridge, until deleted."""
    return "".join(
        f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: blocker-{i}, namespace: {ns}}}
spec:
  schedulerName: {wellknown.SCHEDULER_NAME}
  containers: [{{name: c, image: busybox}}]
"""
        for i in range(start, start + count)
    )


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName")]


def labelled(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Bound pods that carry their job id (a job allocated at once is bound first, labelled right after)."""
    return [p for p in bound(pods) if wellknown.LABEL_SLURM_JOB_ID in (p["metadata"].get("labels") or {})]


def test_seed_nginx_podgroup_runs_as_one_two_node_job(cluster: Cluster, ns: str) -> None:
    """Seed slide scenario: a ReplicaSet of two 3000m nginx pods in a PodGroup is ONE 2-node Slurm job."""
    cluster.apply(pod_group(ns, "nginx", 2))
    cluster.apply(f"""
apiVersion: apps/v1
kind: ReplicaSet
metadata: {{name: nginx, namespace: {ns}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: nginx}}}}
  template:
    metadata:
      labels: {{app: nginx, "{wellknown.LABEL_POD_GROUP}": nginx}}
    spec:
      schedulerName: {wellknown.SCHEDULER_NAME}
      containers:
      - name: nginx
        image: nginx
        resources: {{limits: {{cpu: 3000m}}, requests: {{cpu: 3000m}}}}
""")
    pods = eventually(lambda: (lambda p: p if len(bound(p)) == 2 else None)(cluster.pods(ns)), 90, "2 pods bound")
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 2, "one pod per node"
    pods = eventually(lambda: (lambda p: p if len(p) == 2 else None)(labelled(cluster.pods(ns))), 30, "job id labels")
    job_ids = {p["metadata"]["labels"][wellknown.LABEL_SLURM_JOB_ID] for p in pods}
    assert len(job_ids) == 1, "both pods carry the same job id"
    [job] = [j for j in cluster.jobs_for(ns) if j["job_state"][0] == "RUNNING"]
    assert str(job["job_id"]) in job_ids
    assert job["node_count"]["number"] == 2
    assert sorted(json.loads(job["admin_comment"])["pods"]) == sorted(f"{ns}/{p['metadata']['name']}" for p in pods)
    for pod in pods:
        assert pod["metadata"]["annotations"][wellknown.ANNOTATION_SLURM_NODE] == pod["spec"]["nodeName"]
    assert eventually(lambda: cluster.podgroup_phase(ns, "nginx") == "Running", 30, "PodGroup Running")
    # Scale the ReplicaSet to 0: the gang ends, its job is cancelled, no pod or job is left.
    cluster.kubectl("scale", "replicaset", "-n", ns, "nginx", "--replicas=0")
    eventually(lambda: not cluster.pods(ns), 90, "pods gone")
    eventually(lambda: all(j["job_state"][0] != "RUNNING" for j in cluster.jobs_for(ns)), 30, "job ended")


def test_seed_sleep_podgroup_waits_for_nodes_then_finishes(cluster: Cluster, ns: str) -> None:
    """Seed slide scenario: a PodGroup of two sleep pods waits (Slurm's reason shown) while nodes are busy."""
    eventually(lambda: cluster.free_nodes() >= 2, 60, "two free nodes (an earlier test's pods may be leaving)")
    cluster.block_all_but(ns, 0)
    cluster.apply(pod_group(ns, "sleep-pg", 2))
    sleepers = "".join(
        f"""
---
apiVersion: v1
kind: Pod
metadata:
  name: sleep{i}
  namespace: {ns}
  labels: {{app: sleep-pg, "{wellknown.LABEL_POD_GROUP}": sleep-pg}}
  annotations: {{"{wellknown.ANNOTATION_SIM_RUN_SECONDS}": "2"}}
spec:
  schedulerName: {wellknown.SCHEDULER_NAME}
  restartPolicy: Never
  containers: [{{name: c, image: busybox, command: [sh, -c, "sleep 20 && exit 0"]}}]
"""
        for i in (1, 2)
    )
    cluster.apply(sleepers)

    def pending_condition() -> str | None:
        pod = json.loads(cluster.kubectl("get", "pod", "-n", ns, "sleep1", "-o", "json"))
        for cond in pod["status"].get("conditions") or []:
            if cond["type"] == "PodScheduled" and cond["status"] == "False" and cond.get("reason") == "Unschedulable":
                return str(cond.get("message", ""))
        return None

    message = eventually(pending_condition, 30, "Unschedulable condition with Slurm's reason")
    assert "pending" in message and ("Resources" in message or "Priority" in message)
    assert cluster.podgroup_phase(ns, "sleep-pg") == "Scheduling"
    cluster.kubectl("delete", "pod", "-n", ns, "blocker-0", "blocker-1")
    eventually(lambda: cluster.podgroup_phase(ns, "sleep-pg") == "Running", 60, "PodGroup Running")
    eventually(lambda: cluster.podgroup_phase(ns, "sleep-pg") == "Finished", 60, "PodGroup Finished")
    phases = {
        p["metadata"]["name"]: p["status"]["phase"]
        for p in cluster.pods(ns)
        if p["metadata"]["name"].startswith("sleep")
    }
    assert phases == {"sleep1": "Succeeded", "sleep2": "Succeeded"}
    gang_jobs = [j for j in cluster.jobs_for(ns) if "sleep1" in j["admin_comment"]]
    assert len(gang_jobs) == 1 and gang_jobs[0]["job_state"][0] != "RUNNING"


def test_leaderworkerset_group_of_four(cluster: Cluster, ns: str) -> None:
    """An LWS group (leader + 3 workers, size 4) is one 4-node job; pods as the LWS controller labels them."""
    cluster.apply(f"""
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: llm
  namespace: {ns}
  annotations: {{"{wellknown.ANNOTATION_TIMELIMIT}": "30"}}
spec: {{replicas: 1, leaderWorkerTemplate: {{size: 4}}}}
""")
    key = uuid.uuid4().hex
    pods = "".join(
        f"""
---
apiVersion: v1
kind: Pod
metadata:
  name: llm-0{"" if i == 0 else f"-{i}"}
  namespace: {ns}
  labels:
    "{wellknown.LABEL_LWS_NAME}": llm
    "{wellknown.LABEL_LWS_GROUP_INDEX}": "0"
    "{wellknown.LABEL_LWS_GROUP_KEY}": "{key}"
    "{wellknown.LABEL_LWS_WORKER_INDEX}": "{i}"
  annotations: {{"{wellknown.ANNOTATION_LWS_SIZE}": "4"}}
spec:
  schedulerName: {wellknown.SCHEDULER_NAME}
  containers: [{{name: c, image: vllm, resources: {{requests: {{cpu: "1"}}}}}}]
"""
        for i in range(4)
    )
    cluster.apply(pods)
    got = eventually(lambda: (lambda p: p if len(bound(p)) == 4 else None)(cluster.pods(ns)), 90, "4 bound")
    assert len({p["spec"]["nodeName"] for p in got}) == 4
    [job] = [j for j in cluster.jobs_for(ns) if j["job_state"][0] == "RUNNING"]
    assert job["name"] == "llm-0"
    assert job["node_count"]["number"] == 4
    assert job["time_limit"]["number"] == 30, "annotations come from the LeaderWorkerSet object"
    cluster.kubectl("delete", "pods", "-n", ns, "--all", "--wait=false")
    eventually(lambda: not cluster.pods(ns), 90, "pods gone")
    eventually(
        lambda: job["job_id"] not in [j["job_id"] for j in cluster.jobs_for(ns) if j["job_state"][0] == "RUNNING"],
        30,
        "job cancelled",
    )


def test_jobset_with_two_replicated_jobs_is_one_slurm_job_per_pod(cluster: Cluster, ns: str) -> None:
    """JobSet pods are one job each (as upstream); the annotations come from the JobSet object."""
    jobset = json.loads(
        cluster.kubectl(
            "create",
            "-o",
            "json",
            "-f",
            "-",
            stdin=f"""
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: train
  namespace: {ns}
  annotations: {{"{wellknown.ANNOTATION_JOB_NAME}": "train-js"}}
spec: {{replicatedJobs: [{{name: workers, replicas: 1}}, {{name: driver, replicas: 1}}]}}
""",
        )
    )
    for rj in ("workers", "driver"):
        job = json.loads(
            cluster.kubectl(
                "create",
                "-o",
                "json",
                "-f",
                "-",
                stdin=json.dumps(
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "metadata": {
                            "name": f"train-{rj}-0",
                            "namespace": ns,
                            "labels": {wellknown.LABEL_JOBSET_NAME: "train"},
                            "ownerReferences": [
                                {
                                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                                    "kind": "JobSet",
                                    "name": "train",
                                    "uid": jobset["metadata"]["uid"],
                                    "controller": True,
                                }
                            ],
                        },
                        "spec": {
                            "parallelism": 2 if rj == "workers" else 1,
                            "completions": 2 if rj == "workers" else 1,
                            "activeDeadlineSeconds": 300,
                            "template": {
                                "metadata": {"annotations": {wellknown.ANNOTATION_SIM_RUN_SECONDS: "2"}},
                                "spec": {
                                    "schedulerName": wellknown.SCHEDULER_NAME,
                                    "restartPolicy": "Never",
                                    "containers": [{"name": "c", "image": "busybox"}],
                                },
                            },
                        },
                    }
                ),
            )
        )
        assert job["metadata"]["name"]
    pods = eventually(
        lambda: (lambda p: p if len(p) == 3 and all(x["status"]["phase"] == "Succeeded" for x in p) else None)(
            cluster.pods(ns)
        ),
        120,
        "3 JobSet pods Succeeded",
    )
    jobs = cluster.jobs_for(ns)
    assert len(jobs) == 3, [j["admin_comment"] for j in jobs]
    assert {j["name"] for j in jobs} == {"train-js"}
    assert {j["time_limit"]["number"] for j in jobs} == {5}
    assert sorted(json.loads(j["admin_comment"])["pods"][0] for j in jobs) == sorted(
        f"{ns}/{p['metadata']['name']}" for p in pods
    )


def test_gang_member_deleted_while_pending_cancels_and_resubmits(cluster: Cluster, ns: str) -> None:
    eventually(lambda: cluster.free_nodes() >= 2, 60, "two free nodes (an earlier test's pods may be leaving)")
    cluster.apply(pod_group(ns, "pg", 2))
    cluster.block_all_but(ns, 1)
    member = """
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
  labels: {{"{label}": pg}}
spec:
  schedulerName: {scheduler}
  containers: [{{name: c, image: busybox}}]
"""
    for name in ("m1", "m2"):
        cluster.apply(
            member.format(name=name, ns=ns, label=wellknown.LABEL_POD_GROUP, scheduler=wellknown.SCHEDULER_NAME)
        )
    first = eventually(lambda: [j for j in cluster.jobs_for(ns) if "/m1" in j["admin_comment"]], 30, "gang job")
    assert first[0]["job_state"][0] == "PENDING", "only one node is free: the 2-node job waits"
    cluster.kubectl("delete", "pod", "-n", ns, "m2")
    eventually(
        lambda: all(j["job_state"][0] == "CANCELLED" for j in cluster.jobs_for(ns) if "/m1" in j["admin_comment"]),
        30,
        "first gang job cancelled",
    )
    cluster.apply(member.format(name="m3", ns=ns, label=wellknown.LABEL_POD_GROUP, scheduler=wellknown.SCHEDULER_NAME))
    cluster.kubectl("delete", "pod", "-n", ns, "blocker-0")
    pods = eventually(
        lambda: (lambda p: p if {x["metadata"]["name"] for x in labelled(p)} >= {"m1", "m3"} else None)(
            cluster.pods(ns)
        ),
        90,
        "m1 and m3 bound and labelled",
    )
    gang = [j for j in cluster.jobs_for(ns) if "/m1" in j["admin_comment"]]
    assert len(gang) == 2, "the first job was cancelled, one new job was submitted"
    running = [j for j in gang if j["job_state"][0] == "RUNNING"]
    assert len(running) == 1 and "/m3" in running[0]["admin_comment"]
    assert {
        p["metadata"]["labels"][wellknown.LABEL_SLURM_JOB_ID] for p in pods if p["metadata"]["name"] in ("m1", "m3")
    } == {str(running[0]["job_id"])}


def test_a_waiting_gang_closes_the_immediate_allocation_gate_for_later_pods(cluster: Cluster, ns: str) -> None:
    """Nodes are free but a gang job waits: a later single pod is queued behind it (job/submit), never allocated
    at once past it, and no refused allocation leaves a FAILED record. Slurm alone decides when it starts."""
    eventually(lambda: cluster.free_nodes() >= 3, 60, "three free nodes (an earlier test's pods may be leaving)")
    cluster.block_all_but(ns, 2)
    cluster.apply(pod_group(ns, "big", 3))
    cluster.apply(
        "".join(
            f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: big-{i}, namespace: {ns}, labels: {{"{wellknown.LABEL_POD_GROUP}": big}}}}
spec:
  schedulerName: {wellknown.SCHEDULER_NAME}
  containers: [{{name: c, image: busybox}}]
"""
            for i in range(3)
        )
    )
    eventually(
        lambda: [
            j
            for j in cluster.jobs_for(ns)
            if "/big-0" in j["admin_comment"] and j["job_state"][0] == "PENDING" and j["state_reason"] != "None"
        ],
        30,
        "the 3-node gang job waits for nodes (2 free)",
    )
    cluster.apply(f"""
apiVersion: v1
kind: Pod
metadata: {{name: solo, namespace: {ns}}}
spec:
  schedulerName: {wellknown.SCHEDULER_NAME}
  containers: [{{name: c, image: busybox}}]
""")
    live = ("PENDING", "RUNNING")
    eventually(
        lambda: [j for j in cluster.jobs_for(ns) if '/solo"' in j["admin_comment"] and j["job_state"][0] in live],
        30,
        "solo's job queued",
    )
    # A refused allocation would have left its FAILED record before the queued job.
    solo = [j for j in cluster.jobs_for(ns) if '/solo"' in j["admin_comment"]]
    states = [(j["job_id"], j["job_state"][0], j["state_reason"]) for j in solo]
    assert [state in live for _, state, _ in states] == [True], f"one job, no FAILED record: {states}"
    gang = [j for j in cluster.jobs_for(ns) if "/big-0" in j["admin_comment"]]
    assert [j["job_state"][0] for j in gang] == ["PENDING"], "the gang keeps its single queued job"
