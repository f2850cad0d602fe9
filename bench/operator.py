"""Operator benchmark: NodeSet scale-out and scale-in through the operator vs slurmd started by hand, one run.

Needs the local stack (``slinky dev up``): its real Kubernetes nodes ``slinky-real-1..4`` (label
``node.slinky.slurm.net/real=true``, kubelet + containerd) run NodeSet pods as real slurmd containers, which
register configless with the stack's slurmctld as dynamic nodes named after the pod's hostname. It makes a
namespace annotated for the real nodes (``real_nodes.namespace_annotations``: every pod gets their node selector
and a toleration of their taint) with the stack's external Controller ``slurm`` and its Secret ``slurm-keys``
(``stack.external_controller_objects``), and a NodeSet at 0 replicas (image
``ghcr.io/slinkyproject/slurmd:26.05-ubuntu26.04``, ``extraConf: Features=nodeset-pod`` for the stack's
partition ``nodesets``, ``oversubscribeNode: true``: more pods than real nodes). It runs the operator as its own
process (``python -m workers.operator``, started through this file's ``--operator-child`` shim, which only
counts: every slurmrestd request the process makes, its reconciles and its node polls), and measures, per round:

* **scale-out**: the NodeSet patched from 0 to ``--pods`` replicas → every node IDLE in Slurm;
* **scale-in**: patched back to 0. Per pod, the moment a tight slurmrestd poll (``--poll-ms``) first shows its
  node drained, and the moment a Kubernetes watch shows the pod terminating, then gone: p50 and p99 of
  drained → terminating; and the whole scale-in (patch → every pod gone);
* **by hand** (the baseline): the very pod specs the operator wrote in this round's scale-out, created directly
  through the API server (all at once) as pods ``<nodeset>h-<i>`` with ``nodeName`` set to the real node the
  scheduler gave pod ``<nodeset>-<i>`` (no operator, no scheduler): create → every ``<nodeset>h-<i>`` node IDLE
  in Slurm; then the same drain call the operator makes, sent straight to slurmrestd for every node at once;
  then the pods are deleted and their Slurm nodes removed. The same image, arguments, keys and nodes as the
  NodeSet's pods, so the ratio is what the operator's path (watch, reconcile, scheduling) adds to a slurmd
  container's start by the kubelet. Hence it runs after the scale-out, which gives it the pod specs. (The hand
  pods are named after the NodeSet, not ``hand-<i>`` as in bench/real_nodes.py: their Slurm nodes join the
  stack's one slurmctld, which other runs share.)

Both sides are seen by the same poll of ``GET nodes``. The operator's slurmrestd requests are split by endpoint
and reported per reconcile and per poll, for the scale-out, ``--idle-seconds`` of steady state and the
scale-in. Everything it made is deleted at the end (the hand pods and the NodeSet first, then the operator and
the namespace, then any Slurm node of the run), also on an error or Ctrl-C. Usage::

    .venv/bin/python bench/operator.py --pods 16
    .venv/bin/python bench/operator.py --quick          # 2 pods, a smoke run
"""

from __future__ import annotations

import os
import sys

# Run as `python bench/operator.py`, this directory comes first on sys.path and this file would shadow the
# standard library's `operator` (which `collections` imports): take the directory off the path first.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import httpx  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import Observer, Progress, run_cancellable, slurm_rest  # noqa: E402
from slinky.clients.errors import KubeError, KubeNotFound  # noqa: E402
from slinky.clients.kube import KubeClient  # noqa: E402
from slinky.dev import real_nodes, stack  # noqa: E402
from slinky.operator import slurm_state  # noqa: E402

Obj = dict[str, Any]
GROUP_VERSION = "slinky.slurm.net/v1beta1"
API = f"/apis/{GROUP_VERSION}"
NOT_IDLE_FLAGS = frozenset({"DRAIN", "NOT_RESPONDING", "DOWN", "FUTURE", "INVALID_REG", "COMPLETING"})
SLURMD_IMAGE = "ghcr.io/slinkyproject/slurmd:26.05-ubuntu26.04"
"""Upstream's slurmd image name: the real nodes pull the project's image under it from the stack's registry."""
HAND_LABELS = {"app.kubernetes.io/part-of": "bench-operator"}
"""The hand-made pods' only labels: none of the NodeSet's, so the operator never counts or adopts them."""


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def dist_ms(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50_ms": round(pct(values, 0.5) * 1000, 1),
        "p99_ms": round(pct(values, 0.99) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1) if values else float("nan"),
        "mean_ms": round(statistics.fmean(values) * 1000, 1) if values else float("nan"),
        "n": len(values),
    }


def is_idle(states: Sequence[str]) -> bool:
    return "IDLE" in states and not NOT_IDLE_FLAGS & set(states)


def endpoint(method: str, path: str) -> str:
    """``GET /slurm/v0.0.44/node/w-3`` -> ``GET node/{name}``: the request's kind, without names or ids."""
    parts = path.split("?")[0].strip("/").split("/")
    tail = parts[2:] if len(parts) > 2 and parts[0] == "slurm" else parts
    if len(tail) >= 2 and tail[0] in ("node", "job", "partition", "reservation"):
        tail = [tail[0], "{id}", *tail[2:]]
    return f"{method} {'/'.join(tail)}"


