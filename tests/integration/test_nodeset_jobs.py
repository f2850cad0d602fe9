"""NodeSets with real Slurm jobs on real slurmd pods: a scale-in or an update drains first and never kills a job.

Each test makes a NodeSet with a name of its own (Slurm node names are cluster-wide), runs a real batch job
through slurmrestd on one of its nodes, held until the test releases it, and checks from Slurm's own job
record, from Kubernetes and from the scale-in workflow's history.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus

from slinky import wellknown
from slinky.dev import real_nodes, stack
from slinky.operator.models import ScaleInResult, ScaleInStatus
from tests.integration.cluster import REST, Kube, Slurm, Temporal, condition
from tests.integration.devstack import kubectl
from tests.integration.nodeset_jobs import HeldJob, all_idle, live_pods, nodeset_up, pod_names, slurm_node
from tests.integration.operator_fixtures import (
    GROUP,
    SLURMD_IMAGE,
    VERSION,
    apply_nodeset,
    nodeset,
    objects,
    patch_template,
    scale,
)
from tests.integration.waiting import eventually
from workflows.nodeset import workflow_id

pytestmark = pytest.mark.integration


def fresh_name() -> str:
    return f"w{uuid.uuid4().hex[:5]}"


def scale_in_status(temporal: Temporal, wf: str) -> ScaleInStatus:
    handle = temporal.client.get_workflow_handle(wf)
    status: ScaleInStatus = temporal.loop.run_until_complete(handle.query("status", result_type=ScaleInStatus))
    return status


def scale_in_result(temporal: Temporal, wf: str) -> ScaleInResult:
    handle = temporal.client.get_workflow_handle(wf, result_type=ScaleInResult)
    result: ScaleInResult = temporal.loop.run_until_complete(handle.result())
    return result


def test_scale_in_takes_idle_nodes_first_and_waits_for_the_job_on_a_busy_one(
    kube: Kube, slurm: Slurm, temporal: Temporal, cluster: str, held_jobs: list[HeldJob]
) -> None:
    ns, name = cluster, fresh_name()
    names = nodeset_up(kube, slurm, ns, name, 3)
    busy = names[0]  # the lowest ordinal: by ordinal alone it would be the one kept
    job = HeldJob(slurm, busy)
    held_jobs.append(job)
    started = job.running()
    deadline = time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(started["start_time"]["number"] + 60 * started["time_limit"]["number"])
    )

    # The shared poll sees the job: pod-deadline and pod-protect on its pod, busy in its conditions.
    def protected() -> dict[str, Any] | None:
        pod = kube.pod(ns, busy) or {}
        meta = pod.get("metadata", {})
        ok = (
            meta.get("annotations", {}).get(wellknown.ANNOTATION_POD_DEADLINE) == deadline
            and meta.get("labels", {}).get(wellknown.LABEL_NODESET_POD_PROTECT) == "true"
            and "True" in (condition(pod, f"SlurmNodeState{s}").get("status") for s in ("Allocated", "Mixed"))
        )
        return pod if ok else None

    pod = eventually(protected, 15, "pod-deadline, pod-protect and the Mixed/Allocated condition")
    pdb = objects(kube).get_namespaced_custom_object(
        "policy", "v1beta1", ns, "poddisruptionbudgets", "slurm-workers-pdb"
    )
    assert pdb["spec"]["maxUnavailable"] == 0
    assert pdb["spec"]["selector"]["matchLabels"][wellknown.LABEL_NODESET_POD_PROTECT] == "true"

    # 3 -> 1: the two idle nodes go (earlier deadline first), the busy one stays and its job runs on.
    scale(kube, ns, name, 1)
    eventually(lambda: pod_names(kube, ns, terminating=True) == [busy], 60, "the idle pods gone")
    assert all(slurm_node(slurm, n) is None for n in names[1:]), "no ghost nodes in Slurm"
    assert job.state() == "RUNNING"

    # 1 -> 0: the busy node drains and waits for its job.
    scale(kube, ns, name, 0)
    wf = workflow_id(ns, busy, pod["metadata"]["uid"])
    reason = f"slurm-operator: Pod ({ns}/{busy}) is pending termination for scale-in"
    eventually(lambda: (slurm_node(slurm, busy) or {}).get("reason") == reason, 20, "DRAIN with the operator's reason")
    status = eventually(lambda: (s := scale_in_status(temporal, wf)).jobs and s, 10, "the query names the job")
    assert status.phase == "draining" and status.jobs == [job.job_id] and str(job.job_id) in status.waiting_for
    assert status.deadline == deadline
    drain = eventually(
        lambda: (c := condition(kube.pod(ns, busy), "SlurmNodeStateDrain")).get("status") == "True" and c, 10, "Drain"
    )
    assert drain["message"] == reason
    why = eventually(
        lambda: (c := condition(nodeset(kube, ns, name), "ScaleInProgress")).get("reason") == "WaitingForJobs" and c,
        10,
        "the NodeSet says why it is not at its size",
    )
    assert f"waits for jobs [{job.job_id}]" in why["message"] and deadline in why["message"]
    time.sleep(3)
    assert pod_names(kube, ns) == [busy], "the busy pod waits for its job"
    assert job.state() == "RUNNING", "a scale-in never kills a job"

    job.release()
    seen_job_state = ""
    deadline_s = time.monotonic() + 60
    while kube.pod(ns, busy) is not None and not (kube.pod(ns, busy) or {}).get("metadata", {}).get(
        "deletionTimestamp"
    ):
        seen_job_state = job.state()
        assert time.monotonic() < deadline_s, "the pod was never deleted"
        time.sleep(0.1)
    done = job.finished()
    assert done["job_state"] == ["COMPLETED"] and done["exit_code"]["return_code"]["number"] == 0
    assert seen_job_state in ("RUNNING", "COMPLETED", "COMPLETING", "")
    eventually(lambda: kube.pod(ns, busy) is None, 30, "the pod gone")
    assert slurm_node(slurm, busy) is None
    result = scale_in_result(temporal, wf)
    assert result.outcome == "deleted" and result.cancelled_jobs == []
    eventually(lambda: condition(nodeset(kube, ns, name), "ScaleInProgress").get("reason") == "NoScaleIn", 10, "done")
    assert temporal.status(wf) == WorkflowExecutionStatus.COMPLETED


def test_a_rolling_update_replaces_idle_nodes_first_within_max_unavailable(
    kube: Kube, slurm: Slurm, cluster: str, held_jobs: list[HeldJob]
) -> None:
    ns, name = cluster, fresh_name()
    names = nodeset_up(kube, slurm, ns, name, 4, updateStrategy={"rollingUpdate": {"maxUnavailable": 1}})
    busy = names[1]
    job = HeldJob(slurm, busy)
    held_jobs.append(job)
    job.running()
    old = nodeset(kube, ns, name)["status"]["nodeSetHash"]
    patch_template(kube, ns, name, {"metadata": {"annotations": {"example.com/rev": "2"}}})
    new = eventually(lambda: (h := nodeset(kube, ns, name).get("status", {}).get("nodeSetHash")) != old and h, 10)

    replaced: list[str] = []
    floor = 4
    deadline_s = time.monotonic() + 120
    released_at = 0.0
    while len(replaced) < 4:
        assert time.monotonic() < deadline_s, f"update stuck; replaced {replaced}"
        pods = live_pods(kube, ns)
        serving = [
            p
            for p in pods
            if condition(p, "Ready").get("status") == "True"
            and not p["metadata"].get("annotations", {}).get(wellknown.ANNOTATION_POD_CORDON)
        ]
        floor = min(floor, len(serving))
        for p in pods:
            n = p["metadata"]["name"]
            if p["metadata"]["labels"].get(wellknown.LABEL_CONTROLLER_REVISION_HASH) == new and n not in replaced:
                if condition(p, "Ready").get("status") == "True":
                    replaced.append(n)
        if len(replaced) == 3 and not released_at:
            assert busy not in replaced and job.state() == "RUNNING", "the busy node is updated last"
            assert (
                pod_names(kube, ns) == names
                and (kube.pod(ns, busy) or {})["metadata"]["labels"][wellknown.LABEL_CONTROLLER_REVISION_HASH] == old
            )
            job.release()
            released_at = time.monotonic()
        time.sleep(0.1)
    assert replaced[-1] == busy and sorted(replaced) == names
    assert floor >= 3, f"more than maxUnavailable=1 pods out of service at once ({4 - floor})"
    done = job.finished()
    assert done["job_state"] == ["COMPLETED"], "an update never kills a job"


def test_on_delete_replaces_only_deleted_pods(kube: Kube, slurm: Slurm, cluster: str) -> None:
    ns, name = cluster, fresh_name()
    names = nodeset_up(kube, slurm, ns, name, 2, updateStrategy={"type": "OnDelete"})
    old = nodeset(kube, ns, name)["status"]["nodeSetHash"]
    patch_template(kube, ns, name, {"metadata": {"labels": {"r": "2"}}})
    eventually(lambda: nodeset(kube, ns, name).get("status", {}).get("nodeSetHash") != old, 10, "new revision")
    time.sleep(3)
    revisions = {
        p["metadata"]["name"]: p["metadata"]["labels"][wellknown.LABEL_CONTROLLER_REVISION_HASH]
        for p in live_pods(kube, ns)
    }
    assert revisions == {n: old for n in names}, "OnDelete leaves running pods alone"
    kube.core.delete_namespaced_pod(names[0], ns)
    eventually(
        lambda: (
            (p := kube.pod(ns, names[0])) is not None
            and not p["metadata"].get("deletionTimestamp")
            and p["metadata"]["labels"][wellknown.LABEL_CONTROLLER_REVISION_HASH] != old
        ),
        90,  # the old pod first ends on its node (slurmd's stop, then the kubelet's status sync), then a new one
        "the deleted pod made again at the new revision",
    )
    assert (kube.pod(ns, names[1]) or {})["metadata"]["labels"][wellknown.LABEL_CONTROLLER_REVISION_HASH] == old
    assert nodeset(kube, ns, name)["status"].get("updatedReplicas") in (0, 1)


def test_a_cordoned_kubernetes_node_drains_its_slurm_node_and_a_foreign_reason_stays(
    kube: Kube, slurm: Slurm, cluster: str
) -> None:
    ns, name = cluster, fresh_name()
    names = nodeset_up(kube, slurm, ns, name, 2)
    pods = {n: kube.pod(ns, n) or {} for n in names}
    owned_node, foreign_node = (pods[n]["spec"]["nodeName"] for n in names)
    admin = "admin: bad dimm, ticket 42"
    slurm.http.post(
        f"/slurm/v0.0.44/node/{names[1]}",
        headers=slurm._headers(),
        json={"state": ["DRAIN"], "reason": admin},
    ).raise_for_status()
    try:
        kube.core.patch_node(
            owned_node,
            {
                "metadata": {"annotations": {wellknown.ANNOTATION_NODE_CORDON_REASON: "kernel upgrade"}},
                "spec": {"unschedulable": True},
            },
        )
        kube.core.patch_node(foreign_node, {"spec": {"unschedulable": True}})
        eventually(
            lambda: (slurm_node(slurm, names[0]) or {}).get("reason") == "slurm-operator: kernel upgrade",
            15,
            "the cordon drains Slurm with the node's reason",
        )
        assert "DRAIN" in (slurm_node(slurm, names[0]) or {})["state"]
        time.sleep(2)
        assert (slurm_node(slurm, names[1]) or {}).get("reason") == admin, "a foreign reason is never replaced"
    finally:
        for node in (owned_node, foreign_node):
            kube.core.patch_node(
                node,
                {
                    "metadata": {"annotations": {wellknown.ANNOTATION_NODE_CORDON_REASON: None}},
                    "spec": {"unschedulable": None},
                },
            )
    eventually(lambda: "DRAIN" not in (slurm_node(slurm, names[0]) or {}).get("state", ["DRAIN"]), 15, "undrained")
    time.sleep(2)
    node = slurm_node(slurm, names[1]) or {}
    assert "DRAIN" in node["state"] and node["reason"] == admin, "uncordon never undrains an admin's drain"


def test_deleting_a_nodeset_leaves_no_ghost_nodes_in_slurm(kube: Kube, slurm: Slurm, cluster: str) -> None:
    ns, name = cluster, fresh_name()
    names = nodeset_up(kube, slurm, ns, name, 3)
    objects(kube).delete_namespaced_custom_object("slinky.slurm.net", "v1beta1", ns, "nodesets", name)
    eventually(lambda: not live_pods(kube, ns) and not kube.pods(ns), 60, "the garbage collector took the pods")
    eventually(lambda: all(slurm_node(slurm, n) is None for n in names), 20, "no ghost nodes")
    time.sleep(3)  # a slurmd that re-registered while stopping would show up again here
    assert [n for n in names if slurm_node(slurm, n) is not None] == []


def test_daemonset_mode_follows_the_nodes_that_match(kube: Kube, slurm: Slurm, cluster: str) -> None:
    """One pod per matching real node, named after it; a node that starts to match gets one, a node that stops
    matching has its pod drained and deleted (the dev stack's real nodes are fixed, so they come and go by
    label)."""
    ns, name = cluster, fresh_name()
    label = f"example.com/{name}"
    workers = sorted(n.metadata.name for n in kube.core.list_node(label_selector=real_nodes.NODE_LABEL).items)
    assert len(workers) >= 3, workers

    def set_label(node: str, value: str | None) -> None:
        kube.core.patch_node(node, {"metadata": {"labels": {label: value}}})

    def placement() -> dict[str, str]:
        return {(p["spec"].get("nodeName") or "?"): p["spec"]["hostname"] for p in live_pods(kube, ns)}

    try:
        for node in workers[:2]:
            set_label(node, "yes")
        # The real nodes' taint tolerated in the template itself: the operator, as a DaemonSet controller, places
        # pods by the template (the namespace's default toleration is added to pods only when they are created).
        toleration = {"key": stack.REAL_NODE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
        template = {"spec": {"nodeSelector": {label: "yes"}, "tolerations": [toleration]}}
        apply_nodeset(kube, ns, name, scalingMode="DaemonSet", template=template)

        def ready(nodes: list[str]) -> bool:  # Ready pods: a pod deleted while it starts takes a 1.20 kubelet long
            pods = {p["spec"].get("nodeName"): p for p in live_pods(kube, ns)}
            return all(condition(pods.get(n), "Ready").get("status") == "True" for n in nodes)

        eventually(lambda: placement() == {w: w for w in workers[:2]}, 60, "a pod on each labelled node")
        eventually(lambda: ready(workers[:2]) and all_idle(slurm, workers[:2]), 60, "Ready, Slurm nodes IDLE")
        assert sorted(pod_names(kube, ns)) == sorted(f"{name}-{w}" for w in workers[:2])

        set_label(workers[2], "yes")
        eventually(lambda: placement() == {w: w for w in workers[:3]}, 60, "a node that starts to match gets a pod")
        eventually(lambda: ready(workers[:3]), 60, "its pod Ready")
        set_label(workers[0], None)
        eventually(lambda: set(placement()) == set(workers[1:3]), 60, "a node that stops matching loses its pod")
        eventually(lambda: slurm_node(slurm, workers[0]) is None, 60, "its Slurm node gone")
        counts = ("replicas", "readyReplicas", "slurmIdle")
        eventually(lambda: [nodeset(kube, ns, name).get("status", {}).get(c) for c in counts] == [2, 2, 2], 20)
    finally:
        for node in workers:
            set_label(node, None)


def test_scale_out_from_zero_to_four_then_a_failed_pod_is_made_again(
    kube: Kube, slurm: Slurm, cluster: str, dev_env: dict[str, str]
) -> None:
    """0 -> 4 with real slurmd registering (one pod on each real node); then one slurmd is killed under
    `restartPolicy: Never`: the pod is Failed, the operator deletes it and makes it again under the same name (a
    new pod, the same Slurm node name)."""
    ns, name = cluster, fresh_name()
    apply_nodeset(kube, ns, name, replicas=0, template={"spec": {"restartPolicy": "Never"}})
    eventually(lambda: nodeset(kube, ns, name).get("status", {}).get("nodeSetHash"), 20, "reconciled at 0")
    scale(kube, ns, name, 4)
    names = [f"{name}-{i}" for i in range(4)]
    eventually(lambda: all_idle(slurm, names), 60, "four Slurm nodes registered and IDLE")
    eventually(lambda: nodeset(kube, ns, name).get("status", {}).get("readyReplicas") == 4, 20, "4 Ready")

    victim = kube.pod(ns, names[1]) or {}
    kill = "kill -9 $(cat /run/slurmd-$(hostname).pid)"  # SlurmdPidFile of the stack's slurm.conf
    kubectl(dev_env, "exec", "-n", ns, names[1], "--", "sh", "-c", kill, check=False)
    eventually(
        lambda: (
            (p := kube.pod(ns, names[1])) is not None
            and p["metadata"]["uid"] != victim["metadata"]["uid"]
            and condition(p, "Ready").get("status") == "True"
        ),
        60,
        "the failed pod made again and Ready",
    )
    eventually(lambda: all_idle(slurm, names), 30, "its Slurm node back")


def test_pin_to_node_makes_a_deleted_pod_again_on_its_node(kube: Kube, slurm: Slurm, cluster: str) -> None:
    """With `pinToNode` the status remembers each ordinal's Kubernetes node, and a pod made again goes there
    (three deletions in a row: by chance alone, one node of four would keep it 1 time in 64)."""
    ns, name = cluster, fresh_name()
    (pod_name,) = nodeset_up(kube, slurm, ns, name, 1, pinToNode=True)
    node = (kube.pod(ns, pod_name) or {})["spec"]["nodeName"]
    eventually(lambda: nodeset(kube, ns, name).get("status", {}).get("ordinalToNode") == {"0": node}, 20, "pin")
    for _ in range(3):
        uid = (kube.pod(ns, pod_name) or {})["metadata"]["uid"]
        kube.core.delete_namespaced_pod(pod_name, ns)
        again = eventually(
            lambda uid=uid: (
                (p := kube.pod(ns, pod_name)) and p["metadata"]["uid"] != uid and p["spec"].get("nodeName") and p
            ),
            90,  # the kubelet confirms a deletion at its next status sync (up to 10 s); then the new pod starts
            "made again and bound",
        )
        assert again["spec"]["nodeName"] == node


def test_volume_claim_templates_bind_and_follow_the_retention_policy(
    kube: Kube, slurm: Slurm, cluster: str, dev_env: dict[str, str]
) -> None:
    """Each pod mounts its own claim (bound on the stack's local-path class), the data outlives a pod's
    replacement, `whenScaled: Delete` deletes a scaled-in ordinal's claim, `whenDeleted: Retain` keeps the rest."""
    ns, name = cluster, fresh_name()
    template = {
        "metadata": {"name": "scratch"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}},
    }
    names = nodeset_up(
        kube,
        slurm,
        ns,
        name,
        2,
        volumeClaimTemplates=[template],
        persistentVolumeClaimRetentionPolicy={"whenScaled": "Delete", "whenDeleted": "Retain"},
        slurmd={"image": SLURMD_IMAGE, "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
    )

    def claims() -> dict[str, dict[str, Any]]:
        items = kube.core.list_namespaced_persistent_volume_claim(ns).to_dict()["items"]
        return {c["metadata"]["name"]: c for c in items if not c["metadata"].get("deletion_timestamp")}

    found = eventually(lambda: (c := claims()) and all(x["status"]["phase"] == "Bound" for x in c.values()) and c, 30)
    assert sorted(found) == [f"scratch-{n}" for n in names]
    for n in names:
        (claim,) = [v for v in (kube.pod(ns, n) or {})["spec"]["volumes"] if v["name"] == "scratch"]
        assert claim["persistentVolumeClaim"]["claimName"] == f"scratch-{n}"
    kubectl(dev_env, "exec", "-n", ns, names[0], "-c", "slurmd", "--", "sh", "-c", "echo kept > /scratch/data")

    # The pod is made again (same ordinal): it mounts the same claim, with the data.
    kube.core.delete_namespaced_pod(names[0], ns)
    eventually(
        lambda: (
            (p := kube.pod(ns, names[0]))
            and not p["metadata"].get("deletionTimestamp")
            and condition(p, "Ready").get("status") == "True"
        ),
        90,
        "the pod made again",
    )
    out = kubectl(dev_env, "exec", "-n", ns, names[0], "-c", "slurmd", "--", "cat", "/scratch/data")
    assert out.strip() == "kept"

    # whenScaled: Delete: the claim of the scaled-in ordinal goes once its pod is gone; ordinal 0's stays.
    scale(kube, ns, name, 1)
    eventually(lambda: sorted(claims()) == [f"scratch-{names[0]}"], 60, "the scaled-in ordinal's claim deleted")

    # whenDeleted: Retain: the NodeSet goes, its claim stays (the test deletes it).
    objects(kube).delete_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name)
    eventually(lambda: kube.pod(ns, names[0]) is None, 60, "the pod gone")
    assert sorted(claims()) == [f"scratch-{names[0]}"], "whenDeleted: Retain keeps the claim"
    kube.core.delete_namespaced_persistent_volume_claim(f"scratch-{names[0]}", ns)


