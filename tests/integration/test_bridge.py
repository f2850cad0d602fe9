"""The bridge end to end on the real stack: pods and Jobs through kube-apiserver, Slurm and Temporal.

Needs the stack (the ``dev_env`` session fixture) with its ``bridge-worker`` process and 4 nodes. Each test
gets a fresh namespace; Slurm jobs are matched to it by ``admin_comment`` (other engineers' jobs share the
slurmctld), Slurm's own records are read through the raw slurmrestd API, workflows through the Temporal
client. The kill tests SIGKILL the bridge worker and restart it exactly as ``slinky dev up`` does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey

from activities.kube import KubeActivities
from slinky import wellknown
from slinky.bridge.admission import CONFIGURATION_NAME
from slinky.bridge.models import workload as models
from slinky.bridge.models.workload import (
    Phase,
    PodRef,
    job_comment_for,
)
from slinky.clients.kube import KubeClient
from tests.builders import StaticNodes
from tests.integration.cluster import (
    REST,
    Kube,
    Slurm,
    Temporal,
    condition,
    is_live,
    job_label,
    node_of,
    number,
    phase,
    pods_of,
    state,
    wid,
)
from tests.integration.devstack import restart_worker, slinky, worker_killed
from tests.integration.waiting import eventually

pytestmark = pytest.mark.integration

SA_JOB_ID = SearchAttributeKey.for_int("SlinkySlurmJobId")
SA_PHASE = SearchAttributeKey.for_keyword("SlinkyPhase")

NODE_PREFIX = "slinky-node-"
NODES = [f"{NODE_PREFIX}{i}" for i in range(1, 5)]
"""The first dev-stack nodes (there are at least four); ``free_nodes`` looks at all of them."""


# ------------------------------------------------------------------------------------------------ steps
def wait_bound(kube: Kube, namespace: str, name: str, timeout: float = 30.0) -> dict[str, Any]:
    return dict(
        eventually(
            lambda: (lambda p: p if node_of(p) and job_label(p) else None)(kube.pod(namespace, name)),
            timeout=timeout,
            what=f"pod {namespace}/{name} bound",
        )
    )


def wait_running(kube: Kube, namespace: str, name: str, timeout: float = 30.0) -> dict[str, Any]:
    return dict(
        eventually(
            lambda: (lambda p: p if phase(p) == "Running" else None)(kube.pod(namespace, name)),
            timeout=timeout,
            what=f"pod {namespace}/{name} Running",
        )
    )


def wait_pending_in_slurm(
    kube: Kube, slurm: Slurm, namespace: str, name: str, timeout: float = 30.0
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod is labelled with a job id whose Slurm job is PENDING; returns (pod, job)."""

    def probe() -> tuple[dict[str, Any], dict[str, Any]] | None:
        pod = kube.pod(namespace, name)
        if not job_label(pod):
            return None
        job = slurm.job(job_label(pod))
        return (pod, job) if pod and job and state(job) == "PENDING" else None

    result: tuple[dict[str, Any], dict[str, Any]] = eventually(
        probe, timeout=timeout, what=f"pod {namespace}/{name} pending in Slurm"
    )
    return result


def wait_gone(kube: Kube, namespace: str, name: str, timeout: float = 30.0) -> None:
    eventually(lambda: kube.pod(namespace, name) is None, timeout=timeout, what=f"pod {name} gone")


def wait_job_state(slurm: Slurm, job_id: int | str, *states: str, timeout: float = 30.0) -> dict[str, Any]:
    return dict(
        eventually(
            lambda: (lambda j: j if state(j) in states else None)(slurm.job(job_id)),
            timeout=timeout,
            what=f"Slurm job {job_id} in {states}",
        )
    )


def wait_completed(temporal: Temporal, workflow_id: str, timeout: float = 30.0) -> None:
    eventually(lambda: temporal.completed(workflow_id), timeout=timeout, what=f"workflow {workflow_id} completed")


