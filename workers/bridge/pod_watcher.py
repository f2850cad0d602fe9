"""The bridge's "scheduler": list-watches pods that name the bridge's scheduler and drives workflows.

* An unbound, live pod gets its ``WorkloadWorkflow``, started with an ID derived from its UID and
  ``USE_EXISTING``, so duplicate watch events, relists and restarts of this process are harmless.
* A pod the bridge manages that is deleted, finishes, stops, or changes while pending becomes one
  ``pod_event`` signal; nothing else is sent, so a workload costs few history events.

It covers every namespace: a pod that names the bridge's scheduler would otherwise stay Pending forever.
(Managed namespaces decide where the admission webhook sets the scheduler name.) The watch resumes from
its resourceVersion and relists after 410 Gone.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from slinky import telemetry, wellknown
from slinky.bridge import pods
from slinky.bridge.grouping import GroupRef, group_of, min_member
from slinky.bridge.models.jobspec import TranslateDefaults
from slinky.bridge.models.workload import PodEvent, PodEventKind, PodRef, WorkloadInput, workload_workflow_id
from slinky.clients.errors import KubeError, KubeNotFound
from slinky.clients.events import EventRecorder, pod_event
from slinky.clients.kube import KubeClient, Obj
from workers.bridge.signals import TRANSIENT, Coalescer, retry_delay, signal_lifecycle

logger = logging.getLogger(__name__)
START_CONCURRENCY = 32
START_ATTEMPTS = 5
"""Tries of a lifecycle start whose failure is not transient (see signals.TRANSIENT: those go on while pending)."""
RECHECKS_PER_SECOND = 5.0
"""The default budget of the lifecycles' safety re-checks, all together (``SLINKY_WORKER__SAFETY_RECHECKS_PER_SECOND``):
with more pods than ``safety_recheck_seconds`` times this, lifecycles re-check less often. Each re-check is a workflow
task replayed from its history when the lifecycle is not cached, and two reads; at 10,000 open workloads every 300 s
they were 33 a second, enough to keep the worker and Temporal busy and push other workflow tasks minutes late
(docs/benchmarks.md). Only a lost signal waits for a re-check (signals are retried for minutes)."""

GROUP_CACHE_SECONDS = 30.0
GROUP_MISSING_RECHECK_SECONDS = 10.0
"""How often a gang object that does not exist (or is invalid) is read again while its pods wait."""
GROUP_READ_MAX_DELAY = 10.0
"""The longest wait between reads of a gang object that failed for a passing reason (the API server restarting):
0.5 s, doubling up to this, for as long as a pod waits for it."""


def _read_delay(failures: int) -> float:
    return float(min(GROUP_READ_MAX_DELAY, 0.5 * 2 ** (failures - 1)))


@dataclass(frozen=True)
class GroupInfo:
    uid: str
    min_member: int
    expires: float


@dataclass
class Seen:
    """What the watcher last saw of a pod, to send a signal only on a transition."""

    managed: bool
    started: bool
    terminal: bool
    deleting: bool
    gone: bool
    spec_hash: str
    workflow_id: str
    bound: bool = False


def spec_hash(pod: Obj) -> str:
    """What a re-translation depends on: the workload annotations and the spec (not what the bridge writes)."""
    annotations = pod["metadata"].get("annotations") or {}
    relevant = {
        "annotations": {
            k: v
            for k, v in annotations.items()
            if k.startswith(wellknown.PREFIX_SLURMJOB) or k in wellknown.DEPRECATED_ANNOTATION_ALIASES
        },
        "spec": pod.get("spec") or {},
    }
    return hashlib.sha1(json.dumps(relevant, sort_keys=True).encode()).hexdigest()


def _count_binding(pod: Obj) -> None:
    """A managed pod was seen bound for the first time: count it, and time it from its creation."""
    telemetry.PODS_BOUND.inc()
    created = pod["metadata"].get("creationTimestamp")
    if created:
        age = time.time() - dt.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
        telemetry.CREATE_TO_BOUND.observe(max(0.0, age))


def _group_key(group: GroupRef) -> tuple[str, str, str]:
    return (group.kind, group.namespace, group.name)


def owner_kind(pod: Obj) -> tuple[str, str]:
    owner = next((o for o in pod["metadata"].get("ownerReferences", []) if o.get("controller")), None)
    if owner is None:
        return "Pod", pod["metadata"]["name"]
    return str(owner.get("kind", "Pod")), str(owner.get("name", ""))


class PodWatcher:
    def __init__(
        self,
        kube: KubeClient,
        temporal: Client,
        *,
        task_queue: str,
        scheduler_name: str,
        defaults: TranslateDefaults,
        events: EventRecorder | None = None,
        safety_recheck_seconds: float = 300.0,
        rechecks_per_second: float = RECHECKS_PER_SECOND,
        eager_start: bool = True,
        batch_pod_events: bool = True,
    ) -> None:
        self.kube = kube
        self.eager_start = eager_start
        self.events = events or EventRecorder(kube)
        self.temporal = temporal
        self.task_queue = task_queue
        self.scheduler_name = scheduler_name
        self.defaults = defaults
        self.safety_recheck_seconds = safety_recheck_seconds
        self.rechecks_per_second = rechecks_per_second
        self.seen: dict[str, Seen] = {}
        self.groups: dict[tuple[str, str, str], GroupInfo] = {}
        self._sem = asyncio.Semaphore(START_CONCURRENCY)
        self._tasks: set[asyncio.Task[None]] = set()
        self.started = 0
        self.signals_sent = 0
        self.pending: dict[str, Obj] = {}
        """Unbound live pods as last seen: translation reads them here (activities.kube.PodCache)."""
        self._awaiting: dict[tuple[str, str, str], dict[str, tuple[str, Obj]]] = {}
        """Pods whose gang object is being read (its UID names their lifecycle), by gang, each with its latest
        watch event (kind, object): one reader per gang; a pod deleted meanwhile leaves its gang's set."""
        self.batch_pod_events = batch_pod_events
        """A lifecycle's events that come together go as one ``pod_events`` signal (docs/bridge.md, "Upgrading")."""
        self._events: Coalescer[PodEvent] = Coalescer(self._signal, self._spawn)
        self._joins: Coalescer[tuple[Obj, PodRef, GroupRef]] = Coalescer(self._join, self._spawn)

    def recheck_seconds(self) -> float:
        """The safety re-check interval of a lifecycle from now on: ``safety_recheck_seconds``, or longer when the
        pods this watcher follows would make more than ``rechecks_per_second`` re-checks a second. A lifecycle
        starts with it and gets it again at each re-check (``get_pod_states``), so the budget holds as the number
        of open workloads grows and shrinks."""
        return max(self.safety_recheck_seconds, len(self.seen) / self.rechecks_per_second)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run(self) -> None:
        selector = {"fieldSelector": f"spec.schedulerName={self.scheduler_name}"}
        async for kind, obj in self.kube.list_watch("/api/v1/pods", selector):
            if kind != "SYNC":
                self.observe(kind, obj)
                continue
            live = set()
            for pod in obj["items"]:
                live.add(pod["metadata"]["uid"])
                self.observe("ADDED", pod)
            for uid in [u for u in self.seen if u not in live]:
                self._vanished(uid)

    def pending_pod(self, uid: str) -> Obj | None:
        return self.pending.get(uid)

    def _vanished(self, uid: str) -> None:
        self.pending.pop(uid, None)
        for waiting in self._awaiting.values():
            waiting.pop(uid, None)
        seen = self.seen.pop(uid, None)
        if seen is not None and seen.managed and not seen.gone:
            logger.debug("pod %s vanished during a relist", uid)

    def _workflow_id(self, ref: PodRef, group: GroupRef | None) -> str | None:
        """The lifecycle of this pod: its own, or its gang's (None until the gang object was read)."""
        if group is None:
            return workload_workflow_id(ref.namespace, ref.uid)
        info = self.groups.get(_group_key(group))
        if info is None or info.expires < time.monotonic():
            return None
        return group.workflow_id(info.uid)

    def observe(self, kind: str, pod: Obj) -> None:
        """Turn one watch event into at most one workflow start or signal."""
        meta = pod["metadata"]
        uid, ns = meta["uid"], meta["namespace"]
        ref = PodRef(namespace=ns, name=meta["name"], uid=uid)
        previous = self.seen.get(uid)
        labelled = wellknown.LABEL_SLURM_JOB_ID in (meta.get("labels") or {})
        if kind == "DELETED":
            self.pending.pop(uid, None)
            self.seen.pop(uid, None)
            self._stop_awaiting(pod)
            if previous and previous.managed and not previous.gone:
                self._send(previous.workflow_id, ref, PodEventKind.GONE)
            elif previous is None and labelled and group_of(pod) is None:
                self._send(workload_workflow_id(ns, uid), ref, PodEventKind.GONE)
            return
        group = group_of(pod)
        # The lifecycle that took the pod wrote its ID on it: trust that over the gang object's current UID (a
        # gang object deleted, or made again under the same name, while this process was away).
        claimed = (meta.get("annotations") or {}).get(wellknown.ANNOTATION_WORKFLOW_ID) if labelled else None
        workflow_id = previous.workflow_id if previous else (claimed or self._workflow_id(ref, group))
        if workflow_id is None:
            assert group is not None
            self._await_group(group, kind, pod)
            return
        now = Seen(
            managed=labelled or (previous.managed if previous else False),
            started=previous.started if previous else False,
            terminal=pods.is_terminal(pod),
            deleting=pods.is_deleting(pod),
            gone=pods.is_gone(pod),
            spec_hash=spec_hash(pod),
            workflow_id=workflow_id,
            bound=bool(pods.node_name(pod)),
        )
        unbound = not pods.node_name(pod)
        if unbound and not (now.deleting or now.terminal or now.gone):
            self.pending[uid] = pod
        else:
            self.pending.pop(uid, None)
        if previous is not None and previous.managed and not previous.bound and not unbound:
            _count_binding(pod)
        if unbound and not (now.deleting or now.terminal) and not now.started:
            # Also on the first sight after a restart: starting an existing lifecycle is a no-op.
            now.managed = now.started = True
            if group is not None and self.batch_pod_events:
                self._joins.put(workflow_id, (pod, ref, group))
            else:
                self._spawn(self._start(workflow_id, [(pod, ref)], group))
        self.seen[uid] = now
        if not now.managed:
            return
        # One signal for the strongest transition, compared with what this process saw before (on a
        # relist or restart "before" is unknown, and a repeated flag is harmless to the workflow).
        if now.gone and (previous is None or not previous.gone):
            self._send(workflow_id, ref, PodEventKind.GONE if not now.terminal else PodEventKind.TERMINAL, pod)
        elif now.deleting and (previous is None or not previous.deleting):
            self._send(workflow_id, ref, PodEventKind.DELETING, pod)
        elif previous is not None and unbound and previous.spec_hash != now.spec_hash:
            self._send(workflow_id, ref, PodEventKind.CHANGED, pod)

    def _await_group(self, group: GroupRef, kind: str, pod: Obj) -> None:
        """The pod waits for its gang object to be read; the gang's reader is started with its first pod."""
        waiting = self._awaiting.get(_group_key(group))
        if waiting is None:
            waiting = self._awaiting[_group_key(group)] = {}
            self._spawn(self._resolve(group, waiting))
        waiting[pod["metadata"]["uid"]] = (kind, pod)

    def _stop_awaiting(self, pod: Obj) -> None:
        group = group_of(pod)
        if group is not None:
            self._awaiting.get(_group_key(group), {}).pop(pod["metadata"]["uid"], None)

    async def _resolve(self, group: GroupRef, waiting: dict[str, tuple[str, Obj]]) -> None:
        """Read the gang object (UID, size), then observe its waiting pods again. While it does not exist, say so
        on each pod once and read it again every ``GROUP_MISSING_RECHECK_SECONDS``; after a passing failure (the
        API server restarting) read it again soon. Ends when the object was read or no pod waits any more."""
        key = _group_key(group)
        warned: set[str] = set()
        failures = 0
        try:
            while waiting:
                info, problem = await self._read_group(group, next(iter(waiting.values()))[1])
                if info is not None:
                    del self._awaiting[key]
                    for kind, pod in list(waiting.values()):
                        self.observe(kind, pod)
                    return
                if problem:
                    for uid, (_, pod) in waiting.items():
                        if uid not in warned:
                            warned.add(uid)
                            meta = pod["metadata"]
                            self.events.record(
                                pod_event(meta["namespace"], meta["name"], uid, "GangObjectInvalid", problem, "Warning")
                            )
                    delay = GROUP_MISSING_RECHECK_SECONDS
                else:
                    failures += 1
                    delay = _read_delay(failures)
                await asyncio.sleep(delay)
        finally:
            if self._awaiting.get(key) is waiting:
                del self._awaiting[key]

    async def _read_group(self, group: GroupRef, pod: Obj) -> tuple[GroupInfo | None, str]:
        """Read the gang object and cache its UID and size; else None and what users should hear ("" when the
        read failed for a passing reason)."""
        try:
            obj = await self.kube.get(group.api_path())
            size = min_member(group, obj, pod)
        except KubeNotFound:
            return None, f"{group.kind} {group.name} not found; the pod waits until it exists"
        except ValueError as err:
            return None, str(err)
        except KubeError as err:
            logger.warning("reading %s %s failed: %s", group.kind, group.name, err)
            return None, ""
        info = GroupInfo(obj["metadata"]["uid"], size, time.monotonic() + GROUP_CACHE_SECONDS)
        self.groups[_group_key(group)] = info
        return info, ""

    def _send(self, workflow_id: str, ref: PodRef, kind: PodEventKind, pod: Obj | None = None) -> None:
        event = PodEvent(
            uid=ref.uid,
            name=ref.name,
            kind=kind,
            phase=(pod or {}).get("status", {}).get("phase", "") if pod else "",
            node_name=pods.node_name(pod) if pod else "",
        )
        if self.batch_pod_events:
            self._events.put(workflow_id, event)
        else:
            self._spawn(self._signal(workflow_id, [event]))

    async def _signal(self, workflow_id: str, events: list[PodEvent]) -> None:
        """One signal: ``pod_event`` for one event, ``pod_events`` for several."""
        name, arg = ("pod_event", events[0]) if len(events) == 1 else ("pod_events", events)
        if await signal_lifecycle(self.temporal, workflow_id, name, arg, self._sem):
            self.signals_sent += 1

    async def _join(self, workflow_id: str, members: list[tuple[Obj, PodRef, GroupRef]]) -> None:
        """Gang members that arrived together join their lifecycle with one signal-with-start."""
        await self._start(workflow_id, [(pod, ref) for pod, ref, _ in members], members[0][2])

    async def _start(self, workflow_id: str, members: list[tuple[Obj, PodRef]], group: GroupRef | None) -> None:
        """Start the lifecycle, or (a gang) signal its members' arrival to the running one."""
        pod, ref = members[0]
        if group is None:
            kind, name = owner_kind(pod)
            size = 1
        else:
            info = self.groups.get(_group_key(group))
            failures = 0
            while info is None:
                # A member its lifecycle claimed (annotated), seen first after a restart: the gang object was
                # not read yet. Without it (deleted meanwhile) no lifecycle is started again; the one that
                # claimed the pod still gets its events. A passing failure is read again while a member waits.
                info, problem = await self._read_group(group, pod)
                if info is not None:
                    break
                members = [(p, r) for p, r in members if r.uid in self.pending]
                if problem or not members:
                    keys = ", ".join(r.key for _, r in members) or "its members (no longer pending)"
                    logger.warning("not restarting the lifecycle of %s: %s", keys, problem or "read failed")
                    return
                failures += 1
                await asyncio.sleep(_read_delay(failures))
            pod, ref = members[0]
            kind, name, size = group.kind, group.name, info.min_member
        attributes = TypedSearchAttributes(
            [
                SearchAttributePair(SearchAttributeKey.for_keyword("SlinkyNamespace"), ref.namespace),
                SearchAttributePair(SearchAttributeKey.for_keyword("SlinkyWorkloadKind"), kind),
                SearchAttributePair(SearchAttributeKey.for_keyword("SlinkyWorkloadName"), name),
                SearchAttributePair(SearchAttributeKey.for_keyword("SlinkyPhase"), "Submitting"),
                SearchAttributePair(SearchAttributeKey.for_int("SlinkyGroupSize"), size),
            ]
        )
        inp = WorkloadInput(
            pod=ref,
            group=group,
            min_member=size,
            kind=kind,
            workload_name=name,
            defaults=self.defaults,
            safety_recheck_seconds=self.recheck_seconds(),
        )
        async with self._sem:  # held while backing off: a rate-limited frontend gets fewer calls, not more
            attempt = 0
            while True:
                try:
                    await self.temporal.start_workflow(
                        "WorkloadWorkflow",
                        inp,
                        id=workflow_id,
                        task_queue=self.task_queue,
                        # A finished lifecycle may start again for a pod still pending (e.g. after a
                        # terminate, or a gang whose members all left and came back).
                        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                        search_attributes=attributes,
                        **self._start_options(members, group),
                    )
                    self.started += 1
                    telemetry.WORKFLOWS_STARTED.inc()
                    return
                except WorkflowAlreadyStartedError:
                    return
                except RPCError as err:
                    attempt += 1
                    members = [(p, r) for p, r in members if r.uid in self.pending]
                    if not members:
                        return  # bound, deleting or gone meanwhile: no lifecycle to start
                    inp = inp.model_copy(update={"pod": members[0][1]})  # the starting pod is one still pending
                    if err.status not in TRANSIENT and attempt >= START_ATTEMPTS:
                        # Not a passing failure: the pods' next change (or a restart) tries again.
                        logger.error("start %s failed (%s) after %d attempts", workflow_id, err, attempt)
                        for _, r in members:
                            if r.uid in self.seen:
                                self.seen[r.uid].started = False
                        return
                    # A pending pod needs its lifecycle: while Temporal rate-limits or is unavailable, keep trying.
                    delay = retry_delay("start", err, attempt - 1)
                    logger.warning("start %s failed (%s), attempt %d; again in %.1fs", workflow_id, err.status,
                                   attempt, delay)  # fmt: skip
                    await asyncio.sleep(delay)

    def _start_options(self, members: list[tuple[Obj, PodRef]], group: GroupRef | None) -> dict[str, Any]:
        """A gang's members join with signal-with-start (one signal for all that came together); a single pod
        starts eagerly on this worker (unless the replicas share the lifecycles: then the task queue hands it to
        whichever polls first)."""
        if group is None:
            return {
                "id_conflict_policy": WorkflowIDConflictPolicy.USE_EXISTING,
                "request_eager_start": self.eager_start,
            }
        events = [PodEvent(uid=ref.uid, name=ref.name, kind=PodEventKind.ADDED) for _, ref in members]
        if len(events) == 1:
            return {"start_signal": "pod_event", "start_signal_args": events}
        return {"start_signal": "pod_events", "start_signal_args": [events]}
