"""A pod's volumes as the node agent lays them out, as pure functions (docs/dev-stack.md, "Daemon pods").

A kubelet materialises each volume of a pod in a directory and bind-mounts it at every ``volumeMounts`` entry
of a container. The agent does the same for the pods it runs as real daemons:

* ``configMap``, ``secret`` and ``projected`` (configMap and secret sources): files written from the objects'
  data, ``items`` and modes honoured, kept current when the objects change (as a kubelet does, without its
  minute of delay);
* ``emptyDir``: a directory of the pod, gone with it;
* ``hostPath``: the host's directory;
* ``persistentVolumeClaim``: a directory per claim under the agent's state (``volumes/<namespace>/<claim>``)
  that outlives every pod, as a local-path provisioner gives; no PersistentVolume is made.

Anything else (``downwardAPI``, CSI, ...) is named in :class:`VolumeError`, so the pod does not start
half-configured. This module only decides; ``slinky.dev.slurmd_runtime`` writes and mounts.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import posixpath
from collections.abc import Mapping
from typing import Any, Final, Literal

Obj = dict[str, Any]
Lookup = Mapping[tuple[str, str], Obj]
"""Objects by (namespace, name): the agent's cache of ConfigMaps or Secrets."""

CONFIGMAP_MODE: Final = 0o644
SECRET_MODE: Final = 0o644
"""Kubernetes' default ``defaultMode`` for both (0644); a Secret is as readable as its mode says."""


class VolumeError(ValueError):
    """A volume the agent cannot lay out; the message names the pod's volume and why."""


class MissingSource(VolumeError):
    """A ConfigMap, Secret or key a volume needs does not exist (yet): a kubelet retries, and so do we."""


@dataclasses.dataclass(frozen=True)
class FileVolume:
    """A volume of files (configMap, secret, projected): relative path -> (content, mode)."""

    name: str
    files: Mapping[str, tuple[bytes, int]]
    sources: frozenset[tuple[Literal["configmaps", "secrets"], str]]
    """The objects it is made of (kind, name), so a change of one refreshes it."""


@dataclasses.dataclass(frozen=True)
class DirVolume:
    """A directory: ``pod`` (emptyDir, under the pod's own directory), ``claim`` (a claim's directory under the
    agent's state) or ``host`` (a hostPath)."""

    name: str
    where: Literal["pod", "claim", "host"]
    path: str
    """emptyDir: the volume's name; claim: ``<namespace>/<claim>``; host: the absolute host path."""


Volume = FileVolume | DirVolume


@dataclasses.dataclass(frozen=True)
class Mount:
    """One ``volumeMounts`` entry of the daemon's container."""

    volume: str
    path: str
    sub_path: str = ""
    read_only: bool = False


def _decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as err:
        raise VolumeError(f"{what}: not base64") from err


def object_data(kind: Literal["configmaps", "secrets"], obj: Obj) -> dict[str, bytes]:
    """Every key of a ConfigMap (``data`` and ``binaryData``) or Secret (``data``, base64) as bytes."""
    out: dict[str, bytes] = {}
    if kind == "configmaps":
        out.update({k: str(v).encode() for k, v in (obj.get("data") or {}).items()})
        out.update({k: _decode(str(v), f"binaryData {k}") for k, v in (obj.get("binaryData") or {}).items()})
    else:
        out.update({k: _decode(str(v), f"data {k}") for k, v in (obj.get("data") or {}).items()})
        out.update({k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()})
    return out


def _safe_path(path: str, what: str) -> str:
    """A relative path inside the volume: no absolute path, no `..` (a kubelet refuses those too)."""
    norm = posixpath.normpath(path)
    if not path or path.startswith("/") or norm == ".." or norm.startswith("../") or norm == ".":
        raise VolumeError(f"{what}: path {path!r} must be relative and stay inside the volume")
    return norm


def _project(
    volume: str,
    kind: Literal["configmaps", "secrets"],
    source: Obj,
    namespace: str,
    lookup: Lookup,
    default_mode: int,
    files: dict[str, tuple[bytes, int]],
) -> tuple[Literal["configmaps", "secrets"], str] | None:
    """Add one configMap/secret source's files; returns the object it read, None if optional and absent."""
    name = str(source.get("name") or source.get("secretName") or "")
    what = f"volume {volume}: {kind[:-1]} {name!r}"
    obj = lookup.get((namespace, name))
    optional = bool(source.get("optional"))
    if obj is None:
        if optional:
            return None
        raise MissingSource(f"{what} not found")
    data = object_data(kind, obj)
    items = source.get("items")
    mode = int(source.get("defaultMode", default_mode))
    if items:
        for item in items:
            key = str(item.get("key", ""))
            if key not in data:
                if optional:
                    continue
                raise MissingSource(f"{what} has no key {key!r}")
            files[_safe_path(str(item.get("path") or key), what)] = (data[key], int(item.get("mode", mode)))
    else:
        for key, value in data.items():
            files[_safe_path(key, what)] = (value, mode)
    return kind, name