def free_nodes(slurm: Slurm) -> list[str]:
    """Bridge nodes with nothing allocated (others share this stack: a demo pod may hold one)."""
    nodes = slurm.http.get(f"{REST}/nodes", headers=slurm._headers()).raise_for_status().json()["nodes"]
    busy = {"ALLOCATED", "MIXED", "DOWN", "DRAIN", "COMPLETING"}
    return [n["name"] for n in nodes if n["name"].startswith(NODE_PREFIX) and not busy & set(n["state"])]


def fill_nodes(kube: Kube, slurm: Slurm, namespace: str) -> list[str]:
    """One long-running blocker pod (exclusive whole-node job) per free node, all bound and Running."""
    count = len(eventually(lambda: free_nodes(slurm), timeout=30, what="a free node"))
    names = [f"blocker-{i}" for i in range(count)]
    for name in names:
        kube.create_pod(namespace, name)
    for name in names:
        wait_running(kube, namespace, name, timeout=60)
    return names


def live_jobs_of(slurm: Slurm, namespace: str) -> list[dict[str, Any]]:
    return [j for j in slurm.jobs_of(namespace) if is_live(j)]


def scheduled_events(kube: Kube, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in kube.events(namespace, name) if e.get("reason") == reason]


# ------------------------------------------------------------------------------------------------ tests
def test_single_pod_from_create_to_delete(kube: Kube, slurm: Slurm, temporal: Temporal, ns: str) -> None:
    kube.create_pod(ns, "solo")
    pod = wait_bound(kube, ns, "solo")
    workflow_id = wid(pod)
    assert workflow_id == f"workload/{ns}/{pod['metadata']['uid']}"
    node = node_of(pod)
    assert node.startswith(NODE_PREFIX)
    assert pod["metadata"]["annotations"][wellknown.ANNOTATION_SLURM_NODE] == node
    assert wellknown.FINALIZER_SCHEDULER in pod["metadata"]["finalizers"]
    job_id = job_label(pod)
    job = wait_job_state(slurm, job_id, "RUNNING")
    assert job["nodes"] == node
    assert json.loads(job["admin_comment"]) == {"pods": [f"{ns}/solo"]}
    assert job["comment"] == job_comment_for(workflow_id, 1)  # the first submission of this workflow
    assert "EXTERNAL_JOB" in job["flags"]
    assert job["partition"] == wellknown.DEFAULT_PARTITION
    assert [j["job_id"] for j in slurm.jobs_of_pod(ns, "solo")] == [int(job_id)]
    wait_running(kube, ns, "solo")
    assert temporal.status(workflow_id) == WorkflowExecutionStatus.RUNNING

    assert temporal.search_attribute(workflow_id, SA_JOB_ID) == int(job_id)
    assert temporal.search_attribute(workflow_id, SA_PHASE) == Phase.RUNNING

    kube.delete_pod(ns, "solo")
    wait_gone(kube, ns, "solo")  # the finalizer was removed
    wait_job_state(slurm, job_id, "CANCELLED")
    wait_completed(temporal, workflow_id)
    assert temporal.search_attribute(workflow_id, SA_PHASE) == Phase.FINISHED
    reasons = {"SlurmJobSubmitted", "Scheduled", "SlurmJobCleanedUp"}
    eventually(
        lambda: reasons <= {e["reason"] for e in kube.events(ns, "solo")},
        timeout=10,
        what=f"Events {reasons}",
    )


