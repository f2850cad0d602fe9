"""A small simulated kubelet for the development stack (KWOK-like).

No kubelet can run on the development machines, yet everything we build needs Ready nodes and pods that
move through their phases. This agent owns N Node objects: it keeps them Ready (status heartbeat plus a
``kube-node-lease`` Lease, as a kubelet does) and plays the kubelet's part for pods bound to them:

* Pending -> Running as soon as a pod is bound to one of its nodes;
* Running -> Succeeded after ``ANNOTATION_SIM_RUN_SECONDS`` seconds, or Failed when
  ``ANNOTATION_SIM_EXIT_CODE`` is non-zero (no annotation: it runs until deleted);
* graceful deletion: containers are marked terminated and the pod is deleted with a zero grace period,
  so finalizers still hold it, as with a real kubelet.

Besides the N nodes the stack registers in Slurm, it can own K worker nodes (``--worker-nodes``) that nothing
registers in Slurm, where kube-scheduler places the pods of namespaces that are not sent to the real nodes. Every
pod here is simulated: no process runs (pods run as containers on the stack's real nodes, docs/dev-stack.md).

It is a controller in miniature: one watch on bound pods feeds a cache, a de-duplicating work queue and a
few workers reconcile each pod from its latest state, and timers live in one heap. Everything is level
triggered, so restarting the agent converges (a Running pod whose run time has passed completes at once).
It talks to the API server with the project's ``KubeClient`` (its informer loop included), configured from a
kubeconfig.

Run: ``python -m slinky.dev.node_agent --kubeconfig PATH --nodes N``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import hashlib
import heapq
import logging
import os
import signal
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

from slinky import wellknown
from slinky.clients.errors import KubeConflict, KubeError, KubeNotFound, KubeUnavailable
from slinky.clients.kube import KubeClient, load_kubeconfig, micro_time, rfc3339

log = logging.getLogger("slinky.dev.node_agent")  # not __main__ under python -m

Obj = dict[str, Any]
PodKey = tuple[str, str]

LEASE_NAMESPACE: Final = "kube-node-lease"
LEASE_DURATION_SECONDS: Final = 40
KUBELET_VERSION: Final = "v1.20.2"
TERMINATED_ON_DELETE_EXIT_CODE: Final = 143
"""What a container without a SIGTERM handler reports when the kubelet stops it: 128 + SIGTERM."""
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
CONDITION_TAINTS: Final = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
POD_SELECTOR: Final = "spec.nodeName!="
"""Only bound pods; a field selector cannot name a set of nodes, so the agent filters to its own."""
LABEL_SIM_POOL: Final = wellknown.PREFIX_SIM + "pool"
"""``workers`` on the dedicated worker nodes (the bridged nodes carry no pool label)."""


# ---------------------------------------------------------------------------------------------------------
# Kubeconfig


# ---------------------------------------------------------------------------------------------------------
# Pure builders: node, lease and pod status


@dataclasses.dataclass(frozen=True)
class NodeShape:
    """Capacity and labels shared by every node of this agent."""

    cpu: str = "8"
    memory: str = "16Gi"
    pods: int = 110
    gpus: int = 0
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def node_names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(1, count + 1)]


def node_capacity(shape: NodeShape) -> dict[str, str]:
    capacity = {"cpu": shape.cpu, "memory": shape.memory, "pods": str(shape.pods)}
    if shape.gpus:
        capacity["nvidia.com/gpu"] = str(shape.gpus)
    return capacity


def node_labels(name: str, shape: NodeShape) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        wellknown.LABEL_SIM_AGENT: "true",
        **shape.labels,
    }


def node_conditions(now: float, since: float) -> list[Obj]:
    """Ready=True and every pressure condition False, heartbeat ``now``, transitions at ``since``."""

    def cond(type_: str, status: str, reason: str, message: str) -> Obj:
        return {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": rfc3339(now),
            "lastTransitionTime": rfc3339(since),
        }

    return [
        cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        cond("Ready", "True", "KubeletReady", "simulated kubelet (slinky node agent) is posting ready status"),
    ]


def node_status(name: str, shape: NodeShape, now: float, since: float) -> Obj:
    capacity = node_capacity(shape)
    return {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "conditions": node_conditions(now, since),
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": _digest(name)[:32],
            "systemUUID": _digest("uuid/" + name)[:32],
            "bootID": "",
            "kernelVersion": "",
            "osImage": "slinky simulated node",
            "containerRuntimeVersion": "sim://0.1",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def node_object(name: str, shape: NodeShape, now: float) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels(name, shape)},
        "spec": {},
        "status": node_status(name, shape, now, now),
    }


def lease_object(node: Obj, now: float) -> Obj:
    """The kubelet's Lease: owned by its Node, so garbage collection removes it with the node."""
    name = node["metadata"]["name"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": micro_time(now),
        },
    }


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def pod_ip(uid: str) -> str:
    """Deterministic address in 10.244.0.0/16 (never .0 or .255), so a restarted agent reports the same IP."""
    h = int(_digest(uid)[:8], 16)
    return f"10.244.{(h >> 8) % 256}.{h % 254 + 1}"


