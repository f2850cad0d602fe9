"""Inputs, signals, queries and activity messages of the workload lifecycle (one pydantic model per call).

Pure: imported by workflows, activities and workers alike.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from slinky.grouping import GroupRef
from slinky.models.jobspec import SlurmJobSpec, TranslateDefaults

WORKFLOW_ID_PREFIX: Final = "workload"
JOB_COMMENT_KEY: Final = "slinkyWorkflowId"
"""Key of the JSON object the bridge writes in a placeholder job's ``comment``: which workflow owns it."""


def workload_workflow_id(namespace: str, uid: str) -> str:
    """The workflow ID of a single-pod workload: derived from the pod UID, so duplicates are harmless."""
    return f"{WORKFLOW_ID_PREFIX}/{namespace}/{uid}"


def job_comment_for(workflow_id: str) -> str:
    """The placeholder job's ``comment``: routes Slurm job events to the owning workflow."""
    return json.dumps({JOB_COMMENT_KEY: workflow_id}, separators=(",", ":"))


def workflow_id_from_job_comment(comment: str | None) -> str | None:
    """The owning workflow ID of a bridge job, or None for any other job (junk is not an error)."""
    if not comment or JOB_COMMENT_KEY not in comment:
        return None
    try:
        data = json.loads(comment)
    except ValueError:
        return None
    value = data.get(JOB_COMMENT_KEY) if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