def test_job_with_parallelism_3_and_active_deadline(kube: Kube, slurm: Slurm, temporal: Temporal, ns: str) -> None:
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(annotations={wellknown.ANNOTATION_SIM_RUN_SECONDS: "2"}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            scheduler_name=wellknown.SCHEDULER_NAME,
            containers=[client.V1Container(name="main", image="registry.k8s.io/pause:3.9")],
        ),
    )
    kube.batch.create_namespaced_job(
        ns,
        client.V1Job(
            metadata=client.V1ObjectMeta(name="trio"),
            spec=client.V1JobSpec(parallelism=3, completions=3, active_deadline_seconds=600, template=template),
        ),
    )

    def complete() -> bool:
        status = kube.batch.read_namespaced_job_status("trio", ns).status
        done = any(c.type == "Complete" and c.status == "True" for c in status.conditions or [])
        return bool(done and status.succeeded == 3)

    eventually(complete, timeout=60, what="Job trio complete")
    pods = kube.pods(ns)
    assert len(pods) == 3
    assert all(phase(p) == "Succeeded" for p in pods), [phase(p) for p in pods]
    jobs = slurm.jobs_of(ns)
    assert sorted(pods_of(j)[0] for j in jobs) == sorted(f"{ns}/{p['metadata']['name']}" for p in pods)
    for job in jobs:
        assert number(job["time_limit"]) == 10, job["time_limit"]
    for pod in pods:
        assert job_label(pod) in {str(j["job_id"]) for j in jobs}
        assert pod["metadata"]["annotations"][wellknown.ANNOTATION_SLURM_NODE] == node_of(pod)
    eventually(lambda: not live_jobs_of(slurm, ns), timeout=30, what="all 3 Slurm jobs ended")
    for pod in pods:
        wait_completed(temporal, wid(pod))
    eventually(
        lambda: all(not p["metadata"].get("finalizers") for p in kube.pods(ns)),
        timeout=10,
        what="finalizers removed",
    )


def test_pod_deleted_while_pending(kube: Kube, slurm: Slurm, temporal: Temporal, ns: str) -> None:
    fill_nodes(kube, slurm, ns)
    kube.create_pod(ns, "waiting")
    pod, job = wait_pending_in_slurm(kube, slurm, ns, "waiting")
    job_id = job["job_id"]

    kube.delete_pod(ns, "waiting")
    wait_gone(kube, ns, "waiting")
    wait_job_state(slurm, job_id, "CANCELLED")
    assert not [j for j in slurm.jobs_of_pod(ns, "waiting") if is_live(j)]
    assert [j["job_id"] for j in slurm.jobs_of_pod(ns, "waiting")] == [job_id]
    wait_completed(temporal, wid(pod))
    assert not node_of(pod)


def test_job_cancelled_through_rest_deletes_its_pod(kube: Kube, slurm: Slurm, temporal: Temporal, ns: str) -> None:
    kube.create_pod(ns, "victim")
    pod = wait_bound(kube, ns, "victim")
    job_id = job_label(pod)
    wait_job_state(slurm, job_id, "RUNNING")

    slurm.cancel(job_id)
    wait_gone(kube, ns, "victim")
    assert state(slurm.job(job_id)) == "CANCELLED"
    wait_completed(temporal, wid(pod))
    assert any(scheduled_events(kube, ns, "victim", "SlurmJobEnded"))


