"""What the operator keeps on each NodeSet pod from its Slurm node, and how a cordon travels to Slurm.

Pure rules over the pod, its Slurm node view and its Kubernetes node (upstream's `SlurmDeadline`, `Cordon`
and `syncStatus` steps, `docs/concepts/nodeset-controller.md`):

* `pod-deadline` annotation: when the last job on the node reaches its time limit (`max(start + limit)`);
  removed when no job runs. The scale-in order deletes pods with no or an earlier deadline first.
* `pod-protect` label: "true" while a job holds the node; the shared PodDisruptionBudget (`maxUnavailable:
  0` over that label) then refuses evictions, so a `kubectl drain` of the Kubernetes node waits for the job.
* the 15 `SlurmNodeState*` pod conditions, the Drain condition carrying the reason.
* cordon (one way, Kubernetes -> Slurm): a cordoned Kubernetes node or a `pod-cordon=true` pod drains its
  Slurm node with a `slurm-operator: ` reason; otherwise an operator-owned drain is undone. A reason that
  is not the operator's, or a node DOWN and not responding, is never touched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from slinky import wellknown
from slinky.operator import slurm_state
from slinky.operator.models import SlurmNodeView

Obj = dict[str, Any]

REASON_MAX = 256
"""Upstream bounds a propagated reason; Slurm stores it whole, `sinfo -R` shows it on one line."""
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]+")


def pod_deadline(view: SlurmNodeView | None) -> str | None:
    """The `pod-deadline` value for the node's jobs, or None when none runs (or none has a time limit)."""
    if view is None or not view.jobs or not view.deadline:
        return None
    return view.deadline


def protected(view: SlurmNodeView | None) -> bool:
    """A job holds the node: the pod may not be evicted."""
    return view is not None and (bool(view.jobs) or slurm_state.is_busy(view.states))


def metadata_patch(pod: Obj, view: SlurmNodeView | None, *, protect: bool = True) -> Obj | None:
    """The merge patch that brings the pod's deadline annotation and protect label up to date, or None.
    `protect=False` (the NodeSet's `workloadDisruptionProtection: false`) never labels the pod."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    patch: Obj = {}
    deadline = pod_deadline(view)
    if annotations.get(wellknown.ANNOTATION_POD_DEADLINE) != deadline:
        patch.setdefault("annotations", {})[wellknown.ANNOTATION_POD_DEADLINE] = deadline
    label = "true" if protect and protected(view) else None
    if labels.get(wellknown.LABEL_NODESET_POD_PROTECT) != label:
        patch.setdefault("labels", {})[wellknown.LABEL_NODESET_POD_PROTECT] = label
    return {"metadata": patch} if patch else None


def conditions_patch(pod: Obj, view: SlurmNodeView | None, now: str) -> list[Obj] | None:
    """The 15 `SlurmNodeState*` conditions for the node's current state, each keeping its transition time
    when its status did not change; None when they are already what the pod shows (or there is no node)."""
    if view is None or not view.exists:
        return None
    current = {
        c.get("type"): c
        for c in (pod.get("status") or {}).get("conditions") or []
        if str(c.get("type", "")).startswith(slurm_state.CONDITION_PREFIX)
    }
    wanted = slurm_state.pod_conditions(view.states, view.reason, now)
    out: list[Obj] = []
    changed = False
    for cond in wanted:
        old = current.get(cond["type"])
        if old is not None and old.get("status") == cond["status"]:
            cond = {**cond, "lastTransitionTime": old.get("lastTransitionTime", now)}
        if old is None or any(old.get(k) != cond.get(k) for k in ("status", "message")):
            changed = True
        out.append(cond)
    return out if changed else None


# ------------------------------------------------------------------------------------------ cordon
def node_cordoned(node: Obj | None) -> bool:
    return bool(node and (node.get("spec") or {}).get("unschedulable"))


def sanitize_reason(text: str) -> str:
    """One printable line, bounded (a node annotation is user input that ends up in slurm.conf tooling)."""
    return _UNPRINTABLE.sub(" ", text).strip()[: REASON_MAX - len(wellknown.OPERATOR_REASON_PREFIX)]


def node_cordon_reason(node: Obj) -> str:
    """`slurm-operator: <the node's node-cordon-reason annotation>`, or a default naming the node."""
    meta = node.get("metadata") or {}
    custom = sanitize_reason((meta.get("annotations") or {}).get(wellknown.ANNOTATION_NODE_CORDON_REASON, ""))
    text = custom or f"Kubernetes node ({meta.get('name', '')}) is cordoned"
    return wellknown.OPERATOR_REASON_PREFIX + text


def pod_cordon_reason(namespace: str, pod: str) -> str:
    return f"{wellknown.OPERATOR_REASON_PREFIX}Pod ({namespace}/{pod}) is cordoned"


@dataclass(frozen=True)
class CordonAction:
    """What the cordon step does to the pod's Slurm node."""

    kind: Literal["none", "drain", "undrain"]
    reason: str = ""
    why: str = ""


def cordon_action(pod: Obj, view: SlurmNodeView | None, node: Obj | None) -> CordonAction:
    """Upstream's `syncCordon` for a pod that no scale-in or update holds (those drain on their own)."""
    if view is None or not view.exists:
        return CordonAction("none", why="no Slurm node")
    flags = set(view.states)
    if view.reason and not slurm_state.owns_reason(view.reason):
        return CordonAction("none", why="the drain reason is not the operator's")
    if "DOWN" in flags and "NOT_RESPONDING" in flags:
        return CordonAction("none", why="the node is down and not responding")
    draining = slurm_state.is_draining_or_drained(flags)
    meta = pod.get("metadata") or {}
    if node_cordoned(node):
        assert node is not None
        reason = node_cordon_reason(node)
    elif ((meta.get("annotations") or {}).get(wellknown.ANNOTATION_POD_CORDON)) == "true":
        reason = pod_cordon_reason(meta.get("namespace", ""), meta.get("name", ""))
    else:
        if draining and view.reason:
            return CordonAction("undrain", why="neither the pod nor its Kubernetes node is cordoned")
        return CordonAction("none", why="not cordoned, not drained")
    if draining and view.reason == reason:
        return CordonAction("none", reason=reason, why="already drained for this reason")
    return CordonAction("drain", reason=reason, why="cordoned")


# ------------------------------------------------------------------------------------------ NodeSet condition
SCALE_IN_CONDITION = "ScaleInProgress"
"""Ours (not upstream's): why a NodeSet is not yet at its size, in `kubectl get nodeset -o yaml`."""


def scale_in_condition(held: list[tuple[str, SlurmNodeView | None]]) -> tuple[str, str, str, str]:
    """`(type, status, reason, message)` from the pods a scale-in holds, each with its node's view: True with
    `WaitingForJobs` (naming the jobs and until when) or `Draining`; False with `NoScaleIn` when none runs."""
    if not held:
        return (SCALE_IN_CONDITION, "False", "NoScaleIn", "no pod is being drained")
    parts = []
    waiting = False
    for pod, view in sorted(held, key=lambda item: item[0]):
        if view is not None and view.jobs:
            waiting = True
            until = f" (time limit reached {view.deadline})" if view.deadline else ""
            parts.append(f"{pod} waits for jobs {view.jobs} on Slurm node {view.name}{until}")
        else:
            parts.append(f"{pod} is draining")
    return (SCALE_IN_CONDITION, "True", "WaitingForJobs" if waiting else "Draining", "; ".join(parts))
