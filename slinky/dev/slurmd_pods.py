"""The node agent's kubelet part for pods with a ``slurmd`` container: a real slurmd per pod.

:class:`SlurmdPods` reconciles one such pod at a time (the agent's work queue guarantees it), level triggered:

* bound and not started: a namespace and slurmd (``slinky.dev.slurmd_runtime``), then Running with the
  pod's address and the container running but not ready;
* running: Slurm is asked every ``POLL_SECONDS`` whether the node has registered from the pod's address;
  then Ready (containers ready), and the polling stops (after ``READY_TIMEOUT_SECONDS`` it stops anyway);
* slurmd exited by itself: restarted under ``restartPolicy`` Always (or OnFailure on a non-zero code), with a
  kubelet's back-off and ``restartCount``; else the pod is Failed (Succeeded on exit code 0);
* graceful deletion: the container's preStop command in the pod's namespaces and chroot, SIGTERM, SIGKILL at
  the end of the grace period, the namespace deleted, then the pod released as the agent does for any pod;
* a pod gone from the API while its slurmd runs: slurmd stopped and its namespace deleted.

The processes outlive the agent: a restarted agent re-adopts them from the runtime's state file, and a pod
whose process died meanwhile (exit code lost) counts as exited with ``ContainerStatusUnknown``.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import math
import os
import socket
import subprocess
import time
from collections.abc import Callable, Collection, Coroutine
from typing import Any, Final

from slinky.clients.errors import KubeConflict, KubeNotFound
from slinky.clients.kube import KubeClient
from slinky.dev import daemons, pod_volumes, slurmd_runtime
from slinky.dev import slurmd_spec as spec
from slinky.dev.launch import Launch
from slinky.dev.slurmd_runtime import PodProcess, SlurmdRuntime

log = logging.getLogger("slinky.dev.slurmd_pods")

Obj = dict[str, Any]
PodKey = tuple[str, str]

POLL_SECONDS: Final = 0.5
READY_TIMEOUT_SECONDS: Final = 120.0
RETRY_SECONDS: Final = 5.0
CONFIG_RETRY_SECONDS: Final = 2.0
ORPHAN_STOP_SECONDS: Final = 10.0
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


def _probe(address: str, kind: str, port: int, path: str) -> bool:
    """A kubelet's tcpSocket or httpGet probe against the pod's address (routable from the host)."""
    try:
        if kind == "tcp":
            with socket.create_connection((address, port), timeout=1.0):
                return True
        conn = http.client.HTTPConnection(address, port, timeout=1.0)
        try:
            conn.request("GET", path)
            return 200 <= conn.getresponse().status < 400
        finally:
            conn.close()
    except OSError:
        return False


def _path(key: PodKey) -> str:
    return f"/api/v1/namespaces/{key[0]}/pods/{key[1]}"


class SlurmdPods:
    """Runs the pods that have a ``slurmd`` container as real slurmd processes."""

    def __init__(
        self,
        runtime: SlurmdRuntime,
        api: KubeClient,
        *,
        remember: Callable[[PodKey, Obj], None],
        arm: Callable[[PodKey, float], None],
        enqueue: Callable[[PodKey], None],
        released: set[str],
        plan: Callable[[Obj], Launch],
    ) -> None:
        """``remember`` caches a write's answer, ``arm`` asks for a reconcile at a wall-clock time, ``enqueue``
        asks for one now; ``released`` is the agent's set of pod uids already deleted with grace 0; ``plan``
        decides a pod's launch from the agent's caches (``slinky.dev.launch``)."""
        self.runtime = runtime
        self._plan = plan
        self.api = api
        self._remember = remember
        self._arm = arm
        self._enqueue = enqueue
        self._released = released
        self._locks: dict[str, asyncio.Lock] = {}
        self._watches: dict[str, int] = {}
        """pidfd per pod uid: readable once its slurmd exits."""
        self._restart_at: dict[str, float] = {}
        self._last_exit: dict[str, spec.Termination] = {}
        self._ready_deadline: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle ---------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Before any pod is reconciled: ensure the bridge, re-adopt the daemons the state file records (a
        restarted agent) and delete namespaces no record holds (a crash between creating and recording one)."""
        await asyncio.to_thread(slurmd_runtime.ensure_bridge)
        records = await asyncio.to_thread(self.runtime.load)
        alive = [r for r in records if r.alive()]
        for record in alive:
            self._watch(record, (record.namespace, record.name))
        if records:
            log.info("slurmd pods: %d recorded, %d still running (re-adopted)", len(records), len(alive))
        strays = await asyncio.to_thread(self.runtime.delete_strays)
        if strays:
            log.info("deleted %d stray pod namespace(s): %s", len(strays), ", ".join(strays))

    def after_sync(self, uids: Collection[str]) -> None:
        """After the first pod list: stop (in the background) the daemons of pods deleted while the agent was
        away."""
        for record in self.runtime.records():
            if record.uid not in uids:
                self.forget(record.uid)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def forget(self, uid: str) -> None:
        """The pod is gone from the API: stop its slurmd if one still runs."""
        self._restart_at.pop(uid, None)
        self._last_exit.pop(uid, None)
        self._ready_deadline.pop(uid, None)
        if self.runtime.get(uid) is None:
            self._locks.pop(uid, None)
            return
        self._spawn(self._orphan(uid))

    def _lock(self, uid: str) -> asyncio.Lock:
        return self._locks.setdefault(uid, asyncio.Lock())

    async def _orphan(self, uid: str) -> None:
        async with self._lock(uid):
            record = self.runtime.get(uid)
            if record is None:
                return
            log.info("pod %s/%s is gone from the API: stopping its slurmd", record.namespace, record.name)
            self._unwatch(uid)
            await asyncio.to_thread(self.runtime.terminate, uid, ORPHAN_STOP_SECONDS)
            await asyncio.to_thread(self.runtime.release, uid)
        self._locks.pop(uid, None)

    # -- exit watch ----------------------------------------------------------------------------------------
    def _watch(self, record: PodProcess, key: PodKey) -> None:
        """Reconcile the pod as soon as its slurmd exits (a pidfd works for re-adopted processes too)."""
        self._unwatch(record.uid)
        try:
            fd = os.pidfd_open(record.pid)
        except (ProcessLookupError, OSError):
            self._enqueue(key)
            return
        if not record.alive():
            os.close(fd)
            self._enqueue(key)
            return
        self._watches[record.uid] = fd
        asyncio.get_running_loop().add_reader(fd, self._on_exit, record.uid, key)

    def _on_exit(self, uid: str, key: PodKey) -> None:
        self._unwatch(uid)
        log.info("pod %s/%s: slurmd exited", *key)
        self._enqueue(key)

    def _unwatch(self, uid: str) -> None:
        fd = self._watches.pop(uid, None)
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    # -- reconcile ---------------------------------------------------------------------------------------
    async def reconcile(self, key: PodKey, pod: Obj) -> None:
        """One step for one pod; a failing command is retried in ``RETRY_SECONDS``."""
        async with self._lock(pod["metadata"]["uid"]):
            try:
                await self._reconcile(key, pod)
            except pod_volumes.VolumeError as exc:
                # A kubelet's CreateContainerConfigError: a ConfigMap or Secret is missing (yet), or a volume
                # the agent cannot lay out. The pod waits; a change of the object requeues it sooner.
                log.warning("pod %s/%s: %s; retrying in %.0fs", *key, exc, CONFIG_RETRY_SECONDS)
                self._arm(key, time.time() + CONFIG_RETRY_SECONDS)
            except (OSError, subprocess.SubprocessError, spec.PoolExhausted) as exc:
                log.warning("pod %s/%s: %s; retrying in %.0fs", *key, exc, RETRY_SECONDS)
                self._arm(key, time.time() + RETRY_SECONDS)

    async def _reconcile(self, key: PodKey, pod: Obj) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        uid = meta["uid"]
        if meta.get("deletionTimestamp"):
            await self._delete(key, pod)
            return
        record = self.runtime.get(uid)
        if (status.get("phase") or "Pending") in TERMINAL_PHASES:
            if record is not None:  # a leftover: the pod ended, its namespace must go
                self._unwatch(uid)
                await asyncio.to_thread(self.runtime.release, uid)
            return
        if record is None:
            if status.get("phase") == "Running":
                await self._lost(key, pod)
            else:
                await self._start(key, pod, restarts=0, last_state=None)
            return
        if not await asyncio.to_thread(self.runtime.alive, uid):
            await self._exited(key, pod, record)
            return
        await self._running(key, pod, record)

    async def _patch(self, key: PodKey, body: Obj) -> None:
        self._remember(key, await self.api.patch(_path(key) + "/status", body, "merge"))

    async def _post_running(
        self, key: PodKey, pod: Obj, record: PodProcess, *, ready: bool, restarts: int, last_state: Obj | None
    ) -> None:
        view = spec.SlurmdView(
            record.address,
            "running",
            record.started_at,
            ready=ready,
            restart_count=restarts,
            last_state=last_state,
        )
        await self._patch(key, spec.pod_status(pod, view, time.time()))

    async def _start(self, key: PodKey, pod: Obj, *, restarts: int, last_state: Obj | None) -> None:
        launch = self._plan(pod)
        record = await asyncio.to_thread(self.runtime.start, pod, launch)
        self._watch(record, key)
        await self._post_running(key, pod, record, ready=False, restarts=restarts, last_state=last_state)
        log.info(
            "pod %s/%s on %s: %s started -> Running at %s",
            *key,
            pod["spec"]["nodeName"],
            launch.daemon.container,
            record.address,
        )
        self._ready_deadline[record.uid] = time.monotonic() + READY_TIMEOUT_SECONDS
        self._arm(key, time.time() + POLL_SECONDS)

    async def _running(self, key: PodKey, pod: Obj, record: PodProcess) -> None:
        """The daemon runs: keep its files current, make the status say so, then poll until it is ready (slurmd:
        its node registered; another daemon: its readiness probe, else at once)."""
        uid = record.uid
        launch = self._plan(pod)
        if await asyncio.to_thread(self.runtime.refresh, uid, launch):
            log.info("pod %s/%s: volumes or /etc/hosts updated", *key)
        if not spec.is_running(pod, record.address):  # e.g. the agent died between start and status
            last = spec.container_status(pod).get("lastState")
            await self._post_running(
                key, pod, record, ready=False, restarts=spec.restart_count(pod), last_state=last or None
            )
            return
        if spec.is_ready(pod):
            self._ready_deadline.pop(uid, None)
            return
        deadline = self._ready_deadline.setdefault(uid, time.monotonic() + READY_TIMEOUT_SECONDS)
        if deadline == math.inf:
            return  # gave up polling; a restart of the agent or of slurmd polls again
        if time.monotonic() > deadline:
            self._ready_deadline[uid] = math.inf
            log.warning(
                "pod %s/%s: node %s not registered in Slurm after %.0fs; not polling any more",
                *key,
                record.hostname,
                READY_TIMEOUT_SECONDS,
            )
            return
        if launch.daemon.container != spec.CONTAINER_NAME:
            target = daemons.probe(launch.container)
            ok = target is None or await asyncio.to_thread(_probe, record.address, *target)
            if not ok:
                self._arm(key, time.time() + POLL_SECONDS)
                return
            last = spec.container_status(pod).get("lastState") or None
            await self._post_running(key, pod, record, ready=True, restarts=spec.restart_count(pod), last_state=last)
            self._ready_deadline.pop(uid, None)
            log.info("pod %s/%s: %s ready", *key, launch.daemon.container)
            return
        node = await asyncio.to_thread(self.runtime.slurm_node, uid, record.hostname)
        if not spec.node_registered(node, record.address, record.started_at):
            self._arm(key, time.time() + POLL_SECONDS)
            return
        last = spec.container_status(pod).get("lastState") or None
        await self._post_running(key, pod, record, ready=True, restarts=spec.restart_count(pod), last_state=last)
        self._ready_deadline.pop(uid, None)
        log.info(
            "pod %s/%s: Slurm node %s registered (%s): Ready %.2fs after slurmd started",
            *key,
            record.hostname,
            "+".join((node or {}).get("state") or []),
            time.time() - record.started_at,
        )

    async def _exited(self, key: PodKey, pod: Obj, record: PodProcess) -> None:
        """slurmd ended by itself: restart it (after the back-off) or end the pod, as ``restartPolicy`` says."""
        uid, now = record.uid, time.time()
        self._unwatch(uid)
        term = self._last_exit.get(uid)
        if term is None:
            code = self.runtime.exit_code(uid)
            if code is None:  # a re-adopted process: not our child, its exit status is lost
                term = spec.Termination(spec.UNKNOWN_EXIT_CODE, now, record.started_at, "ContainerStatusUnknown")
                log.info("pod %s/%s: slurmd exited (exit code unknown: started by an earlier agent)", *key)
            else:
                message = spec.log_tail_message(self.runtime.log_tail(record)) if code else ""
                term = spec.Termination(code, now, record.started_at, message=message)
                log.info("pod %s/%s: its daemon exited with code %d", *key, code)
            self._last_exit[uid] = term
        restarts = spec.restart_count(pod)
        if not spec.should_restart(spec.restart_policy(pod), term.exit_code):
            await asyncio.to_thread(self.runtime.release, uid)
            self._last_exit.pop(uid, None)
            view = spec.SlurmdView(
                record.address, "terminated", record.started_at, restart_count=restarts, termination=term
            )
            await self._patch(key, spec.pod_status(pod, view, now))
            log.info(
                "pod %s/%s: Running -> %s (slurmd exit code %d)",
                *key,
                "Succeeded" if term.exit_code == 0 else "Failed",
                term.exit_code,
            )
            return
        due = self._restart_at.setdefault(uid, now + spec.restart_delay(restarts))
        if now < due:
            if (spec.container_status(pod).get("state") or {}).get("waiting") is None:
                view = spec.SlurmdView(
                    record.address, "waiting", record.started_at, restart_count=restarts, last_state=term.as_state()
                )
                await self._patch(key, spec.pod_status(pod, view, now))
            self._arm(key, due)
            return
        launch = self._plan(pod)
        record = await asyncio.to_thread(self.runtime.spawn, uid, launch)
        self._restart_at.pop(uid, None)
        self._last_exit.pop(uid, None)
        self._watch(record, key)
        await self._post_running(key, pod, record, ready=False, restarts=restarts + 1, last_state=term.as_state())
        log.info("pod %s/%s: slurmd restarted (restart %d)", *key, restarts + 1)
        self._ready_deadline[uid] = time.monotonic() + READY_TIMEOUT_SECONDS
        self._arm(key, time.time() + POLL_SECONDS)

    async def _lost(self, key: PodKey, pod: Obj) -> None:
        """The status says Running but no process is recorded (state lost, or the stack went down): the
        container is gone with its exit status, as after a node reboot."""
        now = time.time()
        started = spec.running_since(pod) or now
        term = spec.Termination(spec.UNKNOWN_EXIT_CODE, now, started, "ContainerStatusUnknown")
        restarts = spec.restart_count(pod)
        if spec.should_restart(spec.restart_policy(pod), term.exit_code):
            log.info("pod %s/%s: its slurmd is gone (no record): starting a new one", *key)
            await self._start(key, pod, restarts=restarts + 1, last_state=term.as_state())
            return
        address = (pod.get("status") or {}).get("podIP") or ""
        view = spec.SlurmdView(address, "terminated", started, restart_count=restarts, termination=term)
        await self._patch(key, spec.pod_status(pod, view, now))
        log.info("pod %s/%s: its slurmd is gone (no record): Failed", *key)

    async def _delete(self, key: PodKey, pod: Obj) -> None:
        """Graceful deletion: preStop, SIGTERM (SIGKILL at the end of the grace period), namespace deleted,
        containers terminated, then deleted with grace 0 (finalizers still hold the pod)."""
        uid = pod["metadata"]["uid"]
        if uid in self._released:
            return
        record = self.runtime.get(uid)
        code: int | None = None
        if record is not None:
            code = await self._stop(key, pod, record)
        now = time.time()
        status = pod.get("status") or {}
        if status.get("phase") == "Running" and not spec.is_terminated(pod):
            started = record.started_at if record is not None else now
            term = spec.Termination(143 if code is None else code, now, started)
            address = record.address if record is not None else status.get("podIP") or ""
            view = spec.SlurmdView(
                address, "terminated", started, restart_count=spec.restart_count(pod), termination=term
            )
            await self._patch(key, spec.pod_status(pod, view, now, keep_phase=True))
        with contextlib.suppress(KubeNotFound, KubeConflict):
            await self.api.delete(_path(key), grace_seconds=0, uid=uid)
        self._released.add(uid)
        for table in (self._restart_at, self._last_exit, self._ready_deadline):
            table.pop(uid, None)
        log.info("pod %s/%s on %s: %s -> deleted", *key, pod["spec"]["nodeName"], status.get("phase") or "Pending")

    async def _stop(self, key: PodKey, pod: Obj, record: PodProcess) -> int | None:
        """preStop, then stop slurmd within the grace period; the namespace goes last. Returns the exit code."""
        container = spec.slurmd_container(pod) or {}
        deadline = time.monotonic() + spec.grace_seconds(pod)
        self._unwatch(record.uid)
        code: int | None
        if await asyncio.to_thread(self.runtime.alive, record.uid):
            command = spec.prestop_command(container)
            if command:
                env = spec.literal_env(container)
                rc = await asyncio.to_thread(
                    self.runtime.run_prestop, record.uid, command, env, deadline - time.monotonic()
                )
                log.info("pod %s/%s: preStop exited %s", *key, rc)
            # A kubelet grants 2 s more when preStop used up the grace period.
            code = await asyncio.to_thread(self.runtime.terminate, record.uid, max(deadline - time.monotonic(), 2.0))
        else:
            code = self.runtime.exit_code(record.uid)
        await asyncio.to_thread(self.runtime.release, record.uid)
        log.info("pod %s/%s: slurmd stopped (exit code %s), namespace %s deleted", *key, code, record.netns)
        return code