def test_all_nodes_full_then_a_node_frees(
    kube: Kube, slurm: Slurm, temporal: Temporal, ns: str, dev_env: dict[str, str]
) -> None:
    blockers = fill_nodes(kube, slurm, ns)
    kube.create_pod(ns, "fifth")
    pod, job = wait_pending_in_slurm(kube, slurm, ns, "fifth")
    assert not node_of(pod)

    def unschedulable() -> dict[str, Any] | None:
        cond = condition(kube.pod(ns, "fifth"))
        ok = cond.get("status") == "False" and cond.get("reason") == "Unschedulable"
        return cond if ok else None

    cond = eventually(unschedulable, timeout=20, what="PodScheduled=False Unschedulable")
    assert any(reason in cond["message"] for reason in ("Priority", "Resources")), cond
    assert str(job["job_id"]) in cond["message"]
    why = temporal.why_pending(wid(pod))
    assert why.phase == Phase.PENDING
    assert why.job_id == job["job_id"]
    assert why.slurm_state == "PENDING"
    assert why.reason in ("Priority", "Resources")
    assert why.reason in cond["message"]
    assert why.pods == [f"{ns}/fifth"]
    said = slinky("workloads", "why", "fifth", "-n", ns, env=dev_env)
    assert f"{ns}/fifth: phase Pending, step wait_allocation, Slurm job {job['job_id']} (PENDING)" in said, said

    def listed() -> dict[str, str] | None:  # visibility follows the search attributes a moment later
        rows = json.loads(slinky("workloads", "list", "-n", ns, "--json", env=dev_env))
        row = next((r for r in rows if r["name"] == "fifth"), None)
        return row if row and row["phase"] == "Pending" else None

    row = eventually(listed, timeout=10, what="the pending pod listed")
    assert (row["kind"], row["job"], row["status"], row["workflow_id"]) == (
        "Pod",
        str(job["job_id"]),
        "RUNNING",
        wid(pod),
    )
    with worker_killed():  # no worker to run the query: the answer comes from what the lifecycle published
        started = time.monotonic()
        said = slinky("workloads", "why", "fifth", "-n", ns, env=dev_env)
        took = time.monotonic() - started
    assert f"{ns}/fifth: phase Pending, Slurm job {job['job_id']}. The lifecycle did not answer" in said, said
    assert f"Unschedulable: {cond['message']}" in said, said
    assert took < 10, f"answered without the worker in {took:.1f} s"

    kube.delete_pod(ns, blockers[0])
    pod = wait_bound(kube, ns, "fifth", timeout=30)
    wait_running(kube, ns, "fifth")
    assert job_label(pod) == str(job["job_id"])
    assert state(slurm.job(job["job_id"])) == "RUNNING"
    assert condition(pod).get("status") == "True"


OVERRIDES: list[tuple[str, dict[str, str], Callable[[dict[str, Any]], Any], Any]] = [
    (
        "job-name",
        {wellknown.ANNOTATION_JOB_NAME: "renamed-by-annotation"},
        lambda j: j["name"],
        "renamed-by-annotation",
    ),
    (
        "partition",
        {wellknown.ANNOTATION_PARTITION: wellknown.DEFAULT_PARTITION},
        lambda j: j["partition"],
        wellknown.DEFAULT_PARTITION,
    ),
    ("timelimit", {wellknown.ANNOTATION_TIMELIMIT: "7"}, lambda j: number(j["time_limit"]), 7),
    (
        "cpu-per-task",
        {wellknown.ANNOTATION_CPU_PER_TASK: "3", wellknown.ANNOTATION_EXCLUSIVE: "false"},
        lambda j: (number(j["cpus_per_task"]), number(j["cpus"])),
        (3, 3),
    ),
    ("mem-per-node", {wellknown.ANNOTATION_MEM_PER_NODE: "2Gi"}, lambda j: number(j["memory_per_node"]), 2048),
    ("account", {wellknown.ANNOTATION_ACCOUNT: "physics"}, lambda j: j["account"], "physics"),
    # Slurm 26.05 without accounting shows a job's qos only while it is pending: hold it (priority 0).
    (
        "qos",
        {wellknown.ANNOTATION_QOS: "high", wellknown.ANNOTATION_PRIORITY: "0"},
        lambda j: (j["qos"], state(j), number(j["priority"])),
        ("high", "PENDING", 0),
    ),
    ("priority", {wellknown.ANNOTATION_PRIORITY: "4242"}, lambda j: number(j["priority"]), 4242),
    (
        "constraints",
        {wellknown.ANNOTATION_CONSTRAINTS: wellknown.DEFAULT_PARTITION},
        lambda j: j["features"],
        wellknown.DEFAULT_PARTITION,
    ),
    ("wckey", {wellknown.ANNOTATION_WCKEY: "proj42"}, lambda j: j["wckey"].lstrip("*"), "proj42"),
]


