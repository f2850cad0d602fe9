"""Kubernetes-side activities of the workload lifecycle: small idempotent verbs, one API effect each.

Every verb treats "already done" as success (a NotFound on delete, the same node on a repeated bind) so a
retry after a crash is harmless. Permanent failures become non-retryable ``ApplicationError``s whose
``type`` is the error class name; transient ones propagate and the retry policy handles them.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from slinky import pods, telemetry, wellknown
from slinky.clients.errors import KubeConflict, KubeNotFound, KubeRejected, KubeUnavailable
from slinky.clients.kube import KubeClient, Obj, pod_path
from slinky.models.workload import (
    BindPodInput,
    BindPodResult,
    BuildSpecInput,
    BuildSpecResult,
    DeletePodInput,
    EventInput,
    LabelPodInput,
    PodConditionInput,
    PodRef,
    PodStateResult,
)
from slinky.translate import TranslationError, translate_pod

logger = logging.getLogger(__name__)
EVENT_MESSAGE_LIMIT = 1024
COMPONENT = "slurm-bridge"
OWNER_APIS = {
    "Job": "/apis/batch/v1/namespaces/{ns}/jobs/{name}",
    "JobSet": "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/{name}",
}


class NodeView(Protocol):
    """What the lifecycle needs to know about nodes, from the worker's caches (no list per pod)."""

    def kube_nodes(self) -> Sequence[Mapping[str, Any]]: ...

    def slurm_node_names(self) -> set[str] | None: ...

    def kube_node_for(self, slurm_node: str) -> str | None: ...


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _retryable(err: KubeUnavailable) -> ApplicationError:
    return ApplicationError(
        str(err),
        type=type(err).__name__,
        next_retry_delay=(dt.timedelta(seconds=err.retry_after) if err.retry_after else None),
    )


