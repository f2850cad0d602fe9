"""Kubernetes-side activities of the workload lifecycle: small idempotent verbs, one API effect each, and two
sequences of them that a lifecycle always runs back to back (``place_pods``, ``release_pods``): one activity
instead of three saves the history markers and workflow activations of the other two (issue 16).

Every verb treats "already done" as success (a NotFound on delete, the same node on a repeated bind) so a
retry after a crash is harmless. Permanent failures become non-retryable ``ApplicationError``s whose
``type`` is the error class name; transient ones propagate and the retry policy handles them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Protocol, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from slinky import wellknown
from slinky.bridge import admission, pods
from slinky.bridge.grouping import KIND_LWS, GroupRef
from slinky.bridge.models.workload import (
    BindPodsInput,
    BindPodsResult,
    BuildSpecInput,
    BuildSpecResult,
    DeletePodsInput,
    EventInput,
    GroupPhaseInput,
    LabelPodsInput,
    PlacePodsInput,
    PodConditionInput,
    PodRef,
    PodsInput,
    PodsResult,
    PodStateResult,
    PodStatesResult,
    ReleasePodsInput,
)
from slinky.bridge.translate import TranslationError, translate_group, translate_pod
from slinky.clients.errors import KubeConflict, KubeNotFound, KubeRejected, KubeUnavailable
from slinky.clients.events import MESSAGE_LIMIT, EventRecorder, pod_event
from slinky.clients.kube import KubeClient, Obj, pod_path, rfc3339

logger = logging.getLogger(__name__)

MEMBER_CONCURRENCY = 8
"""Per-member API calls one activity keeps in flight: the Kubernetes client's pool size. A 1,000-pod gang then
queues its calls here, not in the pool, where calls waiting past the pool timeout failed the whole activity and
starved every other lifecycle's calls (measured with a 1,000-pod gang before this bound)."""

_T = TypeVar("_T")
_R = TypeVar("_R")