@pytest.mark.parametrize(
    ("annotations", "read", "expected"),
    [pytest.param(a, r, e, id=i) for i, a, r, e in OVERRIDES],
)
def test_annotation_override_in_slurm_job_record(
    kube: Kube,
    slurm: Slurm,
    ns: str,
    annotations: dict[str, str],
    read: Callable[[dict[str, Any]], Any],
    expected: Any,
) -> None:
    kube.create_pod(ns, "override", annotations=annotations)
    pod = eventually(
        lambda: (lambda p: p if job_label(p) else None)(kube.pod(ns, "override")),
        timeout=30,
        what="job submitted",
    )
    job = slurm.job(job_label(pod))
    assert job is not None
    assert read(job) == expected, {k: job.get(k) for k in ("name", "partition", "account", "qos", "wckey")}
    assert pods_of(job) == [f"{ns}/override"]


BAD: list[tuple[str, dict[str, str | None], dict[str, str | None], str, str]] = [
    (
        "min-nodes-not-a-number",
        {wellknown.ANNOTATION_MIN_NODES: "abc"},
        {wellknown.ANNOTATION_MIN_NODES: "1"},
        "SlurmJobInvalid",
        wellknown.ANNOTATION_MIN_NODES,
    ),
    (
        "unknown-key",
        {wellknown.PREFIX_SLURMJOB + "timelimt": "5"},
        {wellknown.PREFIX_SLURMJOB + "timelimt": None},
        "SlurmJobInvalid",
        wellknown.PREFIX_SLURMJOB + "timelimt",
    ),
    (
        "unknown-partition",
        {wellknown.ANNOTATION_PARTITION: "nope"},
        {wellknown.ANNOTATION_PARTITION: wellknown.DEFAULT_PARTITION},
        "SlurmJobRejected",
        "partition",
    ),
]


@pytest.mark.parametrize(
    ("bad", "fix", "reason", "mentions"),
    [pytest.param(b, f, r, m, id=i) for i, b, f, r, m in BAD],
)
def test_bad_annotations_then_fixed(
    kube: Kube,
    slurm: Slurm,
    temporal: Temporal,
    ns: str,
    bad: dict[str, str],
    fix: dict[str, str | None],
    reason: str,
    mentions: str,
) -> None:
    # The admission webhook, where registered, refuses these at create (next test): this pod opts out of
    # it, as every pod does when the webhook is down (it fails open outside managed namespaces), so what
    # is checked here is the bridge's own handling.
    kube.create_pod(ns, "broken", annotations=bad, labels={wellknown.LABEL_WEBHOOK: wellknown.WEBHOOK_IGNORE})
    events = eventually(lambda: scheduled_events(kube, ns, "broken", reason), timeout=20, what=f"{reason} Event")
    assert events[0]["type"] == "Warning"
    assert mentions.lower() in events[0]["message"].lower(), events[0]["message"]
    cond = eventually(
        lambda: (lambda c: c if c.get("reason") == reason else None)(condition(kube.pod(ns, "broken"))),
        timeout=10,
        what=f"PodScheduled reason {reason}",
    )
    assert cond["status"] == "False"
    assert cond["message"] == events[0]["message"]
    pod = kube.pod(ns, "broken")
    assert pod is not None and not node_of(pod) and not job_label(pod)
    assert slurm.jobs_of_pod(ns, "broken") == []
    why = temporal.why_pending(wid(pod))
    assert why.phase == Phase.INVALID
    assert why.job_id is None

    kube.annotate(ns, "broken", fix)
    pod = wait_bound(kube, ns, "broken")
    wait_running(kube, ns, "broken")
    jobs = slurm.jobs_of_pod(ns, "broken")
    assert [j["job_id"] for j in jobs] == [int(job_label(pod))]
    assert state(jobs[0]) == "RUNNING"