# ------------------------------------------------------------------------------------------- the operator shim
def operator_child(stats_path: str) -> None:
    """``python -m workers.operator``, unchanged, with three counters written to ``stats_path`` every 50 ms:
    each slurmrestd request by endpoint (at ``SlurmClient._send``: one per HTTP request, retries included),
    the NodeSetReconciler's ``reconciles``, and its Controllers' ``polls`` and ``job_lists``."""
    import workers.operator.process as op
    from slinky.clients.slurm.client import SlurmClient
    from workers.operator.nodeset.reconciler import NodeSetReconciler

    requests: Counter[str] = Counter()

    def source() -> str:
        """Who asks, by the asyncio task's name in the operator's runtime: a reconcile (`NodeSet-worker-N`), the
        shared poll (`node-poll-<Controller>`), or anything else (the scale-in workflows' activities)."""
        task = asyncio.current_task()
        name = task.get_name() if task else ""
        if name.startswith("NodeSet-worker"):
            return "reconcile"
        return "poll" if name.startswith("node-poll") else "activities"

    controllers: list[Any] = []
    original = SlurmClient._send

    async def counting_send(self: SlurmClient, method: str, path: str, *, params: Any, body: Any) -> Any:
        try:
            return await original(self, method, path, params=params, body=body)
        finally:  # counted once answered (or failed), so a poll's list and its `polls += 1` land together
            requests[endpoint(method, path)] += 1
            requests[f"from {source()}"] += 1

    SlurmClient._send = counting_send  # type: ignore[method-assign]

    class CountedController(NodeSetReconciler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            controllers.append(self)

    setattr(op, "NodeSetReconciler", CountedController)  # noqa: B010 (the name run_operator looks up)
    target, tmp = Path(stats_path), Path(stats_path + ".tmp")

    def write() -> None:
        while True:
            with contextlib.suppress(RuntimeError):  # a dict changed size while copied: next time
                polls = [p for c in controllers for p in list(c.polls.values())]
                snapshot = {
                    "written": time.monotonic(),
                    "controllers": len(controllers),
                    "synced": bool(controllers) and all(c.synced.is_set() for c in controllers),
                    "reconciles": sum(c.reconciles for c in controllers),
                    "polls": sum(p.polls for p in polls),
                    "job_lists": sum(p.job_lists for p in polls),
                    "requests": dict(requests),
                }
                tmp.write_text(json.dumps(snapshot))
                tmp.replace(target)
            time.sleep(0.05)

    threading.Thread(target=write, name="bench-stats", daemon=True).start()
    op.main()


def other_operators(own: int | None, namespace: str) -> list[int]:
    """PIDs of other operator processes on this machine (`workers.operator`, or this shim) that watch this
    run's namespace (every namespace, or a list with it): they may act on its NodeSet too and taint the figures.
    One scoped to other namespaces (the stack's own, to `slurm`) does not count."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (own, os.getpid()):
            continue
        with contextlib.suppress(OSError, ValueError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"workers.operator" not in argv and b"--operator-child" not in argv:
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


def delta(before: Obj, after: Obj) -> Obj:
    """The operator's counters between two snapshots, and what they mean per reconcile, poll and pod."""
    keys = set(before["requests"]) | set(after["requests"])
    counted = {k: after["requests"].get(k, 0) - before["requests"].get(k, 0) for k in sorted(keys)}
    by_endpoint = {k: v for k, v in counted.items() if v and not k.startswith("from ")}
    by_source = {k[len("from ") :]: v for k, v in counted.items() if v and k.startswith("from ")}
    out: Obj = {
        "seconds": round(after["written"] - before["written"], 2),
        "reconciles": after["reconciles"] - before["reconciles"],
        "polls": after["polls"] - before["polls"],
        "job_lists_by_poll": after["job_lists"] - before["job_lists"],
        "requests": sum(by_endpoint.values()),
        "by_endpoint": by_endpoint,
        "by_source": by_source,
    }
    node_lists = by_endpoint.get("GET nodes", 0)
    per_node = sum(v for k, v in by_endpoint.items() if k.split(" ")[1].startswith("node/"))
    out["node_lists"] = node_lists
    out["node_lists_per_poll"] = round(node_lists / out["polls"], 2) if out["polls"] else float("nan")
    out["per_node_requests"] = per_node
    out["requests_per_reconcile"] = round(out["requests"] / out["reconciles"], 2) if out["reconciles"] else None
    own = by_source.get("reconcile", 0)
    out["reconcile_own_requests_per_reconcile"] = round(own / out["reconciles"], 2) if out["reconciles"] else None
    out["requests_per_poll"] = round(out["requests"] / out["polls"], 2) if out["polls"] else float("nan")
    return out


# ------------------------------------------------------------------------------------------- observers
class NodePoll(Observer):
    """A tight poll of slurmrestd's ``GET nodes``: when each watched node was first seen IDLE, drained, gone."""

    def __init__(self, rest: httpx.AsyncClient, names: set[str], interval: float) -> None:
        super().__init__()
        self.rest, self.names, self.interval = rest, names, interval
        self.idle: dict[str, float] = {}
        self.drained: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.present: set[str] = set()
        self.samples = 0
        self._seen: set[str] = set()

    async def _run(self) -> None:
        while True:
            try:
                answer = await self.rest.get("/nodes")
                nodes = answer.json().get("nodes") or []
            except (httpx.HTTPError, ValueError):
                await asyncio.sleep(self.interval)
                continue
            now = time.monotonic()
            self.samples += 1
            present = set()
            for node in nodes:
                name = node.get("name", "")
                if name not in self.names:
                    continue
                present.add(name)
                states = [str(s) for s in node.get("state") or []]
                if is_idle(states):
                    self.idle.setdefault(name, now)
                if slurm_state.is_drained(states):
                    self.drained.setdefault(name, now)
            for name in self._seen - present:
                self.gone.setdefault(name, now)
            self._seen |= present
            self.present = present
            await asyncio.sleep(self.interval)


class PodWatch(Observer):
    """A watch on the namespace's pods: when each was first seen bound, its containers running, Ready,
    terminating, deleted; and each pod as last seen."""

    wait_synced = True

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        super().__init__()
        self.kube, self.namespace = kube, namespace
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self.terminating: dict[str, float] = {}
        self.deleted: dict[str, float] = {}
        self.live: set[str] = set()
        self.last: dict[str, Obj] = {}

    def _see(self, kind: str, pod: Obj, now: float) -> None:
        name = pod["metadata"]["name"]
        if kind == "DELETED":
            self.deleted.setdefault(name, now)
            self.terminating.setdefault(name, now)
            self.live.discard(name)
            return
        self.live.add(name)
        self.last[name] = pod
        self.created.setdefault(name, now)
        if (pod.get("spec") or {}).get("nodeName"):
            self.bound.setdefault(name, now)
        if pod["metadata"].get("deletionTimestamp"):
            self.terminating.setdefault(name, now)
        status = pod.get("status") or {}
        containers = status.get("containerStatuses") or []
        if containers and all((c.get("state") or {}).get("running") for c in containers):
            self.running.setdefault(name, now)
        conditions = status.get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            self.ready.setdefault(name, now)

    async def _run(self) -> None:
        async for kind, obj in self.kube.list_watch(f"/api/v1/namespaces/{self.namespace}/pods"):
            now = time.monotonic()
            if kind == "SYNC":
                self.live = set()
                for pod in obj["items"]:
                    self._see("ADDED", pod, now)
                self.synced.set()
            else:
                self._see(kind, obj, now)


async def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(0.01)


# ------------------------------------------------------------------------------------------- the benchmark
class Bench:
    def __init__(self, env: dict[str, str], args: argparse.Namespace) -> None:
        self.env, self.args = env, args
        self.rest = slurm_rest(env, timeout=30)
        self.kube = KubeClient.from_kubeconfig(env["KUBECONFIG"])
        self.progress = Progress("bench.operator")
        run = uuid.uuid4().hex[:5]
        self.namespace = f"bench-op-{run}"
        self.name = f"bo{run}"
        """The NodeSet; its pods and Slurm nodes are `<name>-<i>`, the hand-made ones `<name>h-<i>`."""
        self.task_queue = f"bench-operator-{run}"
        self.names = [f"{self.name}-{i}" for i in range(args.pods)]
        self.hand_names = [f"{self.name}h-{i}" for i in range(args.pods)]
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-operator-"))
        self.stats_path = self.tmp / "stats.json"
        self.proc: subprocess.Popen[bytes] | None = None
        self.record_ids: list[int] = []
        """Held jobs of ``--job-records``."""
        self.written: dict[str, Obj] = {}
        """The NodeSet's pods as the operator wrote them (and the scheduler bound them), from the last scale-out:
        the by-hand pods' specs."""
        self.hand_made = False
        """Whether hand-made pods may exist (to delete)."""
        self.made_namespace = False
        self.log_path = stack.STATE / "logs" / "bench-operator.log"

    # ------------------------------------------------------------------------------------- setup
    def nodeset_body(self, name: str, replicas: int) -> Obj:
        return {
            "apiVersion": GROUP_VERSION,
            "kind": "NodeSet",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "controllerRef": {"name": "slurm"},
                "slurmd": {"image": SLURMD_IMAGE},
                "extraConf": f"Features={stack.POD_FEATURE}",  # the stack's partition `nodesets`
                "replicas": replicas,
                "oversubscribeNode": True,  # more pods than real nodes
            },
        }

    async def setup(self) -> Obj:
        """The namespace (its pods on the real nodes), the stack's external Controller `slurm` and its keys'
        Secret; the real nodes, and whether each has the slurmd image already (a pull would count in the first
        scale-out only)."""
        nodes = (await self.kube.get("/api/v1/nodes", {"labelSelector": real_nodes.NODE_LABEL}))["items"]
        if not nodes:
            raise RuntimeError(f"no node labelled {real_nodes.NODE_LABEL}: the stack's real nodes (slinky dev up)")
        annotations = real_nodes.namespace_annotations(stack.REAL_NODE_TAINT)
        await self.kube.create("/api/v1/namespaces", {"metadata": {"name": self.namespace, "annotations": annotations}})
        self.made_namespace = True
        secret, controller = stack.external_controller_objects(self.namespace)
        await self.kube.create(f"/api/v1/namespaces/{self.namespace}/secrets", secret)
        await self.kube.create(f"{API}/namespaces/{self.namespace}/controllers", controller)
        return {
            n["metadata"]["name"]: any(
                SLURMD_IMAGE in (image.get("names") or []) for image in (n.get("status") or {}).get("images") or []
            )
            for n in nodes
        }

    def operator_source(self) -> Path:
        """Where the operator's code comes from: this checkout, or `--operator-commit` exported to a temporary
        directory (`git archive`; this file copied in), so edits under way in the checkout do not run."""
        if not self.args.operator_commit:
            return REPO
        source = self.tmp / "source"
        source.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", self.args.operator_commit], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
        (source / "bench").mkdir(exist_ok=True)
        (source / "bench" / "operator.py").write_bytes(Path(__file__).read_bytes())
        return source

    def start_operator(self) -> None:
        source = self.operator_source()
        env = {
            **os.environ,
            **self.env,
            "PATH": os.environ["PATH"],
            "SLINKY_OPERATOR__TASK_QUEUE": self.task_queue,
            "SLINKY_OPERATOR__NAMESPACES": json.dumps([self.namespace]),
        }
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.operator", "--operator-child", str(self.stats_path)],
                cwd=source,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    async def stats(self) -> Obj:
        """A snapshot of the operator's counters written after this call began."""
        asked = time.monotonic()
        deadline = asked + 10
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the operator exited with {self.proc.returncode}; see {self.log_path}")
            with contextlib.suppress(OSError, ValueError):
                snapshot: Obj = json.loads(self.stats_path.read_text())
                if snapshot["written"] > asked:
                    return snapshot
            await asyncio.sleep(0.02)
        raise TimeoutError(f"no counters from the operator in 10 s; see {self.log_path}")

    async def operator_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                if (await self.stats())["synced"]:
                    return
            await asyncio.sleep(0.1)
        raise TimeoutError(f"the operator did not sync in 60 s; see {self.log_path}")

    async def nodeset_ready(self) -> None:
        path = f"{API}/namespaces/{self.namespace}/nodesets/{self.name}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            conditions = ((await self.kube.get(path)).get("status") or {}).get("conditions") or []
            if any(c["type"] == "ControllerReady" and c["status"] == "True" for c in conditions):
                return
            await asyncio.sleep(0.1)
        raise TimeoutError(f"NodeSet {self.name}: no ControllerReady=True in 30 s; see {self.log_path}")

    # ------------------------------------------------------------------------------------- by hand
    def hand_pods(self) -> list[Obj]:
        """Pod `<name>h-<i>`: the spec the operator wrote for pod `<name>-<i>` (image, arguments, keys' volume,
        tolerations), bound to the node the scheduler gave that pod; only its hostname (its Slurm node's name) and
        its labels (none of the NodeSet's) differ."""
        pods = []
        for name, hand in zip(self.names, self.hand_names, strict=True):
            spec: Obj = copy.deepcopy(self.written[name]["spec"])
            spec["hostname"] = hand  # its `nodeName` stays: the scheduler's choice for the NodeSet's pod
            spec.pop("affinity", None)  # none with oversubscribeNode; a bound pod skips the scheduler anyway
            pods.append(
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": hand, "labels": HAND_LABELS}, "spec": spec}
            )
        return pods

    async def by_hand(self) -> Obj:
        """The NodeSet's own pods, created by hand at once and bound (no operator, no scheduler) → all IDLE; the
        drain call by hand; then the pods deleted and their Slurm nodes removed."""
        assert self.written, "a scale-out first: it gives the pod specs"
        pods = self.hand_pods()
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        async with (
            PodWatch(self.kube, self.namespace) as watch,
            NodePoll(self.rest, set(self.hand_names), self.args.poll_ms / 1000) as poll,
        ):
            started = time.monotonic()
            count = len(pods)
            with self.progress.ticking(
                f"by hand: {count} pods",
                lambda: f"{len([n for n in self.hand_names if n in watch.running])} running, {len(poll.idle)} IDLE",
            ):
                self.hand_made = True
                await asyncio.gather(*(self.kube.create(path, p) for p in pods))
                created = time.monotonic()
                await until(lambda: len(poll.idle) == count, 120, "hand-made pods' nodes IDLE")
                with contextlib.suppress(TimeoutError):  # the kubelet's status may follow IDLE
                    await until(lambda: set(self.hand_names) <= set(watch.running), 30, "hand-made pods running")
        running = [watch.running[n] for n in self.hand_names if n in watch.running]
        result = {
            "all_idle_s": round(max(poll.idle.values()) - started, 3),
            "all_pods_created_s": round(created - started, 3),
            "all_pods_running_s": round(max(running) - started, 3) if len(running) == count else None,
            "first_idle_s": round(min(poll.idle.values()) - started, 3),
            "nodes": dict(Counter(p["spec"]["nodeName"] for p in pods)),
            "drain_call": await self.drain_by_hand(),
        }
        await self.stop_by_hand()
        return result

    async def drain_by_hand(self) -> Obj:
        """The baseline of the operator's drain call: the same ``POST node/{name}`` (state DRAIN with a reason)
        for every hand-made pod's node at once, straight to slurmrestd."""

        async def drain(name: str) -> float:
            asked = time.monotonic()
            body = {"state": ["DRAIN"], "reason": "bench: drained by hand"}
            (await self.rest.post(f"/node/{name}", json=body)).raise_for_status()
            return time.monotonic() - asked

        return dist_ms(list(await asyncio.gather(*(drain(n) for n in self.hand_names))))

    async def stop_by_hand(self) -> None:
        """Delete the hand-made pods (their preStop deletes their Slurm nodes), wait until they are gone, then
        remove whatever Slurm node of theirs is left."""
        if not self.hand_made:
            return
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        selector = {"labelSelector": ",".join(f"{k}={v}" for k, v in HAND_LABELS.items())}

        async def delete(name: str) -> None:
            with contextlib.suppress(KubeNotFound):
                await self.kube.delete(f"{path}/{name}")

        await asyncio.gather(*(delete(n) for n in self.hand_names))
        deadline = time.monotonic() + 60
        while (await self.kube.get(path, selector))["items"]:
            if time.monotonic() > deadline:
                raise TimeoutError("hand-made pods: not gone within 60 s")
            await asyncio.sleep(0.2)
        self.hand_made = False
        await self.forget_nodes(self.hand_names)

    async def forget_nodes(self, names: Sequence[str]) -> None:
        """Delete these Slurm nodes if Slurm still has them (dynamic nodes outlive their slurmd)."""
        for name in names:
            with contextlib.suppress(httpx.HTTPError):
                await self.rest.delete(f"/node/{name}")

    # ------------------------------------------------------------------------------------- the operator
    async def scale(self, replicas: int) -> None:
        await self.kube.patch(
            f"{API}/namespaces/{self.namespace}/nodesets/{self.name}", {"spec": {"replicas": replicas}}
        )

    async def scale_out(self) -> tuple[Obj, Obj]:
        before = await self.stats()
        async with (
            PodWatch(self.kube, self.namespace) as pods,
            NodePoll(self.rest, set(self.names), self.args.poll_ms / 1000) as poll,
        ):
            started = time.monotonic()
            count = len(self.names)
            with self.progress.ticking(
                f"scale-out 0 -> {count}", lambda: f"{len(pods.bound)} pods bound, {len(poll.idle)}/{count} nodes IDLE"
            ):
                await self.scale(count)
                await until(lambda: len(poll.idle) == count, 180, "NodeSet nodes IDLE")
                idle_at = time.monotonic()
                with contextlib.suppress(TimeoutError):  # Ready (the kubelet's, no probe) is usually before IDLE
                    await until(lambda: set(self.names) <= set(pods.ready), 30, "NodeSet pods Ready")
        after = await self.stats()
        self.written = {n: pods.last[n] for n in self.names}  # the by-hand pods' specs, all bound by now
        running = [pods.running[n] for n in self.names if n in pods.running]
        result = {
            "all_idle_s": round(max(poll.idle.values()) - started, 3),
            "first_idle_s": round(min(poll.idle.values()) - started, 3),
            "all_pods_created_s": round(max(pods.created[n] for n in self.names) - started, 3),
            "all_pods_bound_s": round(max(pods.bound[n] for n in self.names) - started, 3),
            "all_pods_running_s": round(max(running) - started, 3) if len(running) == count else None,
            "all_pods_ready_s": round(max(pods.ready.values()) - started, 3) if pods.ready else None,
            "nodes": dict(Counter(pods.last[n]["spec"]["nodeName"] for n in self.names)),
            "seen_at_s": round(idle_at - started, 3),
        }
        return result, delta(before, after)

    async def scale_in(self) -> tuple[Obj, Obj]:
        before = await self.stats()
        async with (
            PodWatch(self.kube, self.namespace) as pods,
            NodePoll(self.rest, set(self.names), self.args.poll_ms / 1000) as poll,
        ):
            await until(lambda: poll.samples > 0, 10, "first node poll")
            started = time.monotonic()
            count = len(self.names)
            with self.progress.ticking(
                f"scale-in {count} -> 0", lambda: f"{len(poll.drained)}/{count} drained, {len(pods.deleted)} pods gone"
            ):
                await self.scale(0)
                await until(lambda: set(self.names) <= set(pods.deleted), 180, "NodeSet pods deleted")
            all_deleted = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await until(lambda: set(self.names) <= set(poll.gone), 30, "NodeSet nodes gone from Slurm")
        after = await self.stats()
        to_terminating = [pods.terminating[n] - poll.drained[n] for n in self.names if n in poll.drained]
        to_deleted = [pods.deleted[n] - poll.drained[n] for n in self.names if n in poll.drained]
        to_drained = [poll.drained[n] - started for n in poll.drained]
        result = {
            "drained_to_terminating": dist_ms(to_terminating),
            "drained_to_deleted": dist_ms(to_deleted),
            "patch_to_drained": dist_ms(to_drained),
            "never_seen_drained": sorted(set(self.names) - set(poll.drained)),
            "total_s": round(max(pods.deleted[n] for n in self.names) - started, 3),
            "slurm_nodes_gone_s": round(max(poll.gone.values()) - started, 3)
            if set(self.names) <= set(poll.gone)
            else None,
            "seen_at_s": round(all_deleted - started, 3),
            "samples": {"drained_to_terminating_s": [round(x, 4) for x in to_terminating]},
        }
        return result, delta(before, after)

    async def idle(self) -> Obj:
        self.progress.phase(f"{self.args.idle_seconds:g} s of steady state")
        before = await self.stats()
        await asyncio.sleep(self.args.idle_seconds)
        return delta(before, await self.stats())

    async def scale_in_workflows(self) -> Obj:
        """The run's NodeSetScaleIn workflows: all on this run's operator (none on another operator's task
        queue), and where the time from the drain to the pod's deletion goes, from their histories."""
        from temporalio.client import Client

        client = await Client.connect(
            self.env["TEMPORAL_ADDRESS"], namespace=self.env.get("TEMPORAL_NAMESPACE", "default")
        )
        query = f"WorkflowType='NodeSetScaleIn' AND SlinkyNamespace='{self.namespace}'"
        found: list[Any] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = [wf async for wf in client.list_workflows(query)]
            if (
                sum(1 for wf in found if wf.status and wf.status.name == "COMPLETED")
                >= len(self.names) * self.args.rounds
            ):
                break
            await asyncio.sleep(0.5)
        queues = Counter(wf.task_queue for wf in found)
        paths = [await history_path(client, wf.id, wf.run_id) for wf in found]
        return {
            "ours": queues.get(self.task_queue, 0),
            "other_task_queues": sum(v for k, v in queues.items() if k != self.task_queue),
            "statuses": dict(Counter(wf.status.name if wf.status else "?" for wf in found)),
            "drain_to_delete": summarise_paths([p for p in paths if p]),
        }

    # ------------------------------------------------------------------------------------- cleanup
    async def cleanup(self) -> Obj:
        """The hand-made pods and the NodeSet first (its pods go, their preStop takes the Slurm nodes), then the
        operator, leftover scale-ins, the namespace and any Slurm node of this run."""
        left: Obj = {}
        with contextlib.suppress(Exception):
            await self.stop_by_hand()
        if self.made_namespace:
            with contextlib.suppress(KubeNotFound):
                await self.kube.delete(f"{API}/namespaces/{self.namespace}/nodesets/{self.name}")
            deadline = time.monotonic() + 60
            items: list[Obj] = []
            while time.monotonic() < deadline:
                try:
                    items = (await self.kube.get(f"/api/v1/namespaces/{self.namespace}/pods"))["items"]
                except KubeError:
                    items = []
                if not items:
                    break
                await asyncio.sleep(0.2)
            left["pods_left_after_60s"] = len(items)
        if self.proc is not None:
            self.proc.terminate()
            try:
                await asyncio.to_thread(self.proc.wait, 15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait, 10)
        with contextlib.suppress(Exception):
            left["scale_ins_terminated"] = await self.terminate_scale_ins()
        if self.made_namespace:
            with contextlib.suppress(KubeNotFound):
                await self.kube.delete(f"/api/v1/namespaces/{self.namespace}")
        await self.forget_nodes([*self.names, *self.hand_names])
        if self.record_ids:
            left["job_records_cancelled"] = await self.cancel_job_records()
        shutil.rmtree(self.tmp, ignore_errors=True)
        await self.rest.aclose()
        await self.kube.aclose()
        return left

    async def add_job_records(self, count: int) -> Obj:
        """``count`` held batch jobs (never run): job records that every full job list of Slurm carries, as on a
        cluster with a long queue. Cancelled at cleanup."""
        self.progress.phase(f"submitting {count} held jobs")
        script = "#!/bin/sh\ntrue\n"
        gate = asyncio.Semaphore(16)
        started = time.monotonic()

        async def one(i: int) -> None:
            desc = {
                "name": f"{self.name}-record", "partition": stack.NODESET_PARTITION, "hold": True,
                "current_working_directory": "/tmp", "environment": ["PATH=/usr/bin:/bin"],
                "standard_output": "/dev/null",
            }  # fmt: skip
            async with gate:
                answer = await self.rest.post("/job/submit", json={"job": desc, "script": script})
                self.record_ids.append(int(answer.raise_for_status().json()["job_id"]))

        with self.progress.ticking("held jobs", lambda: f"{len(self.record_ids)}/{count} submitted"):
            await asyncio.gather(*(one(i) for i in range(count)))
        listed = (await self.rest.get("/jobs")).json().get("jobs") or []
        return {"submitted": len(self.record_ids), "seconds": round(time.monotonic() - started, 1),
                "jobs_listed_by_slurm": len(listed)}  # fmt: skip

    async def cancel_job_records(self) -> int:
        gate = asyncio.Semaphore(16)

        async def one(job_id: int) -> None:
            async with gate:
                with contextlib.suppress(httpx.HTTPError):
                    await self.rest.delete(f"/job/{job_id}")

        await asyncio.gather(*(one(j) for j in self.record_ids))
        return len(self.record_ids)

    async def terminate_scale_ins(self) -> int:
        from temporalio.client import Client

        client = await Client.connect(
            self.env["TEMPORAL_ADDRESS"], namespace=self.env.get("TEMPORAL_NAMESPACE", "default")
        )
        query = f"WorkflowType='NodeSetScaleIn' AND SlinkyNamespace='{self.namespace}' AND ExecutionStatus='Running'"
        count = 0
        async for wf in client.list_workflows(query):
            await client.get_workflow_handle(wf.id, run_id=wf.run_id).terminate("bench/operator.py cleanup")
            count += 1
        return count

    # ------------------------------------------------------------------------------------- the run
    async def run(self) -> Obj:
        results: Obj = {
            "pods": self.args.pods,
            "rounds": self.args.rounds,
            "poll_ms": self.args.poll_ms,
            "namespace": self.namespace,
            "task_queue": self.task_queue,
            "nodeset": self.name,
        }
        rounds: list[Obj] = []
        rest: dict[str, list[Obj]] = {"scale_out": [], "idle": [], "scale_in": []}
        try:
            if self.args.job_records:
                results["job_records"] = await self.add_job_records(self.args.job_records)
            self.progress.phase(f"namespace {self.namespace}; starting the operator")
            results["slurmd_image_on_real_nodes"] = await self.setup()
            self.start_operator()
            await self.operator_ready()
            await self.kube.create(f"{API}/namespaces/{self.namespace}/nodesets", self.nodeset_body(self.name, 0))
            await self.nodeset_ready()  # its first reconcile: the Controller's poll starts, the PDB is made
            others: set[int] = set(other_operators(self.proc.pid if self.proc else None, self.namespace))
            for i in range(self.args.rounds):
                self.progress.phase(f"round {i + 1}/{self.args.rounds}: {self.args.pods} pods")
                out, out_calls = await self.scale_out()
                rest["idle"].append(await self.idle())
                scale_in, in_calls = await self.scale_in()
                hand = await self.by_hand()  # after the scale-out: the pod specs the operator wrote
                rest["scale_out"].append(out_calls)
                rest["scale_in"].append(in_calls)
                rounds.append({"by_hand": hand, "scale_out": out, "scale_in": scale_in})
            others |= set(other_operators(self.proc.pid if self.proc else None, self.namespace))
            results["other_operator_processes"] = sorted(others)
            results["scale_in_workflows"] = await self.scale_in_workflows()
        finally:
            results["cleanup"] = await self.cleanup()
        results["rounds_detail"] = rounds
        results["rest"] = {k: v[0] if len(v) == 1 else v for k, v in rest.items()}
        results["summary"] = summarise(rounds, rest)
        return results


