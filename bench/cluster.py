"""Managed-cluster benchmark: a Slurm cluster made from custom resources vs the same daemons started by hand, one run.

Needs the local stack (``slinky dev up``) with its real Kubernetes nodes ``slinky-real-1..4`` (kubelet and
containerd on this host, pulling the project's Slurm images under upstream's names from the stack's registry).
The run makes a Kubernetes namespace of its own, annotated so that its pods go to the real nodes
(``slinky.dev.real_nodes.namespace_annotations``), runs its own operator (``python -m workers.operator``, scoped
to that namespace, its own task queue), and measures:

1. **apply -> first job RUNNING.** ``kubectl apply`` of two key Secrets, a Controller, a RestApi and a NodeSet of
   one replica (in that order, as tests/integration/test_managed_cluster.py, with upstream's image names
   ``ghcr.io/slinkyproject/{slurmctld,slurmrestd,slurmd}:26.05-ubuntu26.04``); as soon as ``scontrol ping``
   inside the container of pod ``slurm-controller-0`` says UP, ``sbatch -N1 --wrap "sleep 1"`` (from /tmp,
   output to /dev/null) from inside it, then ``scontrol show job`` from inside until the job runs. The pods'
   milestones are reported too. **By hand**, the baseline (bench/by_hand.py): the ConfigMap ``slurm-config``
   the operator rendered, the same keys, and the pods' own containers for each daemon's entry point, arguments,
   environment, user and volume layout, but no Kubernetes, no operator and no container runtime: slurmctld,
   then (once it answers) one ``slurmd -Z``, each from the stack's Slurm chroot (the images are built from it)
   in a network namespace of its own (``slinky-bench-<run>-ctld`` and ``-node``, joined by a veth pair,
   198.18.0.0/24), the same submit and the same poll.
2. **config change -> new config running.** ``extraConf`` patched with a new ``MaxJobCount`` each time, until the
   Controller's ``ConfigValid`` is ``Applied`` naming the new hash and ``scontrol show config`` inside the (new)
   slurmctld container shows the value; with the default restart mode (a new pod), then with ``spec.inplaceReconfigure:
   true`` (``scontrol reconfigure`` through slurmrestd, no new pod). The ControllerReconfigure workflow's end is
   reported apart: ``applied`` (verified; its time is reported too) or ``rolled-back`` (counted, not timed). By
   hand: the new slurm.conf written, then slurmctld restarted (SIGTERM, started again) or ``scontrol
   reconfigure``, until ``scontrol show config`` shows the value.
3. **controller pod deleted -> slurmrestd answers again.** Pod ``slurm-controller-0`` deleted; once its slurmctld
   process is gone, ``GET /slurm/v0.0.44/ping/`` through the RestApi's pod address (Endpoints of
   ``slurm-restapi``, a JWT minted from the Controller's key) until ``responding: true``. By hand: SIGTERM to
   slurmctld, started again on the same state directory, until ``scontrol ping`` inside says UP.

Commands inside a slurmctld (the container's or ours) run as ``kubectl exec`` runs them in the controller's
container (its namespaces and root, its user ``slurm``, uid 401), but entered from this host with ``nsenter``
into the slurmctld process: the real nodes' containerd runs the containers here, and the process is found by
its name and its pod's cgroup (``pod<uid>``). Not ``kubectl exec`` itself: it takes ~0.13 s a command (kubectl's
start, the API server, the kubelet's stream) against ~0.01 s, which would be added to every poll of the
managed side only; both sides are polled the same way. A command that may hang (a name that does not resolve
yet, a slurmctld that is not there) is started again every 0.1 s, several at once, so that one hanging never
hides the next that would answer.

Everything it started is stopped at the end, also on an error, Ctrl-C or SIGTERM: its daemons by PID, its network
namespaces (and mount points it made in the chroot), its custom resources (the NodeSet scaled to 0 first: its
pod's preStop removes its Slurm node; then the Controller), the operator by PID, workflows of the run's namespace
still running, the namespace. Usage::

    .venv/bin/python -m bench.cluster                         # 10 config changes per mode, 5 pod deletions
    .venv/bin/python -m bench.cluster --quick --json out.json # 2 and 1: a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import json
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.by_hand import HOST_ENV, IMAGE_PATH, NETNS_PREFIX, ByHand, bench_namespaces  # noqa: E402
from bench.common import Observer, run_cancellable  # noqa: E402
from slinky.clients.errors import KubeError, KubeNotFound  # noqa: E402
from slinky.clients.kube import KubeClient  # noqa: E402
from slinky.clients.slurm import jwt  # noqa: E402
from slinky.dev import real_nodes, stack  # noqa: E402
from slinky.dev.procs import start_time  # noqa: E402
from slinky.operator.cluster_objects import ANNOTATION_SLURM_CONFIG_HASH  # noqa: E402
from slinky.operator.reconfigure import workflow_id as reconfigure_workflow_id  # noqa: E402

Obj = dict[str, Any]
GROUP_VERSION = "slinky.slurm.net/v1beta1"
API = f"/apis/{GROUP_VERSION}"
CONTROLLER = "slurm"
NODESET = "cpu"
CTLD_POD = f"{CONTROLLER}-controller-0"
NODE_POD = f"{NODESET}-0"
CONFIG_MAP = f"{CONTROLLER}-config"
RESTAPI_SERVICE = f"{CONTROLLER}-restapi"
EXTRA_CONF = "SchedulerParameters=batch_sched_delay=0,sched_interval=1"
JOB = ["sbatch", "--parsable", "--chdir=/tmp", "-N1", "-o", "/dev/null", "--wrap", "sleep 1"]
"""The first job, run as the submitting user ``slurm``: from /tmp (``/`` is root's), its output nowhere."""
SLURM_UID = 401
"""The controller container's ``runAsUser`` (upstream's images' SlurmUser), the user commands inside run as; the
stack's chroot has its ``slurm`` at the same uid."""
RAN = frozenset({"RUNNING", "COMPLETING", "COMPLETED"})
ENDED_BADLY = frozenset({"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "DEADLINE"})
POLL = 0.05
"""Seconds between two polls (each ``scontrol`` inside a slurmctld takes ~10-50 ms more)."""
RACE_PARALLEL = 8
"""Slurm commands that may hang (``race``) at once."""
BY_HAND_PAUSE = 1.0
"""Seconds between two by-hand rounds (not timed): slurmctld stopped right after it started waits up to 3 s for
the RPC threads it had just begun (``agent_fini: left 3 agent threads active``); the operator's rounds are seconds
apart anyway."""

_START = time.monotonic()


def image(name: str) -> str:
    """Upstream's image name: the real nodes pull the project's image under it from the stack's registry."""
    return f"ghcr.io/slinkyproject/{name}:26.05-ubuntu26.04"


def log(message: str) -> None:
    print(f"[{time.monotonic() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- statistics
def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (p50 of 10 values is the 5th, p90 the 9th)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def dist(values: Sequence[float]) -> Obj:
    return {
        "p50_s": round(pct(values, 0.5), 3),
        "p90_s": round(pct(values, 0.9), 3),
        "max_s": round(max(values), 3) if values else float("nan"),
        "n": len(values),
    }


def ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b and math.isfinite(a) and math.isfinite(b) else float("nan")


# ------------------------------------------------------------------------------------------- commands
@dataclasses.dataclass
class Ran:
    code: int
    out: str
    err: str


def kill_group(pid: int) -> None:
    """SIGKILL a command started in a session of its own, and what it started: ``nsenter --pid`` runs the command
    as its child, in the target's PID namespace but in the same process group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_argv(argv: Sequence[str], timeout: float) -> Ran | None:
    """Run a command; None when it did not end within ``timeout`` (then it is killed)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=HOST_ENV,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        kill_group(proc.pid)
        await proc.wait()
        return None
    except asyncio.CancelledError:
        kill_group(proc.pid)
        raise
    return Ran(proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))


def inside_argv(pid: int, command: Sequence[str]) -> list[str]:
    """``command`` as ``kubectl exec`` runs it in the controller's container, in the namespaces and root of process
    ``pid`` (a container's slurmctld: the container's root; ours: the chroot): as the container's user, a clean
    environment with the images' PATH, from /tmp."""
    return [
        *("nsenter", "--target", str(pid), "--mount", "--net", "--uts", "--ipc", "--pid", "--root"),
        *("--setuid", str(SLURM_UID), "--setgid", str(SLURM_UID), "--"),
        *("/usr/bin/env", "-i", "-C", "/tmp", f"PATH={IMAGE_PATH}", "HOME=/nonexistent"),
        *command,
    ]


@dataclasses.dataclass(frozen=True)
class Proc:
    """One process for good: its PID and start time."""

    pid: int
    starttime: str

    def alive(self) -> bool:
        return start_time(self.pid) == self.starttime


def pod_process(pod_uid: str, name: str) -> Proc | None:
    """The process ``name`` (``is_daemon``) of a container of pod ``pod_uid`` on a real node: the nodes' containerd
    runs containers on this host, each in a cgroup under ``.../pod<uid>/<container id>``."""
    marker = f"/pod{pod_uid}/"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if marker not in (entry / "cgroup").read_text() or not is_daemon(int(entry.name), name):
                continue
            started = start_time(int(entry.name))
            if started is not None:
                return Proc(int(entry.name), started)
    return None


def is_daemon(pid: int, name: str) -> bool:
    """Whether process ``pid`` has become ``name`` (ours starts as ``ip netns exec``, then its mount script and its
    entry point; a container's as its entry point): its ``argv[0]``, not its ``comm``, which a reconfigure changes
    (slurmctld executes itself again in place, as ``/proc/self/exe``: ``slurmctld-wlm``, Debian's binary)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return os.path.basename(argv0.decode(errors="replace")) == name


Inside = Callable[[Sequence[str], float], Awaitable[Ran | None]]
"""Runs a command inside a slurmctld (a pod's or ours); None: not running yet, or timed out."""


def job_state(text: str) -> str:
    found = re.search(r"\bJobState=(\S+)", text)
    return found.group(1) if found else ""


def config_value(text: str, key: str) -> str | None:
    found = re.search(rf"^{re.escape(key)}\s*=\s*(\S+)", text, re.MULTILINE)
    return found.group(1) if found else None


async def until(predicate: Callable[[], Awaitable[Any]], timeout: float, what: str, interval: float = POLL) -> Any:
    """Poll ``predicate`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(interval)


async def race(attempt: Callable[[], Coroutine[Any, Any, bool]], timeout: float, what: str, every: float = 0.1) -> None:
    """Start ``attempt`` every ``every`` seconds, several at once, until one returns True: a Slurm command may
    hang for seconds (``getaddrinfo`` retries while the controller's Service has no address yet, a connect to a
    slurmctld that is not there), and one that hangs must not hide the next one that would succeed."""
    deadline = time.monotonic() + timeout
    running: set[asyncio.Task[bool]] = set()
    next_start = time.monotonic()
    try:
        while True:
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"{what}: not within {timeout:.0f} s")
            if now >= next_start and len(running) < RACE_PARALLEL:
                running.add(asyncio.create_task(attempt()))
                next_start = now + every
            wait = every if len(running) >= RACE_PARALLEL else max(0.0, next_start - time.monotonic())
            if not running:
                await asyncio.sleep(wait)
                continue
            done, pending = await asyncio.wait(running, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            running = set(pending)
            if any(task.result() for task in done):
                return
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


async def pings(inside: Inside) -> bool:
    ran = await inside(["scontrol", "ping"], 10)
    return ran is not None and ran.code == 0 and " is UP" in ran.out


async def shows(inside: Inside, key: str, value: str) -> bool:
    ran = await inside(["scontrol", "show", "config"], 10)
    return ran is not None and config_value(ran.out, key) == value


async def first_job(inside: Inside, started: float, on_answer: Callable[[], Awaitable[None]] | None = None) -> Obj:
    """slurmctld answers (``scontrol ping`` UP) -> ``sbatch`` accepted -> the job RUNNING, seconds from
    ``started``; ``on_answer`` runs once slurmctld answers, before the submit."""

    async def submit() -> str | None:
        ran = await inside(JOB, 15)
        job = ran.out.strip().split(";")[0] if ran is not None and ran.code == 0 else ""
        return job if job.isdigit() else None

    await race(lambda: pings(inside), 300, "slurmctld answers")
    answered = time.monotonic()
    if on_answer is not None:
        await on_answer()
    job = await until(submit, 120, "sbatch accepted")
    submitted = time.monotonic()
    states: list[str] = []

    async def ran() -> bool:
        out = await inside(["scontrol", "show", "job", job], 5)
        state = job_state(out.out) if out is not None else ""
        if state and (not states or states[-1] != state):
            states.append(state)
        if state in ENDED_BADLY:
            raise RuntimeError(f"job {job} ended {state}: {out.out if out else ''}")
        return state in RAN

    await until(ran, 180, f"job {job} RUNNING")
    running = time.monotonic()
    return {
        "slurmctld_answers_s": round(answered - started, 3),
        "job_submitted_s": round(submitted - started, 3),
        "job_running_s": round(running - started, 3),
        "job": job,
        "states_seen": states,
    }


# ------------------------------------------------------------------------------------------- pods
@dataclasses.dataclass
class Seen:
    name: str
    uid: str
    created: float
    ready: float | None = None
    terminating: float | None = None
    deleted: float | None = None


class PodWatch(Observer):
    """A watch on the namespace's pods: per pod uid, when it was first seen, Ready, terminating, deleted."""

    wait_synced = True

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        super().__init__()
        self.kube, self.namespace = kube, namespace
        self.pods: dict[str, Seen] = {}

    def named(self, name: str, after: float = 0.0) -> list[Seen]:
        return sorted((s for s in self.pods.values() if s.name == name and s.created >= after), key=lambda s: s.created)

    def _see(self, kind: str, pod: Obj, now: float) -> None:
        meta = pod["metadata"]
        seen = self.pods.setdefault(meta["uid"], Seen(meta["name"], meta["uid"], now))
        if kind == "DELETED":
            seen.deleted = seen.deleted or now
            seen.terminating = seen.terminating or now
            return
        if meta.get("deletionTimestamp"):
            seen.terminating = seen.terminating or now
        if pod_ready(pod):
            seen.ready = seen.ready or now

    async def _run(self) -> None:
        async for kind, obj in self.kube.list_watch(f"/api/v1/namespaces/{self.namespace}/pods"):
            now = time.monotonic()
            if kind == "SYNC":
                for pod in obj["items"]:
                    self._see("ADDED", pod, now)
                self.synced.set()
            else:
                self._see(kind, obj, now)


def pod_ready(pod: Obj | None) -> bool:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def condition(obj: Obj, type_: str) -> Obj:
    return next((dict(c) for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), {})


def other_operators(own: int | None, namespace: str) -> list[int]:
    """Other operator processes on this machine that watch this run's namespace (every namespace, or a list with
    it): they would act on the run's objects too."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (own, os.getpid()):
            continue
        with contextlib.suppress(OSError, ValueError):
            if b"workers.operator" not in (entry / "cmdline").read_bytes().split(b"\0"):
                continue
            environ = dict(
                item.split("=", 1)
                for item in (entry / "environ").read_text(errors="replace").split("\0")
                if "=" in item
            )
            scoped = json.loads(environ.get("SLINKY_OPERATOR__NAMESPACES") or "[]")
            if not scoped or namespace in scoped:
                found.append(int(entry.name))
    return sorted(found)


# ------------------------------------------------------------------------------------------- the benchmark
class Bench:
    def __init__(self, env: dict[str, str], args: argparse.Namespace) -> None:
        self.env, self.args = env, args
        self.run_id = uuid.uuid4().hex[:5]
        self.namespace = f"bench-cl-{self.run_id}"
        self.task_queue = f"bench-cluster-{self.run_id}"
        self.kube = KubeClient.from_kubeconfig(env["KUBECONFIG"])
        self.slurm_key = secrets.token_hex(32)
        self.jwt_key = secrets.token_hex(32)
        self.tmp = Path(tempfile.mkdtemp(prefix=f"bench-cluster-{self.run_id}-"))
        self.log_dir = stack.STATE / "logs" / "bench-cluster"
        self.operator_log = self.log_dir / f"{self.run_id}-operator.log"
        self.root = stack.slurm_root()
        self.hand = ByHand(self.run_id, self.root, self.tmp / "by-hand", self.log_dir)
        self.ctld_seen: tuple[str, Proc] | None = None
        """The pod uid and slurmctld process ``ctld_record`` found last."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.made_namespace = False
        self.temporal: Any = None

    # ------------------------------------------------------------------------------- kube paths
    def path(self, plural: str, name: str = "") -> str:
        core = plural in ("pods", "configmaps", "endpoints", "secrets")
        prefix = "/api/v1" if core else "/apis/apps/v1" if plural == "statefulsets" else API
        return f"{prefix}/namespaces/{self.namespace}/{plural}" + (f"/{name}" if name else "")

    async def get(self, plural: str, name: str) -> Obj | None:
        try:
            return await self.kube.get(self.path(plural, name))
        except KubeNotFound:
            return None

    def manifests(self) -> list[Obj]:
        """What a user applies: the two key Secrets, a Controller, a RestApi and a NodeSet of one replica, with
        upstream's image names."""
        return [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "slurm-auth-slurm"},
                "stringData": {"slurm.key": self.slurm_key},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "slurm-auth-jwt"},
                "stringData": {"jwt.key": self.jwt_key},
            },
            {
                "apiVersion": GROUP_VERSION,
                "kind": "Controller",
                "metadata": {"name": CONTROLLER},
                "spec": {
                    "slurmKeyRef": {"name": "slurm-auth-slurm", "key": "slurm.key"},
                    "jwtKeyRef": {"name": "slurm-auth-jwt", "key": "jwt.key"},
                    "slurmctld": {"image": image("slurmctld")},
                    "extraConf": EXTRA_CONF,
                    "persistence": {"enabled": True, "existingClaim": ""},
                },
            },
            {
                "apiVersion": GROUP_VERSION,
                "kind": "RestApi",
                "metadata": {"name": CONTROLLER},
                "spec": {"controllerRef": {"name": CONTROLLER}, "slurmrestd": {"image": image("slurmrestd")}},
            },
            {
                "apiVersion": GROUP_VERSION,
                "kind": "NodeSet",
                "metadata": {"name": NODESET},
                "spec": {
                    "controllerRef": {"name": CONTROLLER},
                    "replicas": 1,
                    "partition": {"enabled": True, "config": "Default=YES MaxTime=UNLIMITED"},
                    "slurmd": {"image": image("slurmd"), "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                },
            },
        ]

    # ------------------------------------------------------------------------------- set-up
    async def setup(self) -> None:
        annotations = real_nodes.namespace_annotations(stack.REAL_NODE_TAINT)  # its pods go to the real nodes
        await self.kube.create("/api/v1/namespaces", {"metadata": {"name": self.namespace, "annotations": annotations}})
        self.made_namespace = True
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **self.env,
            "PATH": os.environ["PATH"],
            "SLINKY_OPERATOR__TASK_QUEUE": self.task_queue,
            "SLINKY_OPERATOR__NAMESPACES": json.dumps([self.namespace]),
        }
        with self.operator_log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "workers.operator"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        from temporalio.client import Client

        self.temporal = await Client.connect(
            self.env["TEMPORAL_ADDRESS"], namespace=self.env.get("TEMPORAL_NAMESPACE", "default")
        )
        await self.operator_ready()

    def operator_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"the operator exited with {self.proc.returncode}; see {self.operator_log}")

    async def operator_ready(self) -> None:
        """A RestApi naming no Controller: once the operator writes its status, its watches are synced and its
        reconcilers run. Deleted before anything is measured."""
        probe = {
            "apiVersion": GROUP_VERSION,
            "kind": "RestApi",
            "metadata": {"name": "bench-probe"},
            "spec": {"controllerRef": {"name": "bench-nowhere"}},
        }
        await self.kube.create(self.path("restapis"), probe)

        async def reported() -> bool:
            self.operator_alive()
            obj = await self.get("restapis", "bench-probe")
            return bool(condition(obj or {}, "Ready"))

        await until(reported, 90, f"the operator's first reconcile (see {self.operator_log})", 0.1)
        await self.kube.delete(self.path("restapis", "bench-probe"))

    async def kubectl_apply(self, objects: list[Obj]) -> None:
        kubectl = shutil.which("kubectl") or "kubectl"
        proc = await asyncio.create_subprocess_exec(
            kubectl,
            "-n",
            self.namespace,
            "apply",
            "-f",
            "-",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "KUBECONFIG": self.env["KUBECONFIG"]},
        )
        _, err = await asyncio.wait_for(proc.communicate(yaml.safe_dump_all(objects).encode()), 60)
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl apply: {err.decode()}")

    # ------------------------------------------------------------------------------- inside the pods
    async def in_pod(self, command: Sequence[str], timeout: float) -> Ran | None:
        """``kubectl exec -n NS slurm-controller-0 -- CMD``, entered with ``nsenter`` (``inside_argv``); None until
        the pod's slurmctld process runs."""
        record = await self.ctld_record()
        if record is None:
            return None
        return await run_argv(inside_argv(record.pid, command), timeout)

    async def in_hand(self, command: Sequence[str], timeout: float) -> Ran | None:
        pid = self.hand.ctld_pid()
        if pid is None or not is_daemon(pid, "slurmctld"):
            return None
        return await run_argv(inside_argv(pid, command), timeout)

    async def ctld_record(self) -> Proc | None:
        """The slurmctld process of pod ``slurm-controller-0`` (the pod there is now, terminating or not), once its
        container's entry point has become slurmctld; looked up again when the pod or its process changes."""
        pod = await self.get("pods", CTLD_POD)
        if pod is None:
            return None
        uid = str(pod["metadata"]["uid"])
        if self.ctld_seen is not None and self.ctld_seen[0] == uid and self.ctld_seen[1].alive():
            return self.ctld_seen[1]
        found = await asyncio.to_thread(pod_process, uid, "slurmctld")
        self.ctld_seen = (uid, found) if found is not None else None
        return found

    async def steady(self) -> None:
        """The operator has reconciled the Controller's last change, the StatefulSet's rollout is done, and
        slurmctld's pod is Ready and answers."""

        async def reconciled() -> bool:
            """Ready is written by every reconcile (ConfigValid not always: a reconfigure workflow owns it, and a
            rejected config leaves it alone)."""
            self.operator_alive()
            obj = await self.get("controllers", CONTROLLER) or {}
            generation = int(obj.get("metadata", {}).get("generation") or 0)
            return int(condition(obj, "Ready").get("observedGeneration") or -1) >= generation

        async def rolled_out() -> bool:
            sts = await self.get("statefulsets", f"{CONTROLLER}-controller")
            status = (sts or {}).get("status") or {}
            return (
                sts is not None
                and int(status.get("observedGeneration") or 0) >= int(sts["metadata"].get("generation") or 0)
                and status.get("currentRevision") == status.get("updateRevision")
                and int(status.get("readyReplicas") or 0) >= 1
            )

        async def ready() -> bool:
            pod = await self.get("pods", CTLD_POD)
            return pod is not None and not pod["metadata"].get("deletionTimestamp") and pod_ready(pod)

        await until(reconciled, 120, "the operator reconciled the Controller", 0.1)
        await until(rolled_out, 240, "the slurmctld StatefulSet rolled out", 0.1)
        await until(ready, 240, "slurmctld pod Ready", 0.1)
        await race(lambda: pings(self.in_pod), 120, "slurmctld answers")

    # ------------------------------------------------------------------------------- 1. apply -> job
    async def apply_to_job(self) -> Obj:
        seen: dict[str, float] = {}
        async with PodWatch(self.kube, self.namespace) as pods:
            started = time.monotonic()
            await self.kubectl_apply(self.manifests())
            applied = time.monotonic()
            observers = [asyncio.create_task(self.observe_nodeset(seen)), asyncio.create_task(self.observe_rest(seen))]
            try:
                result = await first_job(self.in_pod, started)
            finally:
                for task in observers:
                    task.cancel()
                await asyncio.gather(*observers, return_exceptions=True)
            ctld = pods.named(CTLD_POD, started)
            node = pods.named(NODE_POD, started)
            rest = [s for s in pods.pods.values() if s.name.startswith(RESTAPI_SERVICE) and s.created >= started]

        def at(value: float | None) -> float | None:
            return round(value - started, 3) if value is not None else None

        result.update(
            {
                "kubectl_apply_s": round(applied - started, 3),
                "slurmctld_pods_made": len(ctld),
                "first_slurmctld_pod_s": at(ctld[0].created) if ctld else None,
                "slurmctld_pod_ready_s": at(ctld[-1].ready) if ctld else None,
                "slurmrestd_pod_ready_s": at(rest[0].ready) if rest else None,
                "slurmrestd_ping_responding_s": at(seen.get("rest")),
                "nodeset_controller_ready_s": at(seen.get("nodeset")),
                "slurmd_pod_created_s": at(node[0].created) if node else None,
                "slurmd_pod_ready_s": at(node[0].ready) if node else None,
            }
        )
        return result

    async def observe_nodeset(self, seen: dict[str, float]) -> None:
        """When the NodeSet's ControllerReady first turns True (the operator reached slurmrestd; its pods come
        after that)."""
        while True:
            obj = await self.get("nodesets", NODESET)
            if condition(obj or {}, "ControllerReady").get("status") == "True":
                seen["nodeset"] = time.monotonic()
                return
            await asyncio.sleep(0.1)

    async def observe_rest(self, seen: dict[str, float]) -> None:
        """When slurmrestd first says slurmctld responds (``GET ping`` through the RestApi's pod address)."""
        while True:
            with contextlib.suppress(KubeError, httpx.HTTPError, KeyError, IndexError, TypeError):
                rest = await self.restapi()
                try:
                    await race(functools.partial(self.responding, rest), 300, "slurmrestd ping responding")
                    seen["rest"] = time.monotonic()
                    return
                finally:
                    await rest.aclose()
            await asyncio.sleep(0.1)

    async def by_hand_to_job(self) -> Obj:
        config = await self.get("configmaps", CONFIG_MAP)
        ctld, node = await self.get("pods", CTLD_POD), await self.get("pods", NODE_POD)
        if config is None or ctld is None or node is None:
            raise RuntimeError("the operator's ConfigMap or pods are gone")
        files = {str(k): str(v) for k, v in (config.get("data") or {}).items()}
        keys = {"slurm.key": self.slurm_key, "jwt.key": self.jwt_key}
        started = time.monotonic()
        await asyncio.to_thread(self.hand.prepare, self.namespace, files, keys, ctld, node)
        await asyncio.to_thread(self.hand.start_ctld)

        async def start_node() -> None:
            await asyncio.to_thread(self.hand.start_node)

        result = await first_job(self.in_hand, started, start_node)
        result["config_hash"] = (config["metadata"].get("annotations") or {}).get(ANNOTATION_SLURM_CONFIG_HASH)
        return result

    # ------------------------------------------------------------------------------- 2. config change
    async def config_change(self, value: int, pods: PodWatch) -> Obj:
        """Patch extraConf to ``MaxJobCount=value``: -> ConfigValid Applied naming the new hash, and ``scontrol show
        config`` in the slurmctld pod showing it. The ControllerReconfigure workflow's end apart: ``applied`` (it
        verified slurmctld runs it), or ``rolled-back`` (then the round has no total)."""
        line = f"MaxJobCount={value}"
        before = await self.ctld_record()
        started = time.monotonic()
        await self.kube.patch(self.path("controllers", CONTROLLER), {"spec": {"extraConf": f"{EXTRA_CONF}\n{line}"}})
        times: dict[str, float] = {}

        async def written() -> str | None:
            cm = await self.get("configmaps", CONFIG_MAP)
            if cm is None or line not in (cm.get("data") or {}).get("slurm.conf", "").splitlines():
                return None
            return str((cm["metadata"].get("annotations") or {}).get(ANNOTATION_SLURM_CONFIG_HASH))

        new_hash: str = await until(written, 240, f"ConfigMap with {line}")
        times["configmap_written"] = time.monotonic()

        async def applied() -> bool:
            self.operator_alive()
            cond = condition(await self.get("controllers", CONTROLLER) or {}, "ConfigValid")
            return cond.get("reason") == "Applied" and new_hash in str(cond.get("message"))

        async def condition_side() -> None:
            await until(applied, 300, f"ConfigValid Applied for {line}")
            times["config_valid_applied"] = time.monotonic()

        async def slurm_side() -> None:
            await race(lambda: shows(self.in_pod, "MaxJobCount", str(value)), 300, f"slurmctld runs {line}")
            times["slurmctld_runs_it"] = time.monotonic()

        sides = [asyncio.create_task(condition_side()), asyncio.create_task(slurm_side())]
        try:
            handle = self.temporal.get_workflow_handle(reconfigure_workflow_id(self.namespace, CONTROLLER, new_hash))
            result = await asyncio.wait_for(handle.result(), 300) or {}
            times["workflow_done"] = time.monotonic()
            outcome = str(result.get("outcome"))
            if outcome == "applied":
                await asyncio.wait_for(asyncio.gather(*sides), 300)
        finally:
            for task in sides:
                task.cancel()
            await asyncio.gather(*sides, return_exceptions=True)
        after = await self.ctld_record()
        out: Obj = {"outcome": outcome, "value": value, "hash": new_hash}
        out.update({k + "_s": round(v - started, 3) for k, v in sorted(times.items())})
        if outcome == "applied":
            out["total_s"] = round(max(times["config_valid_applied"], times["slurmctld_runs_it"]) - started, 3)
        else:
            out["message"] = result.get("message")
        out["new_pods"] = len(pods.named(CTLD_POD, started))
        out["same_process"] = bool(before and after and (before.pid, before.starttime) == (after.pid, after.starttime))
        return out

    async def config_changes(self, inplace: bool, base: int) -> Obj:
        toggled: Obj = {}
        async with PodWatch(self.kube, self.namespace) as pods:
            if inplace:  # not measured: whatever the switch itself does to the pod is over before the first patch
                started = time.monotonic()
                await self.kube.patch(self.path("controllers", CONTROLLER), {"spec": {"inplaceReconfigure": True}})
                await self.steady()
                toggled["inplace_switch_s"] = round(time.monotonic() - started, 3)
                toggled["inplace_switch_new_pods"] = len(pods.named(CTLD_POD, started))
            else:
                await self.steady()
            rounds = []
            for i in range(self.args.changes):
                rounds.append(await self.config_change(base + i, pods))
                log(f"  {'in place' if inplace else 'restart'} {i + 1}/{self.args.changes}: {rounds[-1]}")
                await self.steady()
        return {**toggled, "rounds": rounds}

    async def by_hand_config_changes(self, inplace: bool, base: int) -> list[Obj]:
        """The new slurm.conf written (MaxJobCount appended, as the operator renders extraConf), then ``scontrol
        reconfigure`` (in place) or SIGTERM and a new slurmctld, until ``scontrol show config`` shows it."""
        rounds = []
        for i in range(self.args.changes):
            value = base + i
            await asyncio.sleep(BY_HAND_PAUSE)
            await race(lambda: pings(self.in_hand), 60, "by-hand slurmctld answers")
            started = time.monotonic()
            text = self.hand.base_conf.rstrip("\n") + f"\nMaxJobCount={value}\n"
            await asyncio.to_thread(self.hand.write_slurm_conf, text)
            if inplace:
                ran = await self.in_hand(["scontrol", "reconfigure"], 30)
                if ran is None or ran.code != 0:
                    raise RuntimeError(f"by hand: scontrol reconfigure: {ran}")
            else:
                await asyncio.to_thread(self.hand.stop, self.hand.ctld)
                await asyncio.to_thread(self.hand.start_ctld)

            async def runs(v: str = str(value)) -> bool:
                return await shows(self.in_hand, "MaxJobCount", v)

            await race(runs, 120, "by hand: the new config runs")
            rounds.append({"total_s": round(time.monotonic() - started, 3), "value": value})
        return rounds

    # ------------------------------------------------------------------------------- 3. pod deleted
    async def restapi(self) -> httpx.AsyncClient:
        endpoints = await self.kube.get(self.path("endpoints", RESTAPI_SERVICE))
        address = endpoints["subsets"][0]["addresses"][0]["ip"]
        token = jwt.mint(self.jwt_key.encode(), "slurm", 3600)
        return httpx.AsyncClient(
            base_url=f"http://{address}:6820/slurm/v0.0.44",
            headers={"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token},
            timeout=3,
        )

    @staticmethod
    async def responding(rest: httpx.AsyncClient) -> bool:
        try:
            pings = (await rest.get("/ping/")).json().get("pings") or []
        except (httpx.HTTPError, ValueError):
            return False
        return bool(pings) and all(p.get("responding") is True for p in pings)

    async def delete_controller_pod(self, rest: httpx.AsyncClient, pods: PodWatch) -> Obj:
        await self.steady()
        await race(lambda: self.responding(rest), 120, "slurmrestd ping responding before the delete")
        record = await self.ctld_record()
        if record is None:
            raise RuntimeError("no slurmctld process for the pod")
        started = time.monotonic()
        await self.kube.delete(self.path("pods", CTLD_POD))

        async def gone() -> bool:
            return not record.alive()

        await until(gone, 120, "the old slurmctld process gone", 0.01)
        gone_at = time.monotonic()
        await race(lambda: self.responding(rest), 300, "slurmrestd ping responding again")
        back = time.monotonic()
        new = pods.named(CTLD_POD, started)
        return {
            "total_s": round(back - started, 3),
            "old_slurmctld_gone_s": round(gone_at - started, 3),
            "new_pod_created_s": round(new[0].created - started, 3) if new else None,
            "new_pod_ready_s": round(new[0].ready - started, 3) if new and new[0].ready else None,
        }

    async def by_hand_restart(self) -> Obj:
        await asyncio.sleep(BY_HAND_PAUSE)
        await race(lambda: pings(self.in_hand), 60, "by-hand slurmctld answers")
        started = time.monotonic()
        await asyncio.to_thread(self.hand.stop, self.hand.ctld)
        stopped = time.monotonic()
        await asyncio.to_thread(self.hand.start_ctld)
        await race(lambda: pings(self.in_hand), 120, "by-hand slurmctld answers again")
        return {"total_s": round(time.monotonic() - started, 3), "stopped_s": round(stopped - started, 3)}

    # ------------------------------------------------------------------------------- cleanup
    async def cleanup(self) -> Obj:
        left: Obj = {}
        try:
            left["by_hand"] = await asyncio.to_thread(self.hand.cleanup)
        except Exception as err:  # the rest is cleaned up all the same
            left["by_hand"] = f"failed: {err}"
        if self.made_namespace:
            left["pods_left_after_60s"] = await self.delete_resources()
        if self.proc is not None:
            self.proc.terminate()
            try:
                await asyncio.to_thread(self.proc.wait, 15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait, 10)
        if self.temporal is not None:
            try:
                left["workflows_terminated"] = await self.terminate_workflows()
            except Exception as err:
                left["workflows_terminated"] = f"failed: {err}"
        if self.made_namespace and not await self.delete_namespace():
            left["namespace"] = "terminating"
        shutil.rmtree(self.tmp, ignore_errors=True)
        left["bench_netns_left"] = [n for n in bench_namespaces() if n.startswith(f"{NETNS_PREFIX}{self.run_id}-")]
        await self.kube.aclose()
        return left

    async def delete_resources(self) -> int:
        """The NodeSet scaled to 0 first (its pod's preStop drains the node on a slurmctld still there; the
        NodeSet stays in slurm.conf, so no reconfigure starts), then the custom resources, the Controller first;
        wait for their pods to go. The pods left after 60 s."""

        async def pods(name: str | None = None) -> list[Obj]:
            try:
                items: list[Obj] = (await self.kube.get(self.path("pods")))["items"]
            except (KubeError, httpx.HTTPError):
                return []
            return [p for p in items if name is None or p["metadata"]["name"] == name]

        with contextlib.suppress(KubeError, httpx.HTTPError):
            await self.kube.patch(self.path("nodesets", NODESET), {"spec": {"replicas": 0}})
            with contextlib.suppress(TimeoutError):
                await until(lambda: self._none(pods(NODE_POD)), 60, "the slurmd pod gone", 0.2)
        for plural, name in (
            ("controllers", CONTROLLER),
            ("nodesets", NODESET),
            ("restapis", CONTROLLER),
            ("restapis", "bench-probe"),
        ):
            with contextlib.suppress(KubeError, httpx.HTTPError):
                await self.kube.delete(self.path(plural, name))
        with contextlib.suppress(TimeoutError):
            await until(lambda: self._none(pods()), 60, "every pod gone", 0.2)
        return len(await pods())

    @staticmethod
    async def _none(items: Awaitable[list[Obj]]) -> bool:
        return not await items

    async def delete_namespace(self, wait: float = 15.0) -> bool:
        """Delete the run's namespace; whether it is gone within ``wait`` seconds (else it is terminating)."""
        with contextlib.suppress(KubeNotFound):
            await self.kube.delete(f"/api/v1/namespaces/{self.namespace}")
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                await self.kube.get(f"/api/v1/namespaces/{self.namespace}")
            except KubeNotFound:
                return True
            except (KubeError, httpx.HTTPError):
                pass
            await asyncio.sleep(0.5)
        return False

    async def terminate_workflows(self) -> int:
        """Workflows of the run's namespace still running (a reconfigure cut short): they would wait for a task
        queue nobody serves."""
        count = 0
        query = f"SlinkyNamespace='{self.namespace}' AND ExecutionStatus='Running'"
        async for wf in self.temporal.list_workflows(query):
            await self.temporal.get_workflow_handle(wf.id, run_id=wf.run_id).terminate("bench/cluster.py cleanup")
            count += 1
        return count

    # ------------------------------------------------------------------------------- the run
    async def run(self) -> Obj:
        args = self.args
        results: Obj = {
            "namespace": self.namespace,
            "task_queue": self.task_queue,
            "run": self.run_id,
            "changes": args.changes,
            "deletions": args.deletions,
        }
        try:
            log(f"namespace {self.namespace}, operator on task queue {self.task_queue} (log {self.operator_log})")
            await self.setup()
            log("1. apply -> first job RUNNING (operator)")
            results["apply_to_job"] = await self.apply_to_job()
            log(f"   {results['apply_to_job']}")
            log("1. start -> first job RUNNING (by hand)")
            results["by_hand_to_job"] = await self.by_hand_to_job()
            log(f"   {results['by_hand_to_job']}")
            log(f"2. config change x {args.changes}, restart mode")
            results["reconfigure_restart"] = await self.config_changes(False, 20000)
            log(f"2. config change x {args.changes}, in place")
            results["reconfigure_inplace"] = await self.config_changes(True, 30000)
            log("2. by hand: new slurm.conf, slurmctld restarted / scontrol reconfigure")
            results["by_hand_restart_conf"] = await self.by_hand_config_changes(False, 40000)
            results["by_hand_reconfigure"] = await self.by_hand_config_changes(True, 50000)
            log(f"3. controller pod deleted x {args.deletions}")
            rest = await self.restapi()
            deletions = []
            try:
                async with PodWatch(self.kube, self.namespace) as pods:
                    for i in range(args.deletions):
                        deletions.append(await self.delete_controller_pod(rest, pods))
                        log(f"  deletion {i + 1}/{args.deletions}: {deletions[-1]}")
            finally:
                await rest.aclose()
            results["controller_pod_deleted"] = deletions
            log(f"3. by hand: SIGTERM + restart x {args.deletions}")
            results["by_hand_ctld_restart"] = [await self.by_hand_restart() for _ in range(args.deletions)]
            results["other_operator_processes"] = other_operators(self.proc.pid if self.proc else None, self.namespace)
        finally:
            log("cleanup")
            results["cleanup"] = await self.cleanup()
        results["summary"] = summarise(results)
        results["rolled_back"] = {
            mode: sum(1 for x in results[f"reconfigure_{mode}"]["rounds"] if x.get("outcome") != "applied")
            for mode in ("restart", "inplace")
        }
        return results


def summarise(r: Obj) -> Obj:
    def totals(rounds: list[Obj], key: str = "total_s") -> list[float]:
        return [float(x[key]) for x in rounds if x.get(key) is not None and x.get("outcome", "applied") == "applied"]

    out: Obj = {
        "apply_to_job_s": r["apply_to_job"]["job_running_s"],
        "by_hand_to_job_s": r["by_hand_to_job"]["job_running_s"],
    }
    out["apply_to_job_vs_by_hand"] = ratio(out["apply_to_job_s"], out["by_hand_to_job_s"])
    series = {
        "reconfigure_restart": totals(r["reconfigure_restart"]["rounds"]),
        "reconfigure_restart_workflow": totals(r["reconfigure_restart"]["rounds"], "workflow_done_s"),
        "reconfigure_inplace": totals(r["reconfigure_inplace"]["rounds"]),
        "reconfigure_inplace_workflow": totals(r["reconfigure_inplace"]["rounds"], "workflow_done_s"),
        "by_hand_restart_conf": totals(r["by_hand_restart_conf"]),
        "by_hand_reconfigure": totals(r["by_hand_reconfigure"]),
        "controller_pod_deleted": totals(r["controller_pod_deleted"]),
        "by_hand_ctld_restart": totals(r["by_hand_ctld_restart"]),
    }
    for name, values in series.items():
        d = dist(values)
        for k in ("p50_s", "p90_s", "max_s"):
            out[f"{name}_{k}"] = d[k]
    out["reconfigure_restart_vs_by_hand"] = ratio(out["reconfigure_restart_p50_s"], out["by_hand_restart_conf_p50_s"])
    out["reconfigure_inplace_vs_by_hand"] = ratio(out["reconfigure_inplace_p50_s"], out["by_hand_reconfigure_p50_s"])
    out["controller_pod_deleted_vs_by_hand"] = ratio(
        out["controller_pod_deleted_p50_s"], out["by_hand_ctld_restart_p50_s"]
    )
    return out


def print_report(r: Obj) -> None:
    s = r["summary"]
    print(f"namespace {r['namespace']}: {r['changes']} config changes per mode, {r['deletions']} pod deletions")
    print(f"{'measure (seconds)':52} {'operator':>9} {'by hand':>9} {'ratio':>7}")
    print(
        f"{'1. apply -> first job RUNNING':52} {s['apply_to_job_s']:>9} {s['by_hand_to_job_s']:>9} "
        f"{s['apply_to_job_vs_by_hand']:>7}"
    )
    rows = [
        ("2. config change, restart mode", "reconfigure_restart", "by_hand_restart_conf"),
        ("2. config change, in place", "reconfigure_inplace", "by_hand_reconfigure"),
        ("3. slurmctld gone -> answers again", "controller_pod_deleted", "by_hand_ctld_restart"),
    ]
    for label, ours, theirs in rows:
        for k in ("p50_s", "p90_s", "max_s"):
            rate = f"{ratio(s[f'{ours}_{k}'], s[f'{theirs}_{k}']):>7}" if k == "p50_s" else ""
            print(f"{label + ' ' + k[:-2]:52} {s[f'{ours}_{k}']:>9} {s[f'{theirs}_{k}']:>9} {rate}")
    for mode in ("restart", "inplace"):
        print(
            f"{f'2. {mode}: reconfigure workflow verified p50/p90/max':52} "
            f"{s[f'reconfigure_{mode}_workflow_p50_s']} / {s[f'reconfigure_{mode}_workflow_p90_s']} / "
            f"{s[f'reconfigure_{mode}_workflow_max_s']}; rolled back: {r['rolled_back'][mode]}"
        )
        for i, x in enumerate(r[f"reconfigure_{mode}"]["rounds"]):
            print(f"   {mode} {i + 1}: {x}")
    for key in ("controller_pod_deleted", "by_hand_ctld_restart", "by_hand_restart_conf", "by_hand_reconfigure"):
        print(f"{key}: {[x['total_s'] for x in r[key]]}")
    for i, x in enumerate(r["controller_pod_deleted"]):
        print(f"   deletion {i + 1}: {x}")
    a = r["apply_to_job"]
    print(
        "1. operator, seconds from apply: kubectl {kubectl_apply_s}, first slurmctld pod {first_slurmctld_pod_s}, "
        "slurmctld pods made {slurmctld_pods_made}, slurmrestd Ready {slurmrestd_pod_ready_s}, slurmctld Ready "
        "{slurmctld_pod_ready_s}, answers {slurmctld_answers_s}, submitted {job_submitted_s}, slurmrestd ping "
        "responding {slurmrestd_ping_responding_s}, NodeSet ControllerReady {nodeset_controller_ready_s}, slurmd "
        "pod {slurmd_pod_created_s} Ready {slurmd_pod_ready_s}, job RUNNING {job_running_s}".format(**a)
    )
    h = r["by_hand_to_job"]
    print(
        "1. by hand, seconds from start: answers {slurmctld_answers_s}, submitted {job_submitted_s}, job RUNNING "
        "{job_running_s}".format(**h)
    )
    if r.get("other_operator_processes"):
        print(f"WARNING: other operators watch this namespace: {r['other_operator_processes']}")
    print("cleanup:", r["cleanup"])


async def measure(args: argparse.Namespace) -> Obj:
    bench = Bench(stack.load_env_file(), args)
    return await run_cancellable(bench.run)  # SIGTERM cleans up as Ctrl-C does


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--changes", type=int, default=10, help="extraConf changes per reconfigure mode")
    parser.add_argument("--deletions", type=int, default=5, help="controller pod deletions (and by-hand restarts)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 changes per mode, 1 deletion")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.changes, args.deletions = 2, 1
    if args.changes < 1 or args.deletions < 1:
        raise SystemExit("--changes and --deletions must be at least 1")
    results = asyncio.run(measure(args))
    print_report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