def _container_id(uid: str, name: str) -> str:
    return "sim://" + _digest(f"{uid}/{name}")[:32]


def _containers(pod: Obj, key: str) -> list[Obj]:
    return list((pod.get("spec") or {}).get(key) or [])


def running_status(pod: Obj, now: float) -> Obj:
    """Status patch for Pending -> Running; keeps an existing ``startTime`` so restarts converge."""
    uid = pod["metadata"]["uid"]
    status = pod.get("status") or {}
    start = status.get("startTime") or rfc3339(now)
    ip = pod_ip(uid)

    def cond(type_: str) -> Obj:
        return {"type": type_, "status": "True", "lastProbeTime": None, "lastTransitionTime": rfc3339(now)}

    return {
        "status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": start,
            "conditions": [cond("Initialized"), cond("Ready"), cond("ContainersReady"), cond("PodScheduled")],
            "initContainerStatuses": [
                _terminated(uid, c, 0, "Completed", start, rfc3339(now), ready=True)
                for c in _containers(pod, "initContainers")
            ]
            or None,
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "containerID": _container_id(uid, c["name"]),
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": start}},
                }
                for c in _containers(pod, "containers")
            ],
        }
    }


def _terminated(uid: str, c: Obj, code: int, reason: str, started: str, finished: str, ready: bool) -> Obj:
    return {
        "name": c["name"],
        "image": c.get("image", ""),
        "imageID": "",
        "containerID": _container_id(uid, c["name"]),
        "ready": ready,
        "started": False,
        "restartCount": 0,
        "state": {
            "terminated": {
                "exitCode": code,
                "reason": reason,
                "startedAt": started,
                "finishedAt": finished,
                "containerID": _container_id(uid, c["name"]),
            }
        },
    }


def terminated_status(pod: Obj, now: float, exit_code: int, phase: str | None) -> Obj:
    """Status patch with every container terminated; ``phase`` None keeps it (stopped for deletion)."""
    uid = pod["metadata"]["uid"]
    status = pod.get("status") or {}
    started = status.get("startTime") or rfc3339(now)
    reason = "Completed" if exit_code == 0 else "Error"
    if phase == "Succeeded":
        not_ready = {"reason": "PodCompleted", "message": ""}
    else:
        names = ", ".join(c["name"] for c in _containers(pod, "containers"))
        not_ready = {"reason": "ContainersNotReady", "message": f"containers with unready status: [{names}]"}

    def cond(type_: str) -> Obj:
        return {
            "type": type_,
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(now),
            **not_ready,
        }

    patch: Obj = {
        "conditions": [cond("Ready"), cond("ContainersReady")],
        "containerStatuses": [
            _terminated(uid, c, exit_code, reason, started, rfc3339(now), ready=False)
            for c in _containers(pod, "containers")
        ],
    }
    if phase is not None:
        patch["phase"] = phase
    return {"status": patch}


@dataclasses.dataclass(frozen=True)
class SimSpec:
    """What the simulation annotations ask of a pod."""

    run_seconds: float | None
    exit_code: int


def sim_spec(pod: Obj) -> SimSpec:
    """Read the simulation annotations; malformed values are ignored with a warning, never fatal."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    run_seconds: float | None = None
    exit_code = 0
    raw = annotations.get(wellknown.ANNOTATION_SIM_RUN_SECONDS)
    if raw is not None:
        try:
            run_seconds = max(0.0, float(raw))
        except ValueError:
            log.warning("pod %s: ignoring %s=%r", _name(pod), wellknown.ANNOTATION_SIM_RUN_SECONDS, raw)
    raw = annotations.get(wellknown.ANNOTATION_SIM_EXIT_CODE)
    if raw is not None:
        try:
            exit_code = int(raw)
        except ValueError:
            log.warning("pod %s: ignoring %s=%r", _name(pod), wellknown.ANNOTATION_SIM_EXIT_CODE, raw)
    return SimSpec(run_seconds=run_seconds, exit_code=exit_code)


def _name(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def pod_key(pod: Obj) -> PodKey:
    meta = pod["metadata"]
    return meta["namespace"], meta["name"]


def resource_version(obj: Obj) -> int:
    """Resource versions are opaque, but this agent only ever talks to etcd3-backed servers (integers)."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


