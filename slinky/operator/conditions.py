"""Status conditions of the operator's objects, as Kubernetes keeps them: one entry per type, whose
transition time moves only when its status or reason does. Pure; the reconcilers and activities write them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slinky.clients.kube import rfc3339

Obj = dict[str, Any]
MESSAGE_LIMIT = 32768


def set_condition(
    conditions: Sequence[Obj], type_: str, status: str, reason: str, message: str, generation: int = 0
) -> list[Obj]:
    """``conditions`` with ``type_`` set; its transition time is kept while status and reason stay."""
    old = {c.get("type"): c for c in conditions}
    prev = old.get(type_)
    same = prev is not None and prev.get("status") == status and prev.get("reason") == reason
    new = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "lastTransitionTime": prev.get("lastTransitionTime") if same and prev else rfc3339(),
        "observedGeneration": generation,
    }
    return sorted([*(c for t, c in old.items() if t != type_), new], key=lambda c: str(c.get("type")))
