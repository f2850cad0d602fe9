"""Slurm node state as the operator reads it: drained or not, who owns the reason, pod conditions.

Upstream projects a Slurm node's state onto its pod as 15 `SlurmNodeState*` conditions: exactly one base
state is True, and one condition per flag (the Drain condition carries the Slurm reason). Pure functions
over the node's state flags, so workflows and the reconciler share them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from slinky import hostlist, wellknown

BASE_STATES = ("ALLOCATED", "DOWN", "ERROR", "FUTURE", "IDLE", "MIXED", "UNKNOWN")
FLAG_STATES = (
    "COMPLETING",
    "DRAIN",
    "FAIL",
    "INVALID",
    "INVALID_REG",
    "MAINTENANCE",
    "NOT_RESPONDING",
    "UNDRAIN",
)
CONDITION_PREFIX = "SlurmNodeState"
BUSY = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


def condition_type(state: str) -> str:
    """`INVALID_REG` -> `SlurmNodeStateInvalidReg`."""
    return CONDITION_PREFIX + "".join(part.capitalize() for part in state.split("_"))


def is_busy(states: Iterable[str]) -> bool:
    return bool(BUSY & set(states))


def is_draining_or_drained(states: Iterable[str]) -> bool:
    flags = set(states)
    return "DRAIN" in flags and "UNDRAIN" not in flags


def is_drained(states: Iterable[str]) -> bool:
    """DRAIN set, no UNDRAIN, and no job holds the node (upstream's `IsNodeDrained`)."""
    flags = set(states)
    return is_draining_or_drained(flags) and not is_busy(flags)


def owns_reason(reason: str) -> bool:
    """True when the operator set this reason; any other reason is an admin's and is never touched."""
    return reason.startswith(wellknown.OPERATOR_REASON_PREFIX)


def forgettable(states: Iterable[str], reason: str, *, replaced: bool) -> bool:
    """May the operator delete the Slurm node of a NodeSet pod that is gone? Not while a job holds it, not when
    an admin's reason is on it, not when a new pod of the same name runs again (its slurmd owns the record).
    slurmctld's own "Not responding" counts as no reason: a slurmd that re-registered while it was stopping
    leaves such a record behind once it is gone."""
    if replaced or is_busy(states):
        return False
    return not reason or owns_reason(reason) or reason.startswith("Not responding")


def scale_in_reason(namespace: str, pod: str) -> str:
    return f"{wellknown.OPERATOR_REASON_PREFIX}Pod ({namespace}/{pod}) is pending termination for scale-in"


def update_reason(namespace: str, pod: str) -> str:
    return f"{wellknown.OPERATOR_REASON_PREFIX}Pod ({namespace}/{pod}) is pending termination for update"


RESERVATION_FLAGS = frozenset(
    "MAINT NO_MAINT DAILY NO_DAILY WEEKLY NO_WEEKLY IGNORE_JOBS NO_IGNORE_JOBS ANY_NODES NO_ANY_NODES STATIC NO_STATIC"
    " PART_NODES NO_PART_NODES OVERLAP SPEC_NODES TIME_FLOAT REPLACE ALL_NODES PURGE_COMP WEEKDAY NO_WEEKDAY WEEKEND"
    " NO_WEEKEND FLEX NO_FLEX DURATION_PLUS DURATION_MINUS NO_HOLD_JOBS_AFTER_END REPLACE_DOWN NO_PURGE_COMP MAGNETIC"
    " NO_MAGNETIC SKIP HOURLY NO_HOURLY USER_DELETE FORCE_START NO_USER_DELETE REOCCURRING TRES_PER_NODE".split()
)
"""The flags slurmrestd 26.05 takes on a reservation (v0.0.44 `reservation_desc_msg.flags`)."""
RECURRING_RESERVATION = frozenset({"HOURLY", "DAILY", "WEEKLY", "WEEKDAY", "WEEKEND"})
"""Reservation flags with which Slurm moves a reservation to its next occurrence when one ends."""


def utc_text(epoch: float) -> str:
    """RFC 3339 in UTC, to the second (``2026-12-01T02:00:00Z``)."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_conditions(states: Iterable[str], reason: str, now: str) -> list[dict[str, Any]]:
    """The 15 conditions of one node's state (`lastTransitionTime` = now; the caller keeps old times)."""
    flags = set(states)
    base = next((s for s in BASE_STATES if s in flags), "UNKNOWN")
    out = []
    for state in (*BASE_STATES, *FLAG_STATES):
        true = state == base if state in BASE_STATES else state in flags
        message = reason if state == "DRAIN" and true else ""
        cond = {"type": condition_type(state), "status": "True" if true else "False", "lastTransitionTime": now}
        out.append({**cond, "message": message} if message else cond)
    return out


def counts(states_by_pod: Iterable[Iterable[str]]) -> dict[str, int]:
    """NodeSet status counts: slurmIdle, slurmAllocated (ALLOCATED or MIXED), slurmDown, slurmDrain."""
    out = {"slurmIdle": 0, "slurmAllocated": 0, "slurmDown": 0, "slurmDrain": 0}
    for states in states_by_pod:
        flags = set(states)
        if "IDLE" in flags:
            out["slurmIdle"] += 1
        if flags & {"ALLOCATED", "MIXED"}:
            out["slurmAllocated"] += 1
        if "DOWN" in flags:
            out["slurmDown"] += 1
        if is_draining_or_drained(flags):
            out["slurmDrain"] += 1
    return out


class JobLike(Protocol):
    """What `jobs_by_node` reads of a Slurm job (the client's `JobInfo`; this module stays free of clients,
    workflows import it)."""

    @property
    def job_id(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def nodes(self) -> str: ...
    @property
    def start_time(self) -> int | None: ...
    @property
    def time_limit(self) -> int | None: ...


@dataclass
class NodeJobs:
    """The live jobs on one node and when the last of them reaches its time limit (epoch seconds, 0: none)."""

    ids: list[int] = field(default_factory=list)
    deadline: float = 0.0

    def deadline_text(self) -> str:
        """RFC 3339 (the `pod-deadline` annotation's format), "" when no job has a time limit."""
        if not self.deadline:
            return ""
        return dt.datetime.fromtimestamp(self.deadline, dt.UTC).isoformat().replace("+00:00", "Z")


def jobs_by_node(jobs: Iterable[JobLike]) -> dict[str, NodeJobs]:
    """Every live job with nodes, by node: ids in Slurm's order, deadline = max(start_time + time_limit)."""
    out: dict[str, NodeJobs] = {}
    for job in jobs:
        if job.state in wellknown.TERMINAL_JOB_STATES or not job.nodes:
            continue
        for name in hostlist.expand(job.nodes):
            entry = out.setdefault(name, NodeJobs())
            entry.ids.append(job.job_id)
            if job.start_time and job.time_limit:
                entry.deadline = max(entry.deadline, float(job.start_time) + 60.0 * float(job.time_limit))
    return out
