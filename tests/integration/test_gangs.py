"""Gangs end to end on the real stack: a PodGroup, a LeaderWorkerSet group, a JobSet, each as Slurm jobs.

The PodGroup, LWS and JobSet controllers cannot run here; the ReplicaSet and Job controllers do. So the seed
PodGroup scenarios use a real ReplicaSet (its pods carry the pod-group label), and the LWS and JobSet tests
create the pods with the labels and ownerReferences those controllers would set.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from slinky import wellknown
from tests.integration.devstack import kubectl, slinky, worker_killed
from tests.integration.waiting import eventually

pytestmark = pytest.mark.integration
TEMPORAL = Path(sys.executable).parent / "temporal"


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
        return kubectl(self.env, *args, stdin=stdin, check=check)

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


def lws_group(ns: str, name: str, key: str, size: int, container: str) -> str:
    """Group 0 of LeaderWorkerSet ``name``: its ``size`` pods as the LWS controller names and labels them."""
    return "".join(
        f"""
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}-0{"" if i == 0 else f"-{i}"}
  namespace: {ns}
  labels:
    "{wellknown.LABEL_LWS_NAME}": {name}
    "{wellknown.LABEL_LWS_GROUP_INDEX}": "0"
    "{wellknown.LABEL_LWS_GROUP_KEY}": "{key}"
    "{wellknown.LABEL_LWS_WORKER_INDEX}": "{i}"
  annotations: {{"{wellknown.ANNOTATION_LWS_SIZE}": "{size}"}}
spec:
  schedulerName: {wellknown.SCHEDULER_NAME}
  containers: [{container}]
"""
        for i in range(size)
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
    pods = lws_group(ns, "llm", uuid.uuid4().hex, 4, '{name: c, image: vllm, resources: {requests: {cpu: "1"}}}')
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


# ---------------------------------------------------------------------------------------- gangs that start again
def workflow_runs(cluster: Cluster, workflow_id: str) -> list[dict[str, Any]]:
    """Every run of one workflow ID, newest first, as ``temporal workflow list`` shows them."""
    out = subprocess.run(
        [
            str(TEMPORAL),
            "workflow",
            "list",
            "--address",
            cluster.env["TEMPORAL_ADDRESS"],
            "-o",
            "json",
            "-q",
            f"WorkflowId = '{workflow_id}'",
        ],
        text=True,
        capture_output=True,
        check=True,
    )
    runs: list[dict[str, Any]] = json.loads(out.stdout or "[]")
    return runs


def memo_of(cluster: Cluster, workflow_id: str) -> dict[str, Any]:
    """The newest run's memo, as ``temporal workflow describe -o json`` shows it (decoded)."""
    out = subprocess.run(
        [
            str(TEMPORAL),
            "workflow",
            "describe",
            "--address",
            cluster.env["TEMPORAL_ADDRESS"],
            "-w",
            workflow_id,
            "-o",
            "json",
        ],
        text=True,
        capture_output=True,
        check=True,
    )
    memo: dict[str, Any] = (json.loads(out.stdout)["workflowExecutionInfo"].get("memo") or {}).get("fields") or {}
    return memo


def replica_set(ns: str, name: str, replicas: int) -> str:
    return f"""
apiVersion: apps/v1
kind: ReplicaSet
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata:
      labels: {{app: {name}, "{wellknown.LABEL_POD_GROUP}": {name}}}
    spec:
      schedulerName: {wellknown.SCHEDULER_NAME}
      containers: [{{name: c, image: nginx}}]
"""


def gang_bound(cluster: Cluster, ns: str, size: int, exclude: set[str]) -> list[dict[str, Any]]:
    """``size`` live pods of ``ns`` (none of the ``exclude`` uids) bound and labelled with one job id."""

    def probe() -> list[dict[str, Any]] | None:
        pods = [
            p
            for p in labelled(cluster.pods(ns))
            if p["metadata"]["uid"] not in exclude and not p["metadata"].get("deletionTimestamp")
        ]
        ids = {p["metadata"]["labels"][wellknown.LABEL_SLURM_JOB_ID] for p in pods}
        return pods if len(pods) == size and len(ids) == 1 else None

    return eventually(probe, 90, f"{size} new pods bound to one job")


def job_id_of(pods: list[dict[str, Any]]) -> int:
    [job_id] = {int(p["metadata"]["labels"][wellknown.LABEL_SLURM_JOB_ID]) for p in pods}
    return job_id


def job_states(cluster: Cluster, ns: str) -> dict[int, str]:
    return {int(j["job_id"]): j["job_state"][0] for j in cluster.jobs_for(ns)}


