"""Scale-in order: upstream's nine keys, the first difference decides."""

from __future__ import annotations

from typing import Any

from slinky import wellknown
from slinky.operator.victims import condemned


def pod(name: str, ordinal: int, **kw: Any) -> dict[str, Any]:
    annotations = {}
    if "cost" in kw:
        annotations[wellknown.ANNOTATION_POD_DELETION_COST] = str(kw["cost"])
    if "deadline" in kw:
        annotations[wellknown.ANNOTATION_POD_DEADLINE] = kw["deadline"]
    if kw.get("cordon"):
        annotations[wellknown.ANNOTATION_POD_CORDON] = "true"
    conditions = []
    if kw.get("ready", True):
        conditions.append(
            {"type": "Ready", "status": "True", "lastTransitionTime": kw.get("ready_at", "2026-01-01T00:00:00Z")}
        )
    return {
        "metadata": {
            "name": name,
            "labels": {wellknown.LABEL_NODESET_POD_INDEX: str(ordinal)},
            "annotations": annotations,
            "creationTimestamp": kw.get("created", "2026-01-01T00:00:00Z"),
        },
        "spec": {"nodeName": None if kw.get("unassigned") else "n1"},
        "status": {"phase": kw.get("phase", "Running"), "conditions": conditions},
    }


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_each_key_in_turn() -> None:
    assert names(condemned([pod("a", 0), pod("b", 1, unassigned=True)], 1)) == ["b"]
    assert names(condemned([pod("a", 0), pod("b", 1, phase="Pending")], 1)) == ["b"]
    assert names(condemned([pod("a", 0), pod("b", 1, phase="Unknown")], 1)) == ["b"]
    assert names(condemned([pod("a", 1), pod("b", 0, ready=False)], 1)) == ["b"]
    assert names(condemned([pod("a", 1, cost=5), pod("b", 0, cost=-1)], 1)) == ["b"]
    busy_late = pod("a", 1, deadline="2026-06-01T00:00:00Z")
    busy_soon = pod("b", 0, deadline="2026-05-01T00:00:00Z")
    assert names(condemned([busy_late, busy_soon], 1)) == ["b"]
    assert names(condemned([busy_soon, pod("idle", 0)], 1)) == ["idle"], "no deadline: no job, goes first"
    assert names(condemned([pod("a", 1), pod("b", 0, cordon=True)], 1)) == ["b"]
    assert names(condemned([pod("a", 0), pod("b", 3), pod("c", 2)], 1)) == ["b", "c"]
    same = {"ordinal": 0}
    older = pod("a", same["ordinal"], ready_at="2026-01-01T00:00:00Z")
    newer = pod("b", same["ordinal"], ready_at="2026-02-01T00:00:00Z")
    assert names(condemned([older, newer], 1)) == ["b"]
    first = pod("a", 0, ready=False, created="2026-01-01T00:00:00Z")
    second = pod("b", 0, ready=False, created="2026-03-01T00:00:00Z")
    assert names(condemned([first, second], 1)) == ["b"]


def test_keep_bounds() -> None:
    three = [pod("a", 0), pod("b", 1), pod("c", 2)]
    assert condemned(three, 3) == [] and condemned(three, 5) == []
    assert names(condemned(three, 0)) == ["c", "b", "a"]
