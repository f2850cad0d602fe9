"""Real Slurm batch jobs on NodeSet pods, for the operator's integration tests: a job held until the test
releases it (SIGUSR1 to its batch script through slurmrestd: the job runs in the slurmd container, whose files
the test does not share), and readers of Slurm nodes."""

from __future__ import annotations

import uuid
from typing import Any

from slinky.dev import stack
from tests.integration.cluster import REST, Kube, Slurm
from tests.integration.operator_fixtures import apply_nodeset, nodeset
from tests.integration.waiting import eventually

TIME_LIMIT_MINUTES = 10


class HeldJob:
    """A batch job on one node that runs until `release()`, then exits 0."""

    def __init__(self, slurm: Slurm, node: str) -> None:
        self.slurm = slurm
        self.tag = uuid.uuid4().hex[:10]
        desc = {
            "name": f"held-{self.tag}",
            "partition": stack.NODESET_PARTITION,
            "required_nodes": [node],
            "time_limit": {"set": True, "number": TIME_LIMIT_MINUTES},
            "current_working_directory": "/tmp",
            "environment": ["PATH=/usr/bin:/bin"],
            "standard_output": "/dev/null",
        }
        script = "#!/bin/sh\nreleased=\ntrap 'released=1' USR1\nwhile [ -z \"$released\" ]; do sleep 0.2; done\n"
        answer = slurm.http.post(f"{REST}/job/submit", headers=slurm._headers(), json={"job": desc, "script": script})
        self.job_id = int(answer.raise_for_status().json()["job_id"])

    def info(self) -> dict[str, Any]:
        return self.slurm.job(self.job_id) or {}

    def state(self) -> str:
        states = self.info().get("job_state") or [""]
        return str(states[0])

    def running(self, timeout: float = 30) -> dict[str, Any]:
        return eventually(lambda: self.state() == "RUNNING" and self.info(), timeout=timeout, what=f"job {self.job_id}")

    def release(self) -> None:
        """SIGUSR1 to the batch script (`scancel --signal=USR1 --batch`): it exits 0, the job ends COMPLETED."""
        resp = self.slurm.http.delete(
            f"{REST}/job/{self.job_id}",
            params={"signal": "SIGUSR1", "flags": "BATCH_JOB"},
            headers=self.slurm._headers(),
        )
        assert resp.status_code == 200, resp.text

    def finished(self, timeout: float = 30) -> dict[str, Any]:
        """The job at its end: a final state, and no COMPLETING flag left (26.05 shows `COMPLETED, COMPLETING`
        for a moment while the epilog runs)."""
        return eventually(
            lambda: (j := self.info()) and not {"RUNNING", "PENDING", "COMPLETING"} & set(j["job_state"]) and j,
            timeout=timeout,
            what=f"job {self.job_id} done",
        )

    def cleanup(self) -> None:
        if self.state() in ("RUNNING", "PENDING"):
            self.slurm.cancel(self.job_id)


def slurm_node(slurm: Slurm, name: str) -> dict[str, Any] | None:
    resp = slurm.http.get(f"{REST}/node/{name}", headers=slurm._headers())
    if resp.status_code != 200:
        return None
    nodes = resp.json().get("nodes") or []
    return dict(nodes[0]) if nodes else None


def all_idle(slurm: Slurm, names: list[str]) -> bool:
    return all("IDLE" in ((slurm_node(slurm, n) or {}).get("state") or []) for n in names)


def live_pods(kube: Kube, ns: str) -> list[dict[str, Any]]:
    return [p for p in kube.pods(ns) if not p["metadata"].get("deletionTimestamp")]


def pod_names(kube: Kube, ns: str, *, terminating: bool = False) -> list[str]:
    pods = kube.pods(ns) if terminating else live_pods(kube, ns)
    return sorted(p["metadata"]["name"] for p in pods)


def nodeset_up(kube: Kube, slurm: Slurm, ns: str, name: str, replicas: int, **spec: Any) -> list[str]:
    """A NodeSet of `replicas` real slurmd pods, all Ready and IDLE in Slurm; their names."""
    apply_nodeset(kube, ns, name, replicas=replicas, **spec)
    names = [f"{name}-{i}" for i in range(replicas)]
    eventually(lambda: nodeset(kube, ns, name).get("status", {}).get("readyReplicas") == replicas, 90, "Ready")
    eventually(lambda: all_idle(slurm, names), 30, "Slurm nodes IDLE")
    return names
