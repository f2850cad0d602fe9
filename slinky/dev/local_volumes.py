"""A local volume provisioner for the real nodes: host-path PersistentVolumes made on demand.

The dev stack's default StorageClass ``slinky-local-path`` names provisioner :data:`PROVISIONER` and binds on
first use (``WaitForFirstConsumer``), as Rancher's local-path-provisioner does on small clusters. For a claim of
that class the scheduler has placed (annotation ``volume.kubernetes.io/selected-node``), this process makes a
directory under its root and a PersistentVolume ``pvc-<claim uid>`` pre-bound to the claim, with the node as
its node affinity (the data is that node's: a pod using the claim comes back to it). A ``ReadWriteMany`` claim
gets no node affinity: every real node of the dev stack is a kubelet on this one host, so the directory is
shared by pods on all of them, as an NFS export would be (an HA Controller's StateSaveLocation). Kubernetes'
own volume binder then binds the two. A released volume of ours (its claim deleted, reclaim policy Delete) loses its
directory and is deleted.

The directory is mode 0777: a hostPath volume gets no ``fsGroup`` ownership, and the daemons run as their own
users (slurmctld as 401).

Usage: ``python -m slinky.dev.local_volumes --kubeconfig K --root DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from slinky.clients.errors import KubeConflict, KubeNotFound
from slinky.clients.kube import KubeClient

logger = logging.getLogger("slinky.dev.local_volumes")
Obj = dict[str, Any]

PROVISIONER: Final = "slinky.slurm.net/local-path"
STORAGE_CLASS: Final = "slinky-local-path"
ANNOTATION_PROVISIONER: Final = "volume.beta.kubernetes.io/storage-provisioner"
ANNOTATION_SELECTED_NODE: Final = "volume.kubernetes.io/selected-node"
ANNOTATION_PROVISIONED_BY: Final = "pv.kubernetes.io/provisioned-by"
DEFAULT_CLASS: Final = "storageclass.kubernetes.io/is-default-class"


def storage_class() -> Obj:
    """The default StorageClass: ours, bound when a pod first uses the claim, deleted with the claim."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS, "annotations": {DEFAULT_CLASS: "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def volume_name(claim: Mapping[str, Any]) -> str:
    return f"pvc-{claim['metadata']['uid']}"


def wants_volume(claim: Mapping[str, Any]) -> bool:
    """A pending claim our provisioner is asked for, placed on a node by the scheduler."""
    meta = claim.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return (
        (claim.get("status") or {}).get("phase") == "Pending"
        and not (claim.get("spec") or {}).get("volumeName")
        and annotations.get(ANNOTATION_PROVISIONER) == PROVISIONER
        and bool(annotations.get(ANNOTATION_SELECTED_NODE))
        and not meta.get("deletionTimestamp")
    )


def volume_path(root: Path, claim: Mapping[str, Any]) -> Path:
    meta = claim["metadata"]
    return root / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"


def persistent_volume(claim: Mapping[str, Any], root: Path) -> Obj:
    """The PersistentVolume for ``claim``: its size and access modes, a hostPath, pinned to the selected node
    unless the claim asks for ReadWriteMany (see the module's docstring)."""
    meta = claim["metadata"]
    spec = claim.get("spec") or {}
    node = meta["annotations"][ANNOTATION_SELECTED_NODE]
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    modes = list(spec.get("accessModes") or ["ReadWriteOnce"])
    pinned = {
        "required": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
            ]
        }
    }
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name(claim), "annotations": {ANNOTATION_PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": modes,
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": spec.get("storageClassName") or STORAGE_CLASS,
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "hostPath": {"path": str(volume_path(root, claim)), "type": "DirectoryOrCreate"},
            **({} if "ReadWriteMany" in modes else {"nodeAffinity": pinned}),
        },
    }


def reclaimable(volume: Mapping[str, Any]) -> bool:
    """One of ours whose claim is gone, to be deleted with its directory."""
    annotations = (volume.get("metadata") or {}).get("annotations") or {}
    spec = volume.get("spec") or {}
    return (
        annotations.get(ANNOTATION_PROVISIONED_BY) == PROVISIONER
        and (volume.get("status") or {}).get("phase") in {"Released", "Failed"}
        and spec.get("persistentVolumeReclaimPolicy") == "Delete"
    )


def owned_path(root: Path, volume: Mapping[str, Any]) -> Path | None:
    """The volume's directory when it lies under ``root`` (never delete anything else)."""
    path = Path(((volume.get("spec") or {}).get("hostPath") or {}).get("path") or "/")
    resolved = path.resolve()
    return resolved if resolved.parent == root.resolve() else None


class Provisioner:
    def __init__(self, kube: KubeClient, root: Path) -> None:
        self.kube = kube
        self.root = root

    async def provision(self, claim: Obj) -> None:
        path = volume_path(self.root, claim)
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o777)
        try:
            await self.kube.create("/api/v1/persistentvolumes", persistent_volume(claim, self.root))
        except KubeConflict:
            return
        meta = claim["metadata"]
        logger.info("volume %s for %s/%s at %s", volume_name(claim), meta["namespace"], meta["name"], path)

    async def reclaim(self, volume: Obj) -> None:
        path = owned_path(self.root, volume)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
        try:
            await self.kube.delete(f"/api/v1/persistentvolumes/{volume['metadata']['name']}")
        except KubeNotFound:
            return
        logger.info("volume %s deleted with its directory", volume["metadata"]["name"])

    async def claims(self) -> None:
        async for kind, obj in self.kube.list_watch("/api/v1/persistentvolumeclaims"):
            for claim in obj["items"] if kind == "SYNC" else [obj] if kind != "DELETED" else []:
                if wants_volume(claim):
                    await self.provision(claim)

    async def volumes(self) -> None:
        async for kind, obj in self.kube.list_watch("/api/v1/persistentvolumes"):
            for volume in obj["items"] if kind == "SYNC" else [obj] if kind != "DELETED" else []:
                if reclaimable(volume):
                    await self.reclaim(volume)

    async def run(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        await asyncio.gather(self.claims(), self.volumes())


async def _main(args: argparse.Namespace) -> None:
    async with KubeClient.from_kubeconfig(args.kubeconfig) as kube:
        await Provisioner(kube, Path(args.root)).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
