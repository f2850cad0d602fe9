"""Which workload group a pod belongs to: one Slurm job per group (pure, from the pod's labels).

Precedence (upstream slurm-bridge §1.3): a coscheduling PodGroup (label ``scheduling.x-k8s.io/pod-group``),
then a LeaderWorkerSet group (its group-key label), else the pod alone. Job and JobSet pods are one job per
pod unless a PodGroup groups them. The group object's UID is part of the workflow ID, so a PodGroup deleted
and recreated under the same name gets a new lifecycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from slinky import wellknown

KIND_POD = "Pod"
KIND_PODGROUP = "PodGroup"
KIND_LWS = "LeaderWorkerSet"


class GroupRef(BaseModel):
    """A gang: the object that defines it and the key of this group within it."""

    model_config = ConfigDict(frozen=True)

    kind: str
    namespace: str
    name: str
    key: str = ""
    """For LeaderWorkerSet: the group-key label (one LWS has many groups)."""

    def api_path(self) -> str:
        template = wellknown.API_PODGROUP if self.kind == KIND_PODGROUP else wellknown.API_LWS
        return template.format(namespace=self.namespace, name=self.name)

    def workflow_id(self, uid: str) -> str:
        """``workload/<ns>/<kind>/<name>/<object uid>[/<group key>]``."""
        base = f"workload/{self.namespace}/{self.kind.lower()}/{self.name}/{uid}"
        return f"{base}/{self.key}" if self.key else base


def group_of(pod: Mapping[str, Any]) -> GroupRef | None:
    """The gang this pod belongs to, or None when the pod is its own workload."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    namespace = str(meta.get("namespace", ""))
    if labels.get(wellknown.LABEL_POD_GROUP):
        return GroupRef(kind=KIND_PODGROUP, namespace=namespace, name=labels[wellknown.LABEL_POD_GROUP])
    if labels.get(wellknown.LABEL_LWS_GROUP_KEY) and labels.get(wellknown.LABEL_LWS_NAME):
        name = labels[wellknown.LABEL_LWS_NAME]
        return GroupRef(kind=KIND_LWS, namespace=namespace, name=name, key=labels[wellknown.LABEL_LWS_GROUP_KEY])
    return None


def min_member(group: GroupRef, obj: Mapping[str, Any], pod: Mapping[str, Any] | None = None) -> int:
    """Pods the gang needs before it is submitted: PodGroup ``minMember``, LWS ``size``.

    Raises:
        ValueError: The object carries no usable size.
    """
    spec = obj.get("spec") or {}
    if group.kind == KIND_PODGROUP:
        value: Any = spec.get("minMember", 1)
    else:
        annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
        value = annotations.get(wellknown.ANNOTATION_LWS_SIZE) or (spec.get("leaderWorkerTemplate") or {}).get("size")
    try:
        size = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{group.kind} {group.namespace}/{group.name} has no valid size ({value!r})") from None
    if size < 1:
        raise ValueError(f"{group.kind} {group.namespace}/{group.name} size {size} is below 1")
    return size
