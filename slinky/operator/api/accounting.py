"""Accounting: slurmdbd (upstream `api/v1beta1/accounting_types.go`). No controller yet (issue 10, part 2)."""

from __future__ import annotations

from pydantic import Field

from slinky.operator.api.base import (
    ApiModel,
    Conditions,
    ConfigMapKeyRef,
    ExternalConfig,
    FreeForm,
    PodTemplate,
    SecretKeyRef,
    ServiceSpec,
)


class StorageConfig(ApiModel):
    """The database slurmdbd stores accounting in."""

    host: str | None = Field(None, description="Database host.")
    port: int = Field(3306, description="Database port.")
    database: str = Field("slurm_acct_db", description="Database name.")
    username: str | None = Field(None, description="Database user.")
    password_key_ref: SecretKeyRef | None = Field(None, description="A Secret key holding the password.")


class AccountingSpec(ApiModel):
    """The desired state of an Accounting."""

    slurm_key_ref: SecretKeyRef | None = Field(None, description="The auth/slurm key (needed unless external).")
    jwt_hs256_key_ref: SecretKeyRef | None = Field(None, description="Deprecated: use jwtKeyRef.")
    jwt_key_ref: SecretKeyRef | None = Field(None, description="The auth/jwt HS256 key.")
    jwks_key_ref: ConfigMapKeyRef | None = Field(None, description="An auth/jwt JWKS.")
    external: bool = Field(False, description="slurmdbd runs outside Kubernetes; only externalConfig is used.")
    external_config: ExternalConfig | None = Field(None, description="Where the external slurmdbd listens.")
    slurmdbd: FreeForm = Field(default_factory=dict, description="The slurmdbd container (corev1.Container).")
    template: PodTemplate = Field(default_factory=PodTemplate, description="Merged into the slurmdbd pod.")
    storage_config: StorageConfig = Field(default_factory=StorageConfig, description="The accounting database.")
    extra_conf: str | None = Field(None, description="Appended to slurmdbd.conf.")
    service: ServiceSpec = Field(default_factory=ServiceSpec, description="The slurmdbd Service.")


class AccountingStatus(ApiModel):
    """The observed state of an Accounting."""

    conditions: Conditions | None = Field(None, description="The latest observations of the Accounting's state.")


class Accounting(ApiModel):
    """A slurmdbd."""

    api_version: str = "slinky.slurm.net/v1beta1"
    kind: str = "Accounting"
    metadata: FreeForm = Field(default_factory=dict)
    spec: AccountingSpec = Field(default_factory=AccountingSpec)
    status: AccountingStatus = Field(default_factory=AccountingStatus)
