"""Pure builders of NodeSet pods: names, labels, the slurmd container, the template revision.

Upstream builds NodeSet pods directly (no StatefulSet): `<nodeset>-<ordinal>` with a stable hostname that is
the Slurm node name, one `slurmd` container running `slurmd -Z` (a dynamic node) with the configless
`--conf-server` and `--conf 'Features=<nodeset> ...'`, `POD_CPUS`/`POD_MEMORY` from the limits, a preStop
that takes the node out of Slurm, and a required anti-affinity (one pod per Kubernetes node) unless
`oversubscribeNode`. These functions take the parsed objects and return plain dicts; they do no I/O.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from typing import Any

from slinky import wellknown
from slinky.operator import daemonset, ssh
from slinky.operator.api.controller import Controller
from slinky.operator.api.nodeset import NodeSet

Obj = dict[str, Any]

SLURMD_PORT = 6818
SLURM_ETC_VOLUME = "slurm-etc"
SSSD_CONF_VOLUME = "sssd-conf"
SSSD_CONF_PATH = "/etc/sssd/sssd.conf"
SLURMCTLD_PORT = 6817
"""slurmctld's port: SlurmctldPort, the Controller Service, and slurmd's configless `--conf-server`."""
PRE_STOP = (
    "scontrol update nodename=$(hostname) state=down reason='"
    + wellknown.OPERATOR_REASON_PREFIX
    + "Pod is terminating'; scontrol delete nodename=$(hostname)"
)
"""Upstream's preStop sets the node DOWN; ours then deletes the dynamic node, so no ghost stays in sinfo."""

_CONF_ITEM = re.compile(r"^([A-Za-z]+)=(.*)$")


def pod_name(nodeset: str, ordinal: int, padding: int = 0) -> str:
    """`<nodeset>-<ordinal>`, the ordinal zero-padded to `padding` digits."""
    return f"{nodeset}-{ordinal:0{padding}d}" if padding else f"{nodeset}-{ordinal}"


def hostname_of_ordinal(nodeset: NodeSet, ordinal: int) -> str:
    """The Slurm node name of `ordinal` (StatefulSet mode), as upstream: the template's `hostname` as a prefix
    with the padded ordinal (`hostname: gpu-` -> `gpu-0`), else the pod's name."""
    padding = nodeset.spec.ordinal_padding
    prefix = (nodeset.spec.template.spec or {}).get("hostname")
    if prefix:
        return f"{prefix}{ordinal:0{padding}d}" if padding else f"{prefix}{ordinal}"
    return pod_name(_name(nodeset), ordinal, padding)


def ordinal_of(nodeset: str, name: str) -> int | None:
    """The ordinal of a pod named `<nodeset>-<n>`, or None for any other name."""
    prefix = f"{nodeset}-"
    rest = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def free_ordinals(used: set[int], count: int) -> list[int]:
    """The `count` lowest ordinals not in `used` (scale-out fills holes first, as a StatefulSet)."""
    out: list[int] = []
    n = 0
    while len(out) < count:
        if n not in used:
            out.append(n)
        n += 1
    return out


def selector_labels(nodeset: NodeSet) -> dict[str, str]:
    """The labels that select a NodeSet's pods (`.status.selector`, the scale subresource's)."""
    return {wellknown.LABEL_APP: wellknown.APP_SLURMD, wellknown.LABEL_INSTANCE: _name(nodeset)}


def selector_string(nodeset: NodeSet) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(nodeset).items()))


def parse_extra_conf(extra_conf: str | None) -> dict[str, list[str]]:
    """`Key=Value[,Value]` items separated by blanks; raises ValueError naming a malformed item."""
    out: dict[str, list[str]] = {}
    for item in (extra_conf or "").split():
        match = _CONF_ITEM.match(item)
        if not match:
            raise ValueError(f"malformed item {item!r}: expected Key=Value")
        key = match.group(1)[:1].upper() + match.group(1)[1:].lower()
        out.setdefault(key, []).extend(v for v in match.group(2).split(",") if v)
    return out


