"""Which NodeSet pods go first on scale-in: upstream's nine-key order (`docs/usage/nodeset-operations.md`).

The first difference decides: unassigned before assigned; Pending before Unknown before Running; not-ready
before ready; lower `pod-deletion-cost`; earlier `pod-deadline` (a pod without one runs no job, so it goes
first); cordoned before uncordoned; higher ordinal; more recently ready; newer.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from slinky import wellknown

Obj = dict[str, Any]

_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _time(text: str | None) -> dt.datetime:
    if not text:
        return _EPOCH
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return _EPOCH


def ready_since(pod: Obj) -> dt.datetime | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            return _time(cond.get("lastTransitionTime"))
    return None


def deletion_cost(pod: Obj) -> int:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(wellknown.ANNOTATION_POD_DELETION_COST)
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0


def is_cordoned(pod: Obj) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return annotations.get(wellknown.ANNOTATION_POD_CORDON) == "true"


def ordinal(pod: Obj) -> int:
    raw = ((pod.get("metadata") or {}).get("labels") or {}).get(wellknown.LABEL_NODESET_POD_INDEX, "")
    return int(raw) if str(raw).isdigit() else -1


def condemn_key(pod: Obj, cordoned: frozenset[str] = frozenset()) -> tuple[Any, ...]:
    """Sort key: sorted(pods, key=condemn_key) lists the pods to delete first at the front. `cordoned`: uids
    of pods that count as cordoned without the annotation (their Kubernetes node is cordoned)."""
    meta = pod.get("metadata") or {}
    ready = ready_since(pod)
    deadline = _time((meta.get("annotations") or {}).get(wellknown.ANNOTATION_POD_DEADLINE))
    return (
        bool((pod.get("spec") or {}).get("nodeName")),
        _PHASE_RANK.get((pod.get("status") or {}).get("phase", ""), 0),
        ready is not None,
        deletion_cost(pod),
        deadline,
        not (is_cordoned(pod) or meta.get("uid") in cordoned),
        -ordinal(pod),
        -(ready or _EPOCH).timestamp(),
        -_time(meta.get("creationTimestamp")).timestamp(),
    )


def condemned(pods: list[Obj], keep: int, cordoned: frozenset[str] = frozenset()) -> list[Obj]:
    """The pods beyond the `keep` that should stay, in the order they go."""
    if keep >= len(pods):
        return []
    ordered = sorted(pods, key=lambda p: condemn_key(p, cordoned))
    return ordered[: len(pods) - max(keep, 0)]
