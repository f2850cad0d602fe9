"""Pydantic models of the slurmrestd objects slinky uses (data parser v0.0.44; v0.0.42-v0.0.45 parse too).

Written by hand from ``slurm-openapi-26.05.json`` and checked against recorded 26.05 responses. Only the
fields the product reads are typed; every model keeps unknown fields (``extra="allow"``) so a newer Slurm
that adds fields never breaks parsing, and ``model_extra`` still shows them.

Slurm wraps many integers as ``{"set": bool, "infinite": bool, "number": N}``. That wrapper is handled in
one place: :data:`NoValInt` (reading) turns it into ``int | None`` and :data:`NoValOut` (writing) builds
it. ``None`` means "not set" or "infinite"; :func:`is_infinite` tells them apart when it matters.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer
from typing_extensions import TypedDict

from slinky import wellknown

__all__ = [
    "TERMINAL_JOB_STATES",
    "CancelResponse",
    "ControllerPing",
    "Diag",
    "DiagResponse",
    "JobDescMsg",
    "JobInfo",
    "JobResources",
    "JobResourcesAllocation",
    "JobResourcesNodes",
    "JobSubmitResponse",
    "JobUpdateResponse",
    "JobsResponse",
    "NewNodeRequest",
    "NoValInt",
    "NoValOut",
    "Node",
    "NodeResourceLayout",
    "NodeResourcesResponse",
    "NodeUpdate",
    "NodesResponse",
    "OpenapiError",
    "OpenapiResponse",
    "OpenapiWarning",
    "Partition",
    "PartitionsResponse",
    "PingResponse",
    "Reservation",
    "ReservationDesc",
    "ReservationsResponse",
    "is_infinite",
]

# Base job states after which a job never runs again (the first element of job_state).
TERMINAL_JOB_STATES = wellknown.TERMINAL_JOB_STATES


def _unwrap_no_val(value: Any) -> Any:
    """Turn Slurm's ``{"set","infinite","number"}`` wrapper into a plain number or None."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        return value.get("number")
    return value


def _wrap_no_val(value: int | None) -> dict[str, Any]:
    if value is None:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": value}


def _csv_list(value: Any) -> Any:
    """Accept both the v0.0.44 list form and the older comma-separated string form."""
    if value is None:
        return []
    if isinstance(value, str):
        return [item for item in value.split(",") if item]
    return value


def is_infinite(raw: Any) -> bool:
    """Tell whether a raw Slurm number wrapper means "infinite" (e.g. ``time_limit`` UNLIMITED)."""
    return isinstance(raw, dict) and bool(raw.get("infinite", False))


NoValInt = Annotated[int | None, BeforeValidator(_unwrap_no_val)]
"""A Slurm number read from a response: ``None`` when unset or infinite."""

NoValFloat = Annotated[float | None, BeforeValidator(_unwrap_no_val)]

NoValOut = Annotated[int | None, BeforeValidator(_unwrap_no_val), PlainSerializer(_wrap_no_val, return_type=dict)]
"""A Slurm number sent in a request, serialised as the ``{"set","infinite","number"}`` wrapper."""

CsvList = Annotated[list[str], BeforeValidator(_csv_list)]


class _Model(BaseModel):
    # Newer Slurm versions add fields every release; keep them instead of failing.
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class OpenapiError(_Model):
    """One entry of a response's ``errors`` list."""

    description: str = ""
    error_number: int | None = None
    error: str = ""
    source: str = ""


class OpenapiWarning(_Model):
    """One entry of a response's ``warnings`` list."""

    description: str = ""
    source: str = ""


class OpenapiResponse(_Model):
    """Fields every slurmrestd response carries."""

    errors: list[OpenapiError] = Field(default_factory=list)
    warnings: list[OpenapiWarning] = Field(default_factory=list)


# --- jobs -----------------------------------------------------------------------------------------------


class JobResourcesAllocation(_Model):
    """One node of ``job_resources.nodes.allocation``."""

    name: str = ""
    cpus: dict[str, Any] = Field(default_factory=dict)
    memory: dict[str, Any] = Field(default_factory=dict)

    @property
    def cpu_count(self) -> int:
        """CPUs allocated on this node."""
        return int(self.cpus.get("count", 0))

    @property
    def memory_allocated(self) -> int:
        """Memory allocated on this node, MiB."""
        return int(self.memory.get("allocated", 0))


class JobResourcesNodes(_Model):
    """``job_resources.nodes``: the allocated node list."""

    count: int = 0
    node_list: str = Field("", alias="list")
    whole: bool = False
    allocation: list[JobResourcesAllocation] = Field(default_factory=list)