async def history_path(client: Any, workflow_id: str, run_id: str | None) -> Obj | None:
    """From one scale-in's history: the drain call, then drain answered -> delete_pod scheduled (the
    activities and workflow-task waits in between), then the delete call; seconds, by the server's clock."""
    from temporalio.api.enums.v1 import EventType

    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    names: dict[int, str] = {}
    scheduled_at: dict[int, float] = {}
    drained = delete_scheduled = delete_done = drain_started = -1.0
    between: list[str] = []
    task_waits: list[tuple[float, float]] = []
    for e in history.events:
        t = e.event_time.ToMicroseconds() / 1e6
        kind = e.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = e.activity_task_scheduled_event_attributes.activity_type.name
            names[e.event_id] = name
            if name == "nodeset_drain_node" and drain_started < 0:
                drain_started = t
            elif name == "nodeset_delete_pod":
                delete_scheduled = t
            elif drained >= 0 and delete_scheduled < 0:
                between.append(name)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            name = names.get(e.activity_task_completed_event_attributes.scheduled_event_id, "")
            if name == "nodeset_drain_node" and drained < 0:
                drained = t
            elif name == "nodeset_delete_pod":
                delete_done = t
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            scheduled_at[e.event_id] = t
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            task_waits.append((t, t - scheduled_at.get(e.workflow_task_started_event_attributes.scheduled_event_id, t)))
    if min(drained, delete_scheduled, delete_done, drain_started) < 0:
        return None
    return {
        "drain_call": drained - drain_started,
        "drained_to_delete_scheduled": delete_scheduled - drained,
        "workflow_task_waits": sum(w for at, w in task_waits if drained <= at <= delete_scheduled),
        "workflow_tasks": sum(1 for at, _ in task_waits if drained <= at <= delete_scheduled),
        "activities_between": between,
        "delete_call": delete_done - delete_scheduled,
    }


