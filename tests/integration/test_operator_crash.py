"""`kill -9` of the operator during a scale-in and during a rolling update, with a real job on a real slurmd pod.

After a restart each finishes: no job is killed, each condemned pod has exactly one scale-in run, and no
Slurm node is left drained with the operator's reason and no workflow. The restarted operator finds the
running scale-ins on the pods themselves (the `scale-in-workflow` annotation) and signals them from its
new node poll.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus

from slinky import wellknown
from slinky.operator.models import ScaleInResult
from tests.integration.cluster import Kube, Slurm, Temporal, condition
from tests.integration.nodeset_jobs import HeldJob, all_idle, live_pods, nodeset_up, pod_names, slurm_node
from tests.integration.operator_fixtures import Operator, nodeset, patch_template, scale
from tests.integration.waiting import eventually
from workflows.nodeset import workflow_id

pytestmark = pytest.mark.integration


def runs(temporal: Temporal, wf: str) -> list[Any]:
    async def listed() -> list[Any]:
        return [w async for w in temporal.client.list_workflows(f"WorkflowId = '{wf}'")]

    return temporal.loop.run_until_complete(listed())


def outcomes_of(temporal: Temporal, wf: str) -> list[str]:
    """The outcome of every run of `wf`."""
    out = []
    for run in runs(temporal, wf):
        handle = temporal.client.get_workflow_handle(wf, run_id=run.run_id, result_type=ScaleInResult)
        out.append(temporal.loop.run_until_complete(handle.result()).outcome)
    return out


def result(temporal: Temporal, wf: str) -> ScaleInResult:
    handle = temporal.client.get_workflow_handle(wf, result_type=ScaleInResult)
    out: ScaleInResult = temporal.loop.run_until_complete(handle.result())
    return out


def no_owned_drain(slurm: Slurm, names: list[str]) -> bool:
    for name in names:
        node = slurm_node(slurm, name)
        if node and "DRAIN" in node["state"] and node.get("reason", "").startswith("slurm-operator: "):
            return False
    return True


def test_kill_9_during_a_scale_in_then_restart_finishes_it_without_killing_the_job(
    kube: Kube,
    slurm: Slurm,
    temporal: Temporal,
    controller_ns: str,
    operator_process: Operator,
    held_jobs: list[HeldJob],
) -> None:
    ns, name = controller_ns, f"k{uuid.uuid4().hex[:5]}"
    names = nodeset_up(kube, slurm, ns, name, 2)
    busy = kube.pod(ns, names[0]) or {}
    job = HeldJob(slurm, names[0])
    held_jobs.append(job)
    job.running()
    eventually(lambda: (kube.pod(ns, names[0]) or {})["metadata"]["annotations"].get(wellknown.ANNOTATION_POD_DEADLINE))

    scale(kube, ns, name, 0)
    wf = workflow_id(ns, names[0], busy["metadata"]["uid"])
    eventually(lambda: kube.pod(ns, names[1]) is None, 30, "the idle pod gone")
    eventually(
        lambda: (
            (kube.pod(ns, names[0]) or {})["metadata"]["annotations"].get(wellknown.ANNOTATION_SCALE_IN_WORKFLOW) == wf
        ),
        10,
        "the pod names its scale-in",
    )
    eventually(lambda: "DRAIN" in (slurm_node(slurm, names[0]) or {}).get("state", []), 10, "draining")

    operator_process.kill9()
    job.release()  # the job ends while no operator runs
    job.finished()
    time.sleep(2)
    assert kube.pod(ns, names[0]) is not None, "nothing deletes the pod while the operator is down"
    operator_process.restart()

    eventually(lambda: kube.pod(ns, names[0]) is None, 60, "the scale-in finishes after the restart")
    assert job.info()["job_state"] == ["COMPLETED"], "the job was never killed"
    assert slurm_node(slurm, names[0]) is None
    assert result(temporal, wf).outcome == "deleted"
    assert len(runs(temporal, wf)) == 1, "one scale-in run for the pod, joined after the restart"
    assert no_owned_drain(slurm, names)


def test_kill_9_during_a_rolling_update_then_restart_finishes_it(
    kube: Kube,
    slurm: Slurm,
    temporal: Temporal,
    controller_ns: str,
    operator_process: Operator,
    held_jobs: list[HeldJob],
) -> None:
    ns, name = controller_ns, f"k{uuid.uuid4().hex[:5]}"
    names = nodeset_up(kube, slurm, ns, name, 3, updateStrategy={"rollingUpdate": {"maxUnavailable": 1}})
    old_uids = {n: (kube.pod(ns, n) or {})["metadata"]["uid"] for n in names}
    job = HeldJob(slurm, names[2])  # the highest ordinal: only its job keeps it from going first
    held_jobs.append(job)
    job.running()
    eventually(lambda: (kube.pod(ns, names[2]) or {})["metadata"]["annotations"].get(wellknown.ANNOTATION_POD_DEADLINE))
    old = nodeset(kube, ns, name)["status"]["nodeSetHash"]
    patch_template(kube, ns, name, {"metadata": {"labels": {"r": "2"}}})

    def revision(n: str) -> str:
        pod = kube.pod(ns, n) or {}
        return str(pod.get("metadata", {}).get("labels", {}).get(wellknown.LABEL_CONTROLLER_REVISION_HASH, ""))

    # Kill it as soon as the first old pod is held by its scale-in.
    eventually(
        lambda: any(
            p["metadata"].get("annotations", {}).get(wellknown.ANNOTATION_SCALE_IN_WORKFLOW)
            for p in live_pods(kube, ns)
        ),
        20,
        "the update under way",
        interval=0.05,
    )
    operator_process.kill9()
    time.sleep(3)
    operator_process.restart()

    eventually(lambda: sum(revision(n) not in ("", old) for n in names[:2]) == 2, 90, "the idle pods updated")
    assert revision(names[2]) == old and job.state() == "RUNNING", "the busy node waits for its job"
    job.release()
    eventually(
        lambda: all(
            revision(n) not in ("", old) and condition(kube.pod(ns, n), "Ready").get("status") == "True" for n in names
        ),
        90,
        "every pod updated and Ready",
    )
    assert job.finished()["job_state"] == ["COMPLETED"], "an update never kills a job"
    for n, uid in old_uids.items():
        wf = workflow_id(ns, n, uid)
        assert len(runs(temporal, wf)) == 1 and result(temporal, wf).outcome == "deleted", n
        assert temporal.status(wf) == WorkflowExecutionStatus.COMPLETED
    assert pod_names(kube, ns) == names
    eventually(lambda: all_idle(slurm, names), 30, "the new pods IDLE, none left drained")
    assert no_owned_drain(slurm, names)


def test_slurmctld_down_and_temporal_killed_during_a_scale_in_then_it_finishes(
    kube: Kube,
    slurm: Slurm,
    temporal: Temporal,
    controller_ns: str,
    operator_process: Operator,
    held_jobs: list[HeldJob],
) -> None:
    """slurmctld stopped for 3 s, then the Temporal server killed -9 (down 2 s), while a busy node drains: the
    job survives both, the scale-in never fails on a Slurm that does not answer, and it finishes once the job
    does. (slurmctld is stopped, not killed: killed -9, Slurm 26.05 can come back from state saved before the
    job started and requeue it, whatever the operator does; docs/operator.md, "Crash safety".)"""
    from slinky.dev import stack

    ns, name = controller_ns, f"k{uuid.uuid4().hex[:5]}"
    (node,) = nodeset_up(kube, slurm, ns, name, 1)
    uid = (kube.pod(ns, node) or {})["metadata"]["uid"]
    job = HeldJob(slurm, node)
    held_jobs.append(job)
    job.running()
    scale(kube, ns, name, 0)
    wf = workflow_id(ns, node, uid)
    eventually(lambda: "DRAIN" in (slurm_node(slurm, node) or {}).get("state", []), 20, "draining")

    stack.restart_slurmctld(down_seconds=3)
    eventually(lambda: slurm_node(slurm, node) is not None, 60, "slurmctld back with the node")
    stack.restart_temporal(kill=True, down_seconds=2)
    assert job.state() == "RUNNING" and kube.pod(ns, node) is not None, "the busy pod waits for its job"

    job.release()
    assert job.finished(60)["job_state"] == ["COMPLETED"], "the job was never killed"
    eventually(lambda: kube.pod(ns, node) is None, 90, "the scale-in finishes after both restarts")
    eventually(lambda: slurm_node(slurm, node) is None, 30, "its Slurm node gone")
    # A reconcile's start (a join) sent while Temporal was down is retried by the client and can land after
    # the scale-in ended: it makes a second run that finds the pod gone at its first step and ends "gone",
    # touching nothing. Exactly one run did the work.
    outcomes = sorted(outcomes_of(temporal, wf))
    assert outcomes.count("deleted") == 1 and set(outcomes) <= {"deleted", "gone"}, outcomes
