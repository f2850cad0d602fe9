"""Bridge benchmark: pods through the bridge vs raw Slurm and vs kube-scheduler, measured in one run.

Needs the local stack (``slinky dev up``). It adds ``--nodes`` extra nodes (a second node agent plus
matching Slurm external nodes), then runs three systems on the same apiserver and slurmctld:

* **raw Slurm**: EXTERNAL_JOB submits through slurmrestd, submit → RUNNING seen by a tight poll;
* **kube-scheduler v1.20.2** (built by ``dev up``) with its own scheduler name: create → bound;
* **the bridge**: pods naming ``slurm-bridge-scheduler``: create → bound;
* **Temporal's floor** (``bench/temporal_floor.py``): workflows with an allocated pod's history and activities that
  do nothing, on the same Temporal server with the bridge worker's options: start → "bound". No lifecycle per
  workload can be faster on this stack; the bridge's burst is measured against it too.

Each system runs as a burst (throughput: pods bound per second) and paced at ``--rate`` pods/s (latency: p50,
p99); the paced runs of raw Slurm and the bridge alternate for ``--rounds`` rounds, and their samples are
pooled. It also counts slurmrestd requests during the bridge's paced run from slurmrestd's own log, split into
job-list polls and everything else. Usage::

    .venv/bin/python -m bench.bridge --pods 64 --rate 10 --nodes 64
"""

# ruff: noqa: E402  (the path fix below must run before the other imports)
from __future__ import annotations

import os
import sys

# As `python bench/bridge.py` this directory comes first on sys.path, where bench/operator.py would shadow the
# standard library's `operator` (which asyncio's `collections` imports): take the directory off the path first.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(os.path.abspath(__file__))]

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import temporal_floor
from bench.common import CpuMeter, Progress, run_cancellable, slurm_rest
from slinky import hostlist, wellknown
from slinky.bridge.admission import managed_node_toleration
from slinky.bridge.grouping import KIND_PODGROUP, GroupRef
from slinky.clients.errors import KubeNotFound
from slinky.clients.kube import KubeClient, pod_path
from slinky.dev import stack

KS_NAME = "bench-kube-scheduler"
SYSTEMS = {"raw", "kube-scheduler", "temporal", "bridge"}
RAW_JOB_PREFIX = "bench-raw"
"""Names of the raw Slurm jobs this benchmark submits: a run removes its own, and an earlier run's leftovers."""
NODE_PREFIX = "bench-node"
LIVE_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"})
CLEANUP_SECONDS = 120.0
"""How long teardown waits for the pods' namespaces to go and for the jobs on the bench nodes to end."""


def live_jobs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [j for j in jobs if LIVE_STATES & set(j.get("job_state") or [])]


def describe(jobs: list[dict[str, Any]]) -> str:
    return ", ".join(f"{j['job_id']} ({j.get('name', '')}, {'/'.join(j['job_state'])})" for j in jobs[:10]) + (
        f" and {len(jobs) - 10} more" if len(jobs) > 10 else ""
    )


def blocking_work(jobs: list[dict[str, Any]], bench_nodes: set[str]) -> str:
    """Why the benchmark cannot start on this stack ("" when it can): other work's jobs on its nodes (they are
    left alone, so the nodes cannot be removed at the end either), or queued jobs that would take its nodes as soon
    as they appear (the results would then measure someone else's work)."""
    others = [j for j in live_jobs(jobs) if not str(j.get("name", "")).startswith(RAW_JOB_PREFIX)]
    on_nodes = [j for j in others if bench_nodes & set(hostlist.expand(j.get("nodes") or ""))]
    if on_nodes:
        return (
            f"Slurm nodes named {NODE_PREFIX}-* exist and run other work: jobs {describe(on_nodes)}. Let them end or"
            " cancel them (scancel), then run the benchmark again."
        )
    queued = [j for j in others if "PENDING" in j["job_state"] and j.get("state_reason") != "JobHeldUser"]
    if queued:
        return (
            f"{len(queued)} job(s) wait in Slurm's queue ({describe(queued)}): they would take the benchmark's nodes"
            " as soon as they appear. Let them run or cancel them, then run the benchmark again."
        )
    return ""


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(latencies: list[float], span: float, count: int) -> dict[str, float]:
    return {
        "p50_ms": round(pct(latencies, 0.5) * 1000, 1),
        "p99_ms": round(pct(latencies, 0.99) * 1000, 1),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 1) if latencies else float("nan"),
        "per_second": round(count / span, 1) if span > 0 else float("nan"),
    }


