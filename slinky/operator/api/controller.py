"""Controller: the Slurm control plane, slurmctld (upstream `api/v1beta1/controller_types.go`).

With `external: true` the operator runs no slurmctld: `externalConfig` says where an existing one is
(hybrid mode), and the operator only talks to it.
"""

from __future__ import annotations

from pydantic import Field

from slinky.operator.api.base import (
    ApiModel,
    Conditions,
    ConfigMapKeyRef,
    ExternalConfig,
    FreeForm,
    LocalRef,
    Metrics,
    PodTemplate,
    SecretKeyRef,
    ServiceSpec,
)


class ControllerHighAvailability(ApiModel):
    """Backup slurmctld replicas."""

    enabled: bool = Field(False, description="Run backup controllers (needs a ReadWriteMany existingClaim).")
    backups: int | None = Field(
        1, description="Number of backup controllers.", json_schema_extra={"format": "int32", "minimum": 1}
    )


class ControllerPersistence(ApiModel):
    """The volume that holds slurmctld's StateSaveLocation."""

    enabled: bool | None = Field(True, description="Keep the save-state on a persistent volume.")
    existing_claim: str | None = Field(None, description="Use this PersistentVolumeClaim instead of making one.")
    access_modes: list[str] | None = Field(None, description="PVC access modes.")
    resources: FreeForm | None = Field(None, description="PVC resources (requests.storage).")
    storage_class_name: str | None = Field(None, description="PVC storage class.")
    volume_mode: str | None = Field(None, description="PVC volume mode.")
    selector: FreeForm | None = Field(None, description="PVC label selector.")
    volume_name: str | None = Field(None, description="Bind to this PersistentVolume.")
    data_source: FreeForm | None = Field(None, description="PVC data source.")
    data_source_ref: FreeForm | None = Field(None, description="PVC data source reference.")
    volume_attributes_class_name: str | None = Field(None, description="PVC volume attributes class.")


class ControllerSpec(ApiModel):
    """The desired state of a Controller."""

    cluster_name: str | None = Field(None, description="Slurm ClusterName; defaults to <namespace>_<name>.")
    slurm_key_ref: SecretKeyRef | None = Field(None, description="The auth/slurm key (needed unless external).")
    jwt_hs256_key_ref: SecretKeyRef | None = Field(None, description="Deprecated: use jwtKeyRef.")
    jwt_key_ref: SecretKeyRef | None = Field(None, description="The auth/jwt HS256 key the operator signs with.")
    jwks_key_ref: ConfigMapKeyRef | None = Field(None, description="An auth/jwt JWKS.")
    accounting_ref: LocalRef | None = Field(None, description="The Accounting (slurmdbd) this cluster uses.")
    external: bool = Field(False, description="slurmctld runs outside Kubernetes; only externalConfig is used.")
    external_config: ExternalConfig | None = Field(None, description="Where the external slurmctld listens.")
    ha: ControllerHighAvailability = Field(default_factory=ControllerHighAvailability, description="High availability.")
    slurmctld: FreeForm = Field(default_factory=dict, description="The slurmctld container (corev1.Container).")
    inplace_reconfigure: bool = Field(False, description="Reconfigure in place instead of recreating the pod.")
    reconfigure: FreeForm = Field(default_factory=dict, description="The reconfigure sidecar (corev1.Container).")
    logfile: FreeForm = Field(default_factory=dict, description="The logfile sidecar (corev1.Container).")
    template: PodTemplate = Field(default_factory=PodTemplate, description="Merged into the slurmctld pod.")
    extra_conf: str | None = Field(None, description="Appended to slurm.conf.")
    config_file_refs: list[LocalRef] | None = Field(None, description="ConfigMaps of files put in /etc/slurm.")
    prolog_script_refs: list[LocalRef] | None = Field(None, description="ConfigMaps of Prolog scripts.")
    epilog_script_refs: list[LocalRef] | None = Field(None, description="ConfigMaps of Epilog scripts.")
    prolog_slurmctld_script_refs: list[LocalRef] | None = Field(
        None, description="ConfigMaps of PrologSlurmctld scripts."
    )
    epilog_slurmctld_script_refs: list[LocalRef] | None = Field(
        None, description="ConfigMaps of EpilogSlurmctld scripts."
    )
    persistence: ControllerPersistence = Field(
        default_factory=ControllerPersistence, description="The save-state volume."
    )
    service: ServiceSpec = Field(default_factory=ServiceSpec, description="The slurmctld Service.")
    metrics: Metrics = Field(default_factory=Metrics, description="Metric collection.")

    def jwt_key(self) -> SecretKeyRef | None:
        """The JWT key reference, the deprecated field as fallback (as upstream reads it)."""
        return self.jwt_key_ref or self.jwt_hs256_key_ref


class ControllerStatus(ApiModel):
    """The observed state of a Controller."""

    conditions: Conditions | None = Field(None, description="The latest observations of the Controller's state.")


class Controller(ApiModel):
    """A Slurm control plane."""

    api_version: str = "slinky.slurm.net/v1beta1"
    kind: str = "Controller"
    metadata: FreeForm = Field(default_factory=dict)
    spec: ControllerSpec = Field(default_factory=ControllerSpec)
    status: ControllerStatus = Field(default_factory=ControllerStatus)