class _Msg(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Phase(StrEnum):
    """Where a workload is; also the ``SlinkyPhase`` search attribute."""

    SUBMITTING = "Submitting"
    INVALID = "Invalid"
    PENDING = "Pending"
    BINDING = "Binding"
    RUNNING = "Running"
    CLEANING_UP = "CleaningUp"
    FINISHED = "Finished"


class PodRef(_Msg):
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class WorkloadInput(_Msg):
    """Start input of ``WorkloadWorkflow``; everything a decision needs is copied here at start."""

    pod: PodRef
    """The pod whose appearance started the lifecycle (the only member of a single-pod workload)."""
    group: GroupRef | None = None
    """The gang (PodGroup, LeaderWorkerSet group) whose members arrive as ``pod_event`` ADDED signals."""
    min_member: int = 1
    """Members needed before the gang's one Slurm job is submitted."""
    gang_timeout_seconds: float = 300.0
    """After this long with too few members, a Warning Event says so (the gang keeps waiting)."""
    kind: str = "Pod"
    """Top-level owner kind (Pod, Job, JobSet, PodGroup, LeaderWorkerSet): for search attributes and docs."""
    workload_name: str = ""
    defaults: TranslateDefaults = Field(default_factory=TranslateDefaults)
    safety_recheck_seconds: float = 300.0
    """A slow durable re-check of Slurm and the pod, in case an event was missed."""
    gone_timeout_seconds: float = 600.0
    """How long cleanup waits for a deleted pod's containers to stop before it cancels the job anyway."""
    continue_as_new_after_rechecks: int = 500
    """A running workload continues as new after this many re-checks (or when Temporal suggests it), so a
    lifecycle of months keeps a short history."""
    resume: ResumeState | None = None
    """Set by continue-as-new: the running workload's state, so the new run picks up where the old stopped."""


class MemberState(_Msg):
    ref: PodRef
    node: str = ""
    terminal: bool = False
    failed: bool = False
    deleting: bool = False
    gone: bool = False


class ResumeState(_Msg):
    """What a running workload carries across continue-as-new."""

    job_id: int
    job: JobEvent
    spec: SlurmJobSpec
    members: list[MemberState]
    submit_attempts: int = 0
    rechecks: int = 0


class PodEventKind(StrEnum):
    ADDED = "added"
    """A new member of a gang (the pod watcher saw it unbound)."""
    CHANGED = "changed"
    """The spec or annotations changed while unbound (re-translate, update the pending job)."""
    TERMINAL = "terminal"
    """Phase Succeeded or Failed."""
    DELETING = "deleting"
    """deletionTimestamp set; containers may still run."""
    GONE = "gone"
    """The pod no longer runs anywhere: deleted, or deleting and its containers stopped."""


class PodEvent(_Msg):
    """Signal ``pod_event``: the pod watcher saw a meaningful change of one pod."""

    uid: str
    kind: PodEventKind
    name: str = ""
    phase: str = ""
    node_name: str = ""


class JobEvent(_Msg):
    """Signal ``job_event``: the Slurm watcher saw the placeholder job change."""

    job_id: int
    state: str
    """Base state: PENDING, RUNNING, CANCELLED, COMPLETED, TIMEOUT, ... or VANISHED."""
    reason: str = ""
    nodes: list[str] = Field(default_factory=list)
    """Slurm node names of the allocation (hostlist expanded)."""


class WhyPending(_Msg):
    """Answer of the ``why_pending`` query."""

    phase: Phase
    step: str
    job_id: int | None = None
    slurm_state: str = ""
    reason: str = ""
    message: str = ""
    submit_attempts: int = 0
    rechecks: int = 0
    pods: list[str] = Field(default_factory=list)
    min_member: int = 1
    missing_members: int = 0
    """Gangs: members still to come before the job is submitted."""


# ------------------------------------------------------------------------------------------ activities
class BuildSpecInput(_Msg):
    pods: list[PodRef]
    group: GroupRef | None = None
    defaults: TranslateDefaults


class BuildSpecResult(_Msg):
    """A spec, or why there is none: members gone, or the translation failed (message for users)."""

    spec: SlurmJobSpec | None = None
    gone: list[str] = Field(default_factory=list)
    """UIDs of members that no longer run (deleted, terminal, or bound elsewhere)."""
    error_reason: str = ""
    error_message: str = ""
    warnings: list[str] = Field(default_factory=list)
    kind: str = "Pod"
    workload_name: str = ""


class SubmitInput(_Msg):
    workflow_id: str
    spec: SlurmJobSpec


class SubmitResult(_Msg):
    """The job id, or Slurm's rejection (no job exists then)."""

    job_id: int | None = None
    reused: bool = False
    """True when a live job of this workflow already existed (a retry after an unknown outcome)."""
    error_number: int | None = None
    error_message: str = ""
    nodes: list[str] = Field(default_factory=list)
    """The job's Slurm nodes when it is already RUNNING (an immediate allocation): bind without waiting."""


class JobRef(_Msg):
    job_id: int
    workflow_id: str = ""


class UpdateJobInput(_Msg):
    job_id: int
    spec: SlurmJobSpec


class UpdateJobResult(_Msg):
    updated: bool
    error_number: int | None = None
    error_message: str = ""


class PodsInput(_Msg):
    pods: list[PodRef]


class LabelPodsInput(_Msg):
    pods: list[PodRef]
    job_id: int
    workflow_id: str = ""
    """Written to the pods' workflow-id annotation, so tools and GC find the lifecycle of any pod."""


class PodsResult(_Msg):
    """Per-member outcome of a verb applied to every member."""

    done: list[str] = Field(default_factory=list)
    gone: list[str] = Field(default_factory=list)


class PodBinding(_Msg):
    pod: PodRef
    slurm_node: str


class BindPodsInput(_Msg):
    bindings: list[PodBinding]
    job_id: int


class BindPodsResult(_Msg):
    nodes: dict[str, str] = Field(default_factory=dict)
    """uid -> Kubernetes node."""
    gone: list[str] = Field(default_factory=list)


class PodConditionInput(_Msg):
    pods: list[PodRef]
    reason: str
    """PodScheduled reason: Unschedulable (pending in Slurm) or SlurmJobInvalid / SlurmJobRejected."""
    message: str


class EventInput(_Msg):
    pods: list[PodRef]
    reason: str
    message: str
    type: str = "Normal"
    messages: dict[str, str] = Field(default_factory=dict)
    """Per-pod message by UID, where members differ (e.g. each one's node); ``message`` otherwise."""


class DeletePodsInput(_Msg):
    pods: list[PodRef]
    grace_seconds: int | None = None


class PodStateResult(_Msg):
    exists: bool
    phase: str = ""
    node_name: str = ""
    deleting: bool = False
    gone: bool = False
    """Deleted, or no longer running anywhere (terminal, unbound and deleting, or containers stopped)."""


class PodStatesResult(_Msg):
    states: dict[str, PodStateResult] = Field(default_factory=dict)
    """uid -> state."""


class GroupPhaseInput(_Msg):
    group: GroupRef
    phase: str
    """PodGroup status phase: Scheduling, Running, Finished, Failed."""


WorkloadInput.model_rebuild()
ResumeState.model_rebuild()
