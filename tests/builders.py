"""Builders for Kubernetes API objects as plain dicts (camelCase, as the API server returns them).

Every builder takes keyword arguments for the fields tests usually vary and returns a fresh dict, so
a test can still edit the result for anything unusual. Shared by unit, activity, workflow and
integration tests; keep them general.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from slinky import wellknown

DEFAULT_NAMESPACE = wellknown.DEFAULT_MANAGED_NAMESPACE


def _uid(name: str) -> str:
    # Deterministic, so a test's expectations can name the uid without capturing it.
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def _metadata(
    name: str,
    namespace: str | None,
    *,
    uid: str | None,
    labels: Mapping[str, str] | None,
    annotations: Mapping[str, str] | None,
    owner_references: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "uid": uid or _uid(f"{namespace}/{name}")}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owner_references:
        metadata["ownerReferences"] = [dict(ref) for ref in owner_references]
    return metadata


def make_container(
    name: str = "main",
    *,
    image: str = "registry.k8s.io/pause:3.9",
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    restart_policy: str | None = None,
) -> dict[str, Any]:
    """A container; ``restart_policy="Always"`` on an init container makes it a sidecar."""
    container: dict[str, Any] = {"name": name, "image": image}
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = dict(requests)
    if limits:
        resources["limits"] = dict(limits)
    if resources:
        container["resources"] = resources
    if restart_policy is not None:
        container["restartPolicy"] = restart_policy
    return container


def make_pod(
    name: str = "pod-a",
    namespace: str = DEFAULT_NAMESPACE,
    *,
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    limits: Mapping[str, str] | None = None,
    containers: Sequence[Mapping[str, Any]] | None = None,
    init_containers: Sequence[Mapping[str, Any]] | None = None,
    overhead: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    node_affinity_terms: Sequence[Mapping[str, Any]] | None = None,
    tolerations: Sequence[Mapping[str, Any]] | None = None,
    active_deadline_seconds: int | None = None,
    scheduler_name: str = wellknown.SCHEDULER_NAME,
    node_name: str | None = None,
    owner: Mapping[str, Any] | None = None,
    phase: str | None = None,
) -> dict[str, Any]:
    """A pod for the bridge's scheduler.

    ``cpu``/``memory`` are requests on a single ``main`` container (with ``limits`` beside them);
    pass ``containers`` instead for anything else. ``node_affinity_terms`` are required
    ``nodeSelectorTerms``. ``owner`` is an object (e.g. from `make_job`) to reference as controller.
    """
    if containers is None:
        requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
        containers = [make_container(requests=requests, limits=limits)]
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "containers": [dict(c) for c in containers],
        "restartPolicy": "Never",
    }
    if init_containers:
        spec["initContainers"] = [dict(c) for c in init_containers]
    if overhead:
        spec["overhead"] = dict(overhead)
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if node_affinity_terms is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [dict(t) for t in node_affinity_terms]
                }
            }
        }
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = active_deadline_seconds
    if node_name is not None:
        spec["nodeName"] = node_name
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(
            name,
            namespace,
            uid=uid,
            labels=labels,
            annotations=annotations,
            owner_references=[owner_reference(owner)] if owner is not None else None,
        ),
        "spec": spec,
        "status": {"phase": phase or "Pending"},
    }
    return pod


def owner_reference(obj: Mapping[str, Any], *, controller: bool = True) -> dict[str, Any]:
    """An ownerReference pointing at ``obj``."""
    metadata = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def make_job(
    name: str = "job-a",
    namespace: str = DEFAULT_NAMESPACE,
    *,
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    parallelism: int = 1,
    completions: int | None = None,
    active_deadline_seconds: int | None = None,
    template: Mapping[str, Any] | None = None,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job; ``template`` defaults to a one-container pod template for the bridge."""
    if template is None:
        pod = make_pod(name, namespace)
        template = {"metadata": {}, "spec": pod["spec"]}
    spec: dict[str, Any] = {"parallelism": parallelism, "template": dict(template)}
    if completions is not None:
        spec["completions"] = completions
    if active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = active_deadline_seconds
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(
            name,
            namespace,
            uid=uid,
            labels=labels,
            annotations=annotations,
            owner_references=[owner_reference(owner)] if owner is not None else None,
        ),
        "spec": spec,
    }


def make_object(
    kind: str,
    api_version: str,
    name: str,
    namespace: str | None = DEFAULT_NAMESPACE,
    *,
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Any other object (JobSet, PodGroup, LeaderWorkerSet, ...)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": _metadata(name, namespace, uid=uid, labels=labels, annotations=annotations),
        "spec": dict(spec or {}),
    }


def make_jobset(
    name: str = "jobset-a",
    namespace: str = DEFAULT_NAMESPACE,
    *,
    annotations: Mapping[str, str] | None = None,
    replicated_jobs: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A jobset.x-k8s.io/v1alpha2 JobSet."""
    return make_object(
        "JobSet",
        "jobset.x-k8s.io/v1alpha2",
        name,
        namespace,
        annotations=annotations,
        spec={"replicatedJobs": [dict(j) for j in replicated_jobs or []]},
    )


def make_taint(key: str, value: str | None = None, effect: str = "NoSchedule") -> dict[str, Any]:
    """A node taint."""
    taint: dict[str, Any] = {"key": key, "effect": effect}
    if value is not None:
        taint["value"] = value
    return taint


def make_toleration(
    key: str | None = None,
    value: str | None = None,
    *,
    operator: str | None = None,
    effect: str | None = None,
) -> dict[str, Any]:
    """A pod toleration; ``operator`` defaults to Kubernetes' Equal when left out."""
    toleration: dict[str, Any] = {}
    for field, item in (("key", key), ("value", value), ("operator", operator), ("effect", effect)):
        if item is not None:
            toleration[field] = item
    return toleration


def make_node(
    name: str = "node-a",
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, Any]] | None = None,
    unschedulable: bool = False,
    slurm_name: str | None = None,
    cpu: str = "8",
    memory: str = "16Gi",
    allocatable: Mapping[str, str] | None = None,
    ready: bool = True,
    managed_by: str | None = wellknown.SCHEDULER_NAME,
) -> dict[str, Any]:
    """A Kubernetes node.

    ``slurm_name`` sets the slurm-nodename label; ``managed_by`` adds the bridge's managed-node
    NoExecute taint with that scheduler name (None leaves it off).
    """
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if slurm_name is not None:
        all_labels[wellknown.LABEL_SLURM_NODENAME] = slurm_name
    all_taints = [dict(t) for t in taints or []]
    if managed_by is not None:
        all_taints.append(make_taint(wellknown.TAINT_MANAGED_NODE, managed_by, "NoExecute"))
    spec: dict[str, Any] = {}
    if all_taints:
        spec["taints"] = all_taints
    if unschedulable:
        spec["unschedulable"] = True
    resources = {"cpu": cpu, "memory": memory, "pods": "110", **(allocatable or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _metadata(name, None, uid=None, labels=all_labels, annotations=annotations),
        "spec": spec,
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


class StaticNodes:
    """An ``activities.kube.NodeView`` with no Kubernetes nodes and no Slurm node list; every Slurm node maps
    to ``kube_node`` (None: to no Kubernetes node)."""

    def __init__(self, kube_node: str | None = None) -> None:
        self.kube_node = kube_node

    def kube_nodes(self) -> list[dict[str, Any]]:
        return []

    def slurm_node_names(self) -> None:
        return None

    def kube_node_for(self, slurm_node: str) -> str | None:
        return self.kube_node