def slurm_nodeset_name(nodeset: NodeSet) -> str:
    """The NodeSet's name in Slurm (its `NodeSet=` line, the Feature its slurmd registers with, its partition),
    as upstream: the pod template's `hostname` prefix without its dashes (`gpu-` -> `gpu`) when set, else the
    NodeSet's name."""
    hostname = (nodeset.spec.template.spec or {}).get("hostname")
    words = hostname.split() if isinstance(hostname, str) else []
    return words[0].strip("-") if words else _name(nodeset)


def slurmd_conf(nodeset: NodeSet) -> str:
    """The `--conf` value: `Features=<slurm nodeset name>[,extra]` plus the other extraConf keys, sorted."""
    extra = parse_extra_conf(nodeset.spec.extra_conf)
    features = sorted({slurm_nodeset_name(nodeset), *extra.pop("Feature", []), *extra.pop("Features", [])})
    items = {"Features": ",".join(features), **{k: ",".join(v) for k, v in extra.items()}}
    return " ".join(f"{k}={v}" for k, v in sorted(items.items()))


def conf_server(controller: Controller) -> str:
    """`host:port` of slurmctld: the external one, or the Controller's Service (`<name>-controller`)."""
    ext = controller.spec.external_config
    if controller.spec.external and ext is not None:
        return f"{ext.host}:{ext.port}"
    namespace = controller.metadata.get("namespace", "default")
    return f"{controller.metadata.get('name', '')}-controller.{namespace}:{SLURMCTLD_PORT}"


def slurmd_args(nodeset: NodeSet, controller: Controller) -> list[str]:
    return ["-Z", "--conf-server", conf_server(controller), "--conf", slurmd_conf(nodeset)]


def quantity_cpus(value: Any) -> int:
    """A CPU quantity rounded up to whole CPUs (`500m` -> 1, `2` -> 2)."""
    text = str(value)
    if text.endswith("m"):
        return math.ceil(int(text[:-1]) / 1000)
    return math.ceil(float(text))


_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity_bytes(value: Any) -> int:
    """A memory quantity in bytes (`4Gi`, `512Mi`, `1G`, `1048576`)."""
    text = str(value)
    for suffix in sorted(_UNITS, key=len, reverse=True):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * _UNITS[suffix])
    return int(float(text))


def resource_limits(nodeset: NodeSet) -> tuple[int, int]:
    """(CPUs, MiB) from the slurmd container's limits, else the pod template's containers' (upstream's rule)."""
    cpus = mem = 0
    for container in nodeset.spec.template.spec.get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        cpus += quantity_cpus(limits["cpu"]) if "cpu" in limits else 0
        mem += quantity_bytes(limits["memory"]) if "memory" in limits else 0
    own = (nodeset.spec.slurmd.get("resources") or {}).get("limits") or {}
    if "cpu" in own:
        cpus = quantity_cpus(own["cpu"])
    if "memory" in own:
        mem = quantity_bytes(own["memory"])
    return cpus, mem // 2**20


def revision_hash(nodeset: NodeSet, controller_server: str, slurm_key: str = "") -> str:
    """The template revision: a hash of everything that ends up in the pod (a change rolls the pods)."""
    spec = nodeset.spec
    relevant = {
        "slurmd": spec.slurmd,
        "logfile": spec.logfile,
        "template": spec.template.to_wire(),
        "extraConf": spec.extra_conf,
        "ssh": spec.ssh.to_wire() if spec.ssh else None,
        "server": controller_server,
        **({"slurmKey": slurm_key} if slurm_key else {}),
    }
    digest = hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()
    return digest[:10]


def _name(nodeset: NodeSet) -> str:
    return str(nodeset.metadata.get("name", ""))


def _merge_container(base: Obj, overlay: Obj) -> Obj:
    """The user's container fields win, except the name; env is merged by name and volumeMounts by mountPath (a
    strategic merge patch's keys: one volume may be mounted at several paths), and the user's `args` come after
    ours, as upstream appends them (its chart renders `args: []`, which changes nothing)."""
    out = {**base, **{k: v for k, v in overlay.items() if k not in {"env", "volumeMounts", "name", "args"}}}
    for key, merge_key in (("env", "name"), ("volumeMounts", "mountPath")):
        merged = {item[merge_key]: item for item in base.get(key, [])}
        merged.update({item[merge_key]: item for item in overlay.get(key) or []})
        if merged:
            out[key] = list(merged.values())
    args = [*(base.get("args") or []), *(overlay.get("args") or [])]
    if args:
        out["args"] = args
    return out


