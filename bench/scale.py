"""Many open workloads: the bridge with ``--workloads`` pods, nearly all of them pending in Slurm.

Needs the local stack (``slinky dev up``). In a fresh namespace it creates ``--workloads`` single-pod workloads at
``--rate`` pods/s. The stack's few bridge nodes run the first pods (until deleted); every other pod gets a
pending Slurm job. Then it measures, with everything open:

* the bridge worker's and the Temporal server's memory (RSS), and the Temporal database on disk;
* ``slinky workloads list`` (the namespace's lifecycles) and ``slinky workloads why POD`` (a pending pod), wall
  time as a user runs them, against ``squeue``-like raw reads of the same jobs from slurmrestd: right after the
  last pod got its job (the worker still labelling, the machine saturated), and again at rest: once the stack's
  processes use less than ``REST_CORES`` of CPU over 5 s (``--rest-wait`` seconds at most; 0 skips it), as a user
  of a cluster with that many workloads open asks them;
* freeing nodes: the running pods are deleted; time until as many queued pods are bound, against Slurm's
  scheduling interval;
* deleting everything: every pod deleted at once; time until no job of the run is live in Slurm and no pod is
  left (no stuck finalizer).

``--kill-at F`` sends ``kill -9`` to the bridge worker when a fraction F of the pods exists and restarts it with
``slinky dev up``; the run then checks that nothing was lost (every pod got exactly one job). Progress is printed
to stderr every few seconds. Usage::

    .venv/bin/python -m bench.scale --workloads 10000 --rate 25 --kill-at 0.5
    .venv/bin/python -m bench.scale --workloads 200 --rate 20        # a short run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import CpuMeter, Progress, cpu_seconds, run_cancellable, slurm_rest
from slinky import wellknown
from slinky.bridge.admission import managed_node_toleration
from slinky.clients.errors import KubeError, KubeUnavailable
from slinky.clients.kube import KubeClient, pod_path
from slinky.dev import stack

REPO = Path(__file__).resolve().parents[1]
REST_CORES = 0.8
"""The stack is at rest when its processes together use less than this many cores over 5 s (of the machine's 2):
with 10,000 open workloads the job watcher's polls and the lifecycles' re-checks never stop."""
LIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED")


REST_SAMPLE_SECONDS = 30.0
"""Once at rest (or after ``--rest-wait``): each process's CPU is measured over this long."""


def rss_mib(pid: int | None) -> float | None:
    """Resident memory of a process in MiB, None when it is gone."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def pid_of(name: str) -> int | None:
    try:
        return int((stack.STATE / "pids" / f"{name}.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def disk_mib(prefix: Path) -> float:
    return round(sum(p.stat().st_size for p in prefix.parent.glob(prefix.name + "*")) / 2**20, 1)


def timed(*argv: str) -> tuple[float, str]:
    """Wall seconds and output of a command run as a user would."""
    started = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=stack.env_values(), timeout=300)
    return round(time.monotonic() - started, 2), out.stdout + out.stderr


class Scale:
    def __init__(self, env: dict[str, str], args: argparse.Namespace) -> None:
        self.env, self.args = env, args
        self.rest = slurm_rest(env, timeout=120)
        self.kube = KubeClient.from_kubeconfig(env["KUBECONFIG"])
        self.namespace = f"bench-scale-{uuid.uuid4().hex[:6]}"
        self.progress = Progress("bench.scale")
        self.created = 0
        self.pods: dict[str, dict[str, Any]] = {}
        self.jobs: set[int] = set()
        self.live_before = 0
        self.counts = {"with_job": 0, "bound": 0}

    # ----------------------------------------------------------------------------------------------- reads
    async def states(self) -> dict[int, list[str]]:
        """Every job's state (``GET jobs/state``: a few bytes per job)."""
        r = await self.rest.get("/jobs/state")
        return {int(j["job_id"]): list(j["state"]) for j in r.json().get("jobs", [])}

    async def refresh_pods(self) -> None:
        items = (await self.kube.get(pod_path(self.namespace)))["items"]
        self.pods = {p["metadata"]["name"]: p for p in items}
        for pod in items:
            job = job_of(pod)
            if job:
                self.jobs.add(int(job))

    def bound(self) -> list[str]:
        return [n for n, p in self.pods.items() if p["spec"].get("nodeName")]

    def labelled(self) -> int:
        return sum(1 for p in self.pods.values() if job_of(p))

    # ----------------------------------------------------------------------------------------------- phases
    async def create(self) -> dict[str, Any]:
        count, rate = self.args.workloads, self.args.rate
        kill_at = int(count * self.args.kill_at) if self.args.kill_at else None
        killed: dict[str, Any] = {}
        sem = asyncio.Semaphore(16)
        failures = 0

        async def one(i: int) -> None:
            nonlocal failures
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"w{i}", "namespace": self.namespace},
                "spec": {
                    "schedulerName": wellknown.SCHEDULER_NAME,
                    "restartPolicy": "Never",
                    # What the admission webhook adds in a managed namespace (not added at bind).
                    "tolerations": [managed_node_toleration(wellknown.SCHEDULER_NAME)],
                    "containers": [{"name": "c", "image": "busybox"}],
                },
            }
            async with sem:
                for _ in range(20):  # a create refused while the apiserver is busy is retried, as a controller would
                    try:
                        await self.kube.create(pod_path(self.namespace), body)
                        self.created += 1
                        return
                    except KubeError:
                        await asyncio.sleep(0.5)
                failures += 1

        meter = CpuMeter.of_pid_files(stack.STATE / "pids")
        meter.start()
        started = time.monotonic()
        tasks: list[asyncio.Task[None]] = []
        counting = asyncio.create_task(self._keep_counting())
        with self.progress.ticking(f"creating {count} pods at {rate:g}/s", self._counts):
            for i in range(count):
                await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
                tasks.append(asyncio.create_task(one(i)))
                if kill_at is not None and i == kill_at:
                    killed = await self.kill_worker()
            await asyncio.gather(*tasks)
        created_s = time.monotonic() - started
        # Every pod gets its job: labelled (or bound) within the deadline.
        deadline = time.monotonic() + self.args.deadline
        with self.progress.ticking("waiting for every pod's job", self._counts):
            while time.monotonic() < deadline and self.counts["with_job"] < self.created:
                await asyncio.sleep(2)
        counting.cancel()
        cpu = meter.stop()
        await self.refresh_pods()
        return {
            "cpu_seconds": {name: round(s, 1) for name, s in cpu.items()},
            "created": self.created,
            "create_failures": failures,
            "create_seconds": round(created_s, 1),
            "all_submitted_seconds": round(time.monotonic() - started, 1),
            "labelled": self.labelled(),
            "bound": len(self.bound()),
            "kill": killed,
        }

    def _counts(self) -> str:
        return f"{self.created} created, {self.counts['with_job']} with a job, {self.counts['bound']} bound"

    async def _count(self, **params: str) -> int:
        """How many pods match, counted in pages of 1,000 (the API server leaves ``remainingItemCount`` unset
        when a selector is given)."""
        count, token = 0, ""
        while True:
            page = await self.kube.get(pod_path(self.namespace), {"limit": "1000", **params, "continue": token})
            count += len(page["items"])
            token = page["metadata"].get("continue") or ""
            if not token:
                return count

    async def _keep_counting(self) -> None:
        while True:
            with contextlib.suppress(KubeError):
                self.counts["with_job"] = await self._count(labelSelector=wellknown.LABEL_SLURM_JOB_ID)
                self.counts["bound"] = await self._count(fieldSelector="spec.nodeName!=")
            await asyncio.sleep(5)

    async def kill_worker(self) -> dict[str, Any]:
        pid = stack.kill("bridge-worker")
        at = time.monotonic()
        self.progress.phase(f"kill -9 of the bridge worker (pid {pid}); restarting it with slinky dev up")
        up = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "slinky.cli", "dev", "up"], capture_output=True, cwd=REPO
        )
        return {"pid": pid, "restarted": up.returncode == 0, "restart_seconds": round(time.monotonic() - at, 1)}

    async def measure_open(self) -> dict[str, Any]:
        """Memory, disk and the two commands, with every workload open."""
        worker, temporal = pid_of("bridge-worker"), pid_of("temporal")
        pending = next((n for n, p in self.pods.items() if not p["spec"].get("nodeName")), None)
        self.progress.phase(f"measuring with {len(self.pods)} open workloads")
        cli = (".venv/bin/slinky", "workloads", "-n", self.namespace)
        listing = [timed(*cli, "list") for _ in range(3)]
        why = [timed(*cli, "why", pending) for _ in range(3) if pending]
        rest: dict[str, Any] = {}
        if self.args.rest_wait > 0:
            waited, cores = await self._at_rest(self.args.rest_wait)
            rest = {
                "rest_after_s": waited,
                "rest_cores": cores,
                "rest_cpu_ms_per_s": await self._cpu_per_process(REST_SAMPLE_SECONDS),
                "list_seconds_at_rest": [timed(*cli, "list")[0] for _ in range(3)],
                "why_seconds_at_rest": [timed(*cli, "why", pending)[0] for _ in range(3) if pending],
            }
        started = time.monotonic()
        states = await self.states()
        raw_s = time.monotonic() - started
        live = sum(1 for s in states.values() if any(x in LIVE for x in s))
        return {
            "worker_rss_mib": rss_mib(worker),
            "worker_cpu_s": cpu_seconds(worker) if worker else None,
            "temporal_rss_mib": rss_mib(temporal),
            "temporal_db_mib": disk_mib(stack.STATE / "temporal.db"),
            "slurmctld_rss_mib": rss_mib(pid_of("slurmctld")),
            "list_seconds": [t for t, _ in listing],
            "list_rows": max(0, len(listing[-1][1].splitlines()) - 1),
            "why_seconds": [t for t, _ in why],
            "why_example": why[-1][1].strip()[:200] if why else "",
            "raw_job_states_seconds": round(raw_s, 3),
            "live_jobs_in_slurm": live,
            # One live job per pod, no more: a double or an orphan shows here (nothing else runs meanwhile).
            "extra_live_jobs": live - self.live_before - len(self.pods),
            **rest,
        }

    async def _at_rest(self, limit: float) -> tuple[float | None, float]:
        """Wait until the stack's processes use less than ``REST_CORES`` over 5 s: seconds waited (None when
        ``limit`` passed first) and the cores they used in the last 5 s."""
        started = time.monotonic()
        cores = 0.0
        with self.progress.ticking("waiting for the stack to come to rest", lambda: f"{cores:.2f} cores busy"):
            while time.monotonic() - started < limit:
                meter = CpuMeter.of_pid_files(stack.STATE / "pids")
                meter.start()
                await asyncio.sleep(5)
                cores = round(sum(v for k, v in meter.stop().items() if k != "benchmark") / 5, 2)
                if cores < REST_CORES:
                    return round(time.monotonic() - started, 1), cores
        return None, cores

    async def _cpu_per_process(self, seconds: float) -> dict[str, float]:
        """Each stack process's CPU milliseconds per second over ``seconds``: where a stack at rest spends."""
        meter = CpuMeter.of_pid_files(stack.STATE / "pids")
        meter.start()
        with self.progress.ticking(f"CPU of each process over {seconds:.0f} s", lambda: ""):
            await asyncio.sleep(seconds)
        return {name: round(1000 * used / seconds, 1) for name, used in meter.stop().items() if name != "benchmark"}

    async def free_nodes(self) -> dict[str, Any]:
        """Delete the running pods; time until as many queued pods are bound."""
        await self.refresh_pods()
        running = self.bound()
        before = set(running)
        for name in running:
            with contextlib.suppress(KubeError):
                await self.kube.delete(pod_path(self.namespace, name), grace_seconds=0)
        started = time.monotonic()
        newly: list[str] = []
        with self.progress.ticking(f"freeing {len(running)} nodes", lambda: f"{len(newly)} queued pods bound"):
            while time.monotonic() - started < 120:
                await self.refresh_pods()
                newly = [n for n in self.bound() if n not in before]
                if len(newly) >= len(running):
                    break
                await asyncio.sleep(0.5)
        return {"freed": len(running), "bound_after": len(newly), "seconds": round(time.monotonic() - started, 2)}

    async def delete_all(self) -> dict[str, Any]:
        await self.refresh_pods()
        jobs = set(self.jobs)
        meter = CpuMeter.of_pid_files(stack.STATE / "pids")
        meter.start()
        started = time.monotonic()
        asked = await self._delete_collection()
        live_jobs, left = len(jobs), len(self.pods)
        no_jobs_at: float | None = None
        with self.progress.ticking(
            f"deleting all {left} pods", lambda: f"{left} pods left, {live_jobs} of the run's jobs live"
        ):
            while time.monotonic() - started < self.args.deadline:
                states = await self.states()
                live_jobs = sum(1 for j in jobs if any(x in LIVE for x in states.get(j, [])))
                if not live_jobs and no_jobs_at is None:
                    no_jobs_at = time.monotonic()
                items = (await self.kube.get(pod_path(self.namespace)))["items"]
                left = len(items)
                if not live_jobs and not left:
                    break
                unmarked = sum(1 for pod in items if not pod["metadata"].get("deletionTimestamp"))
                if unmarked and time.monotonic() - asked > 30:
                    # v1.20 stops a collection delete whose client went away (its read timed out at 10,000
                    # pods): 367 pods were never marked. Ask again for those.
                    self.progress.phase(f"{unmarked} pods not marked for deletion; deleting them again")
                    asked = await self._delete_collection()
                await asyncio.sleep(1)
        cpu = meter.stop()
        return {
            "cpu_seconds": {name: round(s, 1) for name, s in cpu.items()},
            "pods_left": left,
            "live_jobs_left": live_jobs,
            "to_no_live_job_seconds": round(no_jobs_at - started, 1) if no_jobs_at else None,
            "to_no_pod_seconds": round(time.monotonic() - started, 1),
        }

    async def _delete_collection(self) -> float:
        """Every pod of the namespace deleted (one collection delete); when it was asked (``time.monotonic``)."""
        asked = time.monotonic()
        try:
            await self.kube.request("DELETE", pod_path(self.namespace), params={"gracePeriodSeconds": "0"})
        except KubeUnavailable as err:
            # 10,000 pods take the API server longer than the client's read timeout.
            print(f"[bench.scale] deleting the pods: {err}; asking again for any not marked", file=sys.stderr)
        return asked

    async def check_lost(self) -> dict[str, Any]:
        """Every pod has its job (the label the bridge writes with it), and no two pods share one."""
        await self.refresh_pods()
        ids = [int(job) for p in self.pods.values() if (job := job_of(p))]
        return {
            "pods": len(self.pods),
            "without_job": len(self.pods) - len(ids),
            "shared_job_ids": len(ids) - len(set(ids)),
        }

    async def run(self) -> dict[str, Any]:
        results: dict[str, Any] = {"workloads": self.args.workloads, "namespace": self.namespace}
        before = await self.states()
        self.live_before = results["live_jobs_before"] = sum(1 for s in before.values() if any(x in LIVE for x in s))
        results["worker_rss_mib_before"] = rss_mib(pid_of("bridge-worker"))
        await self.kube.create("/api/v1/namespaces", {"metadata": {"name": self.namespace}})
        try:
            # Each phase's figures are written as soon as it ends: a run of an hour keeps what it measured.
            for phase, measure in (
                ("create", self.create),
                ("lost", self.check_lost),
                ("open", self.measure_open),
                ("free_nodes", self.free_nodes),
                ("delete_all", self.delete_all),
            ):
                results[phase] = await measure()
                self.save(results)
            after = await self.states()
            results["live_jobs_after"] = sum(1 for s in after.values() if any(x in LIVE for x in s))
            results["worker_rss_mib_after"] = rss_mib(pid_of("bridge-worker"))
        finally:
            with contextlib.suppress(KubeError):
                await self.kube.delete(f"/api/v1/namespaces/{self.namespace}")
            await self.rest.aclose()
            await self.kube.aclose()
        return results

    def save(self, results: dict[str, Any]) -> None:
        """The figures so far to ``--json`` (if given) and to stderr."""
        print(f"[bench.scale] so far: {json.dumps(results)}", file=sys.stderr)
        if self.args.json:
            Path(self.args.json).write_text(json.dumps(results, indent=2))


def job_of(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(wellknown.LABEL_SLURM_JOB_ID)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=10000)
    parser.add_argument("--rate", type=float, default=25.0, help="pods created per second")
    parser.add_argument("--kill-at", type=float, default=0.0, help="kill -9 the bridge worker at this fraction")
    parser.add_argument("--deadline", type=float, default=1800.0, help="seconds for each wait")
    parser.add_argument(
        "--rest-wait", type=float, default=300.0, help="seconds to wait for the stack to come to rest (0: skip)"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if stack.status(quiet=True) != 0:
        print("bench.scale: the stack is not healthy; run `slinky dev up` first", file=sys.stderr)
        return 2
    results = asyncio.run(run_cancellable(lambda: Scale(stack.load_env_file(), args).run()))
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    checks = (
        results["lost"]["without_job"],
        results["lost"]["shared_job_ids"],
        results["open"]["extra_live_jobs"],
        results["delete_all"]["pods_left"],
        results["delete_all"]["live_jobs_left"],
    )
    return 1 if any(checks) else 0


if __name__ == "__main__":
    sys.exit(main())
