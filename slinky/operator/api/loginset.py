"""LoginSet: sackd login pods (upstream `api/v1beta1/loginset_types.go`). No controller yet (issue 10, part 2)."""

from __future__ import annotations

from pydantic import Field

from slinky.operator.api.base import (
    ApiModel,
    Conditions,
    FreeForm,
    IntOrString,
    LocalRef,
    PodTemplate,
    SecretKeyRef,
    ServiceSpec,
)


class RollingUpdateDeployment(ApiModel):
    """appsv1.RollingUpdateDeployment."""

    max_unavailable: IntOrString | None = Field(None, description="Pods that may be unavailable during an update.")
    max_surge: IntOrString | None = Field(None, description="Pods that may be created above the desired count.")


class DeploymentStrategy(ApiModel):
    """appsv1.DeploymentStrategy."""

    type: str | None = Field(None, description="Recreate or RollingUpdate.")
    rolling_update: RollingUpdateDeployment | None = Field(None, description="Parameters of RollingUpdate.")


class LoginSetSpec(ApiModel):
    """The desired state of a LoginSet."""

    controller_ref: LocalRef = Field(description="The Controller the login pods talk to.")
    replicas: int | None = Field(
        1, description="Desired number of login pods.", json_schema_extra={"format": "int32", "minimum": 0}
    )
    login: FreeForm = Field(default_factory=dict, description="The login container (corev1.Container).")
    initconf: FreeForm = Field(default_factory=dict, description="The initconf container (corev1.Container).")
    template: PodTemplate = Field(default_factory=PodTemplate, description="Merged into every login pod.")
    root_ssh_authorized_keys: str | None = Field(None, description="authorized_keys of root.")
    extra_sshd_config: str | None = Field(None, description="Added to the end of sshd_config.")
    sssd_conf_ref: SecretKeyRef = Field(description="A Secret key holding sssd.conf.")
    strategy: DeploymentStrategy | None = Field(None, description="The Deployment's update strategy.")
    service: ServiceSpec = Field(default_factory=ServiceSpec, description="The login Service.")


class LoginSetStatus(ApiModel):
    """The observed state of a LoginSet."""

    replicas: int = Field(0, description="Login pods.", json_schema_extra={"format": "int32"})
    conditions: Conditions | None = Field(None, description="The latest observations of the LoginSet's state.")
    selector: str = Field("", description="Label selector of the pods (for the scale subresource).")


class LoginSet(ApiModel):
    """A set of login pods."""

    api_version: str = "slinky.slurm.net/v1beta1"
    kind: str = "LoginSet"
    metadata: FreeForm = Field(default_factory=dict)
    spec: LoginSetSpec
    status: LoginSetStatus = Field(default_factory=LoginSetStatus)