def plan_volume(volume: Obj, namespace: str, configmaps: Lookup, secrets: Lookup) -> Volume:
    """What to lay out for one entry of ``spec.volumes``.

    Raises:
        MissingSource: a referenced ConfigMap, Secret or key is missing (not optional).
        VolumeError: a volume type the agent does not emulate, or a path that leaves the volume.
    """
    name = str(volume.get("name", ""))
    files: dict[str, tuple[bytes, int]] = {}
    sources: set[tuple[Literal["configmaps", "secrets"], str]] = set()
    if "configMap" in volume:
        got = _project(name, "configmaps", volume["configMap"] or {}, namespace, configmaps, CONFIGMAP_MODE, files)
        return FileVolume(name, files, frozenset({got} if got else set()))
    if "secret" in volume:
        got = _project(name, "secrets", volume["secret"] or {}, namespace, secrets, SECRET_MODE, files)
        return FileVolume(name, files, frozenset({got} if got else set()))
    if "projected" in volume:
        projected = volume["projected"] or {}
        mode = int(projected.get("defaultMode", CONFIGMAP_MODE))
        for source in projected.get("sources") or []:
            if "configMap" in source:
                got = _project(
                    name, "configmaps", {"defaultMode": mode, **source["configMap"]}, namespace, configmaps, mode, files
                )
            elif "secret" in source:
                got = _project(
                    name, "secrets", {"defaultMode": mode, **source["secret"]}, namespace, secrets, mode, files
                )
            else:
                kinds = ", ".join(sorted(source)) or "an empty source"
                raise VolumeError(f"volume {name}: projected {kinds} is not emulated (configMap and secret are)")
            if got:
                sources.add(got)
        return FileVolume(name, files, frozenset(sources))
    if "emptyDir" in volume:
        return DirVolume(name, "pod", name)
    if "persistentVolumeClaim" in volume:
        claim = str((volume["persistentVolumeClaim"] or {}).get("claimName") or "")
        if not claim or "/" in claim:
            raise VolumeError(f"volume {name}: persistentVolumeClaim.claimName {claim!r} is not a name")
        return DirVolume(name, "claim", claim_dir(namespace, claim))
    if "hostPath" in volume:
        path = str((volume["hostPath"] or {}).get("path") or "")
        if not path.startswith("/"):
            raise VolumeError(f"volume {name}: hostPath.path {path!r} must be absolute")
        return DirVolume(name, "host", posixpath.normpath(path))
    kinds = ", ".join(sorted(k for k in volume if k != "name")) or "no source"
    raise VolumeError(f"volume {name}: {kinds} is not emulated by the node agent")


def mounts(container: Obj) -> list[Mount]:
    """The container's ``volumeMounts`` (absolute paths, sub-paths checked)."""
    out = []
    for entry in container.get("volumeMounts") or []:
        path = str(entry.get("mountPath") or "")
        if not path.startswith("/"):
            raise VolumeError(f"volumeMount {entry.get('name')!r}: mountPath {path!r} must be absolute")
        sub = str(entry.get("subPath") or "")
        if sub:
            sub = _safe_path(sub, f"volumeMount {entry.get('name')!r} subPath")
        out.append(Mount(str(entry.get("name", "")), posixpath.normpath(path), sub, bool(entry.get("readOnly"))))
    return out


def plan(pod: Obj, container: Obj, configmaps: Lookup, secrets: Lookup) -> tuple[list[Volume], list[Mount]]:
    """The volumes the container mounts, and its mounts; a mount of an undeclared volume is an error."""
    namespace = str(pod["metadata"]["namespace"])
    declared = {str(v.get("name")): v for v in (pod.get("spec") or {}).get("volumes") or []}
    wanted = mounts(container)
    volumes: list[Volume] = []
    for name in dict.fromkeys(m.volume for m in wanted):
        if name not in declared:
            raise VolumeError(f"volumeMount {name!r} names no volume of the pod")
        volumes.append(plan_volume(declared[name], namespace, configmaps, secrets))
    return volumes, wanted