def build_pod(nodeset: NodeSet, controller: Controller, ordinal: int, revision: str, *, pin: str | None = None) -> Obj:
    """The pod of `ordinal` (StatefulSet mode): metadata, the slurmd container, scheduling rules; `pin` (with
    `pinToNode`) is the Kubernetes node the ordinal ran on before."""
    pod = pod_name(_name(nodeset), ordinal, nodeset.spec.ordinal_padding)
    return _build(nodeset, controller, pod, hostname_of_ordinal(nodeset, ordinal), revision, str(ordinal), pin)


def ordinal_to_node(nodeset: NodeSet, pods: list[Obj], previous: dict[str, str], nodes: set[str]) -> dict[str, str]:
    """`status.ordinalToNode` for `pinToNode`: each ordinal's node, from its live pod or else as remembered; an
    entry whose node is gone (or no longer in `nodes`) is reset, so that ordinal may go anywhere again."""
    out = {k: v for k, v in previous.items() if v in nodes}
    for pod in pods:
        ordinal = ordinal_of(_name(nodeset), pod["metadata"]["name"])
        node = (pod.get("spec") or {}).get("nodeName")
        if ordinal is not None and node:
            out[str(ordinal)] = node
    return dict(sorted(out.items(), key=lambda item: int(item[0])))


def build_daemon_pod(nodeset: NodeSet, controller: Controller, node: Obj, revision: str) -> Obj:
    """The pod of one Kubernetes node (DaemonSet mode): pinned to the node, its hostname the node's."""
    pod = daemonset.pod_name(_name(nodeset), node)
    return _build(nodeset, controller, pod, daemonset.hostname_for(node), revision, None, node["metadata"]["name"])


def _build(
    nodeset: NodeSet,
    controller: Controller,
    pod: str,
    hostname: str,
    revision: str,
    index: str | None,
    node: str | None,
) -> Obj:
    namespace = str(nodeset.metadata.get("namespace", "default"))
    cpus, mem = resource_limits(nodeset)
    template_meta = nodeset.spec.template.metadata
    labels = {
        **(template_meta.labels or {}),
        **selector_labels(nodeset),
        wellknown.LABEL_COMPONENT: wellknown.COMPONENT_WORKER,
        wellknown.LABEL_CLUSTER: nodeset.spec.controller_ref.name,
        wellknown.LABEL_NODESET_POD_NAME: pod,
        **({wellknown.LABEL_NODESET_POD_INDEX: index} if index is not None else {}),
        wellknown.LABEL_NODESET_POD_HOSTNAME: hostname,
        wellknown.LABEL_NODESET_SCALING_MODE: nodeset.spec.scaling_mode,
        wellknown.LABEL_CONTROLLER_REVISION_HASH: revision,
    }
    annotations = {**(template_meta.annotations or {}), wellknown.ANNOTATION_DEFAULT_CONTAINER: wellknown.APP_SLURMD}
    slurmd: Obj = {
        "name": wellknown.APP_SLURMD,
        "args": slurmd_args(nodeset, controller),
        "env": [{"name": "POD_CPUS", "value": str(cpus)}, {"name": "POD_MEMORY", "value": str(mem)}],
        "ports": [{"name": wellknown.APP_SLURMD, "containerPort": SLURMD_PORT, "protocol": "TCP"}],
        "lifecycle": {"preStop": {"exec": {"command": ["/usr/bin/sh", "-c", PRE_STOP]}}},
        "securityContext": {
            "privileged": True,
            "capabilities": {"add": ["BPF", "NET_ADMIN", "SYS_ADMIN", "SYS_NICE"]},
        },
    }
    key_ref = controller.spec.slurm_key_ref
    if key_ref is not None and key_ref.name and key_ref.key:
        # auth/slurm: slurmd fetches its config (configless) and signs with the cluster's key, as upstream
        # mounts it: /etc/slurm holds only slurm.key; slurm.conf comes from the controller.
        slurmd["volumeMounts"] = [{"name": SLURM_ETC_VOLUME, "mountPath": "/etc/slurm", "readOnly": True}]
    spec: Obj = copy.deepcopy(nodeset.spec.template.spec)
    if key_ref is not None and key_ref.name and key_ref.key:
        etc = {
            "name": SLURM_ETC_VOLUME,
            "projected": {
                "defaultMode": 0o600,
                "sources": [{"secret": {"name": key_ref.name, "items": [{"key": key_ref.key, "path": "slurm.key"}]}}],
            },
        }
        spec["volumes"] = [*(v for v in spec.get("volumes") or [] if v.get("name") != SLURM_ETC_VOLUME), etc]
    if claims := claim_volumes(nodeset, pod):  # a template's volume replaces one of the same name (StatefulSet)
        names = {v["name"] for v in claims}
        spec["volumes"] = [*(v for v in spec.get("volumes") or [] if v.get("name") not in names), *claims]
    if nodeset.spec.ssh is not None and nodeset.spec.ssh.enabled:
        _with_sshd(nodeset, slurmd, spec, annotations)
    user_containers = [c for c in spec.pop("containers", []) or [] if c.get("name") != wellknown.APP_SLURMD]
    spec.update(
        {
            "hostname": hostname,
            "subdomain": f"{nodeset.spec.controller_ref.name}-workers",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [_merge_container(slurmd, nodeset.spec.slurmd), *user_containers],
        }
    )
    ours = {t["key"] for t in daemonset.SLURMD_TOLERATIONS}
    tolerations = [t for t in spec.get("tolerations") or [] if t.get("key") not in ours]
    spec["tolerations"] = [*tolerations, *(dict(t) for t in daemonset.SLURMD_TOLERATIONS)]
    if node is not None:
        spec = daemonset.pin(spec, node)
    if index is not None and not nodeset.spec.oversubscribe_node:
        spec["affinity"] = _anti_affinity(spec.get("affinity"), nodeset)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(nodeset)],
        },
        "spec": spec,
    }


