"""RestApi: slurmrestd (upstream `api/v1beta1/restapi_types.go`). No controller yet (issue 10, part 2)."""

from __future__ import annotations

from pydantic import Field

from slinky.operator.api.base import ApiModel, Conditions, FreeForm, LocalRef, PodTemplate, ServiceSpec


class RestApiSpec(ApiModel):
    """The desired state of a RestApi."""

    controller_ref: LocalRef = Field(description="The Controller slurmrestd talks to.")
    replicas: int | None = Field(
        1, description="Desired number of slurmrestd pods.", json_schema_extra={"format": "int32", "minimum": 0}
    )
    slurmrestd: FreeForm = Field(default_factory=dict, description="The slurmrestd container (corev1.Container).")
    template: PodTemplate = Field(default_factory=PodTemplate, description="Merged into every slurmrestd pod.")
    service: ServiceSpec = Field(default_factory=ServiceSpec, description="The slurmrestd Service (port 6820).")


class RestApiStatus(ApiModel):
    """The observed state of a RestApi."""

    conditions: Conditions | None = Field(None, description="The latest observations of the RestApi's state.")


class RestApi(ApiModel):
    """A slurmrestd Deployment."""

    api_version: str = "slinky.slurm.net/v1beta1"
    kind: str = "RestApi"
    metadata: FreeForm = Field(default_factory=dict)
    spec: RestApiSpec
    status: RestApiStatus = Field(default_factory=RestApiStatus)
