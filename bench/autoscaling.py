"""Autoscaling benchmark (docs/benchmarks.md, "Autoscaling"): on the dev stack's managed cluster (namespace
``slinky``, deploy/examples/slurm-cluster.yaml),

1. **from zero**: a NodeSet at 0 with a stock HPA on ``slurm_partition_nodes_wanted``; one 1-node job is
   submitted, and the time to RUNNING is split where it goes: the metric showing it (the operator's metrics
   round), the HPA acting (its sync), the pod ready (scale-out), the Slurm node idle (slurmd registration),
   the job RUNNING (Slurm's scheduling). Baseline in the same run: the same job with the NodeSet scaled to 1
   by hand at submit time (what the HPA adds is the ratio);
2. **scrape cost**: the CPU of one metrics round (the families from nodes, jobs, partitions and diag) at 1,000
   jobs and 100 nodes, against the baseline the operator pays anyway: validating slurmrestd's answers into
   models; and of one scrape (the exposition of what the round kept).

``python -m bench.autoscaling [--runs 3]`` (a module: ``bench/operator.py`` would shadow the standard librarys
``operator`` as a script); needs ``slinky dev up``. Prints one line per run and a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry, generate_latest

from bench.common import run_cancellable
from slinky.clients.slurm.models import Diag, JobInfo, JobsResponse, Node, NodesResponse, Partition
from slinky.dev import stack
from slinky.dev.demo import NS, RELEASE, install_cluster
from slinky.operator import slurm_metrics
from slinky.operator.autoscaling import nodeset_hpa

GROUP = "slinky.slurm.net/v1beta1"


def kubectl(env: dict[str, str], *args: str, stdin: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(["kubectl", *args], input=stdin, env=env, capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def login(env: dict[str, str], *command: str) -> str:
    return kubectl(env, "exec", "-n", NS, f"deploy/{RELEASE}-login-login", "--", *command, check=False)


def wait(what: str, probe: Any, timeout: float = 120.0, every: float = 0.1) -> float:
    """Monotonic time at which ``probe()`` was first true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return time.monotonic()
        time.sleep(every)
    raise RuntimeError(f"timed out waiting for {what}")


def replicas(env: dict[str, str], name: str) -> int:
    out = kubectl(env, "get", "nodeset", "-n", NS, name, "-o", "jsonpath={.spec.replicas}", check=False)
    return int(out or 0)


def pod_ready(env: dict[str, str], name: str) -> bool:
    out = kubectl(env, "get", "pod", "-n", NS, f"{name}-0", "-o", "json", check=False)
    conditions = (json.loads(out).get("status") or {}).get("conditions") or [] if out else []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def wanted(env: dict[str, str], name: str) -> float:
    path = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/slurm_partition_nodes_wanted"
    out = kubectl(env, "get", "--raw", f"{path}?labelSelector=nodeset%3D{name}", check=False)
    items = json.loads(out)["items"] if out else []
    return sum(float(i["value"].rstrip("m")) / (1000 if i["value"].endswith("m") else 1) for i in items)


def job_state(env: dict[str, str], job: str) -> str:
    out = login(env, "scontrol", "show", "job", job)
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "")


def one_run(env: dict[str, str], name: str, *, by_hand: bool) -> dict[str, float]:
    """One job from a NodeSet at 0: the HPA's path, or (``by_hand``) `kubectl scale` at submit."""
    job = login(env, "sbatch", "--parsable", "-p", name, "-N1", "--wrap", "sleep 1").strip()
    t0 = time.monotonic()
    if by_hand:
        kubectl(env, "scale", "nodeset", "-n", NS, name, "--replicas=1")
        t_metric = t_hpa = t0
    else:
        t_metric = wait("the metric", lambda: wanted(env, name) >= 1)
        t_hpa = wait("the HPA", lambda: replicas(env, name) >= 1)
    t_pod = wait("the pod ready", lambda: pod_ready(env, name))
    t_node = wait("the node idle", lambda: "idle" in login(env, "sinfo", "-h", "-p", name, "-o", "%t")
                  or job_state(env, job) in ("RUNNING", "COMPLETED"))  # fmt: skip
    t_run = wait("the job RUNNING", lambda: job_state(env, job) in ("RUNNING", "COMPLETED"))
    wait("the job done", lambda: job_state(env, job) == "COMPLETED", 60)
    if by_hand:
        kubectl(env, "scale", "nodeset", "-n", NS, name, "--replicas=0")
    wait("back to 0", lambda: replicas(env, name) == 0 and not pod_ready(env, name), 120, 0.5)
    return {
        "total": t_run - t0,
        "metric": t_metric - t0,
        "hpa": t_hpa - t_metric,
        "scale_out": t_pod - t_hpa,
        "registration": t_node - t_pod,
        "scheduling": t_run - t_node,
    }


