"""Create or update the objects a reconciler builds (``slinky.operator.cluster_objects``), idempotently.

:func:`ensure` reads the live object and writes only when the desired one is not already contained in it (the
server adds defaults, so "contained" and not "equal"), with a JSON merge patch of the fields that may change:
labels and annotations, ``data``, and the mutable part of ``spec`` (a StatefulSet's ``selector``,
``serviceName`` and ``volumeClaimTemplates`` are immutable and never patched). Lists are replaced whole, as a
merge patch does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from slinky.clients.errors import KubeConflict, KubeNotFound
from slinky.clients.kube import KubeClient

Obj = dict[str, Any]

COLLECTIONS: Final[Mapping[str, str]] = {
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Secret": "/api/v1/namespaces/{ns}/secrets",
    "Service": "/api/v1/namespaces/{ns}/services",
    "StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "PodDisruptionBudget": "/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets",
    "ServiceMonitor": "/apis/monitoring.coreos.com/v1/namespaces/{ns}/servicemonitors",
}
IMMUTABLE_SPEC: Final[Mapping[str, frozenset[str]]] = {
    "StatefulSet": frozenset({"selector", "serviceName", "volumeClaimTemplates", "podManagementPolicy"}),
    "Deployment": frozenset({"selector"}),
    "Service": frozenset({"clusterIP", "clusterIPs", "ipFamilies"}),
}


def path_of(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{COLLECTIONS[obj['kind']].format(ns=meta['namespace'])}/{meta['name']}"


def contains(live: Any, desired: Any) -> bool:
    """Whether every field of ``desired`` has its value in ``live`` (maps: by key; lists: same length, each
    element contained; scalars: equal, an int equal to a float of the same value)."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(contains(live.get(k), v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(live) == len(desired) and all(map(contains, live, desired))
    return bool(live == desired)


def changes(kind: str, live: Obj, desired: Obj) -> Obj | None:
    """The merge patch that makes ``live`` hold ``desired``, or None when it already does."""
    patch: Obj = {}
    meta = {
        k: desired["metadata"][k]
        for k in ("labels", "annotations")
        if desired["metadata"].get(k) and not contains(live["metadata"].get(k) or {}, desired["metadata"][k])
    }
    if meta:
        patch["metadata"] = meta
    for field in ("data", "stringData", "binaryData"):
        if field in desired and (live.get(field) or {}) != desired[field]:
            patch[field] = {**{k: None for k in live.get(field) or {} if k not in desired[field]}, **desired[field]}
    immutable = IMMUTABLE_SPEC.get(kind, frozenset())
    spec = {
        k: v
        for k, v in (desired.get("spec") or {}).items()
        if k not in immutable and not contains((live.get("spec") or {}).get(k), v)
    }
    if spec:
        patch["spec"] = spec
    return patch or None


async def ensure(kube: KubeClient, desired: Obj) -> tuple[Obj, str]:
    """Create ``desired`` or bring the live object to it; returns the object and ``created``, ``updated`` or
    ``unchanged``. A create that races another writer reads and patches instead."""
    path = path_of(desired)
    try:
        live = await kube.get(path)
    except KubeNotFound:
        try:
            made = await kube.create(path.rsplit("/", 1)[0], desired)
            return made, "created"
        except KubeConflict:
            live = await kube.get(path)
    patch = changes(desired["kind"], live, desired)
    if patch is None:
        return live, "unchanged"
    return await kube.patch(path, patch), "updated"
