"""ScheduledUpdate on real slurmd pods: a Slurm MAINT reservation from `startTime` for `duration`, the old pods
replaced under it through the drain (a job on a reserved node runs to its end), `ReservationCreated`, an operator
`kill -9` inside the window, and the reservation gone with the NodeSet (finalizer
`nodeset.slinky.slurm.net/reservation`).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from temporalio.client import WorkflowExecutionStatus

from slinky import wellknown
from slinky.hostlist import expand
from slinky.operator import scheduled_update as su
from slinky.operator.models import ScheduledUpdateStatus
from tests.integration.cluster import REST, Kube, Slurm, Temporal, condition
from tests.integration.nodeset_jobs import HeldJob, nodeset_up
from tests.integration.operator_fixtures import (
    GROUP,
    VERSION,
    Operator,
    nodeset,
    objects,
)
from tests.integration.waiting import eventually

pytestmark = pytest.mark.integration


@pytest.fixture
def scheduled_ns(kube: Kube, controller_ns: str, operator_process: Operator) -> Iterator[str]:
    """`controller_ns`; afterwards its NodeSets are deleted while the test's operator still runs (it takes the
    reservation finalizer off), and the test waits until they are gone."""
    yield controller_ns
    for item in _nodesets(kube, controller_ns):
        objects(kube).delete_namespaced_custom_object(
            GROUP, VERSION, controller_ns, "nodesets", item["metadata"]["name"]
        )
    eventually(lambda: not _nodesets(kube, controller_ns), 60, "the NodeSets gone (finalizer taken off)")


def reservation(slurm: Slurm, name: str) -> dict[str, Any] | None:
    resp = slurm.http.get(f"{REST}/reservation/{name}", headers=slurm._headers())
    found = [r for r in (resp.json().get("reservations") or []) if r.get("name") == name]
    return found[0] if found else None


def rfc3339(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_scheduled_update_replaces_pods_in_its_window_across_an_operator_kill_and_cleans_up(
    kube: Kube,
    slurm: Slurm,
    temporal: Temporal,
    scheduled_ns: str,
    operator_process: Operator,
    held_jobs: list[HeldJob],
) -> None:
    ns, name = scheduled_ns, f"s{uuid.uuid4().hex[:5]}"

    def revision(n: str) -> str:
        pod = kube.pod(ns, n) or {}
        return str(pod.get("metadata", {}).get("labels", {}).get(wellknown.LABEL_CONTROLLER_REVISION_HASH, ""))

    names = nodeset_up(kube, slurm, ns, name, 2)
    old_rev = nodeset(kube, ns, name)["status"]["nodeSetHash"]
    job = HeldJob(slurm, names[0])
    held_jobs.append(job)
    job.running()
    start = int(time.time()) + 30
    strategy = {"type": "ScheduledUpdate", "scheduledUpdate": {"startTime": rfc3339(start), "duration": "3m"}}
    body = {"spec": {"updateStrategy": strategy, "template": {"metadata": {"labels": {"r": "2"}}}}}
    objects(kube).patch_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name, body)
    res_name = su.reservation_name(name)

    # Before the window: the reservation exists over both nodes, the condition says so, no pod is replaced.
    res = eventually(lambda: reservation(slurm, res_name), 20, "the MAINT reservation in Slurm")
    assert {"MAINT", "IGNORE_JOBS"} <= set(res["flags"]) and res["users"] == "slurm"
    assert res["start_time"]["number"] == start and res["end_time"]["number"] == start + 180
    assert expand(res["node_list"]) == names
    ready = eventually(
        lambda: condition(nodeset(kube, ns, name), su.CONDITION).get("status") == "True" and nodeset(kube, ns, name),
        15,
        "ReservationCreated True",
    )
    assert condition(ready, su.CONDITION)["reason"] == "Created"
    assert wellknown.FINALIZER_NODESET_RESERVATION in ready["metadata"]["finalizers"]
    wf = ready["metadata"]["annotations"][wellknown.ANNOTATION_SCHEDULED_UPDATE_WORKFLOW]
    status = temporal.loop.run_until_complete(
        temporal.client.get_workflow_handle(wf).query("status", result_type=ScheduledUpdateStatus)
    )
    assert status.phase == "waiting" and status.reservation == res_name and status.start == start
    patched_at = time.time()
    assert {revision(n) for n in names} == {old_rev}, "nothing is replaced before the window"

    # The window opens: the idle node's pod is replaced; the busy one drains and waits for its job.
    eventually(lambda: revision(names[1]) not in ("", old_rev), start - time.time() + 60, "the idle pod replaced")
    assert time.time() >= start - 1, f"replaced before the window opened ({start - time.time():.1f} s early)"
    assert patched_at < start
    assert revision(names[0]) == old_rev and job.state() == "RUNNING", "the busy node waits for its job"

    # kill -9 inside the window: the window's timers and the drain are in Temporal, a new operator goes on.
    operator_process.kill9()
    time.sleep(2)
    operator_process.restart()
    job.release()
    eventually(
        lambda: all(
            revision(n) not in ("", old_rev) and condition(kube.pod(ns, n), "Ready").get("status") == "True"
            for n in names
        ),
        90,
        "both pods replaced and Ready",
    )
    assert job.finished()["job_state"] == ["COMPLETED"], "a scheduled update never kills a job"
    described = temporal.loop.run_until_complete(temporal.client.get_workflow_handle(wf).describe())
    assert described.status == WorkflowExecutionStatus.RUNNING, "the window workflow survived the kill"
    eventually(lambda: all("IDLE" in (slurm_state(slurm, n)) for n in names), 30, "the new slurmds IDLE in Slurm")

    # Deleting the NodeSet deletes the reservation, then the finalizer comes off.
    objects(kube).delete_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name)
    eventually(lambda: reservation(slurm, res_name) is None, 30, "the reservation deleted")
    eventually(lambda: not any(i["metadata"]["name"] == name for i in _nodesets(kube, ns)), 30, "the NodeSet gone")
    closed = temporal.loop.run_until_complete(temporal.client.get_workflow_handle(wf).describe())
    assert closed.status == WorkflowExecutionStatus.CANCELED


def slurm_state(slurm: Slurm, node: str) -> list[str]:
    resp = slurm.http.get(f"{REST}/node/{node}", headers=slurm._headers())
    nodes = resp.json().get("nodes") or []
    return list(nodes[0]["state"]) if nodes else []


def _nodesets(kube: Kube, ns: str) -> list[dict[str, Any]]:
    listed = objects(kube).list_namespaced_custom_object(GROUP, VERSION, ns, "nodesets")
    return list(cast(dict[str, Any], listed)["items"])


def test_a_new_schedule_replaces_the_window_and_leaving_the_strategy_removes_it(
    kube: Kube, slurm: Slurm, temporal: Temporal, scheduled_ns: str, operator_process: Operator
) -> None:
    ns, name = scheduled_ns, f"s{uuid.uuid4().hex[:5]}"
    nodeset_up(kube, slurm, ns, name, 1)
    res_name = su.reservation_name(name)

    def window(start: int, duration: str = "10m") -> None:
        strategy = {"type": "ScheduledUpdate", "scheduledUpdate": {"startTime": rfc3339(start), "duration": duration}}
        objects(kube).patch_namespaced_custom_object(
            GROUP, VERSION, ns, "nodesets", name, {"spec": {"updateStrategy": strategy}}
        )

    first = int(time.time()) + 3600
    window(first)
    eventually(lambda: (r := reservation(slurm, res_name)) and r["start_time"]["number"] == first, 20, "first window")
    old_wf = nodeset(kube, ns, name)["metadata"]["annotations"][wellknown.ANNOTATION_SCHEDULED_UPDATE_WORKFLOW]

    # Another start time: the old window's workflow is cancelled (its reservation deleted) and a new one made.
    second = first + 7200
    window(second, "1h")
    res = eventually(
        lambda: (r := reservation(slurm, res_name)) and r["start_time"]["number"] == second and r, 30, "second window"
    )
    assert res["end_time"]["number"] == second + 3600
    new_wf = eventually(
        lambda: (
            (
                w := nodeset(kube, ns, name)["metadata"]["annotations"].get(
                    wellknown.ANNOTATION_SCHEDULED_UPDATE_WORKFLOW
                )
            )
            != old_wf
            and w
        ),
        10,
    )
    described = temporal.loop.run_until_complete(temporal.client.get_workflow_handle(old_wf).describe())
    assert described.status == WorkflowExecutionStatus.CANCELED
    eventually(lambda: condition(nodeset(kube, ns, name), su.CONDITION).get("status") == "True", 15, "Created again")
    assert rfc3339(second) in condition(nodeset(kube, ns, name), su.CONDITION)["message"]

    # Back to RollingUpdate: the window goes, with its reservation, finalizer, annotation and condition.
    body = {"spec": {"updateStrategy": {"type": "RollingUpdate"}}}
    objects(kube).patch_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name, body)
    eventually(lambda: reservation(slurm, res_name) is None, 30, "the reservation deleted")

    def clean() -> bool:
        obj = nodeset(kube, ns, name)
        return (
            wellknown.FINALIZER_NODESET_RESERVATION not in (obj["metadata"].get("finalizers") or [])
            and wellknown.ANNOTATION_SCHEDULED_UPDATE_WORKFLOW not in (obj["metadata"].get("annotations") or {})
            and not condition(obj, su.CONDITION)
        )

    eventually(clean, 20, "finalizer, annotation and ReservationCreated gone")
    done = temporal.loop.run_until_complete(temporal.client.get_workflow_handle(new_wf).describe())
    assert done.status == WorkflowExecutionStatus.CANCELED
