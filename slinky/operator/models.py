"""Inputs, outputs and signals of the NodeSet scale-in workflow and its activities (one model per call)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ScaleInCause = Literal["scale-in", "update", "scheduled-update"]
ScaleInPhase = Literal["cordoning", "draining", "deleting", "forgetting", "done"]
ScaleInOutcome = Literal["deleted", "kept", "aborted", "gone", ""]


class ControllerKey(BaseModel):
    """The Controller whose Slurm a call talks to (the operator keeps one client per Controller)."""

    namespace: str
    name: str


class PodRef(BaseModel):
    """One NodeSet pod; the uid guards every write (a recreated pod with the same name is another pod)."""

    namespace: str
    name: str
    uid: str


class NodeRef(BaseModel):
    """One Slurm node of a Controller."""

    controller: ControllerKey
    node: str


class DrainInput(BaseModel):
    """Drain (or undrain) a Slurm node with an operator-owned reason."""

    controller: ControllerKey
    node: str
    reason: str


class SlurmNodeView(BaseModel):
    """A Slurm node as the operator sees it; `exists=False` after Slurm said "no such node"."""

    name: str
    exists: bool = True
    states: list[str] = Field(default_factory=list)
    reason: str = ""
    reservation: str = Field("", description="The reservation the node is in now (Slurm shows an active one).")
    features: list[str] = Field(default_factory=list, description="Its active features (a NodeSet's name among them).")
    jobs: list[int] = Field(default_factory=list, description="Running jobs holding the node (when read).")
    deadline: str = Field("", description="RFC 3339: when the last of those jobs reaches its time limit.")


class ScaleInInput(BaseModel):
    """Start of `NodeSetScaleInWorkflow`: drain one condemned pod's Slurm node, then delete the pod."""

    pod: PodRef
    nodeset: str
    node: str = Field(description="The Slurm node name (the pod's hostname).")
    controller: ControllerKey
    cause: ScaleInCause = "scale-in"
    fallback_check_seconds: float = Field(
        60.0, description="Re-read the node this often when no signal came (the poll's signals are the fast path)."
    )


class ScaleInStatus(BaseModel):
    """The `status` query: where the scale-in is and what it waits for."""

    phase: ScaleInPhase
    pod: str
    node: str
    cause: ScaleInCause
    states: list[str] = Field(default_factory=list)
    reason: str = ""
    jobs: list[int] = Field(default_factory=list)
    deadline: str = ""
    waiting_for: str = ""
    forced: bool = False
    cancelled_jobs: list[int] = Field(default_factory=list)
    outcome: ScaleInOutcome = ""


class ScaleInResult(BaseModel):
    outcome: ScaleInOutcome
    node: str
    cancelled_jobs: list[int] = Field(default_factory=list)


class NodeSetEventInput(BaseModel):
    """A Kubernetes Event on a NodeSet pod (the Temporal history says the same, in more detail)."""

    pod: PodRef
    type: Literal["Normal", "Warning"] = "Normal"
    reason: str
    message: str


# ---------------------------------------------------------------------------------------- ScheduledUpdate
ScheduledUpdatePhase = Literal["reserving", "waiting", "open", "ended", "skipped", "refused", "released"]


class ReservationRef(BaseModel):
    """The Slurm reservation of one NodeSet's ScheduledUpdate (``SlurmOperatorMaint-<nodeset>``)."""

    controller: ControllerKey
    name: str


class ReservationSpec(BaseModel):
    """The MAINT reservation to keep: from ``start`` for ``minutes`` over ``nodes``."""

    ref: ReservationRef
    start: int = Field(description="UNIX seconds (the NodeSet's scheduledUpdate.startTime).")
    minutes: int = Field(description="Slurm's reservation duration is whole minutes (scheduledUpdate.duration).")
    flags: list[str] = Field(description="MAINT and IGNORE_JOBS, then the NodeSet's scheduledUpdate.flags.")
    nodes: list[str] = Field(description="The Slurm nodes of the NodeSet's pods (those Slurm knows).")
    full: bool = Field(True, description="False: change only the node list (the only change an active one takes).")


class ReservationView(BaseModel):
    """A reservation as Slurm holds it (`exists=False`: Slurm has none of that name)."""

    name: str
    exists: bool = True
    start: int | None = None
    end: int | None = None
    nodes: list[str] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)


class ScheduledUpdateInput(BaseModel):
    """Start of `NodeSetScheduledUpdateWorkflow`: one window of one NodeSet's ScheduledUpdate."""

    namespace: str
    nodeset: str
    reservation: ReservationSpec


class ScheduledUpdateStatus(BaseModel):
    """The `status` query: where the window is, and what Slurm holds."""

    phase: ScheduledUpdatePhase
    reservation: str
    start: int
    end: int
    nodes: list[str] = Field(default_factory=list)
    message: str = ""


class ScheduledUpdateResult(BaseModel):
    phase: ScheduledUpdatePhase
    message: str = ""
