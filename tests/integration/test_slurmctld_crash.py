"""``kill -9`` of slurmctld under load (issue 9's scenario): Slurm loses its last seconds of jobs and reuses their
ids; the bridge must lose no pod and cancel no job that is not its workload's own.

30 single pods are created at 3 per second, each running 6 s; slurmctld is killed after the 15th and started
again a second later (as a supervisor would; its saved state is kept). Every pod must run to completion, no pod
may get a SlurmJobEnded or SlurmAllocationLost Warning (the symptoms of a lost or foreign-cancelled job), and at
the end no job, finalizer or lifecycle of the namespace may be left. The lifecycles that Slurm lost a job of
say so with a SlurmJobLost Warning (resubmitted, or re-adopted on the same nodes).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from slinky import wellknown
from slinky.bridge.models.workload import job_owner_from_comment
from slinky.dev import stack
from tests.integration.cluster import Kube, Slurm, Temporal, is_live, phase, pods_of, wid
from tests.integration.test_bridge import wait_completed
from tests.integration.waiting import eventually

pytestmark = pytest.mark.integration

PODS, RATE, RUN_SECONDS, KILL_AFTER = 30, 3.0, 6, 15
SYMPTOMS = {"SlurmJobEnded", "SlurmAllocationLost", "SlurmBridgeFailed"}


def _reasons(kube: Kube, namespace: str) -> Counter[str]:
    events = kube._json(kube.core.list_namespaced_event(namespace, _preload_content=False))["items"]
    return Counter(e["reason"] for e in events if e.get("type") == "Warning")


@pytest.mark.timeout(240)
def test_kill_9_of_slurmctld_under_load_loses_no_pod_and_cancels_no_foreign_job(
    kube: Kube, slurm: Slurm, temporal: Temporal, ns: str
) -> None:
    names = [f"crash-{i:02d}" for i in range(PODS)]
    uids: dict[str, str] = {}
    started = time.monotonic()
    for i, name in enumerate(names):
        time.sleep(max(0.0, started + i / RATE - time.monotonic()))
        pod = kube.create_pod(ns, name, annotations={wellknown.ANNOTATION_SIM_RUN_SECONDS: str(RUN_SECONDS)})
        uids[name] = pod["metadata"]["uid"]
        if i + 1 == KILL_AFTER:
            stack.restart_slurmctld(kill=True, down_seconds=1.0)

    def all_succeeded() -> bool:
        phases = {n: phase(kube.pod(ns, n)) for n in names}
        assert all(phases.values()), f"pods deleted: {[n for n, p in phases.items() if not p]}"
        return all(p == "Succeeded" for p in phases.values())

    try:
        eventually(all_succeeded, timeout=150, what="every pod Succeeded", interval=1.0)
    except pytest.fail.Exception:
        # Say where each pod stands, and its lifecycle and jobs, for the next reader of a CI log.
        stuck = {n: phase(kube.pod(ns, n)) for n in names if phase(kube.pod(ns, n)) != "Succeeded"}

        def lifecycle(name: str) -> object:
            try:
                return temporal.why_pending(wid(kube.pod(ns, name) or {})).model_dump(mode="json")
            except Exception as err:  # closed, or no pod any more: say so instead
                return repr(err)

        why = {n: lifecycle(n) for n in stuck}
        jobs = {n: [(j["job_id"], j["job_state"]) for j in slurm.jobs_of_pod(ns, n)] for n in stuck}
        pytest.fail(f"not every pod Succeeded within 150 s: phases {stuck}; lifecycles {why}; jobs {jobs}")
    warnings = _reasons(kube, ns)
    assert not (SYMPTOMS & set(warnings)), f"pods told their job ended or was taken: {warnings}"
    assert warnings["SlurmJobLost"] >= 1, (
        f"slurmctld kept every job (it saves state every few seconds): the crash tested nothing; Warnings: {warnings}"
    )

    # Each job of the namespace is its workload's own (its comment names the pod's lifecycle), and none is left.
    eventually(lambda: not [j for j in slurm.jobs_of(ns) if is_live(j)], timeout=30, what="no live job left")
    for job in slurm.jobs_of(ns):
        owner = job_owner_from_comment(job.get("comment"))
        assert owner is not None
        assert {owner.workflow_id} == {f"workload/{ns}/{uids[key.split('/', 1)[1]]}" for key in pods_of(job)}
    for name in names:
        wait_completed(temporal, wid(kube.pod(ns, name) or {}), timeout=60)

    def finalizers_left() -> list[str]:
        return [n for n in names if (kube.pod(ns, n) or {}).get("metadata", {}).get("finalizers")]

    eventually(lambda: not finalizers_left(), timeout=20, what="every finalizer removed")