class JobResources(_Model):
    """``job_resources`` of a running job."""

    nodes: JobResourcesNodes | None = None
    cpus: int = 0
    select_type: list[str] = Field(default_factory=list)


class JobInfo(_Model):
    """A job as ``GET job/{id}`` and ``GET jobs`` return it.

    Times are Unix seconds; memory is MiB; ``None`` means unset. Unlike the other models it keeps only the
    fields below: the job watcher holds every job Slurm knows, and the hundred or so other fields of each
    (about 8 KB of JSON) made the bridge worker hold about 1 GB at 7,000 pending jobs.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    job_id: int
    name: str = ""
    job_state: list[str] = Field(default_factory=list)
    state_reason: str = ""
    state_description: str = ""
    nodes: str = ""
    node_count: NoValInt = None
    batch_host: str = ""
    partition: str = ""
    account: str = ""
    qos: str = ""
    user_name: str = ""
    admin_comment: str = ""
    comment: str = ""
    mcs_label: str = ""
    flags: list[str] = Field(default_factory=list)
    shared: list[str] | None = None
    submit_time: NoValInt = None
    eligible_time: NoValInt = None
    start_time: NoValInt = None
    end_time: NoValInt = None
    last_sched_evaluation: NoValInt = None
    time_limit: NoValInt = None
    cpus: NoValInt = None
    cpus_per_task: NoValInt = None
    memory_per_node: NoValInt = None
    memory_per_cpu: NoValInt = None
    tasks: NoValInt = None
    priority: NoValInt = None
    job_resources: JobResources | None = None

    @property
    def state(self) -> str:
        """The base state, e.g. "PENDING", "RUNNING", "CANCELLED" ("" if Slurm sent none)."""
        return self.job_state[0] if self.job_state else ""

    @property
    def is_pending(self) -> bool:
        """True while the job waits for resources."""
        return "PENDING" in self.job_state

    @property
    def is_running(self) -> bool:
        """True while the job holds its allocation."""
        return "RUNNING" in self.job_state

    @property
    def is_finished(self) -> bool:
        """True once the job reached a terminal state (completed, cancelled, failed, ...)."""
        return any(state in TERMINAL_JOB_STATES for state in self.job_state)

    @property
    def is_external(self) -> bool:
        """True for a job submitted with ``EXTERNAL_JOB`` (no script, no slurmd)."""
        return "EXTERNAL_JOB" in self.flags


class JobDescMsg(_Model):
    """The job description sent to ``POST job/submit`` (inside ``{"job": ...}``) and ``POST job/{id}``.

    Field names are v0.0.44's. Unset fields are left out of the request. Extra keyword arguments are
    forwarded as is, for fields this model does not type yet.
    """

    name: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    wckey: str | None = None
    flags: list[str] | None = None
    script: str | None = None
    nodes: str | None = None
    minimum_nodes: int | None = None
    maximum_nodes: int | None = None
    required_nodes: list[str] | None = None
    excluded_nodes: list[str] | None = None
    constraints: str | None = None
    tasks: int | None = None
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    minimum_cpus: int | None = None
    minimum_cpus_per_node: int | None = None
    memory_per_node: NoValOut = None
    memory_per_cpu: NoValOut = None
    time_limit: NoValOut = None
    time_minimum: NoValOut = None
    priority: NoValOut = None
    shared: list[str] | None = None
    hold: bool | None = None
    requeue: bool | None = None
    licenses: str | None = None
    tres_per_job: str | None = None
    tres_per_node: str | None = None
    tres_per_task: str | None = None
    mcs_label: str | None = None
    admin_comment: str | None = None
    comment: str | None = None
    extra: str | None = None
    current_working_directory: str | None = None
    environment: list[str] | None = None
    user_id: str | None = None
    group_id: str | None = None
    standard_output: str | None = None
    standard_error: str | None = None

    def to_request(self) -> dict[str, Any]:
        """The JSON body fields, without unset ones."""
        return self.model_dump(mode="json", exclude_none=True)


class JobSubmitResponse(OpenapiResponse):
    """Answer to ``POST job/submit``."""

    job_id: int | None = None
    step_id: str | None = None
    job_submit_user_msg: str = ""


class JobUpdateResponse(OpenapiResponse):
    """Answer to ``POST job/{id}``."""

    results: list[dict[str, Any]] | None = None


class CancelResponse(OpenapiResponse):
    """Answer to ``DELETE job/{id}``."""

    status: list[Any] | None = None


class JobState(TypedDict):
    """One entry of ``GET jobs/state``; slurmrestd sends the id as a string. A TypedDict, not a model: the bridge
    polls this list several times a second, and at 10,000 jobs building 10,000 model instances took 38 ms per
    answer against 9 ms for the same validation into dicts (py-spy had it at 45 % of the worker's main thread)."""

    job_id: str
    state: list[str]


class JobStatesResponse(OpenapiResponse):
    """Answer to ``GET jobs/state``."""

    jobs: list[JobState] = Field(default_factory=list)


class JobsResponse(OpenapiResponse):
    """Answer to ``GET jobs`` and ``GET job/{id}``.

    ``last_update`` is kept raw here: the client maps its quirk (0 = nothing changed) in one place.
    """

    jobs: list[JobInfo] = Field(default_factory=list)
    last_update: NoValInt = None
    last_backfill: NoValInt = None


class NodeResourceLayout(_Model):
    """One node of ``GET resources/{job_id}`` (v0.0.44+)."""

    node: str
    sockets_per_node: int | None = None
    cores_per_socket: int | None = None
    mem_alloc: int | None = None
    core_bitmap: str = ""
    channel: NoValInt = None
    gres: list[dict[str, Any]] = Field(default_factory=list)


class NodeResourcesResponse(OpenapiResponse):
    """Answer to ``GET resources/{job_id}``."""

    nodes: list[NodeResourceLayout] = Field(default_factory=list)


# --- nodes ----------------------------------------------------------------------------------------------


class Node(_Model):
    """A node as ``GET node/{name}`` and ``GET nodes`` return it. Memory is MiB."""

    name: str
    state: list[str] = Field(default_factory=list)
    reason: str = ""
    reason_set_by_user: str = ""
    reason_changed_at: NoValInt = None
    comment: str = ""
    extra: str = ""
    features: CsvList = Field(default_factory=list)
    active_features: CsvList = Field(default_factory=list)
    partitions: CsvList = Field(default_factory=list)
    reservation: str = ""
    cpus: int = 0
    alloc_cpus: int = 0
    real_memory: int = 0
    alloc_memory: int = 0
    gres: str = ""
    gres_used: str = ""
    address: str = ""
    hostname: str = ""
    port: int | None = None
    version: str = ""
    slurmd_start_time: NoValInt = None

    @property
    def states(self) -> frozenset[str]:
        """The state flags as a set, e.g. ``{"IDLE", "EXTERNAL", "DRAIN", "DYNAMIC_NORM"}``."""
        return frozenset(self.state)

    @property
    def is_external(self) -> bool:
        """True for a node registered with ``State=EXTERNAL`` (no slurmd); visible from v0.0.44."""
        return "EXTERNAL" in self.states

    @property
    def is_drain(self) -> bool:
        """True when DRAIN is set: the node is draining or drained."""
        return "DRAIN" in self.states

    @property
    def is_busy(self) -> bool:
        """True while jobs hold the node (ALLOCATED, MIXED or COMPLETING)."""
        return bool(self.states & {"ALLOCATED", "MIXED", "COMPLETING"})

    @property
    def is_drained(self) -> bool:
        """True when DRAIN is set and no job holds the node any more: safe to delete."""
        return self.is_drain and not self.is_busy


class NodesResponse(OpenapiResponse):
    """Answer to ``GET nodes`` and ``GET node/{name}``."""

    nodes: list[Node] = Field(default_factory=list)
    last_update: NoValInt = None


class NodeUpdate(_Model):
    """Body of ``POST node/{name}`` (v0.0.44 ``update_node_msg``)."""

    state: list[str] | None = None
    reason: str | None = None
    comment: str | None = None
    extra: str | None = None
    features: list[str] | None = None
    features_act: list[str] | None = None
    gres: str | None = None
    address: list[str] | None = None
    hostname: list[str] | None = None
    weight: NoValOut = None

    def to_request(self) -> dict[str, Any]:
        """The JSON body fields, without unset ones."""
        return self.model_dump(mode="json", exclude_none=True)


class NewNodeRequest(_Model):
    """Body of ``POST new/node`` (v0.0.44+): one ``scontrol create`` line, e.g.
    ``NodeName=n1 CPUs=8 RealMemory=16000 State=EXTERNAL Feature=k8s``."""

    node_conf: str


# --- partitions, reservations, diag, ping ---------------------------------------------------------------


class Partition(_Model):
    """A partition as ``GET partitions`` returns it."""

    name: str
    nodes: dict[str, Any] = Field(default_factory=dict)
    cpus: dict[str, Any] = Field(default_factory=dict)
    partition: dict[str, Any] = Field(default_factory=dict)
    node_sets: str = ""

    @property
    def node_list(self) -> str:
        """The configured node list (hostlist expression), e.g. ``slinky-node-[1-4]``."""
        return str(self.nodes.get("configured", ""))

    @property
    def total_nodes(self) -> int:
        """Number of nodes in the partition."""
        return int(self.nodes.get("total", 0))

    @property
    def total_cpus(self) -> int:
        """Number of CPUs in the partition."""
        return int(self.cpus.get("total", 0))

    @property
    def states(self) -> frozenset[str]:
        """Partition state flags, e.g. ``{"UP"}``."""
        return frozenset(self.partition.get("state", []))


class PartitionsResponse(OpenapiResponse):
    """Answer to ``GET partitions`` and ``GET partition/{name}``."""

    partitions: list[Partition] = Field(default_factory=list)
    last_update: NoValInt = None


class Reservation(_Model):
    """A reservation as ``GET reservations`` returns it."""

    name: str
    node_list: str = ""
    node_count: int = 0
    partition: str = ""
    users: str = ""
    accounts: str = ""
    features: str = ""
    flags: list[str] = Field(default_factory=list)
    start_time: NoValInt = None
    end_time: NoValInt = None


class ReservationDesc(_Model):
    """Body of ``POST reservation`` (v0.0.44 ``reservation_desc_msg``): create the reservation, or update the one
    of that name. Times are UNIX seconds, ``duration`` minutes; unset fields are left out."""

    name: str
    start_time: NoValOut = None
    duration: NoValOut = None
    flags: list[str] | None = None
    users: list[str] | None = None
    node_list: list[str] | None = None

    def to_request(self) -> dict[str, Any]:
        """The JSON body fields, without unset ones."""
        return self.model_dump(mode="json", exclude_none=True)


class ReservationsResponse(OpenapiResponse):
    """Answer to ``GET reservations``."""

    reservations: list[Reservation] = Field(default_factory=list)
    last_update: NoValInt = None


JOB_COUNTERS = ("jobs_submitted", "jobs_started", "jobs_completed", "jobs_canceled", "jobs_failed")
"""slurmctld's counters of job transitions in ``GET diag`` (reset with its statistics, with ``req_time_start``)."""


class Diag(_Model):
    """The controller statistics of ``GET diag`` (a few typed, the rest in ``model_extra``)."""

    server_thread_count: int | None = None
    agent_queue_size: int | None = None
    jobs_submitted: int | None = None
    jobs_started: int | None = None
    jobs_completed: int | None = None
    jobs_canceled: int | None = None
    jobs_failed: int | None = None
    jobs_pending: int | None = None
    jobs_running: int | None = None
    schedule_cycle_last: int | None = None
    schedule_cycle_mean: int | None = None
    schedule_queue_length: int | None = None
    bf_cycle_last: int | None = None
    dbd_agent_queue_size: int | None = None
    """Messages slurmctld holds for slurmdbd (job records among them): they wait here while slurmdbd or its
    database is down and are sent once it is back."""
    req_time: NoValInt = None
    req_time_start: NoValInt = None
    """When the statistics started: slurmctld's start (or the last ``sdiag --reset``). The job watcher reads a
    change as a controller restart."""


class DiagResponse(OpenapiResponse):
    """Answer to ``GET diag``."""

    statistics: Diag = Field(default_factory=Diag)


class SlurmdbdDiag(_Model):
    """slurmdbd's statistics of ``GET /slurmdb/.../diag`` (``sdiag`` of slurmdbd; the rest in ``model_extra``)."""

    time_start: int | None = None


class SlurmdbdDiagResponse(OpenapiResponse):
    """Answer to ``GET /slurmdb/.../diag``: slurmrestd asks slurmdbd, which needs its database to answer (502
    with error 7000 "Unable to connect to database" when it is down, measured on 26.05)."""

    statistics: SlurmdbdDiag = Field(default_factory=SlurmdbdDiag)


class ControllerPing(_Model):
    """One controller of ``GET ping``. ``responding`` is False while slurmctld is down."""

    hostname: str = ""
    pinged: str = ""
    responding: bool = False
    latency: int | None = None
    mode: str = ""
    primary: bool = False


class PingResponse(OpenapiResponse):
    """Answer to ``GET ping``. Answers 200 even when slurmctld is down or the token is bad."""

    pings: list[ControllerPing] = Field(default_factory=list)