class Bench:
    def __init__(self, env: dict[str, str], args: argparse.Namespace) -> None:
        self.env = env
        self.args = args
        self.rest = slurm_rest(env, timeout=60)
        self.kube = KubeClient.from_kubeconfig(env["KUBECONFIG"])
        self.nodes = [f"{NODE_PREFIX}-{i}" for i in range(1, args.nodes + 1)]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.progress = Progress("bench.bridge")
        self.namespaces: set[str] = set()
        """Namespaces this run created and has not seen gone yet."""
        self.raw_jobs: set[int] = set()
        """Raw Slurm jobs this run submitted and has not cancelled yet."""

    # ------------------------------------------------------------------------------------------- setup
    async def jobs(self) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = (await self.rest.get("/jobs")).raise_for_status().json()["jobs"]
        return jobs

    async def check_free(self) -> None:
        """Before anything is created: an earlier run's leftovers (raw jobs, idle bench nodes) are removed; work
        that would take the bench's nodes makes the run refuse (``SystemExit`` with what is in the way)."""
        jobs = await self.jobs()
        leftovers = [j for j in live_jobs(jobs) if str(j.get("name", "")).startswith(RAW_JOB_PREFIX)]
        for job in leftovers:
            await self.rest.delete(f"/job/{job['job_id']}")
        if leftovers:
            self.progress.phase(f"cancelled {len(leftovers)} raw job(s) an earlier run left: {describe(leftovers)}")
        problem = blocking_work(jobs, set(self.nodes))
        if problem:
            raise SystemExit(f"bench.bridge: not started: {problem}")

    async def setup(self) -> None:
        log = open(stack.STATE / "logs" / "bench-node-agent.log", "ab")
        self.procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "slinky.dev.node_agent",
                    "--kubeconfig",
                    self.env["KUBECONFIG"],
                    "--nodes",
                    str(self.args.nodes),
                    "--prefix",
                    "bench-node",
                    "--cpu",
                    "8",
                    "--memory",
                    "16Gi",
                    "--delete-nodes-on-exit",
                ],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        for i, name in enumerate(self.nodes, start=1):
            conf = (
                f"NodeName={name} NodeAddr=127.27.{i // 250}.{i % 250 + 1} Sockets=1 CoresPerSocket=8 "
                f"ThreadsPerCore=1 CPUs=8 RealMemory=16384 State=External Feature={wellknown.DEFAULT_PARTITION}"
            )
            r = await self.rest.post("/new/node", json={"node_conf": conf})
            if r.status_code != 200 and "already exists" not in r.text:
                raise SystemExit(f"new/node {name}: {r.status_code} {r.text[:200]}")
        self.progress.phase(f"{self.args.nodes} bench nodes added to Slurm; waiting for them to be Ready")
        deadline = time.monotonic() + 60 + self.args.nodes / 10
        while time.monotonic() < deadline:
            nodes = (await self.kube.get("/api/v1/nodes", {"labelSelector": wellknown.LABEL_SIM_AGENT}))["items"]
            ready = [
                n
                for n in nodes
                if n["metadata"]["name"].startswith("bench-node-")
                # Ready: no node-lifecycle taint (the bridge's managed-node taint is expected and tolerated).
                and not [t for t in n["spec"].get("taints") or [] if t["key"].startswith("node.kubernetes.io/")]
            ]
            if len(ready) == self.args.nodes:
                break
            await asyncio.sleep(0.5)
        else:
            raise SystemExit(f"bench nodes not Ready in {60 + self.args.nodes / 10:.0f} s")
        self.progress.phase(f"nodes Ready; {self.args.settle:.0f} s for the bridge's node caches to see them")
        await asyncio.sleep(self.args.settle)  # let the bridge's node caches see them (Slurm side: 30 s refresh)

    async def teardown(self) -> None:
        """Leave nothing, on any exit (an error, Ctrl-C, SIGTERM): the raw jobs, the pods (their namespaces, gone
        before the nodes they run on), then the bench's Slurm nodes once no job holds them, then the node agent."""
        with contextlib.suppress(httpx.HTTPError):
            await self.cancel_raw_jobs()
        for name in list(self.namespaces):
            with contextlib.suppress(KubeNotFound):
                await self.kube.delete(f"/api/v1/namespaces/{name}")
        deadline = time.monotonic() + CLEANUP_SECONDS
        while self.namespaces and time.monotonic() < deadline:
            for name in list(self.namespaces):
                with contextlib.suppress(KubeNotFound):
                    await self.kube.get(f"/api/v1/namespaces/{name}")
                    continue
                self.namespaces.discard(name)
            await asyncio.sleep(0.5)
        if self.namespaces:
            print(f"bench.bridge: namespaces not gone in {CLEANUP_SECONDS:.0f} s: {sorted(self.namespaces)}",
                  file=sys.stderr)  # fmt: skip
        busy: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                nodes = set(self.nodes)
                busy = [j for j in live_jobs(await self.jobs()) if nodes & set(hostlist.expand(j.get("nodes") or ""))]
                if not busy:
                    break
            await asyncio.sleep(0.5)
        if busy:
            print(f"bench.bridge: jobs still on the bench nodes (left in place): {describe(busy)}", file=sys.stderr)
        left = []
        for name in self.nodes:
            with contextlib.suppress(httpx.HTTPError):
                r = await self.rest.delete(f"/node/{name}")
                if r.status_code != 200 and "not found" not in r.text.lower() and "invalid node" not in r.text.lower():
                    left.append(name)
        if left:
            print(f"bench.bridge: Slurm nodes not removed: {hostlist.compress(left)}", file=sys.stderr)
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
        await self.rest.aclose()
        await self.kube.aclose()

    # ------------------------------------------------------------------------------------------- raw Slurm
    async def raw_slurm(self, count: int, rate: float | None, *, allocate: bool = False) -> dict[str, Any]:
        """submit → RUNNING for EXTERNAL_JOBs, seen by a 5 ms poll of the cheap jobs/state endpoint.

        With ``allocate``: ``job/allocate`` with ``immediate`` instead of ``job/submit`` (the bridge's path when
        nodes are free), so the bridge's own overhead can be read against Slurm's fastest start too.
        """
        submitted: dict[int, float] = {}
        running: dict[int, float] = {}
        done = asyncio.Event()

        async def poll() -> None:
            while not done.is_set():
                r = await self.rest.get("/jobs/state")
                now = time.monotonic()
                for job in r.json().get("jobs", []):
                    jid = int(job["job_id"])
                    if jid in submitted and jid not in running and "RUNNING" in job["state"]:
                        running[jid] = now
                if len(running) == count:
                    done.set()
                await asyncio.sleep(0.005)

        poller = asyncio.create_task(poll())
        start = time.monotonic()
        pace = "burst" if rate is None else f"paced at {rate:g}/s"
        label = f"raw Slurm {'allocate' if allocate else 'submit'} {pace}"
        try:
            with self.progress.ticking(label, lambda: f"{len(submitted)}/{count} submitted, {len(running)} running"):
                await self._raw_submit(count, rate, allocate, start, submitted)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), timeout=120)
            done.set()
            await poller
        finally:  # stopped or failed: the poll ends before teardown closes its client
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await poller
        latencies = [running[j] - submitted[j] for j in running]
        span = max(running.values(), default=start) - start
        await self.cancel_raw_jobs()
        await asyncio.sleep(1)
        return {**summary(latencies, span, len(running)), "n": len(running), "samples": latencies}

    async def cancel_raw_jobs(self) -> None:
        for job_id in sorted(self.raw_jobs):
            await self.rest.delete(f"/job/{job_id}")
            self.raw_jobs.discard(job_id)

    async def _raw_submit(
        self, count: int, rate: float | None, allocate: bool, start: float, submitted: dict[int, float]
    ) -> None:
        for i in range(count):
            if rate:
                await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            desc = {
                "name": f"bench-raw-{i}",
                "partition": wellknown.DEFAULT_PARTITION,
                "flags": ["EXTERNAL_JOB"],
                "minimum_nodes": 1,
                "maximum_nodes": 1,
                "tasks_per_node": 1,
                "shared": ["none"],
                "current_working_directory": "/tmp",
                "admin_comment": json.dumps({"pods": [f"bench/raw-{i}"]}),
            }
            t0 = time.monotonic()
            if allocate:
                r = await self.rest.post("/job/allocate", json={"job": {**desc, "immediate": True}})
            else:
                r = await self.rest.post("/job/submit", json={"job": desc})
            job_id = r.raise_for_status().json()["job_id"]
            self.raw_jobs.add(job_id)
            submitted[job_id] = t0

    # ------------------------------------------------------------------------------------------- pods
    @contextlib.asynccontextmanager
    async def namespace(self, prefix: str) -> AsyncIterator[str]:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        await self.kube.create("/api/v1/namespaces", {"metadata": {"name": name}})
        self.namespaces.add(name)  # until teardown sees it gone
        try:
            yield name
        finally:
            with contextlib.suppress(KubeNotFound):
                await self.kube.delete(f"/api/v1/namespaces/{name}")

    def cpu_meter(self) -> CpuMeter:
        """The stack's processes (its pid files) and the ones this run started."""

        def name(argv: list[str]) -> str:
            return "bench-node-agent" if "slinky.dev.node_agent" in argv else f"bench-{Path(argv[0]).name}"

        return CpuMeter.of_pid_files(stack.STATE / "pids", {name(list(p.args)): p.pid for p in self.procs})

    async def pods(self, scheduler: str, count: int, rate: float | None, prefix: str) -> dict[str, Any]:
        """Create ``count`` pods (all at once, or paced at ``rate``), time create → bound, then delete them.

        A burst also measures the CPU every process of the stack used from the first create until every pod
        is gone: milliseconds per pod, per process.
        """
        label = f"{prefix} {'burst' if rate is None else f'paced at {rate:g}/s'}"
        meter = self.cpu_meter() if rate is None else None
        async with self.namespace(prefix) as ns:
            created: dict[str, float] = {}
            bound: dict[str, float] = {}
            listing = await self.kube.get(pod_path(ns))
            rv = listing["metadata"]["resourceVersion"]
            all_bound = asyncio.Event()

            async def watch() -> None:
                async for event in self.kube.watch(pod_path(ns), {"resourceVersion": rv, "timeoutSeconds": 300}):
                    obj = event["object"]
                    name = obj["metadata"].get("name", "")
                    if obj.get("spec", {}).get("nodeName") and name not in bound:
                        bound[name] = time.monotonic()
                        if len(bound) == count:
                            all_bound.set()
                            return

            watcher = asyncio.create_task(watch())
            if meter is not None:
                meter.start()
            start = time.monotonic()

            async def create(i: int) -> None:
                name = f"p{i}"
                body = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {
                        "schedulerName": scheduler,
                        # Nodes known to Slurm carry the bridge's NoExecute taint; kube-scheduler's pods
                        # tolerate it, as the admission webhook makes the bridge's pods do.
                        "tolerations": [
                            {
                                "key": wellknown.TAINT_MANAGED_NODE,
                                "operator": "Equal",
                                "value": wellknown.SCHEDULER_NAME,
                                "effect": "NoExecute",
                            }
                        ],
                        "containers": [
                            {
                                "name": "c",
                                "image": "busybox",
                                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                            }
                        ],
                    },
                }
                created[name] = time.monotonic()
                await self.kube.create(pod_path(ns), body)

            tasks = []
            with self.progress.ticking(label, lambda: f"{len(created)}/{count} created, {len(bound)} bound"):
                for i in range(count):
                    if rate:
                        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
                    tasks.append(asyncio.create_task(create(i)))
                await asyncio.gather(*tasks)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(all_bound.wait(), timeout=180)
            to_bound = meter.stop() if meter is not None else {}
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            latencies = [bound[n] - created[n] for n in bound]
            span = max(bound.values(), default=start) - start
            result: dict[str, Any] = {**summary(latencies, span, len(bound)), "n": len(bound), "samples": latencies}
            await self.delete_pods(ns, [f"p{i}" for i in range(count)])
            if meter is not None:
                used = meter.stop()
                result["cpu_ms_per_pod"] = {k: round(v * 1000 / count, 1) for k, v in used.items() if v > 0}
                result["cpu_ms_per_pod"]["all"] = round(sum(used.values()) * 1000 / count, 1)
                # The part spent until every pod was bound: what the burst rate is made of on a busy machine.
                result["cpu_ms_per_pod_to_bound"] = {
                    k: round(v * 1000 / count, 1) for k, v in to_bound.items() if v * 1000 / count >= 0.5
                }
                result["cpu_ms_per_pod_to_bound"]["all"] = round(sum(to_bound.values()) * 1000 / count, 1)
            return result

    async def temporal_floor(self, count: int, bursts: int) -> list[dict[str, Any]]:
        """Temporal's floor (``bench/temporal_floor.py``): ``bursts`` bursts of ``count`` lifecycles that do nothing."""
        client = await Client.connect(self.env["TEMPORAL_ADDRESS"], namespace=self.env["TEMPORAL_NAMESPACE"])
        runs = []
        for i in range(bursts):
            self.progress.phase(f"Temporal's floor: burst {i + 1}/{bursts} of {count} lifecycles")
            run = await temporal_floor.burst(client, count, self.cpu_meter())
            run.pop("workflow_ids")
            runs.append(run)
        return runs

    async def delete_pods(self, ns: str, names: list[str]) -> None:
        """Delete the pods and wait until they are gone (the bridge's cleanup included: its finalizer)."""
        for name in names:
            with contextlib.suppress(KubeNotFound):
                await self.kube.delete(pod_path(ns, name), grace_seconds=0)
        deadline = time.monotonic() + 120
        left = len(names)
        with self.progress.ticking(f"deleting {len(names)} pods in {ns}", lambda: f"{left} left"):
            while time.monotonic() < deadline:
                left = len((await self.kube.get(pod_path(ns)))["items"])
                if not left:
                    return
                await asyncio.sleep(0.2)

    # ------------------------------------------------------------------------------------------- gangs
    async def raw_gang(self, size: int) -> float:
        """Seconds from submitting one ``size``-node EXTERNAL_JOB to seeing it RUNNING (5 ms poll)."""
        desc = {
            "name": "bench-raw-gang",
            "partition": wellknown.DEFAULT_PARTITION,
            "flags": ["EXTERNAL_JOB"],
            "minimum_nodes": size,
            "maximum_nodes": size,
            "tasks_per_node": 1,
            "shared": ["none"],
            "current_working_directory": "/tmp",
            "admin_comment": json.dumps({"pods": ["bench/raw-gang"]}),
        }
        t0 = time.monotonic()
        job_id = (await self.rest.post("/job/submit", json={"job": desc})).json()["job_id"]
        self.raw_jobs.add(job_id)
        while True:
            state = (await self.rest.get(f"/jobs/state?job_id={job_id}")).json()["jobs"][0]["state"]
            if "RUNNING" in state:
                elapsed = time.monotonic() - t0
                break
            await asyncio.sleep(0.005)
        await self.cancel_raw_jobs()
        await asyncio.sleep(1)
        return elapsed

    async def bridge_gang(self, size: int) -> dict[str, Any]:
        """One PodGroup of ``size``, one job: seconds from the last member's creation to every member bound, and
        from the deletion to every pod gone; and the gang lifecycle's history (events, signals, workflow tasks the
        server failed: a task fails when more than 100 signals wait behind a long local activity)."""
        async with self.namespace("bench-gang") as ns:
            group = await self.kube.create(
                f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups",
                {
                    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                    "kind": "PodGroup",
                    "metadata": {"name": "g", "namespace": ns},
                    "spec": {"minMember": size},
                },
            )
            rv = (await self.kube.get(pod_path(ns)))["metadata"]["resourceVersion"]
            bound: set[str] = set()
            done = asyncio.Event()

            async def watch() -> None:
                async for event in self.kube.watch(pod_path(ns), {"resourceVersion": rv, "timeoutSeconds": 300}):
                    obj = event["object"]
                    if obj.get("spec", {}).get("nodeName"):
                        bound.add(obj["metadata"]["name"])
                        if len(bound) == size:
                            done.set()
                            return

            watcher = asyncio.create_task(watch())
            names = [f"m{i}" for i in range(size)]
            await asyncio.gather(
                *(
                    self.kube.create(
                        pod_path(ns),
                        {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "metadata": {"name": n, "namespace": ns, "labels": {wellknown.LABEL_POD_GROUP: "g"}},
                            "spec": {
                                "schedulerName": wellknown.SCHEDULER_NAME,
                                # What the admission webhook adds in a managed namespace (not added at bind).
                                "tolerations": [managed_node_toleration(wellknown.SCHEDULER_NAME)],
                                "containers": [{"name": "c", "image": "busybox"}],
                            },
                        },
                    )
                    for n in names
                )
            )
            last_created = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), timeout=180)
            elapsed = time.monotonic() - last_created if done.is_set() else float("nan")
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            deleting = time.monotonic()
            await self.delete_pods(ns, names)
            deleted = time.monotonic() - deleting
        workflow_id = GroupRef(kind=KIND_PODGROUP, namespace=ns, name="g").workflow_id(group["metadata"]["uid"])
        return {"bound_s": elapsed, "deleted_s": deleted, **await self.history_counts(workflow_id)}

    async def history_counts(self, workflow_id: str) -> dict[str, int]:
        """Events, signals and failed workflow tasks of a lifecycle's history, once it ended (at most 60 s)."""
        client = await Client.connect(self.env["TEMPORAL_ADDRESS"], namespace=self.env["TEMPORAL_NAMESPACE"])
        handle = client.get_workflow_handle(workflow_id)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handle.result(), 60)
        events = (await handle.fetch_history()).events
        kinds = [event.event_type for event in events]
        return {
            "history_events": len(events),
            "signals": kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED),
            "failed_workflow_tasks": kinds.count(EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED),
        }

    # ------------------------------------------------------------------------------------------- kube-scheduler
    def start_kube_scheduler(self) -> None:
        binary = Path(self.env.get("SLINKY_DEV_KUBE_BIN", stack.KUBE_BIN)) / "kube-scheduler"
        cfg = Path(tempfile.mkdtemp()) / "scheduler.yaml"
        cfg.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1beta1\nkind: KubeSchedulerConfiguration\n"
            f"clientConnection:\n  kubeconfig: {self.env['KUBECONFIG']}\n  qps: 200\n  burst: 400\n"
            "leaderElection:\n  leaderElect: false\n"
            # Loopback only: by default 1.20 serves healthz and metrics on every address.
            "healthzBindAddress: 127.0.0.1:10251\nmetricsBindAddress: 127.0.0.1:10251\n"
            f"profiles:\n- schedulerName: {KS_NAME}\n"
        )
        log = open(stack.STATE / "logs" / "bench-kube-scheduler.log", "ab")
        self.procs.append(
            subprocess.Popen(
                [str(binary), f"--config={cfg}", "--port=0", "--secure-port=0"], stdout=log, stderr=subprocess.STDOUT
            )
        )

    # ------------------------------------------------------------------------------------------- REST calls
    @staticmethod
    def rest_log_position() -> int:
        return (stack.STATE / "logs" / "slurmrestd.log").stat().st_size

    @staticmethod
    def rest_calls_since(position: int) -> dict[str, int]:
        with open(stack.STATE / "logs" / "slurmrestd.log", "rb") as f:
            f.seek(position)
            lines = f.read().decode(errors="replace").splitlines()
        calls = [
            ln for ln in lines if "operations_router" in ln and "] " in ln and "/slurm/" in ln and "error" not in ln
        ]
        polls = [ln for ln in calls if " GET /slurm/" in ln and ln.rstrip().endswith(("/jobs", "/jobs/state"))]
        # Per-job calls (submit, the read when a job starts, cancel) are what "per pod" counts; node reads
        # and the GC's periodic list are the bridge's too but do not grow with pods.
        jobs = [ln for ln in calls if "/job/" in ln]
        return {
            "total": len(calls),
            "polls": len(polls),
            "job_calls": len(jobs),
            "other": len(calls) - len(polls) - len(jobs),
        }


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary over every round's samples (p50/p99 of all pods); throughput is the rounds' median."""
    samples = [x for r in runs for x in r["samples"]]
    out = summary(samples, 0, 0)
    out["per_second"] = statistics.median(r["per_second"] for r in runs)
    out["n"] = len(samples)
    return out


def median_burst(bursts: list[dict[str, Any]]) -> dict[str, Any]:
    """The burst with the median rate, with every burst's rate and the median CPU per pod of each process."""
    ordered = sorted(bursts, key=lambda b: b["per_second"])
    out = dict(ordered[(len(ordered) - 1) // 2])
    if len(bursts) > 1:
        out["per_second_each"] = [b["per_second"] for b in bursts]
        for field in ("cpu_ms_per_pod", "cpu_ms_per_pod_to_bound"):
            names = {k for b in bursts for k in b.get(field, {})}
            if names:
                out[field] = {
                    k: round(statistics.median(b[field].get(k, 0.0) for b in bursts), 1)
                    for k in sorted(names, key=lambda k: -max(b[field].get(k, 0.0) for b in bursts))
                }
    return out


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """Every ratio whose two systems ran (bursts: throughput; paced rounds: latency)."""
    burst = {
        name: results[key]["per_second"]
        for name, key in (
            ("bridge", "bridge_burst"),
            ("kube_scheduler", "kube_scheduler_burst"),
            ("raw_slurm", "raw_slurm_burst"),
            ("temporal_floor", "temporal_floor_burst"),
        )
        if key in results
    }
    out: dict[str, float] = {}
    for a, b in (
        ("bridge", "kube_scheduler"),
        # The ceilings: every bridge pod is one Slurm job and one lifecycle, so the bridge cannot bind faster than
        # Slurm starts jobs, nor than Temporal runs lifecycles that do nothing (the floor).
        ("raw_slurm", "kube_scheduler"),
        ("temporal_floor", "kube_scheduler"),
        ("bridge", "raw_slurm"),
        ("bridge", "temporal_floor"),
    ):
        if a in burst and b in burst:
            out[f"{a}_vs_{b}_pods_per_second"] = round(burst[a] / burst[b], 2)
    br = results.get("bridge_paced")
    if br is not None and "raw_slurm_paced" in results:
        out["bridge_p50_minus_raw_slurm_p50_ms"] = round(br["p50_ms"] - results["raw_slurm_paced"]["p50_ms"], 1)
    if br is not None and "raw_slurm_allocate_paced" in results:
        # Against job/allocate, Slurm's fastest start (the bridge uses it when nodes are free): the bridge's own cost.
        out["bridge_p50_minus_raw_allocate_p50_ms"] = round(
            br["p50_ms"] - results["raw_slurm_allocate_paced"]["p50_ms"], 1
        )
    if br is not None:
        out["bridge_p99_ms"] = br["p99_ms"]
    return out


async def measure(args: argparse.Namespace, only: set[str]) -> dict[str, Any]:
    """Run the selected systems on the same stack, and every ratio of two that ran.

    Slurm's own submit → RUNNING time drifts by hundreds of milliseconds between minutes (its job table, the
    other servers' load), so latency is measured in ``--rounds`` rounds that run raw Slurm and the bridge
    back to back (paced, then the gang). The table pools every round's pods; the differences are also
    given per round, and the gang's is the median of the rounds.
    """
    env = stack.load_env_file()
    bench = Bench(env, args)
    results: dict[str, Any] = {"pods": args.pods, "rate": args.rate, "nodes": args.nodes + 4, "rounds": args.rounds}
    paced: dict[str, list[dict[str, Any]]] = {"raw_slurm_paced": [], "bridge_paced": []}
    gangs: list[dict[str, Any]] = []
    await bench.check_free()  # before anything is made: a refusal has nothing to clean up
    try:
        await bench.setup()
        if args.idle_seconds:
            # Steady state at this size: what the watches, polls and node sync cost with nothing to schedule.
            meter = bench.cpu_meter()
            meter.start()
            bench.progress.phase(f"{args.idle_seconds:g} s of steady state with {args.nodes + 4} nodes")
            await asyncio.sleep(args.idle_seconds)
            used = meter.stop()
            results["idle_cpu_ms_per_second"] = {
                k: round(v * 1000 / args.idle_seconds, 1) for k, v in used.items() if v > 0
            }
        if "kube-scheduler" in only:
            bench.start_kube_scheduler()
            await asyncio.sleep(3)
            results["kube_scheduler_paced"] = await bench.pods(KS_NAME, args.pods, args.rate, "bench-ks")
            if args.bursts:
                bursts = [await bench.pods(KS_NAME, args.pods, None, "bench-ks") for _ in range(args.bursts)]
                results["kube_scheduler_burst"] = median_burst(bursts)
        if "raw" in only:
            results["raw_slurm_burst"] = await bench.raw_slurm(args.pods, None)
        if "temporal" in only and args.bursts:
            results["temporal_floor_burst"] = median_burst(await bench.temporal_floor(args.pods, args.bursts))
        if "bridge" in only and args.bursts:
            name = wellknown.SCHEDULER_NAME
            bursts = [await bench.pods(name, args.pods, None, "bench-br") for _ in range(args.bursts)]
            results["bridge_burst"] = median_burst(bursts)
        if "raw" in only and args.rounds:
            results["raw_slurm_allocate_paced"] = await bench.raw_slurm(args.pods, args.rate, allocate=True)
        for _ in range(args.rounds):
            if "raw" in only:
                paced["raw_slurm_paced"].append(await bench.raw_slurm(args.pods, args.rate))
            if "bridge" in only:
                position = bench.rest_log_position()
                t0 = time.monotonic()
                paced["bridge_paced"].append(
                    await bench.pods(wellknown.SCHEDULER_NAME, args.pods, args.rate, "bench-br")
                )
                calls = bench.rest_calls_since(position)
                calls["seconds"] = round(time.monotonic() - t0, 1)
                calls["job_calls_per_pod"] = round(calls["job_calls"] / args.pods, 2)
                results["bridge_rest_calls"] = calls
            if args.gang:
                raw_gang = await bench.raw_gang(args.gang) if "raw" in only else float("nan")
                gang: dict[str, Any] = {"raw_ms": round(raw_gang * 1000, 1), "bridge_ms": float("nan")}
                if "bridge" in only:
                    bridge = await bench.bridge_gang(args.gang)
                    gang["bridge_ms"] = round(bridge.pop("bound_s") * 1000, 1)
                    gang["bridge_deleted_ms"] = round(bridge.pop("deleted_s") * 1000, 1)
                    gang.update(bridge)
                gangs.append(gang)
    finally:
        await bench.teardown()
    summarise(results, paced, gangs, args.gang)
    results["ratios"] = ratios(results)
    return results


def summarise(
    results: dict[str, Any], paced: dict[str, list[dict[str, Any]]], gangs: list[dict[str, Any]], size: int
) -> None:
    """Pool the paced rounds, drop raw samples, and add the per-round differences."""
    for key, runs in paced.items():
        if runs:
            results[key] = pooled(runs)
    for key in (
        "raw_slurm_burst",
        "raw_slurm_allocate_paced",
        "kube_scheduler_paced",
        "kube_scheduler_burst",
        "bridge_burst",
    ):
        if key in results:
            results[key].pop("samples", None)
    if paced["raw_slurm_paced"] and paced["bridge_paced"]:
        results["p50_difference_ms_per_round"] = [
            round((pct(b["samples"], 0.5) - pct(r["samples"], 0.5)) * 1000, 1)
            for r, b in zip(paced["raw_slurm_paced"], paced["bridge_paced"], strict=True)
        ]
    if gangs:
        results["gang"] = {
            "size": size,
            "rounds": gangs,
            "median_difference_ms": round(statistics.median(g["bridge_ms"] - g["raw_ms"] for g in gangs), 1),
        }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--rate", type=float, default=10.0, help="offered pods/s for the latency runs")
    parser.add_argument("--nodes", type=int, default=64, help="extra nodes for the benchmark")
    parser.add_argument("--settle", type=float, default=32.0, help="seconds for caches to see the new nodes")
    parser.add_argument("--gang", type=int, default=0, help="also time one PodGroup of this size (0: skip)")
    parser.add_argument("--rounds", type=int, default=3, help="paced and gang runs, raw and bridge back to back")
    parser.add_argument(
        "--only",
        default="raw,kube-scheduler,temporal,bridge",
        help="comma-separated systems to run: raw, kube-scheduler, temporal (the floor), bridge; a ratio needs "
        "both of its systems",
    )
    parser.add_argument(
        "--bursts",
        type=int,
        default=1,
        help="bursts per system; the median is reported (0: none, e.g. only the paced rounds)",
    )
    parser.add_argument(
        "--idle-seconds", type=float, default=10.0, help="steady state measured after setup (CPU per second)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    if only - SYSTEMS:
        raise SystemExit(f"--only: unknown system(s) {sorted(only - SYSTEMS)}")
    if max(args.pods, args.gang) > args.nodes:
        raise SystemExit("--pods must not exceed --nodes: every placeholder job takes a whole node")
    results = await measure(args, only)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{args.pods} pods, {args.nodes + 4} nodes; paced runs at {args.rate} pods/s, {args.rounds} round(s) pooled")
    print(f"{'system':28} {'p50 ms':>9} {'p99 ms':>9} {'bound/s':>9} {'n':>5}")
    for key in (
        "raw_slurm_paced",
        "raw_slurm_allocate_paced",
        "raw_slurm_burst",
        "kube_scheduler_paced",
        "kube_scheduler_burst",
        "temporal_floor_burst",
        "bridge_paced",
        "bridge_burst",
    ):
        if key in results:
            r = results[key]
            print(f"{key:28} {r['p50_ms']:>9} {r['p99_ms']:>9} {r['per_second']:>9} {r['n']:>5}")
    if "idle_cpu_ms_per_second" in results:
        idle = results["idle_cpu_ms_per_second"]
        print("steady state, CPU ms per second:", ", ".join(f"{k} {v}" for k, v in idle.items()))
    for key in ("kube_scheduler_burst", "temporal_floor_burst", "bridge_burst"):
        if "cpu_ms_per_pod" in results.get(key, {}):
            cpu = results[key]["cpu_ms_per_pod"]
            each = f" (bursts: {results[key]['per_second_each']} pods/s)" if "per_second_each" in results[key] else ""
            print(f"{key}: CPU ms per pod (create, bind, delete){each}:", ", ".join(f"{k} {v}" for k, v in cpu.items()))
            if "cpu_ms_per_pod_to_bound" in results[key]:
                part = results[key]["cpu_ms_per_pod_to_bound"]
                print(f"{key}: of which until all were bound:", ", ".join(f"{k} {v}" for k, v in part.items()))
    if "bridge_rest_calls" in results:
        print("slurmrestd requests during the bridge's paced run:", results["bridge_rest_calls"])
    if "p50_difference_ms_per_round" in results:
        print("bridge p50 minus raw Slurm p50, per round (ms):", results["p50_difference_ms_per_round"])
    if results.get("ratios"):
        print("ratios:", results["ratios"])
    if "gang" in results:
        print("gang:", results["gang"])
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        sys.exit(asyncio.run(run_cancellable(main)))
    except (asyncio.CancelledError, KeyboardInterrupt):
        print("bench.bridge: stopped; what it made was removed (any leftover is named above)", file=sys.stderr)
        sys.exit(130)
