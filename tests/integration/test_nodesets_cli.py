"""`slinky nodesets list|show|scale-ins` on the real stack, run as a user runs it: a subprocess with the env file.

The scale-in it shows is a real `NodeSetScaleIn` workflow of the operator, and the workflow ID it prints works
with the `temporal` CLI.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from slinky.dev import stack
from tests.integration.cluster import REST, Kube, Slurm, number, state
from tests.integration.operator_fixtures import (
    GROUP,
    SLURMD_IMAGE,
    VERSION,
    apply_nodeset,
    nodeset,
    objects,
    scale,
    wait_for,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TEMPORAL = Path(sys.executable).parent / "temporal"


def slinky(dev_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **dev_env, "PATH": os.environ["PATH"]}
    return subprocess.run(
        [sys.executable, "-m", "slinky.cli", "nodesets", *args],
        cwd=REPO,
        env=env,
        text=True,
        capture_output=True,
        timeout=30,
    )


def slinky_json(dev_env: dict[str, str], *args: str) -> Any:
    proc = slinky(dev_env, *args, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def temporal(dev_env: dict[str, str], command: str) -> subprocess.CompletedProcess[str]:
    """A `temporal ...` command line as the CLI prints it, run with the stack's env (TEMPORAL_ADDRESS)."""
    argv = shlex.split(command)
    assert argv[0] == "temporal", command
    env = {**os.environ, **dev_env, "PATH": os.environ["PATH"]}
    return subprocess.run([str(TEMPORAL), *argv[1:]], env=env, text=True, capture_output=True, timeout=20)


def pod_names(kube: Kube, ns: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in kube.pods(ns))


def delete_nodeset(kube: Kube, ns: str, name: str) -> None:
    """So the operator stops recreating its pods and the namespace fixture can delete them."""
    objects(kube).delete_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name)


def slurm_states(slurm: Slurm, node: str) -> list[str]:
    resp = slurm.http.get(f"{REST}/node/{node}", headers=slurm._headers())
    nodes = resp.json().get("nodes") or [] if resp.status_code == 200 else []
    return list(nodes[0]["state"]) if nodes else []


def submit_sleeper(slurm: Slurm, node: str) -> int:
    desc = {
        "name": f"hold-{node}",
        "partition": stack.NODESET_PARTITION,
        "required_nodes": [node],
        "time_limit": {"set": True, "number": 10},
        "current_working_directory": "/tmp",
        "environment": ["PATH=/usr/bin:/bin"],
        "standard_output": "/dev/null",
    }
    script = "#!/bin/sh\nsleep 600\n"
    answer = slurm.http.post(f"{REST}/job/submit", headers=slurm._headers(), json={"job": desc, "script": script})
    return int(answer.raise_for_status().json()["job_id"])


def test_list_show_and_the_scale_in_of_a_nodeset(kube: Kube, cluster: str, dev_env: dict[str, str]) -> None:
    ns, name = cluster, f"cli{uuid.uuid4().hex[:5]}"  # Slurm node names are global: unique per run
    apply_nodeset(kube, ns, name, replicas=2)
    try:
        ready = wait_for(lambda: nodeset(kube, ns, name).get("status", {}).get("readyReplicas") == 2, timeout=30)
        assert ready, "two pods ready"

        (row,) = slinky_json(dev_env, "list", "-n", ns)
        assert (row["namespace"], row["name"], row["desired"], row["replicas"], row["readyReplicas"]) == (
            ns,
            name,
            2,
            2,
            2,
        )
        assert row["ready"] == "True" and row["problem"] is None, row
        table = slinky(dev_env, "list", "-A")
        assert table.returncode == 0, table.stderr
        line = next(t for t in table.stdout.splitlines() if t.split()[:2] == [ns, name])
        assert line.split()[2:4] == ["2/2", "2"], line  # REPLICAS ready/desired, UPDATED

        detail = slinky_json(dev_env, "show", name, "-n", ns)
        assert detail["controller"] == "slurm" and detail["image"] == SLURMD_IMAGE
        pods = [(p["name"], p["slurmNode"]) for p in detail["pods"]]
        assert pods == [(f"{name}-0", f"{name}-0"), (f"{name}-1", f"{name}-1")]
        conditions = {c["type"]: c["status"] for c in detail["conditions"]}
        assert conditions == {
            "ControllerReady": "True",
            "PodsHealthy": "True",
            "SpecValid": "True",
            "ScaleInProgress": "False",
            "FieldsSupported": "True",
            "SlurmdRegistered": "True",
        }
        assert detail["scaleIns"] == []
        text = slinky(dev_env, "show", name, "-n", ns)
        assert text.returncode == 0 and "Replicas:      2 desired, 2 current" in text.stdout, text

        scale(kube, ns, name, 1)
        wait_for(lambda: pod_names(kube, ns) == [f"{name}-0"], timeout=25, what="scale-in")
        rows = wait_for(
            lambda: [
                r for r in slinky_json(dev_env, "scale-ins", name, "-n", ns, "--all") if r["outcome"] == "deleted"
            ],
            timeout=10,
            what="the scale-in closed with outcome deleted",
        )
        (done,) = rows
        assert (done["namespace"], done["nodeset"], done["pod"]) == (ns, name, f"{name}-1")
        assert (done["slurmNode"], done["status"], done["phase"], done["outcome"]) == (
            f"{name}-1",
            "COMPLETED",
            "done",
            "deleted",
        )
        assert done["workflowId"].startswith(f"nodeset-scalein/{ns}/{name}-1/")
        assert slinky_json(dev_env, "scale-ins", "-n", ns) == [], "a closed scale-in is listed only with --all"
        table = slinky(dev_env, "scale-ins", "-n", ns, "--all")
        assert done["workflowId"] in table.stdout and " deleted " in table.stdout, table

        described = temporal(dev_env, f"temporal workflow describe -w {done['workflowId']} -o json")
        assert described.returncode == 0, described.stderr
        info = json.loads(described.stdout)
        assert info["workflowExecutionInfo"]["type"]["name"] == "NodeSetScaleIn"
        assert info["result"]["outcome"] == "deleted"
    finally:
        delete_nodeset(kube, ns, name)