def summarise_paths(paths: list[Obj]) -> Obj:
    if not paths:
        return {}
    out: Obj = {"n": len(paths)}
    for key in ("drain_call", "drained_to_delete_scheduled", "workflow_task_waits", "delete_call"):
        out[f"{key}_p50_ms"] = round(statistics.median(p[key] for p in paths) * 1000, 1)
    out["workflow_tasks_p50"] = statistics.median(p["workflow_tasks"] for p in paths)
    out["activities_between"] = dict(Counter(a for p in paths for a in p["activities_between"]))
    return out


def summarise(rounds: list[Obj], rest: dict[str, list[Obj]]) -> Obj:
    hand = statistics.median(r["by_hand"]["all_idle_s"] for r in rounds)
    out = statistics.median(r["scale_out"]["all_idle_s"] for r in rounds)
    samples = [x for r in rounds for x in r["scale_in"]["samples"]["drained_to_terminating_s"]]
    scale_in = dist_ms(samples)
    calls = [c for phase in rest.values() for c in phase]
    requests = sum(c["requests"] for c in calls)
    reconciles = sum(c["reconciles"] for c in calls)
    polls = sum(c["polls"] for c in calls)
    node_lists = sum(c["node_lists"] for c in calls)
    sources: Counter[str] = Counter()
    for c in calls:
        sources.update(c["by_source"])
    own = sources.get("reconcile", 0)
    pods = len(rounds[0]["scale_in"]["samples"]["drained_to_terminating_s"]) if rounds else 0
    scale_in_calls = rest["scale_in"]
    return {
        "by_hand_all_idle_s": hand,
        "scale_out_all_idle_s": out,
        "scale_out_vs_by_hand": round(out / hand, 2) if hand else float("nan"),
        "scale_in_drained_to_terminating_p50_s": round(scale_in["p50_ms"] / 1000, 3),
        "scale_in_drained_to_terminating_p99_s": round(scale_in["p99_ms"] / 1000, 3),
        "scale_in_total_s": statistics.median(r["scale_in"]["total_s"] for r in rounds),
        "drain_call_by_hand_p50_s": round(
            statistics.median(r["by_hand"]["drain_call"]["p50_ms"] for r in rounds) / 1000, 3
        )
        if rounds
        else None,
        "slurm_requests_per_reconcile": round(requests / reconciles, 2) if reconciles else None,
        "reconcile_own_requests_per_reconcile": round(own / reconciles, 2) if reconciles else None,
        "requests_by_source": dict(sources),
        "slurm_requests_per_poll": round(requests / polls, 2) if polls else None,
        "node_lists_per_poll": round(node_lists / polls, 2) if polls else None,
        "scale_in_per_node_requests_per_pod": round(
            sum(c["per_node_requests"] for c in scale_in_calls) / (pods * len(scale_in_calls)), 2
        )
        if pods and scale_in_calls
        else None,
        "goals": {
            "scale_out_le_1_5x_by_hand": out <= 1.5 * hand,
            "scale_in_p50_le_1s": scale_in["p50_ms"] <= 1000,
            "one_node_list_per_poll": polls > 0 and node_lists == polls,
        },
    }


