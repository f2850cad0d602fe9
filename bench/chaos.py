"""Chaos suite: a paced run of single pods and 2-pod gangs through the bridge while random ``kill -9`` hits the
stack's processes, each restarted as a supervisor would; then it counts what went wrong and exits non-zero on
any count.

Needs the local stack (``slinky dev up``). Faults go to the bridge worker, the admission webhook, slurmctld,
slurmrestd, the Temporal server and kube-apiserver (``slinky.dev.stack.kill``), each followed, after a random
0.5-2 s, by ``slinky dev up``, which starts exactly what crashed. Pod creation while the apiserver or the
webhook is down is retried as a user's controller would (counted as retries, not failures).

Counts (all must be 0):

* ``lost_pods``: a pod the harness created that did not end Succeeded (deleted or Failed), or that was told
  its job ended or was taken (Warning ``SlurmJobEnded``, ``SlurmAllocationLost``, ``SlurmBridgeFailed``);
* ``orphan_jobs``: a live Slurm job of the run's namespace after the settle time;
* ``double_jobs``: a workload seen with two RUNNING jobs at once (the job list is sampled every 0.5 s);
* ``foreign_cancels``: a job cancelled that was not its owner's to cancel: a ``SlurmJobEnded`` Warning naming
  a CANCELLED job (the harness never cancels), plus cancels the bridge refused because the id had been reused
  (``slinky_bridge_foreign_jobs_spared_total``, reported separately as ``foreign_cancels_prevented``);
* ``stuck_finalizers``: a pod still holding the bridge's finalizer after the settle time;
* ``stuck_workflows``: a lifecycle of the namespace still running after the settle time;
* ``late_lifecycles``: a pod whose lifecycle started more than ``--late`` seconds (60) after the pod was created
  (its gang's, for a gang member: after the gang's last member): a pod the bridge lost sight of until a relist,
  which the counts above miss when the relist comes before the deadline. The slowest start is reported too
  (``slowest_lifecycle_start_s``).

Usage::

    .venv/bin/python -m bench.chaos --workloads 200 --kills 10 --seed 1
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import Progress  # noqa: E402
from slinky import wellknown  # noqa: E402
from slinky.bridge.admission import managed_node_toleration  # noqa: E402
from slinky.bridge.models.jobspec import pods_from_admin_comment  # noqa: E402
from slinky.bridge.models.workload import job_owner_from_comment  # noqa: E402
from slinky.dev import stack  # noqa: E402

COMPONENTS = ("bridge-worker", "webhook", "slurmctld", "slurmrestd", "temporal", "kube-apiserver")
SYMPTOMS = ("SlurmJobEnded", "SlurmAllocationLost", "SlurmBridgeFailed")
LIVE = {"PENDING", "RUNNING", "CONFIGURING", "REQUEUED", "SUSPENDED"}
REST = "/slurm/v0.0.44"
COUNTS = (
    "lost_pods",
    "orphan_jobs",
    "double_jobs",
    "foreign_cancels",
    "stuck_finalizers",
    "stuck_workflows",
    "late_lifecycles",
)


@dataclass
class Run:
    namespace: str
    pods: list[str] = field(default_factory=list)
    retries: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    doubles: set[str] = field(default_factory=set)
    samples: int = 0
    stop: threading.Event = field(default_factory=threading.Event)


def _kube() -> client.CoreV1Api:
    env = stack.env_values()
    return client.CoreV1Api(config.new_client_from_config(config_file=env["KUBECONFIG"]))


def _slurm() -> httpx.Client:
    env = stack.env_values()
    return httpx.Client(base_url=env["SLURM_REST_URL"], timeout=15)


def _jobs(http: httpx.Client) -> list[dict[str, Any]]:
    token = Path(stack.env_values()["SLURM_JWT_FILE"]).read_text().strip()
    answer = http.get(f"{REST}/jobs", headers={"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token})
    return list(answer.raise_for_status().json().get("jobs") or [])


def _ours(job: dict[str, Any], namespace: str) -> bool:
    return any(p.startswith(f"{namespace}/") for p in pods_from_admin_comment(job.get("admin_comment")) or [])


def _retrying(run: Run, what: str, call: Callable[[], Any], served_soon: bool = False) -> Any:
    """Create something as a controller would: retry while the apiserver or the admission webhook is down.
    ``served_soon``: a 404 is passing too (a custom resource: a restarted apiserver serves CRDs a moment after it
    answers)."""
    for _ in range(600):
        try:
            return call()
        except ApiException as err:
            if err.status == 409:
                return None  # created by an earlier attempt whose answer was lost
            if err.status is not None and err.status < 500 and not (served_soon and err.status == 404):
                raise  # a real refusal: not an outage
        except (urllib3.exceptions.HTTPError, OSError):
            pass  # the apiserver is restarting
        run.retries += 1
        time.sleep(0.2)
    raise RuntimeError(f"gave up creating {what} after 120 s of outage")


def _pod(namespace: str, name: str, run_seconds: int, group: str | None = None) -> dict[str, Any]:
    labels = {wellknown.LABEL_POD_GROUP: group} if group else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {wellknown.ANNOTATION_SIM_RUN_SECONDS: str(run_seconds)},
        },
        "spec": {
            "schedulerName": wellknown.SCHEDULER_NAME,
            "restartPolicy": "Never",
            # What the admission webhook adds in a managed namespace (not added at bind).
            "tolerations": [managed_node_toleration(wellknown.SCHEDULER_NAME)],
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}],
        },
    }


def _create_workloads(run: Run, core: client.CoreV1Api, args: argparse.Namespace, rng: random.Random) -> None:
    custom = client.CustomObjectsApi(core.api_client)
    started = time.monotonic()
    for i in range(args.workloads):
        time.sleep(max(0.0, started + i / args.rate - time.monotonic()))
        if rng.random() < args.gang_share:
            group = f"gang-{i:03d}"
            body = {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": group, "namespace": run.namespace},
                "spec": {"minMember": 2},
            }
            _retrying(
                run,
                group,
                lambda b=body: custom.create_namespaced_custom_object(
                    "scheduling.x-k8s.io", "v1alpha1", run.namespace, "podgroups", b
                ),
                served_soon=True,
            )
            names = [f"{group}-{m}" for m in range(2)]
        else:
            group, names = None, [f"pod-{i:03d}"]
        for name in names:
            body = _pod(run.namespace, name, args.run_seconds, group)
            _retrying(run, name, lambda b=body: core.create_namespaced_pod(run.namespace, b))
            run.pods.append(name)


def _faults(run: Run, args: argparse.Namespace, rng: random.Random, window: float) -> None:
    """``--kills`` faults at random times over the creation window, each restarted after 0.5-2 s."""
    times = sorted(rng.uniform(1.0, max(2.0, window)) for _ in range(args.kills))
    started = time.monotonic()
    for at in times:
        if run.stop.wait(max(0.0, started + at - time.monotonic())):
            return
        component = rng.choice(args.components)
        if stack.kill(component) is None:
            continue
        run.faults[component] += 1
        time.sleep(rng.uniform(0.5, 2.0))
        _supervise()


def _supervise() -> None:
    """What a supervisor does: start whatever is not running (``slinky dev up`` starts only that)."""
    for _ in range(5):
        up = subprocess.run([sys.executable, "-m", "slinky.cli", "dev", "up"], cwd=REPO, capture_output=True, text=True)
        if up.returncode == 0:
            return
        time.sleep(1.0)
    print(f"chaos: dev up kept failing: {up.stderr[-300:]}", file=sys.stderr)


def _supervisor(run: Run) -> None:
    """Restarts a process that died on its own (e.g. after another component's outage), every 3 s."""
    while not run.stop.wait(3.0):
        if stack.crashed():
            _supervise()


def _sample(run: Run) -> None:
    """The job list every 0.5 s: a workload with two RUNNING jobs at once is a double job."""
    with _slurm() as http:
        while not run.stop.wait(0.5):
            try:
                jobs = _jobs(http)
            except (httpx.HTTPError, ValueError):
                continue  # slurmctld or slurmrestd is down
            run.samples += 1
            running: Counter[str] = Counter()
            for job in jobs:
                owner = job_owner_from_comment(job.get("comment"))
                if owner and _ours(job, run.namespace) and job.get("job_state", [""])[0] == "RUNNING":
                    running[owner.workflow_id] += 1
            run.doubles.update(w for w, n in running.items() if n > 1)


def _spared() -> float:
    try:
        text = httpx.get(f"http://127.0.0.1:{stack.PORTS.bridge_metrics}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("slinky_bridge_foreign_jobs_spared_total "):
            return float(line.split()[1])
    return 0.0


def _temporal(*args: str) -> str:
    env = stack.env_values()
    command = [str(stack.temporal_cli()), "workflow", *args, "--address", env["TEMPORAL_ADDRESS"]]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def _running_workflows(namespace: str) -> int:
    query = f"WorkflowId STARTS_WITH 'workload/{namespace}/' AND ExecutionStatus = 'Running'"
    return int(_temporal("count", "--query", query).split()[-1])  # "Total: N"


def _parse_time(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def lifecycle_start_delays(pods: list[Any], runs: list[dict[str, Any]]) -> dict[str, float]:
    """Per pod, seconds from the moment its lifecycle could start (its creation; a gang member: its gang's last
    member's) to that lifecycle's first start, from ``temporal workflow list -o json`` rows. A pod without a
    lifecycle is left out (``lost_pods`` counts it)."""
    first: dict[str, float] = {}  # by pod uid (workload/NS/UID) or PodGroup name (workload/NS/podgroup/NAME/UID)
    for row in runs:
        parts, started = row["execution"]["workflowId"].split("/"), _parse_time(row["startTime"])
        key = parts[3] if parts[2] == "podgroup" else parts[-1]
        first[key] = min(started, first.get(key, started))
    ready: dict[str, float] = {}
    for pod in pods:
        key = (pod.metadata.labels or {}).get(wellknown.LABEL_POD_GROUP) or pod.metadata.uid
        created = pod.metadata.creation_timestamp.timestamp()
        ready[key] = max(created, ready.get(key, created))
    delays: dict[str, float] = {}
    for pod in pods:
        key = (pod.metadata.labels or {}).get(wellknown.LABEL_POD_GROUP) or pod.metadata.uid
        if key in first:
            delays[pod.metadata.name] = max(0.0, first[key] - ready[key])
    return delays


def _settled(core: client.CoreV1Api, run: Run, late: float) -> dict[str, Any]:
    items = core.list_namespaced_pod(run.namespace).items
    pods = {p.metadata.name: p for p in items}
    runs = json.loads(_temporal("list", "--query", f"WorkflowId STARTS_WITH 'workload/{run.namespace}/'", "-o", "json"))
    delays = lifecycle_start_delays(items, runs or [])
    events = core.list_namespaced_event(run.namespace).items
    warned = {e.involved_object.name for e in events if e.type == "Warning" and e.reason in SYMPTOMS}
    not_succeeded = [n for n in run.pods if n not in pods or pods[n].status.phase != "Succeeded"]
    ended_cancelled = [e for e in events if e.reason == "SlurmJobEnded" and "CANCELLED" in (e.message or "")]
    with _slurm() as http:
        orphans = [j["job_id"] for j in _jobs(http) if _ours(j, run.namespace) and j["job_state"][0] in LIVE]
    return {
        "lost_pods": len(set(not_succeeded) | (warned & set(run.pods))),
        "orphan_jobs": len(orphans),
        "double_jobs": len(run.doubles),
        "foreign_cancels": len(ended_cancelled),
        "stuck_finalizers": sum(
            1 for p in pods.values() if wellknown.FINALIZER_SCHEDULER in (p.metadata.finalizers or [])
        ),
        "stuck_workflows": _running_workflows(run.namespace),
        "late_lifecycles": sum(1 for d in delays.values() if d > late),
        "slowest_lifecycle_start_s": round(max(delays.values(), default=0.0), 1),
        "recovered": dict(Counter(_recovery(e.message or "") for e in events if e.reason == "SlurmJobLost")),
    }


def _recovery(message: str) -> str:
    """How a lost job was recovered, from its SlurmJobLost Event (docs/bridge.md)."""
    if "resubmitted as" in message:
        return "resubmitted"
    return "readopted" if "re-adopted as" in message else "readopt_queued"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=200)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=3.0, help="workloads created per second")
    parser.add_argument("--gang-share", type=float, default=0.25, help="share of workloads that are 2-pod gangs")
    parser.add_argument("--run-seconds", type=int, default=4, help="how long each pod runs")
    parser.add_argument("--components", nargs="+", default=list(COMPONENTS), choices=COMPONENTS)
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds to wait for every pod to end")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds after the end before counting")
    parser.add_argument("--late", type=float, default=60.0, help="seconds after which a lifecycle start is late")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args(argv)
    if stack.status(quiet=True) != 0:
        print("chaos: the stack is not healthy; run `slinky dev up` first", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    core = _kube()
    run = Run(namespace=f"chaos-{uuid.uuid4().hex[:6]}")
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=run.namespace)))
    spared_before = _spared()
    started = time.monotonic()
    window = args.workloads / args.rate
    threads = [
        threading.Thread(target=_faults, args=(run, args, rng, window), daemon=True),
        threading.Thread(target=_sample, args=(run,), daemon=True),
        threading.Thread(target=_supervisor, args=(run,), daemon=True),
    ]
    progress = Progress("chaos")
    ended: list[str] = []
    try:
        for thread in threads:
            thread.start()
        with progress.ticking(
            f"creating {args.workloads} workloads in {run.namespace}",
            lambda: f"{len(run.pods)} pods created, kills {dict(run.faults) or 0}",
        ):
            _create_workloads(run, core, args, random.Random(args.seed + 1))
            threads[0].join()  # every fault injected and restarted
        deadline = time.monotonic() + args.deadline
        with progress.ticking("waiting for every pod to end", lambda: f"{len(ended)}/{len(run.pods)} ended"):
            while time.monotonic() < deadline:
                with contextlib.suppress(Exception):
                    phases = [p.status.phase for p in core.list_namespaced_pod(run.namespace).items]
                    ended[:] = [p for p in phases if p in ("Succeeded", "Failed")]
                    if len(phases) == len(run.pods) and len(ended) == len(phases):
                        break
                    if len(phases) < len(run.pods) and time.monotonic() - started > window + 60:
                        break  # pods were deleted: no need to wait for them
                time.sleep(1.0)
        progress.phase(f"settling {args.settle:.0f} s, then counting")
        run.stop.wait(args.settle)
        run.stop.set()
        threads[1].join()
        threads[2].join()
        _supervise()
        counts = _settled(core, run, args.late)
    finally:
        run.stop.set()
        with contextlib.suppress(ApiException):
            core.delete_namespace(run.namespace)
    summary = {
        "workloads": args.workloads,
        "pods": len(run.pods),
        "faults": dict(run.faults),
        "kills": sum(run.faults.values()),
        "create_retries": run.retries,
        "seconds": round(time.monotonic() - started, 1),
        "job_list_samples": run.samples,
        "foreign_cancels_prevented": _spared() - spared_before,
        **counts,
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    bad = {k: summary[k] for k in COUNTS if summary[k]}
    if bad:
        print(f"chaos: FAILED {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
