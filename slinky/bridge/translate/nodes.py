"""Kubernetes nodes a pod may not run on, as Slurm node names for ``excluded_nodes``.

Slurm picks the node, but only among nodes that Kubernetes would also accept: those that match the
pod's ``nodeSelector`` and required node affinity, and whose NoSchedule/NoExecute taints the pod
tolerates. The rest are excluded. The result is never a ``required_nodes`` list, because a
required node that goes away fails every job naming it (upstream slurm-bridge #43).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final

from slinky import wellknown

HARD_TAINT_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
TAINT_UNSCHEDULABLE: Final = "node.kubernetes.io/unschedulable"
"""The taint kube-scheduler implies for a cordoned node (``spec.unschedulable``)."""
_IGNORED_TAINTS: Final = frozenset({wellknown.TAINT_MANAGED_NODE})
"""The bridge's own taint only keeps other schedulers away; the bridge places pods there."""


def slurm_node_name(node: Mapping[str, Any]) -> str:
    """The Slurm NodeName of a Kubernetes node: its slurm-nodename label, else its name."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return str(labels.get(wellknown.LABEL_SLURM_NODENAME) or metadata.get("name", ""))


def _match_expression(expression: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key = expression.get("key", "")
    operator = expression.get("operator")
    wanted = expression.get("values") or []
    present = key in values
    value = values.get(key)
    if operator == "In":
        return present and value in wanted
    if operator == "NotIn":
        return not present or value not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(wanted) != 1:
            return False
        try:
            have, bound = int(str(value)), int(wanted[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False  # An unknown operator matches nothing, as in Kubernetes.


def _match_term(term: Mapping[str, Any], labels: Mapping[str, str], fields: Mapping[str, str]) -> bool:
    expressions = term.get("matchExpressions") or []
    field_expressions = term.get("matchFields") or []
    if not expressions and not field_expressions:
        return False  # An empty term matches no node.
    return all(_match_expression(e, labels) for e in expressions) and all(
        _match_expression(e, fields) for e in field_expressions
    )


def matches_node_selection(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether the node passes the pod's nodeSelector and required node affinity."""
    spec = pod.get("spec") or {}
    metadata = node.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    selector: Mapping[str, str] = spec.get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in selector.items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        return True
    fields = {"metadata.name": str(metadata.get("name", ""))}
    return any(_match_term(term, labels, fields) for term in terms)  # Terms are ORed.


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"  # An empty key with Exists tolerates everything.
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def _hard_taints(node: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    spec = node.get("spec") or {}
    taints = list(spec.get("taints") or [])
    if spec.get("unschedulable") and not any(t.get("key") == TAINT_UNSCHEDULABLE for t in taints):
        taints.append({"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule"})
    return [t for t in taints if t.get("effect") in HARD_TAINT_EFFECTS and t.get("key") not in _IGNORED_TAINTS]


def tolerates_node(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether the pod tolerates every NoSchedule/NoExecute taint of the node (cordon included)."""
    tolerations: Sequence[Mapping[str, Any]] = (pod.get("spec") or {}).get("tolerations") or []
    return all(any(_tolerates(t, taint) for t in tolerations) for taint in _hard_taints(node))


def node_fits(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether Kubernetes would let the pod run on the node (selection and taints)."""
    return matches_node_selection(pod, node) and tolerates_node(pod, node)


def placement_key(pod: Mapping[str, Any]) -> str:
    """All that :func:`node_fits` reads of a pod, as text: pods with the same key fit the same nodes (a gang's
    members mostly share one, so its nodes are checked once, not once per member)."""
    spec = pod.get("spec") or {}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return json.dumps([spec.get("nodeSelector"), required, spec.get("tolerations")], sort_keys=True)


def excluded_nodes(
    pod: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    *,
    slurm_nodes: Collection[str] | None = None,
) -> tuple[str, ...]:
    """Sorted Slurm names of the nodes the pod does not fit.

    Args:
        pod: The pod, as an API dict.
        nodes: Kubernetes nodes, as API dicts.
        slurm_nodes: When given, only these Slurm node names are reported, so the list never
            names a node Slurm does not know.
    """
    names = {slurm_node_name(node) for node in nodes if not node_fits(pod, node)}
    if slurm_nodes is not None:
        names &= set(slurm_nodes)
    names.discard("")
    return tuple(sorted(names))