def webhook_registered(kube: Kube) -> bool:
    api = client.AdmissionregistrationV1Api(kube.api)
    names = {c.metadata.name for c in api.list_validating_webhook_configuration().items}
    return CONFIGURATION_NAME in names


@pytest.mark.parametrize(
    ("bad", "mentions"),
    [pytest.param(b, m, id=i) for i, b, _, r, m in BAD if r == "SlurmJobInvalid"],
)
def test_bad_annotations_refused_at_admission(
    kube: Kube, slurm: Slurm, ns: str, bad: dict[str, str], mentions: str
) -> None:
    if not webhook_registered(kube):
        pytest.fail("the admission webhook is not registered: `slinky dev up` registers it")
    with pytest.raises(ApiException) as refused:
        kube.create_pod(ns, "refused", annotations=bad)
    assert refused.value.status in (400, 403), refused.value.status
    assert mentions in str(refused.value.body), refused.value.body
    assert kube.pod(ns, "refused") is None
    assert slurm.jobs_of_pod(ns, "refused") == []


async def _bind_one(acts: KubeActivities, ref: PodRef) -> bool:
    """Bind ``ref`` through the bind activity; True when it reports the pod gone."""
    binding = models.PodBinding(pod=ref, slurm_node=NODES[0])
    result = await acts.bind_pods(models.BindPodsInput(bindings=[binding], job_id=1))
    return ref.uid in result.gone


async def test_bind_of_a_pod_deleted_after_it_was_read_reports_it_gone(
    dev_env: dict[str, str], kube: Kube, ns: str
) -> None:
    """The allocation comes while the pod is being deleted: that is "pod gone", not a permanent AlreadyBound
    error (which failed the bind step and left the job and the finalizer behind). Without the pod watcher's copy
    (a follower replica, or the pod left its cache) the bind reads the pod once, for its managed-node toleration,
    and finds it deleting: gone, with no binding posted. (With the copy, it posts first and reads only after the
    server's 409: ``test_kube_activities``.)"""
    hold = "test.slinky.slurm.net/hold"
    kube.create_pod(ns, "racer", scheduler_name="nobody")  # the bridge leaves it alone
    kube.patch(ns, "racer", {"metadata": {"finalizers": [hold]}})
    before = kube.pod(ns, "racer")
    assert before is not None
    ref = PodRef(namespace=ns, name="racer", uid=before["metadata"]["uid"])
    kube.delete_pod(ns, "racer")
    eventually(lambda: (kube.pod(ns, "racer") or {}).get("metadata", {}).get("deletionTimestamp"), timeout=10)

    kube_client = KubeClient.from_kubeconfig(dev_env["KUBECONFIG"])
    acts = KubeActivities(kube_client, StaticNodes(NODES[0]))
    reads = 0
    real_get = acts._get_pod

    async def counted(pod: PodRef) -> dict[str, Any] | None:
        nonlocal reads
        reads += 1
        return await real_get(pod)

    acts._get_pod = counted  # type: ignore[method-assign]
    try:
        gone = await _bind_one(acts, ref)
    finally:
        await kube_client.aclose()
        kube.patch(ns, "racer", {"metadata": {"finalizers": None}})
    assert gone
    assert reads == 1, "one read"
    assert not node_of(kube.pod(ns, "racer"))