# ---------------------------------------------------------------------------------------------------------
# Timers and work queue


class TimerHeap:
    """Deadlines (wall-clock seconds) in one heap instead of a task or thread per pod.

    A key has at most one live deadline: pushing again supersedes the earlier one lazily.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, PodKey]] = []
        self._live: dict[PodKey, float] = {}
        self._seq = 0

    def push(self, key: PodKey, deadline: float) -> None:
        if self._live.get(key) == deadline:
            return
        self._live[key] = deadline
        self._seq += 1
        heapq.heappush(self._heap, (deadline, self._seq, key))

    def cancel(self, key: PodKey) -> None:
        self._live.pop(key, None)

    def deadline(self, key: PodKey) -> float | None:
        return self._live.get(key)

    def pop_due(self, now: float) -> list[PodKey]:
        due: list[PodKey] = []
        while self._heap and self._heap[0][0] <= now:
            deadline, _, key = heapq.heappop(self._heap)
            if self._live.get(key) == deadline:
                del self._live[key]
                due.append(key)
        return due

    def next_deadline(self) -> float | None:
        while self._heap and self._live.get(self._heap[0][2]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._live)


class WorkQueue:
    """client-go's work queue semantics: a key is queued once, and never processed by two workers at once."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[PodKey] = asyncio.Queue()
        self._dirty: set[PodKey] = set()
        self._processing: set[PodKey] = set()

    def add(self, key: PodKey) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.put_nowait(key)

    async def get(self) -> PodKey:
        key = await self._queue.get()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: PodKey) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.put_nowait(key)

    def __len__(self) -> int:
        return self._queue.qsize()


# ---------------------------------------------------------------------------------------------------------
# API access


# ---------------------------------------------------------------------------------------------------------
# The agent


@dataclasses.dataclass
class AgentOptions:
    nodes: int
    prefix: str = "slinky-node"
    shape: NodeShape = dataclasses.field(default_factory=NodeShape)
    heartbeat_seconds: float = 10.0
    workers: int = 16
    delete_nodes_on_exit: bool = False
    watch_timeout_seconds: int = 120
    worker_nodes: int = 0
    """Nodes ``<worker_prefix>-1..K`` for the pods kube-scheduler places; the stack never registers them in Slurm."""
    worker_prefix: str = "slinky-worker"
    worker_shape: NodeShape = dataclasses.field(default_factory=lambda: NodeShape(cpu="4", memory="8Gi"))