async def each(items: Sequence[_T], call: Callable[[_T], Awaitable[_R]]) -> list[_R]:
    """``call`` on every item, at most ``MEMBER_CONCURRENCY`` at a time; results in the items' order."""
    gate = asyncio.Semaphore(MEMBER_CONCURRENCY)

    async def one(item: _T) -> _R:
        async with gate:
            return await call(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


class NodeView(Protocol):
    """What the lifecycle needs to know about nodes, from the worker's caches (no list per pod)."""

    def kube_nodes(self) -> Sequence[Mapping[str, Any]]: ...

    def slurm_node_names(self) -> AbstractSet[str] | None: ...

    def kube_node_for(self, slurm_node: str) -> str | None: ...


class PodCache(Protocol):
    """Pods the worker's pod watcher holds while they wait for a node (its latest watch event of each)."""

    def pending_pod(self, uid: str) -> Mapping[str, Any] | None: ...

    def recheck_seconds(self) -> float:
        """The safety re-check interval that keeps every lifecycle's re-checks together within their budget."""
        ...


class Verbs(Protocol):
    """The verbs ``place`` and ``release`` run in sequence: ``KubeActivities``' own, or the workflow tests' fakes
    (so the fakes' sequences are the real ones)."""

    async def bind_pods(self, data: BindPodsInput) -> BindPodsResult: ...

    async def label_pods(self, data: LabelPodsInput) -> PodsResult: ...

    async def remove_finalizers(self, data: PodsInput) -> None: ...

    def queue_event(self, data: EventInput) -> None:
        """Queue an Event on every member; never fails, never waits."""
        ...


async def place(verbs: Verbs, data: PlacePodsInput) -> BindPodsResult:
    """Bind, then (``label``) label the members bound, then queue their Events: once both writes succeeded, on the
    members they reached. A retry repeats the whole (each verb is idempotent)."""
    out = await verbs.bind_pods(BindPodsInput(bindings=data.bindings, job_id=data.job_id))
    bound = [b.pod for b in data.bindings if b.pod.uid in out.nodes]
    if data.label and bound:
        labelled = await verbs.label_pods(LabelPodsInput(pods=bound, job_id=data.job_id, workflow_id=data.workflow_id))
        out = out.model_copy(update={"gone": [*out.gone, *labelled.gone]})
        bound = [ref for ref in bound if ref.uid not in labelled.gone]
    if not bound:
        return out
    if data.label and data.submitted is not None:
        verbs.queue_event(data.submitted.model_copy(update={"pods": bound}))
    if data.scheduled_reason:
        messages = {
            ref.uid: f"Successfully assigned {ref.key} to {out.nodes[ref.uid]} (Slurm job {data.job_id})"
            for ref in bound
        }
        verbs.queue_event(EventInput(pods=bound, reason=data.scheduled_reason, message="", messages=messages))
    return out


async def release(verbs: Verbs, data: ReleasePodsInput) -> None:
    """The finalizers off every member, then the Event (if any)."""
    await verbs.remove_finalizers(PodsInput(pods=data.pods))
    if data.event is not None:
        verbs.queue_event(data.event)


def _retryable(err: KubeUnavailable) -> ApplicationError:
    return ApplicationError(
        str(err),
        type=type(err).__name__,
        next_retry_delay=(dt.timedelta(seconds=err.retry_after) if err.retry_after else None),
    )


class KubeActivities:
    """Kubernetes verbs over a workload's members; holds one pooled async client and the worker's node view.

    Every verb takes the whole member list and works on the members concurrently: a gang of 64 pods costs
    one activity (one history marker), not 64.
    """

    def __init__(
        self,
        kube: KubeClient,
        nodes: NodeView,
        events: EventRecorder | None = None,
        pods: PodCache | None = None,
    ) -> None:
        self.kube = kube
        self.nodes = nodes
        self.pods = pods
        """The pod watcher's pending pods: translation reads them there instead of from the API server."""
        self.events = events or EventRecorder(kube)
        """Where Events go: the worker's background recorder, shared with the pod watcher."""

    async def _get_pod(self, ref: PodRef) -> Obj | None:
        """The pod with this UID, or None (deleted, or its name reused by a newer pod)."""
        try:
            pod = await self.kube.get(pod_path(ref.namespace, ref.name))
        except KubeNotFound:
            return None
        return pod if pod.get("metadata", {}).get("uid") == ref.uid else None

    async def _cached_or_get_pod(self, ref: PodRef) -> Obj | None:
        cached = self.pods.pending_pod(ref.uid) if self.pods is not None else None
        return dict(cached) if cached is not None else await self._get_pod(ref)

    async def _read_members(self, data: BuildSpecInput) -> list[Obj | None]:
        """The members by UID (None: gone). From the pod watcher's cache when it holds every member (the pods
        the watch just delivered); else a gang is read with ONE list by its label, a single pod with a GET."""
        if self.pods is not None:
            cached = [self.pods.pending_pod(ref.uid) for ref in data.pods]
            if all(pod is not None for pod in cached):
                return [dict(pod) for pod in cached if pod is not None]
        if data.group is None or len(data.pods) == 1:
            return await each(data.pods, self._get_pod)
        group = data.group
        label, value = (
            (wellknown.LABEL_LWS_GROUP_KEY, group.key)
            if group.kind == KIND_LWS
            else (wellknown.LABEL_POD_GROUP, group.name)
        )
        listing = await self.kube.get(pod_path(group.namespace), {"labelSelector": f"{label}={value}"})
        by_uid = {pod["metadata"]["uid"]: pod for pod in listing["items"]}
        return [by_uid.get(ref.uid) for ref in data.pods]

    async def _owner_chain(self, pod: Obj) -> tuple[Obj | None, Obj | None]:
        """(top-level owner, controlling Job) for Job and JobSet pods; (None, None) for a plain pod."""
        ns = pod["metadata"]["namespace"]
        owner = next((o for o in pod["metadata"].get("ownerReferences", []) if o.get("controller")), None)
        if owner is None or owner.get("kind") != "Job":
            return None, None
        try:
            job = await self.kube.get(wellknown.API_JOB.format(namespace=ns, name=owner["name"]))
        except KubeNotFound:
            return None, None
        parent = next((o for o in job["metadata"].get("ownerReferences", []) if o.get("controller")), None)
        if parent is not None and parent.get("kind") == "JobSet":
            try:
                jobset = await self.kube.get(wellknown.API_JOBSET.format(namespace=ns, name=parent["name"]))
                return jobset, job
            except (KubeNotFound, KubeRejected):
                return job, job
        return job, job

    @activity.defn(name="build_job_spec")
    async def build_job_spec(self, data: BuildSpecInput) -> BuildSpecResult:
        """Read the members (and their owners or gang object) and translate them into one Slurm job spec."""
        try:
            found = await self._read_members(data)
            gone = [ref.uid for ref, pod in zip(data.pods, found, strict=True) if pod is None or _not_pending(pod)]
            live = [pod for pod in found if pod is not None and not _not_pending(pod)]
            if not live:
                return BuildSpecResult(gone=gone)
            if data.group is not None:
                return self._translate_gang(data, live, gone, await self._group_object(data.group))
            owner, job = await self._owner_chain(live[0])
        except KubeUnavailable as err:
            raise _retryable(err) from err
        kind = owner["kind"] if owner else "Pod"
        name = owner["metadata"]["name"] if owner else live[0]["metadata"]["name"]
        try:
            result = translate_pod(
                live[0],
                settings=data.defaults,
                owner=owner,
                job=job,
                nodes=self.nodes.kube_nodes(),
                slurm_nodes=self.nodes.slurm_node_names(),
            )
        except TranslationError as err:
            return BuildSpecResult(
                error_reason="SlurmJobInvalid", error_message=str(err), kind=kind, workload_name=name
            )
        return BuildSpecResult(
            spec=result.spec, gone=gone, warnings=[w.message for w in result.warnings], kind=kind, workload_name=name
        )

    async def _group_object(self, group: GroupRef) -> Obj:
        try:
            return await self.kube.get(group.api_path())
        except KubeNotFound:
            return {"metadata": {"name": group.name, "namespace": group.namespace}}

    def _translate_gang(self, data: BuildSpecInput, live: list[Obj], gone: list[str], obj: Obj) -> BuildSpecResult:
        assert data.group is not None
        group = data.group
        name = group.name
        if group.kind == KIND_LWS:
            index = (live[0]["metadata"].get("labels") or {}).get(wellknown.LABEL_LWS_GROUP_INDEX, "0")
            name = f"{group.name}-{index}"
        try:
            result = translate_group(
                live,
                settings=data.defaults,
                annotation_source=obj,
                nodes=self.nodes.kube_nodes(),
                slurm_nodes=self.nodes.slurm_node_names(),
                name=name,
            )
        except TranslationError as err:
            return BuildSpecResult(
                error_reason="SlurmJobInvalid", error_message=str(err), kind=group.kind, workload_name=name
            )
        return BuildSpecResult(
            spec=result.spec,
            gone=gone,
            warnings=[w.message for w in result.warnings],
            kind=group.kind,
            workload_name=name,
        )

    @activity.defn(name="label_pods")
    async def label_pods(self, data: LabelPodsInput) -> PodsResult:
        """Put the job id label and the finalizer on every member; members found gone are reported."""
        results = await each(data.pods, lambda ref: self._label(ref, data.job_id, data.workflow_id))
        return PodsResult(
            done=[r.uid for r, ok in zip(data.pods, results, strict=True) if ok],
            gone=[r.uid for r, ok in zip(data.pods, results, strict=True) if not ok],
        )

    async def _label(self, ref: PodRef, job_id: int, workflow_id: str) -> bool:
        """One strategic-merge patch, no read: finalizers merge (others kept), the UID must match."""
        patch = {
            "metadata": {
                "uid": ref.uid,
                "labels": {wellknown.LABEL_SLURM_JOB_ID: str(job_id)},
                "annotations": {wellknown.ANNOTATION_WORKFLOW_ID: workflow_id} if workflow_id else {},
                "finalizers": [wellknown.FINALIZER_SCHEDULER],
            }
        }
        try:
            await self.kube.patch(pod_path(ref.namespace, ref.name), patch, patch_type="strategic", decode=False)
        except KubeNotFound:
            return False
        except KubeRejected as err:
            if err.status_code == 422:
                # Another pod now has this name (UID differs), or the pod is being deleted (no new
                # finalizers then): either way it will not run this job.
                return False
            raise
        return True

    @activity.defn(name="bind_pods")
    async def bind_pods(self, data: BindPodsInput) -> BindPodsResult:
        """Bind each member to the Kubernetes node of its Slurm node; idempotent, never binds twice."""
        results = await each(data.bindings, lambda b: self._bind(b.pod, b.slurm_node))
        out = BindPodsResult()
        for binding, node in zip(data.bindings, results, strict=True):
            if node is None:
                out.gone.append(binding.pod.uid)
            else:
                out.nodes[binding.pod.uid] = node
        return out

    async def _bind(self, ref: PodRef, slurm_node: str) -> str | None:
        """POST the binding straight away (the common case); read the pod only when the server objects, or when
        the pod watcher does not hold it (the managed-node toleration is checked first)."""
        node = self.nodes.kube_node_for(slurm_node)
        if node is None:
            raise ApplicationError(f"Slurm node {slurm_node} maps to no Kubernetes node", type="NoKubeNodeMatch")
        if not await self._tolerate_managed_node(ref):
            return None
        # The API server copies a Binding's annotations onto the pod: node annotation and binding in one call.
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": ref.name, "uid": ref.uid, "annotations": {wellknown.ANNOTATION_SLURM_NODE: node}},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self.kube.create(pod_path(ref.namespace, ref.name, "binding"), binding, decode=False)
        except KubeNotFound:
            return None
        except KubeConflict:
            # Already bound (a retry whose first try succeeded, or bound elsewhere), or deleted since (the API
            # server answers 409 to binding a pod that is being deleted): read back and compare.
            again = await self._get_pod(ref)
            bound_now = again["spec"].get("nodeName") if again is not None else None
            if bound_now == node:
                return node
            if again is None or pods.is_gone(again):
                return None
            if not bound_now:
                raise ApplicationError("binding conflicted; retry", type="KubeConflict") from None
            raise ApplicationError(
                f"pod {ref.key} already bound to {bound_now}, allocation is on {node}",
                type="AlreadyBound",
                non_retryable=True,
            ) from None
        except KubeRejected as err:
            if err.status_code == 403:
                return None  # the namespace is being deleted: its pods are going
            raise ApplicationError(str(err), type=type(err).__name__, non_retryable=True) from err
        return node

    async def _tolerate_managed_node(self, ref: PodRef) -> bool:
        """Add the managed-node toleration to a pod that came without it (it skipped the admission webhook): a
        bridged node is tainted NoExecute, and Kubernetes' taint manager evicts a pod bound there without it.
        The pod watcher's copy says whether one is needed (no call for a pod the webhook mutated). False: gone."""
        pod = await self._cached_or_get_pod(ref)
        if pod is None or pods.is_deleting(pod) or pods.is_terminal(pod) or pods.is_gone(pod):
            return False  # read because the pod watcher no longer holds it: being deleted, it runs no job
        spec = pod.get("spec") or {}
        ops = admission.toleration_ops(spec, str(spec.get("schedulerName") or ""))
        if not ops:
            return True
        test = {"op": "test", "path": "/metadata/uid", "value": ref.uid}
        try:
            await self.kube.patch(pod_path(ref.namespace, ref.name), [test, *ops], patch_type="json", decode=False)
        except KubeNotFound:
            return False
        except KubeRejected as err:
            if err.status_code == 422:  # the UID test failed (a newer pod of that name), or the pod is deleting
                return False
            raise
        return True

    @activity.defn(name="place_pods")
    async def place_pods(self, data: PlacePodsInput) -> BindPodsResult:
        """``bind_pods``, ``label_pods`` and their Events in one call (``place``)."""
        return await place(self, data)

    @activity.defn(name="release_pods")
    async def release_pods(self, data: ReleasePodsInput) -> None:
        """``remove_finalizers`` and the Event in one call (``release``): the cleanup's last step."""
        await release(self, data)

    @activity.defn(name="set_pod_condition")
    async def set_pod_condition(self, data: PodConditionInput) -> None:
        """PodScheduled=False with the reason and message on every member, where `kubectl describe` shows it."""
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": data.reason,
            "message": data.message[:MESSAGE_LIMIT],
            "lastTransitionTime": rfc3339(),
        }

        async def one(ref: PodRef) -> None:
            try:
                await self.kube.patch(
                    pod_path(ref.namespace, ref.name, "status"),
                    {"metadata": {"uid": ref.uid}, "status": {"conditions": [condition]}},
                    patch_type="strategic",
                    decode=False,
                )
            except (KubeNotFound, KubeConflict, KubeRejected):
                return

        await each(data.pods, one)

    @activity.defn(name="record_event")
    async def record_event(self, data: EventInput) -> None:
        """A core/v1 Event on every member, queued to the worker's background recorder: an Event is never
        worth holding, let alone failing, a lifecycle step."""
        self.queue_event(data)

    def queue_event(self, data: EventInput) -> None:
        for ref in data.pods:
            message = data.messages.get(ref.uid, data.message)
            self.events.record(pod_event(ref.namespace, ref.name, ref.uid, data.reason, message, data.type))

    @activity.defn(name="delete_pods")
    async def delete_pods(self, data: DeletePodsInput) -> None:
        """Delete members gracefully (UID precondition: never a newer pod with the same name)."""

        async def one(ref: PodRef) -> None:
            try:
                await self.kube.delete(
                    pod_path(ref.namespace, ref.name), grace_seconds=data.grace_seconds, uid=ref.uid, decode=False
                )
            except (KubeNotFound, KubeConflict):
                return  # gone already, or the UID precondition failed: our pod is gone

        await each(data.pods, one)

    @activity.defn(name="get_pod_states")
    async def get_pod_states(self, data: PodsInput) -> PodStatesResult:
        """The members' states. An unbound live pod comes from the pod watcher's cache (the watch keeps it current
        and drops it once it is deleting, bound or gone); any other is read. The safety re-check asks this of
        every lifecycle every few minutes: 10,000 pending pods were 33 GETs a second (issue 16)."""
        found = await each(data.pods, self._cached_or_get_pod)
        states: dict[str, PodStateResult] = {}
        for ref, pod in zip(data.pods, found, strict=True):
            if pod is None:
                states[ref.uid] = PodStateResult(exists=False, gone=True)
                continue
            states[ref.uid] = PodStateResult(
                exists=True,
                phase=pod.get("status", {}).get("phase", ""),
                node_name=pod["spec"].get("nodeName") or "",
                deleting=bool(pod["metadata"].get("deletionTimestamp")),
                gone=pods.is_gone(pod),
            )
        # The interval follows the number of open workloads: one fixed at each start let the early ones of a
        # burst of 10,000 re-check every 300 s, 16 a second together against a budget of 10 (measured).
        return PodStatesResult(
            states=states, recheck_seconds=self.pods.recheck_seconds() if self.pods is not None else None
        )

    @activity.defn(name="remove_finalizers")
    async def remove_finalizers(self, data: PodsInput) -> None:
        """Remove the bridge finalizer from every member (last step of every lifecycle)."""
        await each(data.pods, self._unfinalize)

    async def _unfinalize(self, ref: PodRef) -> None:
        """Our finalizer off this pod (the client's UID- and entry-tested removal: a repeat never writes)."""
        try:
            await self.kube.remove_finalizer(pod_path(ref.namespace, ref.name), ref.uid, wellknown.FINALIZER_SCHEDULER)
        except KubeConflict as err:
            raise ApplicationError(f"finalizer of {ref.key} kept changing; retry", type="KubeConflict") from err

    @activity.defn(name="set_group_phase")
    async def set_group_phase(self, data: GroupPhaseInput) -> None:
        """Keep a PodGroup's ``status.phase`` current (Scheduling, Running, Finished, Failed)."""
        try:
            await self.kube.patch(data.group.api_path() + "/status", {"status": {"phase": data.phase}}, decode=False)
        except KubeNotFound:
            return

    def all(self) -> list[Any]:
        return [
            self.build_job_spec,
            self.label_pods,
            self.bind_pods,
            self.place_pods,
            self.set_pod_condition,
            self.record_event,
            self.delete_pods,
            self.get_pod_states,
            self.remove_finalizers,
            self.release_pods,
            self.set_group_phase,
        ]


def _not_pending(pod: Obj) -> bool:
    """A member that can no longer join a job: it ended, is being deleted, or was bound by someone else."""
    return pods.is_gone(pod) or pods.is_deleting(pod) or pods.is_terminal(pod)