async def test_remove_finalizers_is_idempotent_and_keeps_other_finalizers(
    dev_env: dict[str, str], kube: Kube, ns: str
) -> None:
    """A local activity runs again when its workflow task fails (a signal raced the completion), so removing
    the finalizer twice must not put it back. Kubernetes before 1.23 ADDS the entries of a
    ``$deleteFromPrimitiveList`` patch to an absent list (kubernetes#105146); this apiserver is 1.20."""
    other = "test.slinky.slurm.net/hold"
    kube.create_pod(ns, "solo-fin", scheduler_name="nobody")
    kube.create_pod(ns, "two-fin", scheduler_name="nobody")
    kube.patch(ns, "solo-fin", {"metadata": {"finalizers": [wellknown.FINALIZER_SCHEDULER]}})
    kube.patch(ns, "two-fin", {"metadata": {"finalizers": [other, wellknown.FINALIZER_SCHEDULER]}})
    refs = []
    for name in ("solo-fin", "two-fin"):
        pod = kube.pod(ns, name)
        assert pod is not None
        refs.append(PodRef(namespace=ns, name=name, uid=pod["metadata"]["uid"]))
    stale = PodRef(namespace=ns, name="solo-fin", uid="00000000-0000-0000-0000-000000000000")

    kube_client = KubeClient.from_kubeconfig(dev_env["KUBECONFIG"])
    acts = KubeActivities(kube_client, StaticNodes(NODES[0]))
    try:
        for _ in range(2):  # on 1.20 the old strategic patch toggled: removed, then added back
            await acts.remove_finalizers(models.PodsInput(pods=refs))
        solo_after = (kube.pod(ns, "solo-fin") or {})["metadata"].get("finalizers")
        two_after = (kube.pod(ns, "two-fin") or {})["metadata"].get("finalizers")
        kube.patch(ns, "solo-fin", {"metadata": {"finalizers": [wellknown.FINALIZER_SCHEDULER]}})
        await acts.remove_finalizers(models.PodsInput(pods=[stale]))  # another pod's UID: not ours to touch
        stale_kept = (kube.pod(ns, "solo-fin") or {})["metadata"].get("finalizers")
        await acts.remove_finalizers(models.PodsInput(pods=refs[:1]))
    finally:
        await kube_client.aclose()
        kube.patch(ns, "two-fin", {"metadata": {"finalizers": None}})
    assert not solo_after, "removed, and not put back by the repeated removals"
    assert two_after == [other], "only ours removed, from the second place"
    assert stale_kept == [wellknown.FINALIZER_SCHEDULER]
    assert not (kube.pod(ns, "solo-fin") or {})["metadata"].get("finalizers")


# ------------------------------------------------------------------------------------------------ kill -9
def assert_one_job_per_workload_and_no_orphans(
    kube: Kube, slurm: Slurm, temporal: Temporal, namespace: str, pods: list[dict[str, Any]]
) -> None:
    jobs = slurm.jobs_of(namespace)
    per_pod: dict[str, list[int]] = {}
    for job in jobs:
        for key in pods_of(job):
            per_pod.setdefault(key, []).append(job["job_id"])
    for pod in pods:
        key = f"{namespace}/{pod['metadata']['name']}"
        assert len(per_pod.get(key, [])) == 1, (key, per_pod.get(key))
    eventually(lambda: not live_jobs_of(slurm, namespace), timeout=30, what="no live job left")
    for pod in pods:
        wait_completed(temporal, wid(pod))


@pytest.mark.timeout(150)
def test_kill_worker_between_submit_and_bind(kube: Kube, slurm: Slurm, temporal: Temporal, ns: str) -> None:
    blockers = fill_nodes(kube, slurm, ns)
    names = ["late-0", "late-1", "late-2"]
    for name in names:
        kube.create_pod(ns, name, annotations={wellknown.ANNOTATION_SIM_RUN_SECONDS: "2"})
    pending = [wait_pending_in_slurm(kube, slurm, ns, name)[0] for name in names]
    blocker_pods = [kube.pod(ns, b) for b in blockers]

    with worker_killed():
        # Free the nodes both ways while nobody watches: delete some blocker pods (their finalizer holds
        # them and their jobs until the bridge is back) and cancel the other blockers' Slurm jobs, so
        # Slurm allocates pending jobs whose pods nobody binds yet.
        cancelled = blockers[1::2] or blockers
        deleted = [b for b in blockers if b not in cancelled]
        for name in deleted:
            kube.delete_pod(ns, name)
        for name in cancelled:
            slurm.cancel(job_label(kube.pod(ns, name)))
        expected = min(len(cancelled), len(names))
        allocated = eventually(
            lambda: (lambda r: r if len(r) >= expected else None)(
                [p for p in pending if state(slurm.job(job_label(p))) == "RUNNING"]
            ),
            timeout=20,
            what="pending jobs allocated while the worker is dead",
        )
        assert all(not node_of(kube.pod(ns, p["metadata"]["name"])) for p in allocated)
        assert all(kube.pod(ns, b) is not None for b in blockers)
        restart_worker()

    for name in blockers:
        wait_gone(kube, ns, name)
    for name in names:
        eventually(lambda n=name: phase(kube.pod(ns, n)) == "Succeeded", timeout=60, what=f"{name} Succeeded")
    finished = [kube.pod(ns, n) for n in names]
    assert all(p is not None and node_of(p) for p in finished)
    assert_one_job_per_workload_and_no_orphans(
        kube, slurm, temporal, ns, [p for p in pending + blocker_pods if p is not None]
    )
    eventually(
        lambda: all(not (kube.pod(ns, n) or {}).get("metadata", {}).get("finalizers") for n in names),
        timeout=10,
        what="finalizers removed",
    )