def test_a_podgroup_member_deleted_restarts_the_gang_with_a_new_job(cluster: Cluster, ns: str) -> None:
    """Issue 29: delete one member of a running PodGroup gang. The bridge deletes the other (all or nothing), the
    ReplicaSet replaces both, and the replacements run as the gang's next lifecycle: a new Slurm job (never the
    cancelled one), the PodGroup Running again, the old run's history kept and linked from the new one."""
    eventually(lambda: cluster.free_nodes() >= 2, 60, "two free nodes (an earlier test's pods may be leaving)")
    cluster.apply(pod_group(ns, "rep", 2))
    workflow_id = "workload/{}/podgroup/rep/{}".format(
        ns, json.loads(cluster.kubectl("get", "podgroup", "-n", ns, "rep", "-o", "json"))["metadata"]["uid"]
    )
    cluster.apply(replica_set(ns, "rep", 2))
    first = gang_bound(cluster, ns, 2, set())
    old_job = job_id_of(first)
    eventually(lambda: cluster.podgroup_phase(ns, "rep") == "Running", 30, "PodGroup Running")
    [old_run] = workflow_runs(cluster, workflow_id)

    cluster.kubectl("delete", "pod", "-n", ns, first[0]["metadata"]["name"], "--wait=false")
    second = gang_bound(cluster, ns, 2, {p["metadata"]["uid"] for p in first})
    new_job = job_id_of(second)
    assert new_job != old_job, "a new job, not the cancelled one"
    eventually(lambda: job_states(cluster, ns).get(old_job) == "CANCELLED", 30, "the old job cancelled")
    assert [s for s in job_states(cluster, ns).values() if s in ("RUNNING", "PENDING")] == ["RUNNING"]
    eventually(lambda: cluster.podgroup_phase(ns, "rep") == "Running", 30, "PodGroup Running again")
    assert len({p["spec"]["nodeName"] for p in second}) == 2, "one member per node"

    runs = workflow_runs(cluster, workflow_id)
    assert len(runs) == 2 and old_run["execution"]["runId"] in {r["execution"]["runId"] for r in runs}
    old = next(r for r in runs if r["execution"]["runId"] == old_run["execution"]["runId"])
    assert old["status"] == "WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW", "the old history stays findable"
    memo = memo_of(cluster, workflow_id)
    assert memo["previous_run_id"] == old_run["execution"]["runId"] and memo["restarts"] == 1

    cluster.kubectl("scale", "replicaset", "-n", ns, "rep", "--replicas=0")
    eventually(lambda: not cluster.pods(ns), 90, "pods gone")
    eventually(lambda: job_states(cluster, ns).get(new_job) == "CANCELLED", 30, "the new job cancelled")


def test_a_leaderworkerset_group_recreated_under_its_key_gets_a_new_job(cluster: Cluster, ns: str) -> None:
    """LWS's RecreateGroupOnPodRestart deletes every pod of a group and creates them again under the same names
    and group key (the controller cannot run here: the test does what it does). The new pods get a new job."""
    eventually(lambda: cluster.free_nodes() >= 2, 60, "two free nodes (an earlier test's pods may be leaving)")
    cluster.apply(f"""
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {{name: lws, namespace: {ns}}}
spec: {{replicas: 1, leaderWorkerTemplate: {{size: 2, restartPolicy: RecreateGroupOnPodRestart}}}}
""")
    group = lws_group(ns, "lws", uuid.uuid4().hex, 2, "{name: c, image: vllm}")
    cluster.apply(group)
    first = gang_bound(cluster, ns, 2, set())
    old_job = job_id_of(first)
    # A worker restarted: the controller deletes the whole group, then creates it again as soon as it is gone.
    cluster.kubectl("delete", "pods", "-n", ns, "--all", "--wait=true", "--timeout=90s")
    cluster.apply(group)
    second = gang_bound(cluster, ns, 2, {p["metadata"]["uid"] for p in first})
    assert job_id_of(second) != old_job
    assert job_states(cluster, ns)[old_job] == "CANCELLED"
    assert sorted(p["metadata"]["name"] for p in second) == ["lws-0", "lws-0-1"]
    cluster.kubectl("delete", "pods", "-n", ns, "--all", "--wait=false")
    eventually(lambda: not cluster.pods(ns), 90, "pods gone")


