"""NodeSet: a set of slurmd pods, one Slurm node each (upstream `api/v1beta1/nodeset_types.go`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from slinky.operator.api.base import (
    ApiModel,
    Conditions,
    FreeForm,
    IntOrString,
    LocalRef,
    PodTemplate,
    PreserveUnknown,
    SecretKeyRef,
)

ScalingMode = Literal["DaemonSet", "StatefulSet"]
UpdateStrategyType = Literal["RollingUpdate", "OnDelete", "ScheduledUpdate"]
RetentionPolicy = Literal["Retain", "Delete"]
PruneSlurmNodeRecords = Literal["Never", "NodeNotFound"]

DEFAULT_MAX_UNAVAILABLE = "25%"


class NodeSetPartition(ApiModel):
    """A Slurm partition made of exactly this NodeSet's nodes."""

    enabled: bool = Field(False, description="Create a partition named after the NodeSet.")
    config: str | None = Field(
        None,
        description="Added to the partition line of slurm.conf; one line, no newline.",
        json_schema_extra={"pattern": "^[^\\n]+$"},
    )


class NodeSetSsh(ApiModel):
    """SSH access to the worker pods."""

    enabled: bool = Field(False, description="Run sshd in the worker pods.")
    extra_sshd_config: str | None = Field(None, description="Added to the end of sshd_config.")
    sssd_conf_ref: SecretKeyRef = Field(description="A Secret key holding sssd.conf.")


class RollingUpdateNodeSetStrategy(ApiModel):
    """Parameters of a rolling update."""

    max_unavailable: IntOrString = Field(
        DEFAULT_MAX_UNAVAILABLE,
        description="Pods that may be unavailable during the update: a number (5) or a percentage of the desired "
        "pods (10%), rounded up. Must not be 0.",
    )


class ScheduledUpdateNodeSetStrategy(ApiModel):
    """When a ScheduledUpdate replaces pods (a Slurm MAINT reservation)."""

    start_time: str | None = Field(
        None, description="RFC 3339 time at which updates begin.", json_schema_extra={"format": "date-time"}
    )
    duration: str = Field("30m", description="How long updates may run (Go duration).")
    flags: list[str] | None = Field(None, description="Extra flags of the operator's Slurm reservation.")


class NodeSetUpdateStrategy(ApiModel):
    """How pods of an old template revision are replaced."""

    type: UpdateStrategyType = Field("RollingUpdate", description="RollingUpdate, OnDelete or ScheduledUpdate.")
    rolling_update: RollingUpdateNodeSetStrategy = Field(
        default_factory=RollingUpdateNodeSetStrategy, description="Parameters of RollingUpdate."
    )
    scheduled_update: ScheduledUpdateNodeSetStrategy = Field(
        default_factory=ScheduledUpdateNodeSetStrategy, description="Parameters of ScheduledUpdate."
    )


class NodeSetPersistentVolumeClaimRetentionPolicy(ApiModel):
    """What happens to PVCs made from volumeClaimTemplates."""

    when_deleted: RetentionPolicy = Field("Retain", description="On NodeSet deletion: Retain or Delete.")
    when_scaled: RetentionPolicy = Field("Retain", description="On scale-in: Retain or Delete.")


