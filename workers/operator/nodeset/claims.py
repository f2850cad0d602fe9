"""A NodeSet's PersistentVolumeClaims from its `volumeClaimTemplates`, as a StatefulSet keeps them.

Each pod gets `<template>-<pod>` before it is created (so a replaced pod of the same ordinal mounts the same
data), and keeps it across updates. `persistentVolumeClaimRetentionPolicy`:

* `whenDeleted: Delete`: the NodeSet owns the claims (``pods.build_claims``) and the garbage collector takes them
  with it; `Retain` (default): they outlive the NodeSet.
* `whenScaled: Delete`: once a scale-in's pod is gone, the claims of its ordinal (at or above `replicas`) are
  deleted; `Retain` (default): they stay, and a scale-out to that ordinal mounts them again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from slinky import wellknown
from slinky.clients.errors import KubeConflict, KubeNotFound
from slinky.clients.kube import KubeClient
from slinky.operator import pods as builder
from slinky.operator.api.nodeset import NodeSet
from workers.operator.workqueue import Key

logger = logging.getLogger(__name__)
Obj = dict[str, Any]
CLAIMS = "/api/v1/persistentvolumeclaims"


def owner_of_claim(claim: Obj) -> Key | None:
    """The NodeSet whose template made the claim (its selector labels; a retained claim has no owner)."""
    labels = claim["metadata"].get("labels") or {}
    if labels.get(wellknown.LABEL_APP) != wellknown.APP_SLURMD or not labels.get(wellknown.LABEL_INSTANCE):
        return None
    return (claim["metadata"]["namespace"], labels[wellknown.LABEL_INSTANCE])


class Claims:
    def __init__(self, kube: KubeClient, cache: Mapping[Key, Obj]) -> None:
        self.kube = kube
        self.cache = cache

    async def ensure(self, nodeset: NodeSet, pods: Iterable[str]) -> None:
        """Create the claims of `pods` that do not exist yet."""
        for pod in pods:
            for claim in builder.build_claims(nodeset, pod):
                meta = claim["metadata"]
                if (meta["namespace"], meta["name"]) in self.cache:
                    continue
                with contextlib.suppress(KubeConflict):  # made meanwhile (or retained from before)
                    await self.kube.create(f"/api/v1/namespaces/{meta['namespace']}/persistentvolumeclaims", claim)
                    logger.info("created claim %s/%s", meta["namespace"], meta["name"])

    async def prune_scaled(self, key: Key, nodeset: NodeSet, desired: int, pod_names: set[str]) -> None:
        """`whenScaled: Delete`: delete the claims of the ordinals at or above `desired` whose pod is gone."""
        policy = nodeset.spec.persistent_volume_claim_retention_policy
        if policy.when_scaled != "Delete" or not nodeset.spec.volume_claim_templates:
            return
        if nodeset.spec.scaling_mode != "StatefulSet":
            return
        for (namespace, name), claim in list(self.cache.items()):
            labels = claim["metadata"].get("labels") or {}
            pod = labels.get(wellknown.LABEL_NODESET_POD_NAME, "")
            if namespace != key[0] or owner_of_claim(claim) != key or pod in pod_names:
                continue
            ordinal = builder.ordinal_of(key[1], pod)
            if ordinal is None or ordinal < desired or claim["metadata"].get("deletionTimestamp"):
                continue
            with contextlib.suppress(KubeNotFound, KubeConflict):
                await self.kube.delete(
                    f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}", uid=claim["metadata"]["uid"]
                )
                logger.info("deleted claim %s/%s of scaled-in pod %s (whenScaled: Delete)", namespace, name, pod)