def test_a_lone_replacement_waits_for_its_gang_and_says_so(cluster: Cluster, ns: str) -> None:
    """A member whose gang is short: its PodScheduled condition names what it waits for, and ``slinky workloads
    why`` answers for the pod (this is what a replacement sees while the rest of its gang has not come back)."""
    cluster.apply(pod_group(ns, "half", 2))
    cluster.apply(f"""
apiVersion: v1
kind: Pod
metadata: {{name: half-0, namespace: {ns}, labels: {{"{wellknown.LABEL_POD_GROUP}": half}}}}
spec:
  schedulerName: {wellknown.SCHEDULER_NAME}
  containers: [{{name: c, image: busybox}}]
""")

    def condition() -> str | None:
        pod = json.loads(cluster.kubectl("get", "pod", "-n", ns, "half-0", "-o", "json"))
        for cond in pod["status"].get("conditions") or []:
            if cond["type"] == "PodScheduled" and cond["status"] == "False" and cond["reason"] == "WaitingForGang":
                return str(cond["message"])
        return None

    assert eventually(condition, 30, "the waiting condition") == "waiting for 1 of 2 members of PodGroup half"
    why = slinky("workloads", "why", "half-0", "-n", ns, env=cluster.env)
    assert "step wait_members" in why and "waiting for 1 of 2 members of PodGroup half" in why, why
    assert not cluster.jobs_for(ns), "half a gang submits nothing"


def test_a_failed_job_pod_recreated_by_its_job_gets_a_job_of_its_own(cluster: Cluster, ns: str) -> None:
    """A batch Job whose pod fails makes a new pod (backoffLimit): the new pod is a new workload with its own
    Slurm job; the failed one's job was cancelled."""
    cluster.apply(f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: retry, namespace: {ns}}}
spec:
  backoffLimit: 1
  template:
    metadata:
      annotations: {{"{wellknown.ANNOTATION_SIM_RUN_SECONDS}": "1", "{wellknown.ANNOTATION_SIM_EXIT_CODE}": "1"}}
    spec:
      schedulerName: {wellknown.SCHEDULER_NAME}
      restartPolicy: Never
      containers: [{{name: c, image: busybox}}]
""")
    pods = eventually(
        lambda: (lambda p: p if len(p) == 2 and all(x["status"]["phase"] == "Failed" for x in p) else None)(
            cluster.pods(ns)
        ),
        120,
        "the Job's pod and its replacement both ran and failed",
    )
    jobs = eventually(
        lambda: (lambda j: j if len(j) == 2 and all(s != "RUNNING" for s in j.values()) else None)(
            job_states(cluster, ns)
        ),
        30,
        "two Slurm jobs, both ended",
    )
    assert len(jobs) == 2
    comments = sorted(json.loads(j["admin_comment"])["pods"][0] for j in cluster.jobs_for(ns))
    assert comments == sorted(f"{ns}/{p['metadata']['name']}" for p in pods), "one job per pod"


def test_worker_killed_while_replacements_arrive_leaves_one_new_job(cluster: Cluster, ns: str) -> None:
    """kill -9 of the bridge worker right after a member is deleted: the old lifecycle is mid-cleanup and the
    replacements come while no worker runs. After the restart there is exactly one new job for them."""
    eventually(lambda: cluster.free_nodes() >= 2, 60, "two free nodes (an earlier test's pods may be leaving)")
    cluster.apply(pod_group(ns, "crash", 2))
    cluster.apply(replica_set(ns, "crash", 2))
    first = gang_bound(cluster, ns, 2, set())
    old_job = job_id_of(first)
    old_uids = {p["metadata"]["uid"] for p in first}
    cluster.kubectl("delete", "pod", "-n", ns, first[0]["metadata"]["name"], "--wait=false")
    with worker_killed():
        # The replacement of the deleted member comes while no worker runs (the other member is deleted by the
        # lifecycle once a worker runs it again, and replaced then).
        eventually(
            lambda: [p for p in cluster.pods(ns) if p["metadata"]["uid"] not in old_uids],
            30,
            "the ReplicaSet's replacement exists",
        )
    second = gang_bound(cluster, ns, 2, old_uids)
    new_job = job_id_of(second)
    eventually(lambda: job_states(cluster, ns).get(old_job) == "CANCELLED", 60, "the old job cancelled")
    live = [j for j, s in job_states(cluster, ns).items() if s in ("RUNNING", "PENDING")]
    assert live == [new_job], f"one live job, the new gang's: {job_states(cluster, ns)}"
    assert len(job_states(cluster, ns)) == 2, "no duplicate job"
    cluster.kubectl("scale", "replicaset", "-n", ns, "crash", "--replicas=0")
    eventually(lambda: not cluster.pods(ns), 90, "pods gone")