def test_a_running_scale_in_shows_its_job_and_the_printed_force_works(
    kube: Kube, slurm: Slurm, cluster: str, dev_env: dict[str, str]
) -> None:
    # One pod scaled to zero: the only pod is the one condemned, so it is the one holding the job.
    ns, name = cluster, f"cli{uuid.uuid4().hex[:5]}"
    node = f"{name}-0"
    apply_nodeset(kube, ns, name, replicas=1)
    job_id = 0
    try:
        wait_for(lambda: "IDLE" in slurm_states(slurm, node), timeout=30, what=f"Slurm node {node} idle")
        job_id = submit_sleeper(slurm, node)
        wait_for(lambda: state(slurm.job(job_id)) == "RUNNING", timeout=15, what=f"job {job_id} running on {node}")
        start = int(number((slurm.job(job_id) or {})["start_time"]))
        deadline = datetime.fromtimestamp(start + 600, UTC).isoformat().replace("+00:00", "Z")  # + time limit
        scale(kube, ns, name, 0)
        (running,) = wait_for(
            lambda: [r for r in slinky_json(dev_env, "scale-ins", name, "-n", ns) if r["phase"] == "draining"],
            timeout=15,
            what="the scale-in draining the busy node",
        )
        assert (running["pod"], running["slurmNode"], running["status"]) == (node, node, "RUNNING")
        assert node in running["waitingFor"] and "DRAIN" in running["nodeStates"], running
        # The pod says until when its job holds it (from its own Controller's poll). The live `status` query's job
        # list is not asserted: while other namespaces' Controllers point at the same Slurm (tests running side by
        # side), their polls signal this scale-in, by node name, a view of the node without its jobs.
        detail = wait_for(
            lambda: (d := slinky_json(dev_env, "show", name, "-n", ns))["pods"][0]["deadline"] and d,
            timeout=10,
            what="the pod-deadline annotation",
        )
        (pod,) = detail["pods"]
        assert (pod["name"], pod["cordon"], pod["deadline"], pod["scaleInWorkflow"]) == (
            node,
            True,
            deadline,
            running["workflowId"],
        )
        assert [s["workflowId"] for s in detail["scaleIns"]] == [running["workflowId"]]
        table = slinky(dev_env, "scale-ins", name, "-n", ns)
        assert running["commands"]["force"] in table.stdout, table.stdout
        assert running["commands"]["abort"] in table.stdout

        forced = temporal(dev_env, running["commands"]["force"])
        assert forced.returncode == 0, forced.stderr
        (done,) = wait_for(
            lambda: [r for r in slinky_json(dev_env, "scale-ins", name, "-n", ns, "--all") if r["outcome"]],
            timeout=20,
            what="the forced scale-in closed",
        )
        assert (done["workflowId"], done["outcome"], done["cancelledJobs"]) == (
            running["workflowId"],
            "deleted",
            [job_id],
        )
        assert pod_names(kube, ns) == []
    finally:
        delete_nodeset(kube, ns, name)
        if job_id:
            slurm.cancel(job_id)


def test_a_missing_nodeset_is_one_line_and_exit_1(ns: str, dev_env: dict[str, str]) -> None:
    proc = slinky(dev_env, "show", "nosuch", "-n", ns)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == f"error: NodeSet 'nosuch' not found in namespace '{ns}'\n"
