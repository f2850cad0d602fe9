"""Which NodeSet pods a template change replaces now (upstream's `syncUpdate`, `docs/usage/nodeset-operations.md`).

A template change makes a new revision (`pods.revision_hash`, the `controller-revision-hash` label). With
`RollingUpdate` (the default) old-revision pods are condemned through the same drain-first scale-in
workflow, so an update waits for the jobs on each node:

* old pods that are not Ready go first, outside the budget (replacing them loses nothing);
* old pods already being replaced (a scale-in workflow holds them) stay condemned, so a restart or a new
  reconcile never flips them back;
* then healthy old pods in the scale-in order (idle nodes and earlier deadlines first), while the pods
  unavailable (not Ready, Ready for less than `minReadySeconds`, being replaced, or missing) stay within
  `maxUnavailable` (25 % of the desired pods, rounded up, at least 1).

`OnDelete` replaces only the pods someone deletes. `ScheduledUpdate` replaces, besides the old pods that are not
Ready, the old pods whose Slurm nodes are in its MAINT reservation's maintenance now (``maintenance``: the window
is open; ``scheduled_update``), through the same drain.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from slinky import wellknown
from slinky.operator import victims
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.validation import max_unavailable

Obj = dict[str, Any]


def revision_of(pod: Obj) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(wellknown.LABEL_CONTROLLER_REVISION_HASH, ""))


def held_by(pod: Obj) -> str:
    """The scale-in workflow that holds the pod (its cordon activity wrote its ID on it), or ""."""
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(wellknown.ANNOTATION_SCALE_IN_WORKFLOW) or "")


def in_flight(pod: Obj) -> bool:
    return bool(held_by(pod))


def is_ready(pod: Obj) -> bool:
    return victims.ready_since(pod) is not None


def available_in(pod: Obj, min_ready_seconds: int | None, now: dt.datetime) -> float | None:
    """Seconds until the pod counts as available (Ready for ``minReadySeconds``, as a StatefulSet's): 0 when it
    is, None when it is not Ready."""
    since = victims.ready_since(pod)
    if since is None:
        return None
    return max((min_ready_seconds or 0) - (now - since).total_seconds(), 0.0)


def is_available(pod: Obj, min_ready_seconds: int | None, now: dt.datetime) -> bool:
    return available_in(pod, min_ready_seconds, now) == 0.0


def update_victims(
    nodeset: NodeSet,
    pods: list[Obj],
    revision: str,
    desired: int,
    now: dt.datetime | None = None,
    maintenance: frozenset[str] = frozenset(),
) -> list[Obj]:
    """The old-revision pods among `pods` (the ones that stay after scale-in) to replace now, in order;
    `maintenance`: the uids of the pods whose Slurm nodes a ScheduledUpdate's open window holds."""
    strategy = nodeset.spec.update_strategy
    if strategy.type == "OnDelete":
        return []
    old = [p for p in pods if revision_of(p) != revision]
    if not old:
        return []
    if strategy.type == "ScheduledUpdate":
        return [p for p in old if not is_ready(p) or in_flight(p) or p["metadata"]["uid"] in maintenance]
    budget = max_unavailable(strategy.rolling_update.max_unavailable, desired)
    unhealthy = [p for p in old if not is_ready(p)]
    held = [p for p in old if is_ready(p) and in_flight(p)]
    when = now or dt.datetime.now(dt.UTC)
    min_ready = nodeset.spec.min_ready_seconds
    unavailable = sum(1 for p in pods if not is_available(p, min_ready, when) or in_flight(p))
    unavailable += max(desired - len(pods), 0)
    healthy = sorted((p for p in old if is_ready(p) and not in_flight(p)), key=victims.condemn_key)
    return [*unhealthy, *held, *healthy[: max(budget - unavailable, 0)]]