@pytest.mark.timeout(150)
def test_kill_worker_between_bind_and_completion(kube: Kube, slurm: Slurm, temporal: Temporal, ns: str) -> None:
    # As many pods as free nodes (up to 3; others' demos may hold nodes): all run at once, long enough
    # to be killed under.
    free = len(eventually(lambda: free_nodes(slurm), timeout=30, what="a free node"))
    names = [f"run-{i}" for i in range(min(3, free))]
    for name in names:
        kube.create_pod(ns, name, annotations={wellknown.ANNOTATION_SIM_RUN_SECONDS: "6"})
    bound = [wait_bound(kube, ns, name) for name in names]

    with worker_killed():
        for name in names:
            eventually(lambda n=name: phase(kube.pod(ns, n)) == "Succeeded", timeout=30, what=f"{name} Succeeded")
        # The lifecycle is not there to clean up: the jobs still run and the finalizers stay.
        assert all(is_live(j) for j in slurm.jobs_of(ns)), [
            (j["job_id"], state(j), pods_of(j)) for j in slurm.jobs_of(ns)
        ]
        restart_worker()

    assert_one_job_per_workload_and_no_orphans(kube, slurm, temporal, ns, bound)
    for name in names:
        pod = kube.pod(ns, name)
        assert phase(pod) == "Succeeded"
        assert not (pod or {}).get("metadata", {}).get("finalizers")


# ------------------------------------------------------------------------------------------- Temporal crash
def test_temporal_server_killed_mid_lifecycle(kube: Kube, slurm: Slurm, temporal: Temporal, ns: str) -> None:
    """kill -9 of the Temporal server while a pod runs: the history is on disk; after the restart the same
    lifecycle notices the pod's end, cancels the job and removes the finalizer. Nothing is lost or doubled."""
    from slinky.dev import stack

    kube.create_pod(ns, "durable", annotations={wellknown.ANNOTATION_SIM_RUN_SECONDS: "4"})
    pod = wait_bound(kube, ns, "durable")
    workflow_id, job_id = wid(pod), job_label(pod)
    stack.restart_temporal(kill=True, down_seconds=1.0)
    eventually(lambda: phase(kube.pod(ns, "durable")) == "Succeeded", timeout=30, what="pod Succeeded")
    wait_job_state(slurm, job_id, "CANCELLED", timeout=60)
    eventually(
        lambda: (
            wellknown.FINALIZER_SCHEDULER
            not in ((kube.pod(ns, "durable") or {}).get("metadata", {}).get("finalizers") or [])
        ),
        timeout=60,
        what="finalizer removed",
    )
    wait_completed(temporal, workflow_id, timeout=60)
    assert [j["job_id"] for j in slurm.jobs_of_pod(ns, "durable")] == [int(job_id)]