class KubeActivities:
    """Kubernetes verbs; holds one pooled async client and the worker's node view."""

    def __init__(self, kube: KubeClient, nodes: NodeView) -> None:
        self.kube = kube
        self.nodes = nodes

    async def _get_pod(self, ref: PodRef) -> Obj | None:
        """The pod with this UID, or None (deleted, or its name reused by a newer pod)."""
        try:
            pod = await self.kube.get(pod_path(ref.namespace, ref.name))
        except KubeNotFound:
            return None
        return pod if pod.get("metadata", {}).get("uid") == ref.uid else None

    async def _owner_chain(self, pod: Obj) -> tuple[Obj | None, Obj | None]:
        """(top-level owner, controlling Job) for Job and JobSet pods; (None, None) for a plain pod."""
        ns = pod["metadata"]["namespace"]
        owner = next((o for o in pod["metadata"].get("ownerReferences", []) if o.get("controller")), None)
        if owner is None or owner.get("kind") != "Job":
            return None, None
        try:
            job = await self.kube.get(OWNER_APIS["Job"].format(ns=ns, name=owner["name"]))
        except KubeNotFound:
            return None, None
        parent = next((o for o in job["metadata"].get("ownerReferences", []) if o.get("controller")), None)
        if parent is not None and parent.get("kind") == "JobSet":
            try:
                jobset = await self.kube.get(OWNER_APIS["JobSet"].format(ns=ns, name=parent["name"]))
                return jobset, job
            except (KubeNotFound, KubeRejected):
                return job, job
        return job, job

    @activity.defn(name="build_job_spec")
    async def build_job_spec(self, data: BuildSpecInput) -> BuildSpecResult:
        """Read the pod and its owners and translate them into a Slurm job spec (pure translation)."""
        try:
            pod = await self._get_pod(data.pod)
            if pod is None or pods.is_gone(pod):
                return BuildSpecResult(pod_gone=True)
            if pod["spec"].get("nodeName"):
                return BuildSpecResult(pod_bound_to=pod["spec"]["nodeName"])
            owner, job = await self._owner_chain(pod)
        except KubeUnavailable as err:
            raise _retryable(err) from err
        kind = owner["kind"] if owner else "Pod"
        name = owner["metadata"]["name"] if owner else data.pod.name
        try:
            result = translate_pod(
                pod,
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
            spec=result.spec,
            warnings=[w.message for w in result.warnings],
            kind=kind,
            workload_name=name,
        )

    @activity.defn(name="label_pod")
    async def label_pod(self, data: LabelPodInput) -> bool:
        """Put the job id label and the finalizer on the pod; False if the pod is gone."""
        pod = await self._get_pod(data.pod)
        if pod is None:
            return False
        finalizers = list(pod["metadata"].get("finalizers") or [])
        labels = pod["metadata"].get("labels") or {}
        if labels.get(wellknown.LABEL_SLURM_JOB_ID) == str(data.job_id) and wellknown.FINALIZER_SCHEDULER in finalizers:
            return True
        if pod["metadata"].get("deletionTimestamp"):
            return False  # a finalizer cannot be added to a deleting object
        if wellknown.FINALIZER_SCHEDULER not in finalizers:
            finalizers.append(wellknown.FINALIZER_SCHEDULER)
        patch = {
            "metadata": {
                "uid": data.pod.uid,
                "resourceVersion": pod["metadata"]["resourceVersion"],
                "labels": {wellknown.LABEL_SLURM_JOB_ID: str(data.job_id)},
                "finalizers": finalizers,
            }
        }
        try:
            await self.kube.patch(pod_path(data.pod.namespace, data.pod.name), patch)
        except KubeNotFound:
            return False
        except KubeConflict as err:
            raise ApplicationError("pod changed under us; retry", type="KubeConflict") from err
        return True

    @activity.defn(name="bind_pod")
    async def bind_pod(self, data: BindPodInput) -> BindPodResult:
        """Bind the pod to the Kubernetes node of its Slurm allocation; idempotent, never binds twice."""
        node = self.nodes.kube_node_for(data.slurm_node)
        if node is None:
            raise ApplicationError(f"Slurm node {data.slurm_node} maps to no Kubernetes node", type="NoKubeNodeMatch")
        pod = await self._get_pod(data.pod)
        if pod is None or pods.is_gone(pod):
            return BindPodResult(pod_gone=True)
        bound = pod["spec"].get("nodeName")
        if bound:
            if bound != node:
                raise ApplicationError(
                    f"pod already bound to {bound}, allocation is on {node}",
                    type="AlreadyBound",
                    non_retryable=True,
                )
            return BindPodResult(node=node)
        path = pod_path(data.pod.namespace, data.pod.name)
        annotations = pod["metadata"].get("annotations") or {}
        if annotations.get(wellknown.ANNOTATION_SLURM_NODE) != node:
            await self.kube.patch(path, {"metadata": {"annotations": {wellknown.ANNOTATION_SLURM_NODE: node}}})
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": data.pod.name, "uid": data.pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self.kube.create(path + "/binding", binding)
        except KubeNotFound:
            return BindPodResult(pod_gone=True)
        except KubeConflict:
            # Already bound (a retry whose first try succeeded): read back and compare.
            again = await self._get_pod(data.pod)
            if again is None:
                return BindPodResult(pod_gone=True)
            if again["spec"].get("nodeName") != node:
                raise ApplicationError("pod bound elsewhere", type="AlreadyBound", non_retryable=True) from None
            return BindPodResult(node=node)
        telemetry.PODS_BOUND.inc()
        created = _parse_time(pod["metadata"].get("creationTimestamp"))
        if created is not None:
            telemetry.CREATE_TO_BOUND.observe(max(0.0, time.time() - created))
        return BindPodResult(node=node)

    @activity.defn(name="set_pod_condition")
    async def set_pod_condition(self, data: PodConditionInput) -> None:
        """PodScheduled=False with the reason and Slurm's message, where `kubectl describe` shows it."""
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": data.reason,
            "message": data.message[:EVENT_MESSAGE_LIMIT],
            "lastTransitionTime": _now(),
        }
        try:
            await self.kube.patch(
                pod_path(data.pod.namespace, data.pod.name, "status"),
                {"metadata": {"uid": data.pod.uid}, "status": {"conditions": [condition]}},
                patch_type="strategic",
            )
        except (KubeNotFound, KubeConflict):
            return

    @activity.defn(name="record_event")
    async def record_event(self, data: EventInput) -> None:
        """A core/v1 Event on the pod (best effort: an Event is never worth failing a lifecycle)."""
        now = _now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{data.pod.name}.", "namespace": data.pod.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": data.pod.namespace,
                "name": data.pod.name,
                "uid": data.pod.uid,
            },
            "reason": data.reason,
            "message": data.message[:EVENT_MESSAGE_LIMIT],
            "type": data.type,
            "source": {"component": COMPONENT},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": COMPONENT,
        }
        try:
            await self.kube.create(f"/api/v1/namespaces/{data.pod.namespace}/events", event)
        except (KubeRejected, KubeNotFound) as err:
            logger.warning("event %s on %s not recorded: %s", data.reason, data.pod.key, err)

    @activity.defn(name="delete_pod")
    async def delete_pod(self, data: DeletePodInput) -> None:
        """Delete the pod gracefully (UID precondition: never a newer pod with the same name)."""
        try:
            await self.kube.delete(
                pod_path(data.pod.namespace, data.pod.name),
                grace_seconds=data.grace_seconds,
                uid=data.pod.uid,
            )
        except KubeNotFound:
            return
        except KubeConflict:
            return  # the UID precondition failed: our pod is gone already

    @activity.defn(name="get_pod_state")
    async def get_pod_state(self, data: PodRef) -> PodStateResult:
        pod = await self._get_pod(data)
        if pod is None:
            return PodStateResult(exists=False, gone=True)
        return PodStateResult(
            exists=True,
            phase=pod.get("status", {}).get("phase", ""),
            node_name=pod["spec"].get("nodeName") or "",
            deleting=bool(pod["metadata"].get("deletionTimestamp")),
            gone=pods.is_gone(pod),
        )

    @activity.defn(name="remove_finalizer")
    async def remove_finalizer(self, data: PodRef) -> None:
        """Remove the bridge finalizer (last step of every lifecycle); a missing pod is success."""
        pod = await self._get_pod(data)
        if pod is None:
            return
        finalizers = list(pod["metadata"].get("finalizers") or [])
        if wellknown.FINALIZER_SCHEDULER not in finalizers:
            return
        finalizers.remove(wellknown.FINALIZER_SCHEDULER)
        patch = {
            "metadata": {
                "uid": data.uid,
                "resourceVersion": pod["metadata"]["resourceVersion"],
                "finalizers": finalizers or None,
            }
        }
        try:
            await self.kube.patch(pod_path(data.namespace, data.name), patch)
        except KubeNotFound:
            return
        except KubeConflict as err:
            raise ApplicationError("pod changed under us; retry", type="KubeConflict") from err

    def all(self) -> list[Any]:
        return [
            self.build_job_spec,
            self.label_pod,
            self.bind_pod,
            self.set_pod_condition,
            self.record_event,
            self.delete_pod,
            self.get_pod_state,
            self.remove_finalizer,
        ]
