"""Inputs, signals, queries and activity messages of the workload lifecycle (one pydantic model per call).

Pure: imported by workflows, activities and workers alike.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Final, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from slinky.bridge.grouping import GroupRef
from slinky.bridge.models.jobspec import SlurmJobSpec, TranslateDefaults

WORKFLOW_ID_PREFIX: Final = "workload"
JOB_COMMENT_KEY: Final = "slinkyWorkflowId"
"""Key of the JSON object the bridge writes in a placeholder job's ``comment``: which workflow owns it."""
JOB_SUBMISSION_KEY: Final = "slinkySubmission"
"""Second key of that object: which of the workflow's submissions the job is (1, 2, ...). Job ids are reused
after a slurmctld crash, and a workflow resubmits a lost job under the same workflow id: the pair names one job."""


def workload_workflow_id(namespace: str, uid: str) -> str:
    """The workflow ID of a single-pod workload: derived from the pod UID, so duplicates are harmless."""
    return f"{WORKFLOW_ID_PREFIX}/{namespace}/{uid}"


class JobOwner(NamedTuple):
    """Who a bridge job belongs to, as its ``comment`` says."""

    workflow_id: str
    submission: int | None = None
    """None for jobs submitted before submissions were numbered: they match any submission of the workflow."""


def job_comment_for(workflow_id: str, submission: int | None = None) -> str:
    """The placeholder job's ``comment``: routes Slurm job events to the owning workflow and submission."""
    data: dict[str, str | int] = {JOB_COMMENT_KEY: workflow_id}
    if submission is not None:
        data[JOB_SUBMISSION_KEY] = submission
    return json.dumps(data, separators=(",", ":"))


def job_owner_from_comment(comment: str | None) -> JobOwner | None:
    """The owner of a bridge job, or None for any other job (junk is not an error)."""
    if not comment or JOB_COMMENT_KEY not in comment:
        return None
    try:
        data = json.loads(comment)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    workflow_id, submission = data.get(JOB_COMMENT_KEY), data.get(JOB_SUBMISSION_KEY)
    if not isinstance(workflow_id, str):
        return None
    return JobOwner(
        workflow_id, submission if isinstance(submission, int) and not isinstance(submission, bool) else None
    )


def workflow_id_from_job_comment(comment: str | None) -> str | None:
    """The owning workflow ID of a bridge job, or None for any other job."""
    owner = job_owner_from_comment(comment)
    return owner.workflow_id if owner else None


def owns_job(comment: str | None, workflow_id: str, submission: int | None) -> bool:
    """Whether a job with this ``comment`` is the given workflow's submission: the identity check before any
    action on a job id (docs/bridge.md, "Job identity"). A job of another workflow, or an earlier or later
    submission of the same workflow, is not; a job with no submission number matches any of its workflow's."""
    owner = job_owner_from_comment(comment)
    if owner is None or owner.workflow_id != workflow_id:
        return False
    return submission is None or owner.submission is None or owner.submission == submission


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
    members: list[PodRef] = Field(default_factory=list)
    """More members known at the start, beside ``pod``: the pending pods an ended lifecycle of the same gang
    handed on (``restart``), each taken as if it had joined with ``pod_event`` ADDED."""
    restart: GangRestart | None = None
    """Set when an ended gang lifecycle continues as new for the members that came after its job."""


class MemberState(_Msg):
    ref: PodRef
    node: str = ""
    terminal: bool = False
    failed: bool = False
    deleting: bool = False
    gone: bool = False


class GangRestart(_Msg):
    """What links a gang's new lifecycle to the one that ended (docs/bridge.md, "A gang starts again")."""

    previous_run_id: str
    """The run of the same workflow ID that ended: ``temporal workflow show -w ID -r RUN`` shows its history."""
    previous_result: str = ""
    """Why it ended ("member team-a/rep-x was deleted")."""
    submissions: int = 0
    """Submissions made under this workflow ID so far: the new run numbers its jobs on from here, so a job of
    the ended run (its ``comment`` names the same workflow) is never taken for the new run's."""
    restarts: int = 1
    """How many times this gang started again under this workflow ID."""


class ResumeState(_Msg):
    """What a running workload carries across continue-as-new."""

    job_id: int
    job: JobEvent
    spec: SlurmJobSpec
    members: list[MemberState]
    submit_attempts: int = 0
    rechecks: int = 0
    submission: int | None = None
    """Which submission the job is (its ``comment``); None for runs started before submissions were numbered."""
    readopt_waiting: bool = False
    """The job re-adopting the members' nodes is still queued for them."""
    waiting: list[PodRef] = Field(default_factory=list)
    """Gang members that came after the job was submitted: not in it, kept for the gang's next lifecycle."""


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
    submission: int | None = None
    """The workflow's submission the job is (from its ``comment``): an event of an earlier submission whose id
    Slurm reused is not about the current job. None: unknown (matches)."""
    cause: str = ""
    """Why a job is VANISHED, when known: ``controller restart`` (the watcher saw slurmctld start again)."""


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
    previous_run_id: str = ""
    """Gangs started again: the run of the same workflow ID that ended before this one."""
    waiting_members: list[str] = Field(default_factory=list)
    """Gangs: pods that came after the job was submitted; they start the gang's next lifecycle when this one ends."""


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
    submission: int | None = None
    """The workflow's submission number, written to the job's ``comment`` with the workflow id."""
    nodes: list[str] = Field(default_factory=list)
    """Re-adoption: allocate exactly these Slurm nodes now (the pods run there already), or not at all."""


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
    """A job by id AND owner: every verb checks the job is still this workflow's submission before it acts."""

    job_id: int
    workflow_id: str
    submission: int | None = None

    def owns(self, comment: str | None) -> bool:
        return owns_job(comment, self.workflow_id, self.submission)


class UpdateJobInput(_Msg):
    job: JobRef
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


class PlacePodsInput(_Msg):
    """The binding step in one call: bind, then (an allocation at submit) label, then the Events, on the members
    found bound (one gone meanwhile gets none)."""

    bindings: list[PodBinding]
    job_id: int
    workflow_id: str = ""
    label: bool = False
    """Also put the job id label, ``workflow_id`` and the finalizer on the bound members (their job was allocated
    at submit, so they were not labelled while pending)."""
    submitted: EventInput | None = None
    """With ``label``: the Event saying the job was submitted (its ``pods`` are ignored)."""
    scheduled_reason: str = ""
    """The reason of the Event "Successfully assigned <pod> to <node> (Slurm job <id>)" on each bound member."""


class ReleasePodsInput(_Msg):
    """The cleanup's Kubernetes step in one call: the finalizers off, then the Event (if any) on every member."""

    pods: list[PodRef]
    event: EventInput | None = None


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
    recheck_seconds: float | None = None
    """The safety re-check interval from now on (the pod watcher's budget for the pods it follows now); None: keep
    the one the lifecycle has (a replica without the pod watcher, or a history from before it)."""


class GroupPhaseInput(_Msg):
    group: GroupRef
    phase: str
    """PodGroup status phase: Scheduling, Running, Finished, Failed."""


WorkloadInput.model_rebuild()
ResumeState.model_rebuild()
