"""ScheduledUpdate (upstream 1.2.0): a Slurm MAINT reservation over a NodeSet's nodes, and the pods it lets go.

Pure functions: the reservation a NodeSet's `spec.updateStrategy.scheduledUpdate` asks for (upstream's name
`SlurmOperatorMaint-<nodeset>`, flags `MAINT,IGNORE_JOBS` then the user's, user `slurm`), the ID of the workflow
that keeps it (one per NodeSet and schedule: a changed schedule is a new window), the pods whose Slurm nodes are
under it now (they are replaced through the drain-first scale-in), and the `ReservationCreated` condition
from the workflow's `status` query (docs/operator.md, "ScheduledUpdate").
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from collections.abc import Iterable, Mapping
from typing import Final

from slinky.operator import slurm_state
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.models import (
    ControllerKey,
    ReservationRef,
    ReservationSpec,
    ScheduledUpdateStatus,
    SlurmNodeView,
)
from slinky.operator.tokens import parse_duration

RESERVATION_PREFIX: Final = "SlurmOperatorMaint-"
BASE_FLAGS: Final = ("MAINT", "IGNORE_JOBS")
CONDITION: Final = "ReservationCreated"
WORKFLOW_PREFIX: Final = "nodeset-scheduledupdate"

Condition = tuple[str, str, str, str]


def reservation_name(nodeset: str) -> str:
    return RESERVATION_PREFIX + nodeset


def is_scheduled(nodeset: NodeSet) -> bool:
    return nodeset.spec.update_strategy.type == "ScheduledUpdate"


def start_of(nodeset: NodeSet) -> int:
    """`startTime` as UNIX seconds (RFC 3339; the validation refuses a ScheduledUpdate without it)."""
    text = nodeset.spec.update_strategy.scheduled_update.start_time or ""
    when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp())


def minutes_of(nodeset: NodeSet) -> int:
    """`duration` in Slurm's whole minutes, rounded up (the webhook refuses less than 1m)."""
    field = "spec.updateStrategy.scheduledUpdate.duration"
    seconds = parse_duration(nodeset.spec.update_strategy.scheduled_update.duration, field)
    return max(math.ceil(seconds / 60), 1)


def flags_of(nodeset: NodeSet) -> list[str]:
    out = list(BASE_FLAGS)
    for flag in nodeset.spec.update_strategy.scheduled_update.flags or []:
        if (upper := flag.strip().upper()) and upper not in out:
            out.append(upper)
    return out


def schedule_key(nodeset: NodeSet) -> str:
    """What makes a window: start, length and flags (a change of any of them is a new window)."""
    text = f"{start_of(nodeset)}|{minutes_of(nodeset)}|{','.join(flags_of(nodeset))}"
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def workflow_id(namespace: str, name: str, uid: str, key: str) -> str:
    return f"{WORKFLOW_PREFIX}/{namespace}/{name}/{uid}/{key}"


def spec_for(nodeset: NodeSet, controller: ControllerKey, nodes: Iterable[str]) -> ReservationSpec:
    name = str(nodeset.metadata.get("name"))
    return ReservationSpec(
        ref=ReservationRef(controller=controller, name=reservation_name(name)),
        start=start_of(nodeset),
        minutes=minutes_of(nodeset),
        flags=flags_of(nodeset),
        nodes=sorted(set(nodes)),
    )


def under_maintenance(views: Mapping[str, SlurmNodeView], reservation: str) -> frozenset[str]:
    """The Slurm nodes in the reservation's maintenance now (Slurm marks them `MAINTENANCE` while it is active),
    as upstream's `GetPodsUnderReservation`."""
    return frozenset(
        name for name, view in views.items() if "MAINTENANCE" in view.states and view.reservation == reservation
    )


def condition(status: ScheduledUpdateStatus | None, reservation: str) -> Condition:
    """`ReservationCreated` as upstream names it: True while the reservation exists in Slurm."""
    if status is None:
        message = f"no Slurm node of this NodeSet is registered yet: {reservation} is made once one is"
        return (CONDITION, "False", "WaitingForNodes", message)
    nodes = ",".join(status.nodes)
    window = f"from {slurm_state.utc_text(status.start)} to {slurm_state.utc_text(status.end)}"
    phase = status.phase
    if phase == "reserving":
        return (CONDITION, "False", "Creating", f"creating Slurm reservation {reservation} over {nodes} {window}")
    if phase == "waiting":
        message = f"Slurm reservation {reservation} (MAINT) over {nodes} {window}; the window has not opened yet"
        return (CONDITION, "True", "Created", message)
    if phase == "open":
        message = (
            f"Slurm reservation {reservation} over {nodes} {window}: the window is open; pods of an old revision "
            "whose nodes are in maintenance are drained and replaced"
        )
        return (CONDITION, "True", "Created", message)
    if phase == "skipped":
        return (CONDITION, "False", "StartTimePassed", status.message)
    if phase == "refused":
        return (CONDITION, "False", "Refused", status.message)
    return (CONDITION, "False", "NotExists", status.message or f"the window {window} ended")
