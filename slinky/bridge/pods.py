"""Pure predicates on pod API dicts, shared by the pod watcher and the activities."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def is_deleting(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def node_name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def is_gone(pod: Mapping[str, Any] | None) -> bool:
    """True when the pod runs nowhere: deleted, terminal, unbound while deleting, or stopped by its node.

    A node (kubelet) confirms that a deleted pod's containers stopped by deleting it with a zero grace
    period; with the bridge's finalizer the object stays, showing ``deletionGracePeriodSeconds: 0``.
    Cancelling the Slurm job only after this point keeps the allocation until the pod really stopped
    (upstream slurm-bridge #16 released it while the pod was still terminating).
    """
    if pod is None or is_terminal(pod):
        return True
    if is_deleting(pod):
        meta = pod.get("metadata") or {}
        return not node_name(pod) or meta.get("deletionGracePeriodSeconds") == 0
    return False