def ssh_config(nodeset: NodeSet) -> Obj:
    """A NodeSet's ConfigMap `<name>-ssh-config` (upstream's) with `ssh.enabled`: the workers' sshd_config."""
    name = _name(nodeset)
    extra = nodeset.spec.ssh.extra_sshd_config if nodeset.spec.ssh is not None else None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": ssh.config_name(name),
            "namespace": str(nodeset.metadata.get("namespace", "default")),
            "labels": selector_labels(nodeset),
            "ownerReferences": [owner_reference(nodeset)],
        },
        "data": {ssh.SSHD_CONFIG_FILE: ssh.sshd_config(extra, login=False)},
    }


def _with_sshd(nodeset: NodeSet, slurmd: Obj, spec: Obj, annotations: dict[str, str]) -> None:
    """`ssh.enabled`: sshd beside slurmd (`SSHD=1`, port 22 `ssh`), upstream's sshd_config and the `sssdConfRef`
    key at /etc/sssd/sssd.conf; the host keys are the pod's own, made at its start, as upstream's workers."""
    assert nodeset.spec.ssh is not None
    slurmd["env"] = [*slurmd["env"], dict(ssh.SSHD_ENV)]
    slurmd["ports"] = [*slurmd["ports"], {"name": "ssh", "containerPort": ssh.PORT, "protocol": "TCP"}]
    slurmd["volumeMounts"] = [
        *(slurmd.get("volumeMounts") or []),
        {
            "name": ssh.SSH_CONFIG_VOLUME,
            "mountPath": ssh.SSHD_CONFIG_PATH,
            "subPath": ssh.SSHD_CONFIG_FILE,
            "readOnly": True,
        },
        {"name": SSSD_CONF_VOLUME, "mountPath": SSSD_CONF_PATH, "subPath": "sssd.conf", "readOnly": True},
    ]
    ref = nodeset.spec.ssh.sssd_conf_ref
    items = [{"key": ssh.SSHD_CONFIG_FILE, "path": ssh.SSHD_CONFIG_FILE, "mode": 0o600}]
    volumes = [
        {"name": ssh.SSH_CONFIG_VOLUME, "projected": {"defaultMode": 0o600, "sources": [
            {"configMap": {"name": ssh.config_name(_name(nodeset)), "items": items}}]}},
        {"name": SSSD_CONF_VOLUME, "projected": {"defaultMode": 0o600, "sources": [
            {"secret": {"name": ref.name, "items": [{"key": ref.key, "path": "sssd.conf", "mode": 0o600}]}}]}},
    ]  # fmt: skip
    names = {v["name"] for v in volumes}
    spec["volumes"] = [*(v for v in spec.get("volumes") or [] if v.get("name") not in names), *volumes]
    annotations[ssh.ANNOTATION_SSHD_CONF_HASH] = ssh.config_hash(ssh_config(nodeset)["data"])