def print_report(results: Obj) -> None:
    s = results["summary"]
    print(f"{results['pods']} pods, {results['rounds']} round(s), Slurm polled every {results['poll_ms']} ms")
    print(f"{'measure':48} {'value':>12}")
    rows = [
        ("by hand: create pods -> all IDLE (s)", s["by_hand_all_idle_s"]),
        ("operator scale-out 0->N: patch -> all IDLE (s)", s["scale_out_all_idle_s"]),
        ("  ratio to by hand (goal <= 1.5)", s["scale_out_vs_by_hand"]),
        ("scale-in: drained -> pod terminating p50 (s)", s["scale_in_drained_to_terminating_p50_s"]),
        ("scale-in: drained -> pod terminating p99 (s)", s["scale_in_drained_to_terminating_p99_s"]),
        ("scale-in N->0: patch -> all pods gone (s)", s["scale_in_total_s"]),
        ("drain call by hand, all nodes at once, p50 (s)", s["drain_call_by_hand_p50_s"]),
        ("operator slurmrestd requests per reconcile", s["slurm_requests_per_reconcile"]),
        ("  of them made by the reconcile itself", s["reconcile_own_requests_per_reconcile"]),
        ("operator slurmrestd requests per poll", s["slurm_requests_per_poll"]),
        ("node lists (GET nodes) per poll (goal 1)", s["node_lists_per_poll"]),
        ("per-node requests per pod in the scale-in", s["scale_in_per_node_requests_per_pod"]),
    ]
    for label, value in rows:
        print(f"{label:48} {value!s:>12}")
    for phase, calls in results["rest"].items():
        for c in calls if isinstance(calls, list) else [calls]:
            print(
                f"{phase:9} {c['seconds']:>6} s  reconciles {c['reconciles']:>4}  polls {c['polls']:>3}  "
                f"requests {c['requests']:>4}  {c['by_source']}  {c['by_endpoint']}"
            )
    for i, r in enumerate(results["rounds_detail"]):
        print(f"round {i + 1}: by hand {r['by_hand']}")
        print(f"round {i + 1}: scale-out {r['scale_out']}")
        si = {k: v for k, v in r["scale_in"].items() if k != "samples"}
        print(f"round {i + 1}: scale-in {si}")
    print(
        "scale-in, drain -> delete from the workflow histories:",
        results.get("scale_in_workflows", {}).get("drain_to_delete"),
    )
    print("goals:", s["goals"])
    if results.get("other_operator_processes") or results.get("scale_in_workflows", {}).get("other_task_queues"):
        print(
            "WARNING: another operator ran meanwhile (pids {}; scale-ins on other task queues: {}): it may have "
            "acted on this run's NodeSet, so the figures may be tainted".format(
                results.get("other_operator_processes"), results.get("scale_in_workflows", {}).get("other_task_queues")
            )
        )
    missing = sorted(n for n, cached in results.get("slurmd_image_on_real_nodes", {}).items() if not cached)
    if missing:
        print(f"WARNING: {SLURMD_IMAGE} not on {', '.join(missing)} at the start: round 1's scale-out pulled it")
    workflows = {k: v for k, v in results.get("scale_in_workflows", {}).items() if k != "drain_to_delete"}
    print("scale-in workflows:", workflows, " cleanup:", results["cleanup"])