def from_zero(env: dict[str, str], runs: int) -> dict[str, Any]:
    name = f"bench{uuid.uuid4().hex[:4]}"
    nodeset = {"apiVersion": GROUP, "kind": "NodeSet", "metadata": {"name": name, "namespace": NS},
               "spec": {"controllerRef": {"name": "slurm"}, "replicas": 0, "partition": {"enabled": True},
                        "slurmd": {"image": "slurmd:26.05"}}}  # fmt: skip
    hpa = nodeset_hpa(NS, name, max_replicas=1, scale_down_seconds=5)
    install_cluster(env)  # the demo's cluster, the slurm chart's release
    wait("the managed cluster", lambda: bool(login(env, "sinfo", "-h")), 180, 1.0)
    kubectl(env, "apply", "-f", "-", stdin=json.dumps(nodeset))
    out: dict[str, Any] = {"hpa": [], "by_hand": []}
    try:
        wait(f"partition {name}", lambda: name in login(env, "sinfo", "-h", "-o", "%P"), 60, 0.5)
        for i in range(runs):
            out["by_hand"].append(one_run(env, name, by_hand=True))
            print(f"by hand {i + 1}: " + " ".join(f"{k}={v:.2f}s" for k, v in out["by_hand"][-1].items()), flush=True)
        kubectl(env, "apply", "-f", "-", stdin=json.dumps(hpa))
        for i in range(runs):
            out["hpa"].append(one_run(env, name, by_hand=False))
            print(f"HPA {i + 1}:     " + " ".join(f"{k}={v:.2f}s" for k, v in out["hpa"][-1].items()), flush=True)
    finally:
        kubectl(env, "delete", "hpa", "-n", NS, name, "--ignore-not-found", check=False)
        kubectl(env, "delete", "nodeset", "-n", NS, name, "--ignore-not-found", check=False)
    return out


def scrape_cost(jobs: int = 1000, nodes: int = 100, rounds: int = 20) -> dict[str, float]:
    """CPU ms of one metrics round and of one scrape at this size, and of validating the answers (baseline)."""
    node_json = [{"name": f"n{i}", "state": ["MIXED" if i % 3 else "IDLE"], "partitions": [f"p{i % 4}"],
                  "cpus": 64, "alloc_cpus": 32 if i % 3 else 0, "real_memory": 256000, "alloc_memory": 1000,
                  "gres": "gpu:a100:4(S:0)", "gres_used": "gpu:a100:2(IDX:0-1)"} for i in range(nodes)]  # fmt: skip
    job_json = [{"job_id": i, "job_state": ["PENDING" if i % 2 else "RUNNING"], "partition": f"p{i % 4}",
                 "state_reason": ["Resources", "Priority", "None"][i % 3], "node_count": {"set": True, "number": 2},
                 "cpus": {"set": True, "number": 8}} for i in range(jobs)]  # fmt: skip

    def cpu(fn: Any) -> float:
        started = time.process_time()
        for _ in range(rounds):
            fn()
        return (time.process_time() - started) * 1000 / rounds

    def parse() -> tuple[list[Node], list[JobInfo]]:
        return NodesResponse.model_validate({"nodes": node_json}).nodes, JobsResponse.model_validate(
            {"jobs": job_json}
        ).jobs

    parsed_nodes, parsed_jobs = parse()
    snapshot = slurm_metrics.Snapshot(parsed_nodes, parsed_jobs, [Partition(name=f"p{i}") for i in range(4)],
                                      Diag(jobs_submitted=jobs))  # fmt: skip
    kept = slurm_metrics.families(snapshot, {"namespace": "ns", "controller": "c"}, {"p0": "p0"})

    class Collector:
        def collect(self) -> Any:
            return slurm_metrics.to_prometheus(kept)

    registry = CollectorRegistry()
    registry.register(Collector())
    return {
        "parse_ms": cpu(parse),
        "round_ms": cpu(lambda: slurm_metrics.families(snapshot, {"namespace": "ns", "controller": "c"}, {})),
        "scrape_ms": cpu(lambda: generate_latest(registry)),
        "scrape_bytes": float(len(generate_latest(registry))),
    }


def summary(values: list[dict[str, float]], key: str) -> float:
    return statistics.median(v[key] for v in values)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    env = {**os.environ, **{k: v for k, v in stack.load_env_file().items() if k != "PATH"}}
    cost = scrape_cost()
    print(
        f"scrape cost at 1000 jobs, 100 nodes: metrics round {cost['round_ms']:.1f} ms CPU, scrape "
        f"{cost['scrape_ms']:.1f} ms CPU ({cost['scrape_bytes'] / 1024:.0f} KiB); baseline (validating the answers) "
        f"{cost['parse_ms']:.1f} ms: round/baseline {cost['round_ms'] / cost['parse_ms']:.2f}x",
        flush=True,
    )
    timings = await asyncio.to_thread(from_zero, env, args.runs)
    hpa, hand = timings["hpa"], timings["by_hand"]
    parts = " ".join(
        f"{k} {summary(hpa, k):.2f}s" for k in ("metric", "hpa", "scale_out", "registration", "scheduling")
    )
    print(f"from zero, p50 of {args.runs}: HPA {summary(hpa, 'total'):.2f}s ({parts})")
    print(
        f"  by hand (kubectl scale at submit) {summary(hand, 'total'):.2f}s: "
        f"HPA/by hand {summary(hpa, 'total') / summary(hand, 'total'):.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(run_cancellable(main)))
