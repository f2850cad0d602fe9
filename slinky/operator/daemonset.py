"""DaemonSet mode (`scalingMode: DaemonSet`): one NodeSet pod per Kubernetes node that may run it.

A node is eligible when the pod would be scheduled there as a DaemonSet's pod is (upstream evaluates the
daemon predicates on a simulated pod): the template's `nodeSelector`, its required node affinity, and the
node's NoSchedule/NoExecute taints against the pod's tolerations. A cordoned node stays eligible (a
DaemonSet tolerates `unschedulable`); its Slurm node is drained by the cordon step instead.

The pod is pinned to its node with a required node affinity on `metadata.name` (what the DaemonSet
controller does), named `<nodeset>-<node>`, and its hostname (the Slurm node name) is the node's short name
or the node's `hostname-override` annotation. Pure functions; the reconciler does the I/O.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

from slinky import wellknown
from slinky.operator import slurm_state
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.models import SlurmNodeView

Obj = dict[str, Any]

_DNS_LABEL = re.compile(r"[^a-z0-9-]+")

SLURMD_TOLERATIONS: tuple[Obj, ...] = (
    {"key": wellknown.TAINT_NODESET_WORKER, "operator": "Exists", "effect": "NoExecute"},
    {"key": wellknown.TAINT_MANAGED_NODE, "operator": "Exists", "effect": "NoExecute"},
)
"""What every slurmd pod tolerates beside its template's: the nodes reserved for NodeSet pods, and the bridge's
``managed-node`` taint, which the bridge's node sync puts on every Kubernetes node that is a Slurm node of the same
name: the node a DaemonSet-mode slurmd pod makes one. Without it the bridge evicted that pod, its Slurm node went,
the taint went, the pod came back: a cycle every 10 s (seen in make test)."""


def short_name(node: Obj) -> str:
    """The node's short name: its name up to the first dot."""
    return str(node["metadata"]["name"]).split(".", 1)[0]


def hostname_for(node: Obj) -> str:
    """The Slurm node name of the node's pod: the `hostname-override` annotation, else the short name."""
    override = ((node.get("metadata") or {}).get("annotations") or {}).get(wellknown.ANNOTATION_NODE_HOSTNAME_OVERRIDE)
    return dns_label(str(override or short_name(node)))


def dns_label(text: str) -> str:
    """A valid pod hostname: lower case, `[a-z0-9-]`, at most 63 characters."""
    return _DNS_LABEL.sub("-", text.lower())[:63].strip("-")


def pod_name(nodeset: str, node: Obj) -> str:
    """`<nodeset>-<node short name>`, bounded to a DNS label's 63 characters."""
    return dns_label(f"{nodeset}-{short_name(node)}")


def target_node(pod: Obj) -> str:
    """The node a DaemonSet-mode pod is pinned to (its `metadata.name` node affinity), else its nodeName."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and field.get("values"):
                return str(field["values"][0])
    return str((pod.get("spec") or {}).get("nodeName") or "")


def pin(spec: Obj, node: str) -> Obj:
    """The pod spec with a required node affinity to `node` (kept beside the user's own terms: each of the
    user's terms gets the pin added, so the pin and the user's rule must both hold)."""
    out = copy.deepcopy(spec)
    affinity = out.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    pinned = {"key": "metadata.name", "operator": "In", "values": [node]}
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [
        {**t, "matchFields": [*[f for f in t.get("matchFields") or [] if f.get("key") != "metadata.name"], pinned]}
        for t in terms
    ]
    return out


# ------------------------------------------------------------------------------------------ eligibility
def _requirement(values: dict[str, str], req: Obj) -> bool:
    key, op, wanted = req.get("key", ""), req.get("operator", ""), [str(v) for v in req.get("values") or []]
    have = values.get(key)
    if op == "In":
        return have is not None and have in wanted
    if op == "NotIn":
        return have is None or have not in wanted
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and wanted:
        try:
            left, right = int(have), int(wanted[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def _term_matches(node: Obj, term: Obj) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    fields = {"metadata.name": str(node["metadata"]["name"])}
    exprs = term.get("matchExpressions") or []
    matches = term.get("matchFields") or []
    if not exprs and not matches:
        return False  # an empty term selects nothing (as the scheduler reads it)
    return all(_requirement(labels, r) for r in exprs) and all(_requirement(fields, r) for r in matches)


def _tolerated(taint: Obj, tolerations: list[Obj]) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol.get("key") == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def eligible(nodeset: NodeSet, node: Obj) -> bool:
    """Would the NodeSet's pod run on this node (nodeSelector, required node affinity, taints)?"""
    template: Obj = nodeset.spec.template.spec or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (template.get("nodeSelector") or {}).items()):
        return False
    affinity = (template.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms")
    if terms and not any(_term_matches(node, t) for t in terms):
        return False
    tolerations = [
        *(template.get("tolerations") or []),
        *SLURMD_TOLERATIONS,
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    ]
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(taint, tolerations):
            return False
    return True


def plan(nodeset: NodeSet, nodes: list[Obj], pods: list[Obj]) -> tuple[list[Obj], list[Obj]]:
    """(eligible nodes without a pod, pods to remove: on a node that is no longer eligible or gone, or a second
    pod on one node). `pods` are the NodeSet's live pods."""
    wanted = {n["metadata"]["name"]: n for n in nodes if eligible(nodeset, n)}
    seen: set[str] = set()
    extra: list[Obj] = []
    for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", "")):
        node = target_node(pod)
        if node not in wanted or node in seen:
            extra.append(pod)
        else:
            seen.add(node)
    missing = [n for name, n in sorted(wanted.items()) if name not in seen]
    return missing, extra


def defunct_nodes(
    nodeset_feature: str,
    views: Mapping[str, SlurmNodeView],
    pod_hostnames: Iterable[str],
    nodes: Iterable[Obj],
) -> list[str]:
    """`pruneSlurmNodeRecords: NodeNotFound` (DaemonSet mode, upstream's `GetDefunctNodesForNodeSet`): the Slurm
    nodes of the NodeSet (its feature) that no pod of it holds and no Kubernetes node maps to any more (a node
    deleted while the operator was away: its pod went without its preStop), and that hold no job."""
    held = set(pod_hostnames)
    mapped = {hostname_for(n) for n in nodes}
    return sorted(
        name
        for name, view in views.items()
        if view.exists
        and nodeset_feature in view.features
        and name not in held
        and name not in mapped
        and not slurm_state.is_busy(view.states)
    )