class NodeSetSpec(ApiModel):
    """The desired state of a NodeSet."""

    controller_ref: LocalRef = Field(description="The Controller this NodeSet's Slurm nodes register with.")
    replicas: int | None = Field(
        1,
        description="Desired number of pods (StatefulSet mode); ignored in DaemonSet mode.",
        json_schema_extra={"format": "int32", "minimum": 0},
    )
    scaling_mode: ScalingMode = Field(
        "StatefulSet", description="StatefulSet: a fixed replica count. DaemonSet: one pod per matching node."
    )
    slurmd: FreeForm = Field(default_factory=dict, description="The slurmd container (corev1.Container).")
    ssh: NodeSetSsh | None = Field(None, description="SSH access to the worker pods.")
    logfile: FreeForm = Field(default_factory=dict, description="The logfile sidecar (corev1.Container).")
    template: PodTemplate = Field(default_factory=PodTemplate, description="Merged into every worker pod.")
    extra_conf: str | None = Field(None, description="Passed to slurmd as `--conf <extraConf>`; one line.")
    partition: NodeSetPartition = Field(default_factory=NodeSetPartition, description="The NodeSet's partition.")
    volume_claim_templates: Annotated[list[dict[str, Any]], PreserveUnknown()] | None = Field(
        None, description="PersistentVolumeClaims made per pod, as a StatefulSet's."
    )
    update_strategy: NodeSetUpdateStrategy = Field(
        default_factory=NodeSetUpdateStrategy, description="How pods of an old revision are replaced."
    )
    revision_history_limit: int = Field(
        0, description="Old ControllerRevisions kept.", json_schema_extra={"format": "int32"}
    )
    persistent_volume_claim_retention_policy: NodeSetPersistentVolumeClaimRetentionPolicy = Field(
        default_factory=NodeSetPersistentVolumeClaimRetentionPolicy, description="PVC retention."
    )
    min_ready_seconds: int | None = Field(
        None,
        description="Seconds a pod must be ready to count as available (default 0).",
        json_schema_extra={"format": "int32"},
    )
    ordinal_padding: int = Field(0, description="Zero-pad pod ordinals to this many digits (StatefulSet mode).")
    pin_to_node: bool = Field(False, description="Recreate a pod on the Kubernetes node it first ran on.")
    workload_disruption_protection: bool = Field(
        True, description="Protect pods that run Slurm jobs with a PodDisruptionBudget."
    )
    prune_slurm_node_records: PruneSlurmNodeRecords = Field(
        "Never", description="When the operator deletes Slurm node records: Never or NodeNotFound."
    )
    oversubscribe_node: bool = Field(False, description="Allow several pods of this NodeSet on one Kubernetes node.")


class NodeSetStatus(ApiModel):
    """The observed state of a NodeSet."""

    replicas: int = Field(0, description="Non-terminated pods.", json_schema_extra={"format": "int32"})
    updated_replicas: int = Field(0, description="Pods of the current revision.", json_schema_extra={"format": "int32"})
    ready_replicas: int = Field(0, description="Ready pods.", json_schema_extra={"format": "int32"})
    available_replicas: int = Field(
        0, description="Pods ready for minReadySeconds.", json_schema_extra={"format": "int32"}
    )
    unavailable_replicas: int = Field(
        0, description="Pods still needed for full capacity.", json_schema_extra={"format": "int32"}
    )
    desired: int = Field(0, description="Pods that should run.", json_schema_extra={"format": "int32"})
    slurm_idle: int = Field(0, description="Pods whose Slurm node is IDLE.", json_schema_extra={"format": "int32"})
    slurm_allocated: int = Field(
        0, description="Pods whose Slurm node is ALLOCATED or MIXED.", json_schema_extra={"format": "int32"}
    )
    slurm_down: int = Field(0, description="Pods whose Slurm node is DOWN.", json_schema_extra={"format": "int32"})
    slurm_drain: int = Field(0, description="Pods whose Slurm node is DRAIN.", json_schema_extra={"format": "int32"})
    observed_generation: int = Field(0, description="The generation this status was computed from.")
    node_set_hash: str = Field("", description="The controller-revision-hash of the current revision.")
    collision_count: int | None = Field(
        None, description="Hash collisions of ControllerRevision names.", json_schema_extra={"format": "int32"}
    )
    conditions: Conditions | None = Field(None, description="The latest observations of the NodeSet's state.")
    ordinal_to_node: dict[str, str] | None = Field(None, description="Pod ordinal to Kubernetes node (pinToNode).")
    selector: str = Field("", description="Label selector of the pods (for the scale subresource).")


class NodeSet(ApiModel):
    """A set of slurmd pods."""

    api_version: str = "slinky.slurm.net/v1beta1"
    kind: str = "NodeSet"
    metadata: FreeForm = Field(default_factory=dict)
    spec: NodeSetSpec
    status: NodeSetStatus = Field(default_factory=NodeSetStatus)