class NodeAgent:
    """Keeps this agent's nodes Ready and plays the kubelet for pods bound to them."""

    def __init__(self, api: KubeClient, options: AgentOptions) -> None:
        self.api = api
        self.options = options
        workers = node_names(options.worker_prefix, options.worker_nodes)
        self.names = node_names(options.prefix, options.nodes) + workers
        self._shapes = {name: options.shape for name in self.names} | {name: options.worker_shape for name in workers}
        self._own = frozenset(self.names)
        self._nodes: dict[str, Obj] = {}
        self._ready_since: dict[str, float] = {}
        self._pods: dict[PodKey, Obj] = {}
        self._started_at: dict[str, float] = {}
        """Exact start time per pod uid (``status.startTime`` only has seconds); lost on restart."""
        self._deleted_uids: set[str] = set()
        self._failures: dict[PodKey, int] = {}
        self._timers = TimerHeap()
        self._timer_wakeup = asyncio.Event()
        self._queue = WorkQueue()
        self._sem = asyncio.Semaphore(options.workers)
        self.synced = asyncio.Event()
        """Set once the first pod list has been taken in (tests and benchmarks wait on it)."""

    # -- lifecycle ------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        await self.register_nodes()
        tasks = [
            asyncio.create_task(self._heartbeat_loop(), name="heartbeat"),
            asyncio.create_task(self._watch_loop(), name="watch"),
            asyncio.create_task(self._timer_loop(), name="timers"),
            *(asyncio.create_task(self._worker(), name=f"worker-{i}") for i in range(self.options.workers)),
        ]
        stopped = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopped:
                    task.result()  # a loop must never end on its own: surface why it did
                    raise RuntimeError(f"node agent task {task.get_name()} ended")
        finally:
            for task in [stopped, *tasks]:
                task.cancel()
            await asyncio.gather(stopped, *tasks, return_exceptions=True)
            if self.options.delete_nodes_on_exit:
                await self.delete_nodes()

    # -- nodes --------------------------------------------------------------------------------------------

    async def register_nodes(self) -> None:
        """Create missing nodes, update labels of existing ones, and post a first Ready status."""
        await asyncio.gather(*(self._bounded(self._register(name)) for name in self.names))
        log.info("registered %d nodes %s..%s", len(self.names), self.names[0], self.names[-1])

    async def _register(self, name: str) -> None:
        now = time.time()
        shape = self._shapes[name]
        try:
            node = await self.api.create("/api/v1/nodes", node_object(name, shape, now))
            log.info("node %s created", name)
        except KubeConflict:
            node = await self.api.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": node_labels(name, shape)}})
            ready: Obj = next((c for c in node.get("status", {}).get("conditions") or [] if c["type"] == "Ready"), {})
            since = parse_time(ready.get("lastTransitionTime")) if ready.get("status") == "True" else None
            if since is not None:
                self._ready_since[name] = since
            log.info("node %s exists: updated", name)
        self._ready_since.setdefault(name, now)
        self._nodes[name] = node
        await self._heartbeat(name)

    async def _heartbeat_loop(self) -> None:
        interval = self.options.heartbeat_seconds
        while True:
            await asyncio.sleep(interval)
            results = await asyncio.gather(
                *(self._bounded(self._heartbeat(name)) for name in self.names), return_exceptions=True
            )
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:
                log.warning("heartbeat failed for %d of %d nodes: %s", len(failed), len(results), failed[0])

    async def _heartbeat(self, name: str) -> None:
        """Node status (Ready, fresh heartbeat) and the Lease; recreate either if someone deleted it."""
        now = time.time()
        status = node_status(name, self._shapes[name], now, self._ready_since[name])
        try:
            node = await self.api.patch(f"/api/v1/nodes/{name}/status", {"status": status}, "strategic")
            await self._clear_condition_taints(name, node)
        except KubeNotFound:
            log.info("node %s was deleted: recreating", name)
            self._ready_since[name] = now
            self._nodes[name] = await self.api.create("/api/v1/nodes", node_object(name, self._shapes[name], now))
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{name}"
        try:
            await self.api.patch(lease_path, {"spec": {"renewTime": micro_time(now)}})
        except KubeNotFound:
            with contextlib.suppress(KubeConflict):  # created concurrently, renewed next beat
                await self.api.create(
                    f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases",
                    lease_object(self._nodes[name], now),
                )

    async def _clear_condition_taints(self, name: str, node: Obj) -> None:
        """Drop the not-ready/unreachable taints the apiserver puts on new nodes.

        The node lifecycle controller removes them once a node is Ready; it is not among the
        controllers the dev stack runs, so the agent plays that part for its own Ready nodes.
        """
        taints = (node.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if t.get("key") not in CONDITION_TAINTS]
        if len(kept) != len(taints):
            await self.api.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": kept or None}})
            log.info("node %s: removed condition taints", name)

    async def delete_nodes(self) -> None:
        async def delete(name: str) -> None:
            with contextlib.suppress(KubeError):
                await self.api.delete(f"/api/v1/nodes/{name}")
            with contextlib.suppress(KubeError):
                await self.api.delete(f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{name}")

        await asyncio.gather(*(self._bounded(delete(n)) for n in self.names))
        log.info("deleted %d nodes", len(self.names))

    async def _bounded(self, coro: Any) -> Any:
        async with self._sem:
            return await coro

    # -- pod watch ----------------------------------------------------------------------------------------

    async def _watch_loop(self) -> None:
        """List then watch bound pods (the client's informer loop: resume, relist on 410 or a refusal)."""
        params = {"fieldSelector": POD_SELECTOR}
        async for kind, obj in self.api.list_watch(
            "/api/v1/pods", params, timeout_seconds=self.options.watch_timeout_seconds
        ):
            if kind != "SYNC":
                self._observe(kind, obj)
                continue
            self._replace(obj["items"])
            level = logging.DEBUG if self.synced.is_set() else logging.INFO
            log.log(
                level,
                "listed %d pods on this agent's nodes (resourceVersion %s)",
                len(self._pods),
                obj["metadata"]["resourceVersion"],
            )
            self.synced.set()

    def _replace(self, items: Iterable[Obj]) -> None:
        """Take in a fresh list: forget pods that vanished while we were not watching."""
        seen: set[PodKey] = set()
        for pod in items:
            if self._observe("ADDED", pod):
                seen.add(pod_key(pod))
        for key in set(self._pods) - seen:
            self._forget(key)

    def _observe(self, kind: str, pod: Obj) -> bool:
        """Update the cache from a watch event; returns whether the pod is on one of our nodes."""
        if (pod.get("spec") or {}).get("nodeName") not in self._own:
            return False
        key = pod_key(pod)
        if kind == "DELETED":
            self._forget(key)
            return True
        cached = self._pods.get(key)
        if cached is not None and cached["metadata"]["uid"] != pod["metadata"]["uid"]:
            self._forget(key)  # a new pod with a recycled name
            cached = None
        if cached is None or resource_version(pod) >= resource_version(cached):
            self._pods[key] = pod
        self._queue.add(key)
        return True

    def _forget(self, key: PodKey) -> None:
        pod = self._pods.pop(key, None)
        self._timers.cancel(key)
        self._failures.pop(key, None)
        if pod is not None:
            uid = pod["metadata"]["uid"]
            self._deleted_uids.discard(uid)
            self._started_at.pop(uid, None)

    def _remember(self, key: PodKey, pod: Obj) -> None:
        """Cache a write's answer, unless the watch already brought something newer."""
        cached = self._pods.get(key)
        if cached is not None and cached["metadata"]["uid"] == pod["metadata"]["uid"]:
            if resource_version(pod) > resource_version(cached):
                self._pods[key] = pod

    # -- timers and workers ------------------------------------------------------------------------------

    def _arm(self, key: PodKey, deadline: float) -> None:
        if self._timers.deadline(key) == deadline:
            return
        next_before = self._timers.next_deadline()
        self._timers.push(key, deadline)
        if next_before is None or deadline < next_before:
            self._timer_wakeup.set()

    async def _timer_loop(self) -> None:
        while True:
            for key in self._timers.pop_due(time.time()):
                self._queue.add(key)
            nxt = self._timers.next_deadline()
            self._timer_wakeup.clear()
            timeout = None if nxt is None else max(0.0, nxt - time.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._timer_wakeup.wait(), timeout)

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            try:
                await self._reconcile(key)
                self._failures.pop(key, None)
            except Exception as exc:
                if isinstance(exc, KubeNotFound):
                    log.debug("pod %s/%s vanished while being updated", *key)
                elif isinstance(exc, KubeUnavailable):
                    # Per-pod exponential backoff, and one warning per outage rather than one per retry.
                    n = self._failures[key] = self._failures.get(key, 0) + 1
                    delay = min(0.5 * 2**n, 30.0)
                    (log.warning if n == 1 else log.debug)("pod %s/%s: %r; retrying in %.0fs", *key, exc, delay)
                    self._arm(key, time.time() + delay)
                else:
                    log.exception("pod %s/%s: giving up on this event", *key)
            finally:
                self._queue.done(key)

    async def _reconcile(self, key: PodKey) -> None:
        """Drive one pod one step towards what a kubelet would have made of it by now."""
        pod = self._pods.get(key)
        if pod is None:
            return
        meta, status = pod["metadata"], pod.get("status") or {}
        phase = status.get("phase") or "Pending"
        node = pod["spec"]["nodeName"]
        path = f"/api/v1/namespaces/{key[0]}/pods/{key[1]}"
        now = time.time()

        if meta.get("deletionTimestamp"):
            if meta["uid"] in self._deleted_uids:
                return  # already released; finalizers (if any) hold it now, which is their point
            self._timers.cancel(key)
            if phase == "Running" and not _all_terminated(status):
                patch = terminated_status(pod, now, TERMINATED_ON_DELETE_EXIT_CODE, phase=None)
                self._remember(key, await self.api.patch(path + "/status", patch, "strategic"))
                log.info("pod %s/%s on %s: containers stopped for deletion", *key, node)
            with contextlib.suppress(KubeNotFound, KubeConflict):  # gone already, or a new pod with the same name
                await self.api.delete(path, grace_seconds=0, uid=meta["uid"])
            self._deleted_uids.add(meta["uid"])
            log.info("pod %s/%s on %s: %s -> deleted", *key, node, phase)
            return

        if phase in TERMINAL_PHASES:
            return

        if phase != "Running":
            pod = await self.api.patch(path + "/status", running_status(pod, now), "strategic")
            self._remember(key, pod)
            self._started_at[meta["uid"]] = now
            log.info("pod %s/%s on %s: %s -> Running", *key, node, phase)

        spec = sim_spec(pod)
        if spec.run_seconds is None:
            return
        started = self._started_at.get(meta["uid"]) or parse_time((pod.get("status") or {}).get("startTime"))
        deadline = (started or now) + spec.run_seconds
        if deadline > now:
            self._arm(key, deadline)
            return
        final = "Succeeded" if spec.exit_code == 0 else "Failed"
        patch = terminated_status(pod, now, spec.exit_code, phase=final)
        self._remember(key, await self.api.patch(path + "/status", patch, "strategic"))
        log.info("pod %s/%s on %s: Running -> %s (exit code %d)", *key, node, final, spec.exit_code)


def _all_terminated(status: Obj) -> bool:
    statuses = status.get("containerStatuses") or []
    return bool(statuses) and all("terminated" in (s.get("state") or {}) for s in statuses)


# ---------------------------------------------------------------------------------------------------------
# Command line


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected k=v, got {text!r}")
    return key, value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m slinky.dev.node_agent", description=__doc__.split("\n")[0])
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="default: $KUBECONFIG")
    p.add_argument("--context", default=None, help="kubeconfig context (default: current-context)")
    p.add_argument("--nodes", type=int, required=True, help="number of nodes <prefix>-1..N")
    p.add_argument("--prefix", default="slinky-node")
    p.add_argument("--cpu", default="8", help="cpu capacity per node (quantity)")
    p.add_argument("--memory", default="16Gi", help="memory capacity per node (quantity)")
    p.add_argument("--gpus", type=int, default=0, help="nvidia.com/gpu per node (0: none)")
    p.add_argument("--pods", type=int, default=110, help="pod capacity per node")
    p.add_argument("--label", type=_label, action="append", default=[], metavar="K=V", help="extra node label")
    p.add_argument("--heartbeat-seconds", type=float, default=10.0)
    p.add_argument("--workers", type=int, default=16, help="concurrent API writes")
    p.add_argument("--delete-nodes-on-exit", action="store_true")
    p.add_argument("--worker-nodes", type=int, default=0, help="dedicated nodes for NodeSet pods (not in Slurm)")
    p.add_argument("--worker-prefix", default="slinky-worker")
    p.add_argument("--worker-cpu", default="4", help="cpu capacity per worker node (quantity)")
    p.add_argument("--worker-memory", default="8Gi", help="memory capacity per worker node (quantity)")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    if not args.kubeconfig:
        p.error("--kubeconfig (or $KUBECONFIG) is required")
    if args.nodes < 1:
        p.error("--nodes must be at least 1")
    if args.worker_nodes < 0:
        p.error("--worker-nodes must not be negative")
    return args


async def amain(args: argparse.Namespace) -> int:
    config = load_kubeconfig(args.kubeconfig, args.context)
    labels = dict(args.label)
    options = AgentOptions(
        nodes=args.nodes,
        prefix=args.prefix,
        shape=NodeShape(cpu=args.cpu, memory=args.memory, pods=args.pods, gpus=args.gpus, labels=labels),
        heartbeat_seconds=args.heartbeat_seconds,
        workers=args.workers,
        delete_nodes_on_exit=args.delete_nodes_on_exit,
        worker_nodes=args.worker_nodes,
        worker_prefix=args.worker_prefix,
        worker_shape=NodeShape(
            cpu=args.worker_cpu, memory=args.worker_memory, pods=args.pods, labels={**labels, LABEL_SIM_POOL: "workers"}
        ),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    api = KubeClient(config, max_connections=args.workers + 4, user_agent="slinky-node-agent/0.1")
    try:
        await NodeAgent(api, options).run(stop)
    finally:
        await api.aclose()
    log.info("node agent stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request would drown the transitions
    return asyncio.run(amain(args))


if __name__ == "__main__":
    raise SystemExit(main())