async def measure(args: argparse.Namespace) -> Obj:
    bench = Bench(stack.load_env_file(), args)
    return await run_cancellable(bench.run)  # SIGTERM cleans up as Ctrl-C does


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--pods", type=int, default=16, help="NodeSet replicas, and pods made by hand")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 pods, 2.5 s of steady state")
    parser.add_argument("--rounds", type=int, default=1, help="scale-out, scale-in and by hand, this many times")
    parser.add_argument("--poll-ms", type=float, default=25.0, help="the benchmark's own poll of Slurm's nodes")
    parser.add_argument("--idle-seconds", type=float, default=5.0, help="steady state counted between the two")
    parser.add_argument("--json", metavar="PATH", help="also write the JSON summary to this file")
    parser.add_argument(
        "--job-records", type=int, default=0, metavar="N", help="first submit N held jobs (cancelled at the end)"
    )
    parser.add_argument(
        "--operator-commit", metavar="REV", help="run the operator of this commit (default: the checkout as it is)"
    )
    parser.add_argument("--operator-child", metavar="STATS", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.operator_child:
        operator_child(args.operator_child)
        return 0
    if args.quick:
        args.pods, args.idle_seconds = 2, 2.5  # at least two of the 1 s polls in the steady state
    if args.pods < 1 or args.rounds < 1:
        raise SystemExit("--pods and --rounds must be at least 1")
    results = asyncio.run(measure(args))
    print_report(results)
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
