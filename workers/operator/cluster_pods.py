"""The pods of a Controller, RestApi, Accounting or LoginSet, as those reconcilers watch them: by upstream's
labels (``app.kubernetes.io/name`` the daemon, ``app.kubernetes.io/instance`` the object's name), so a pod that
cannot pull its image or keeps crashing wakes its object, whose ``PodsHealthy`` condition then says so
(``slinky.operator.pod_health``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slinky import wellknown
from slinky.operator import pod_health
from workers.operator.runtime import Caches, Runtime, Watch, set_condition
from workers.operator.workqueue import Key

Obj = dict[str, Any]
PODS = "/api/v1/pods"


def _selector(app: str) -> str:
    return f"{wellknown.LABEL_APP}={app}"


def pods_watch(app: str) -> Watch:
    """The pods of daemon ``app`` (slurmctld, slurmrestd, slurmdbd, login), each mapped to its object."""

    def owner(pod: Obj) -> list[Key]:
        instance = (pod["metadata"].get("labels") or {}).get(wellknown.LABEL_INSTANCE)
        return [(pod["metadata"]["namespace"], str(instance))] if instance else []

    return Watch(PODS, owner, label_selector=_selector(app))


def pods_of(caches: Caches, app: str, namespace: str, name: str) -> list[Obj]:
    collection = Watch(PODS, label_selector=_selector(app)).collection
    return [
        pod
        for pod in caches.in_namespace(collection, namespace)
        if (pod["metadata"].get("labels") or {}).get(wellknown.LABEL_INSTANCE) == name
    ]


def with_pods_healthy(runtime: Runtime, raw: Obj, app: str, conditions: Sequence[Obj]) -> list[Obj]:
    """``conditions`` with ``PodsHealthy`` set from the object's pods; a Warning Event when it turns False."""
    meta = raw["metadata"]
    type_, status, reason, message = pod_health.condition(pods_of(runtime.caches, app, meta["namespace"], meta["name"]))
    generation = int(meta.get("generation") or 0)
    previous = next((c for c in conditions if c.get("type") == type_), None)
    if status == "False":
        runtime.warn_once(raw, reason, message)
    elif previous is not None and previous.get("status") == "False":
        runtime.forget_warning(raw, str(previous.get("reason")))
    return set_condition(conditions, type_, status, reason, message, generation)