def sources(pod: Obj) -> set[tuple[Literal["configmaps", "secrets"], str, str]]:
    """Every (kind, namespace, name) the pod's volumes and env read: a change of one refreshes the pod."""
    namespace = str(pod["metadata"]["namespace"])
    out: set[tuple[Literal["configmaps", "secrets"], str, str]] = set()
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if "configMap" in volume:
            out.add(("configmaps", namespace, str((volume["configMap"] or {}).get("name", ""))))
        if "secret" in volume:
            out.add(("secrets", namespace, str((volume["secret"] or {}).get("secretName", ""))))
        for source in ((volume.get("projected") or {}).get("sources")) or []:
            if "configMap" in source:
                out.add(("configmaps", namespace, str(source["configMap"].get("name", ""))))
            if "secret" in source:
                out.add(("secrets", namespace, str(source["secret"].get("name", ""))))
    for container in (pod.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            ref = env.get("valueFrom") or {}
            if "configMapKeyRef" in ref:
                out.add(("configmaps", namespace, str(ref["configMapKeyRef"].get("name", ""))))
            if "secretKeyRef" in ref:
                out.add(("secrets", namespace, str(ref["secretKeyRef"].get("name", ""))))
    return out


def env(container: Obj, namespace: str, configmaps: Lookup, secrets: Lookup) -> dict[str, str]:
    """The container's environment: literal values, and ``valueFrom`` ConfigMap and Secret keys.

    Raises:
        MissingSource: a referenced key is missing and not optional.
        VolumeError: a ``valueFrom`` the agent does not emulate (fieldRef, resourceFieldRef).
    """
    out: dict[str, str] = {}
    for entry in container.get("env") or []:
        name = str(entry.get("name", ""))
        if "value" in entry or "valueFrom" not in entry:
            out[name] = str(entry.get("value") or "")
            continue
        value = _env_ref(name, entry["valueFrom"] or {}, namespace, configmaps, secrets)
        if value is not None:
            out[name] = value
    return out


def _env_ref(name: str, ref: Obj, namespace: str, configmaps: Lookup, secrets: Lookup) -> str | None:
    """One ``valueFrom``: the key's value, None when it is optional and missing."""
    kind: Literal["configmaps", "secrets"]
    if "configMapKeyRef" in ref:
        kind, src, lookup = "configmaps", ref["configMapKeyRef"], configmaps
    elif "secretKeyRef" in ref:
        kind, src, lookup = "secrets", ref["secretKeyRef"], secrets
    else:
        raise VolumeError(f"env {name}: valueFrom {', '.join(sorted(ref))} is not emulated by the node agent")
    obj = lookup.get((namespace, str(src.get("name", ""))))
    value = object_data(kind, obj).get(str(src.get("key", ""))) if obj is not None else None
    if value is None:
        if src.get("optional"):
            return None
        raise MissingSource(f"env {name}: {kind[:-1]} {src.get('name')!r} key {src.get('key')!r} not found")
    return value.decode(errors="replace")


def claim_dir(namespace: str, claim: str) -> str:
    """The directory of a claim under the agent's state (``volumes/<namespace>/<claim>``)."""
    return f"volumes/{namespace}/{claim}"


def provision(claim: Obj, state_dir: str) -> Obj | None:
    """The PersistentVolume a local-path provisioner makes for an unbound claim of no storage class: a hostPath
    at the claim's directory, pre-bound to the claim (``claimRef``), kept when the claim goes (Retain). None
    for a claim that is bound, or asks for a storage class (another provisioner's)."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    if spec.get("volumeName") or spec.get("storageClassName") or meta.get("deletionTimestamp"):
        return None
    if ((claim.get("status") or {}).get("phase") or "Pending") != "Pending":
        return None
    namespace, name = str(meta["namespace"]), str(meta["name"])
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage") or "1Gi"
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": f"local-{meta['uid']}",
            "labels": {"slinky.slurm.net/local-path": "true"},
            "annotations": {"pv.kubernetes.io/provisioned-by": "slinky.slurm.net/node-agent"},
        },
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "hostPath": {"path": f"{state_dir.rstrip('/')}/{claim_dir(namespace, name)}", "type": "DirectoryOrCreate"},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": namespace,
                "name": name,
                "uid": meta["uid"],
            },
        },
    }
