"""A NodeSet's status: replica and Slurm node counts, selector, revision, pins, and its conditions
(``SpecValid``, ``ControllerReady``, ``FieldsSupported``, ``ScaleIn``, ``PodsHealthy``, ``SlurmdRegistered``),
written only when something changed.
A condition that turns False posts one Warning Event naming what to fix (docs/operator.md)."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterable
from typing import Any

from slinky import wellknown
from slinky.clients.errors import KubeNotFound
from slinky.operator import pod_health, pod_sync, slurm_state, updates
from slinky.operator import pods as builder
from slinky.operator import scheduled_update as su
from slinky.operator.api.nodeset import NodeSet
from workers.operator.nodeset.pods import is_terminating
from workers.operator.nodeset.poll import ControllerPoll, hostname_of
from workers.operator.runtime import Runtime, set_condition

Obj = dict[str, Any]
Condition = tuple[str, str, str, str]
"""(type, status, reason, message)."""
QUIET_FALSE = frozenset({(su.CONDITION, r) for r in ("WaitingForNodes", "Creating", "Rescheduling", "NotExists")})
"""False conditions that are a state, not a problem: no Warning Event."""


def nodeset_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/apis/slinky.slurm.net/v1beta1/namespaces/{namespace}/nodesets/{name}"
    return f"{path}/{sub}" if sub else path


def status_counts(
    nodeset: NodeSet, live: list[Obj], poll: ControllerPoll | None, revision: str, desired: int | None
) -> Obj:
    """The counted part of the status, from the NodeSet's live pods and the Controller's poll."""
    nodes = poll.nodes if poll else {}
    states = [nodes[h].states for p in live if (h := hostname_of(p)) in nodes]
    ready = sum(1 for p in live if updates.is_ready(p))
    now = dt.datetime.now(dt.UTC)
    available = sum(1 for p in live if updates.is_available(p, nodeset.spec.min_ready_seconds, now))
    if desired is None:
        desired = nodeset.spec.replicas if nodeset.spec.replicas is not None else 1
    status: Obj = {
        "replicas": len(live),
        "readyReplicas": ready,
        "availableReplicas": available,
        "updatedReplicas": sum(
            1
            for p in live
            if revision and p["metadata"].get("labels", {}).get(wellknown.LABEL_CONTROLLER_REVISION_HASH) == revision
        ),
        "desired": desired,
        "selector": builder.selector_string(nodeset),
        "observedGeneration": nodeset.metadata.get("generation", 0),
        **slurm_state.counts(states),
    }
    status["unavailableReplicas"] = max(status["desired"] - status["readyReplicas"], 0)
    if revision:
        status["nodeSetHash"] = revision
    return status


FIELDS_SUPPORTED: Condition = ("FieldsSupported", "True", "Supported", "every field set is reconciled")
"""Every field of upstream's NodeSet is built (issue 31); the condition stays, as the Controller's and the
LoginSet's do, for a field upstream adds later."""


def informational(live: list[Obj], poll: ControllerPoll) -> list[Condition]:
    """The conditions that tell, never warn: which pods a scale-in holds, and that every field is reconciled."""
    held = [(p["metadata"]["name"], poll.nodes.get(hostname_of(p))) for p in live if updates.in_flight(p)]
    return [pod_sync.scale_in_condition(held), FIELDS_SUPPORTED]


async def write_status(
    runtime: Runtime,
    raw: Obj,
    nodeset: NodeSet,
    owned: Iterable[Obj],
    *,
    revision: str = "",
    poll: ControllerPoll | None = None,
    condition: Condition | None = None,
    desired: int | None = None,
    pins: dict[str, str] | None = None,
    more: Iterable[Condition] = (),
) -> None:
    """Write the status of ``raw`` with ``condition`` and ``more`` set (and, with a poll, the informational ones)."""
    live = [p for p in owned if not is_terminating(p)]
    status = status_counts(nodeset, live, poll, revision, desired)
    if pins is not None:
        status["ordinalToNode"] = pins
    wanted = informational(live, poll) if poll is not None else []
    wanted.append(pod_health.condition(live))  # the kubelet's word, whether or not Slurm answers
    wanted.extend(more)
    if condition:
        wanted.append(condition)
        if condition[0] == "ControllerReady" or condition[1] == "True":
            wanted.append(("SpecValid", "True", "Valid", "the spec is valid"))
    if wanted:
        status["conditions"] = _conditions(runtime, raw, nodeset, wanted)
    current = raw.get("status") or {}
    if all(current.get(k) == v for k, v in status.items()):
        return
    meta = raw["metadata"]
    with contextlib.suppress(KubeNotFound):
        await runtime.kube.patch(nodeset_path(meta["namespace"], meta["name"], "status"), {"status": status})


def _conditions(runtime: Runtime, raw: Obj, nodeset: NodeSet, wanted: list[Condition]) -> list[Obj]:
    """The NodeSet's conditions with ``wanted`` set, each keeping its time while its status does not change; a
    problem that turns False posts a Warning Event once, and is told again if it comes back after clearing."""
    generation = int(nodeset.metadata.get("generation") or 0)
    conditions: list[Obj] = list((raw.get("status") or {}).get("conditions") or [])
    before = {c.get("type"): c for c in conditions}
    if not su.is_scheduled(nodeset):  # ReservationCreated is about a ScheduledUpdate only (upstream drops it too)
        conditions = [c for c in conditions if c.get("type") != su.CONDITION]
    for type_, status, reason, message in wanted:
        conditions = set_condition(conditions, type_, status, reason, message, generation)
        if type_ == pod_sync.SCALE_IN_CONDITION or (type_, reason) in QUIET_FALSE:
            continue
        if status == "False":
            runtime.warn_once(raw, reason, message)
        elif (prev := before.get(type_)) is not None and prev.get("status") == "False":
            runtime.forget_warning(raw, str(prev.get("reason")))
    return conditions