def claim_name(template: Obj, pod: str) -> str:
    """A pod's claim from a `volumeClaimTemplates` entry: `<template name>-<pod name>`, as a StatefulSet's."""
    return f"{(template.get('metadata') or {}).get('name', '')}-{pod}"


def build_claims(nodeset: NodeSet, pod: str) -> list[Obj]:
    """The PersistentVolumeClaims of `pod`, one per `volumeClaimTemplates` entry, labelled with the NodeSet's
    selector. With `persistentVolumeClaimRetentionPolicy.whenDeleted: Delete` the NodeSet owns them (the garbage
    collector deletes them with it); with `Retain` (the default) nothing does, so they outlive it."""
    namespace = str(nodeset.metadata.get("namespace", "default"))
    owned = nodeset.spec.persistent_volume_claim_retention_policy.when_deleted == "Delete"
    out = []
    for template in nodeset.spec.volume_claim_templates or []:
        meta = template.get("metadata") or {}
        labels = {**(meta.get("labels") or {}), **selector_labels(nodeset), wellknown.LABEL_NODESET_POD_NAME: pod}
        claim: Obj = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": claim_name(template, pod),
                "namespace": namespace,
                "labels": labels,
                "annotations": dict(meta.get("annotations") or {}),
            },
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        if owned:
            claim["metadata"]["ownerReferences"] = [{**owner_reference(nodeset), "controller": False}]
        out.append(claim)
    return out


def claim_volumes(nodeset: NodeSet, pod: str) -> list[Obj]:
    """The pod's volumes for its claims, named as the templates (the slurmd container's `volumeMounts` use them)."""
    return [
        {"name": (t.get("metadata") or {}).get("name", ""), "persistentVolumeClaim": {"claimName": claim_name(t, pod)}}
        for t in nodeset.spec.volume_claim_templates or []
    ]


def workers_pdb_name(controller: str) -> str:
    return f"{controller}-workers-pdb"


def workers_pdb(namespace: str, controller: str) -> Obj:
    """The shared PodDisruptionBudget of a Controller's NodeSet pods: none of the pods labelled `pod-protect`
    (a job runs on their Slurm node) may be evicted. `policy/v1beta1`, the version Kubernetes 1.20 serves."""
    return {
        "apiVersion": "policy/v1beta1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": workers_pdb_name(controller),
            "namespace": namespace,
            "labels": {wellknown.LABEL_CLUSTER: controller, wellknown.LABEL_COMPONENT: wellknown.COMPONENT_WORKER},
        },
        "spec": {
            "maxUnavailable": 0,
            "selector": {
                "matchLabels": {
                    wellknown.LABEL_APP: wellknown.APP_SLURMD,
                    wellknown.LABEL_CLUSTER: controller,
                    wellknown.LABEL_NODESET_POD_PROTECT: "true",
                }
            },
        },
    }


def owner_reference(nodeset: NodeSet) -> Obj:
    return {
        "apiVersion": nodeset.api_version,
        "kind": nodeset.kind,
        "name": _name(nodeset),
        "uid": nodeset.metadata.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _anti_affinity(affinity: Obj | None, nodeset: NodeSet) -> Obj:
    out = copy.deepcopy(affinity or {})
    anti = out.setdefault("podAntiAffinity", {})
    terms = anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", [])
    terms.append({"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": selector_labels(nodeset)}})
    return out