@pytest.mark.parametrize("policy", ["NodeNotFound", "Never"])
def test_prune_slurm_node_records_node_not_found_deletes_a_defunct_record(
    kube: Kube, slurm: Slurm, cluster: str, policy: str
) -> None:
    """A DaemonSet-mode NodeSet's Slurm node whose Kubernetes node is gone (deleted while no operator watched its
    pod go, so no preStop ran): `NodeNotFound` deletes the record, `Never` (the default) keeps it."""
    ns, name = cluster, fresh_name()
    ghost = f"{name}-ghost"
    answer = slurm.http.post(
        f"{REST}/new/node",
        headers=slurm._headers(),
        json={"node_conf": f"NodeName={ghost} CPUs=1 RealMemory=100 Feature={name} State=CLOUD"},
    )
    assert answer.status_code == 200, answer.text
    try:
        apply_nodeset(
            kube, ns, name, scalingMode="DaemonSet", pruneSlurmNodeRecords=policy,
            template={"spec": {"nodeSelector": {"example.com/none": "true"}}},
        )  # fmt: skip
        if policy == "NodeNotFound":
            eventually(lambda: slurm_node(slurm, ghost) is None, 30, "the defunct record pruned")
        else:
            eventually(lambda: condition(nodeset(kube, ns, name), "ControllerReady").get("status") == "True", 30)
            time.sleep(3)
            assert slurm_node(slurm, ghost) is not None, "Never: the record stays"
    finally:
        slurm.http.delete(f"{REST}/node/{ghost}", headers=slurm._headers())
