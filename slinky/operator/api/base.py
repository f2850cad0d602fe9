"""Shared types of the `slinky.slurm.net/v1beta1` API, with upstream's JSON names.

Every CR embeds Kubernetes objects (a container, a pod spec, a service spec) the way upstream does: as
free-form objects that the apiserver keeps as written (`x-kubernetes-preserve-unknown-fields`), so the
CRDs stay small and any field Kubernetes adds later passes through. The markers below tell the schema
generator (`slinky.operator.api.schema`) what a Python type becomes in the OpenAPI schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

GROUP = "slinky.slurm.net"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"


@dataclass(frozen=True)
class PreserveUnknown:
    """An embedded Kubernetes object kept as written (upstream's `ContainerWrapper`, `PodSpecWrapper`)."""


@dataclass(frozen=True)
class IntOrStringMarker:
    """`intstr.IntOrString`: `5` or `"25%"`."""


@dataclass(frozen=True)
class Atomic:
    """`x-kubernetes-map-type: atomic`: a reference replaced as a whole by server-side apply."""


@dataclass(frozen=True)
class ListMap:
    """`x-kubernetes-list-type: map`: list items are merged by these keys."""

    keys: tuple[str, ...]


FreeForm = Annotated[dict[str, Any], PreserveUnknown()]
IntOrString = Annotated[int | str, IntOrStringMarker()]


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields ignored (the apiserver prunes them)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def to_wire(self) -> dict[str, Any]:
        """The object as the apiserver stores it (camelCase, unset optional fields left out)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class LocalObjectReference(ApiModel):
    """A reference to an object in the same namespace."""

    name: str = Field("", description="Name of the referent.")


LocalRef = Annotated[LocalObjectReference, Atomic()]


class SecretKeySelector(ApiModel):
    """A key of a Secret in the same namespace."""

    name: str = Field("", description="Name of the Secret.")
    key: str = Field(description="The key of the Secret to select from.")
    optional: bool | None = Field(None, description="Whether the Secret or its key must be defined.")


SecretKeyRef = Annotated[SecretKeySelector, Atomic()]


class ConfigMapKeySelector(ApiModel):
    """A key of a ConfigMap in the same namespace."""

    name: str = Field("", description="Name of the ConfigMap.")
    key: str = Field(description="The key to select.")
    optional: bool | None = Field(None, description="Whether the ConfigMap or its key must be defined.")


ConfigMapKeyRef = Annotated[ConfigMapKeySelector, Atomic()]


class Metadata(ApiModel):
    """Labels and annotations put on the objects the operator creates."""

    labels: dict[str, str] | None = Field(None, description="Labels added to the created objects.")
    annotations: dict[str, str] | None = Field(None, description="Annotations added to the created objects.")


class PodTemplate(ApiModel):
    """Metadata and a pod spec merged into the pods the operator creates."""

    metadata: Metadata = Field(default_factory=Metadata, description="Labels and annotations of the pods.")
    spec: FreeForm = Field(default_factory=dict, description="A PodSpec (corev1.PodSpec), kept as written.")


class ServiceSpec(ApiModel):
    """A template for a Kubernetes Service."""

    metadata: Metadata = Field(default_factory=Metadata, description="Labels and annotations of the Service.")
    spec: FreeForm = Field(default_factory=dict, description="A ServiceSpec (corev1.ServiceSpec), kept as written.")
    port: int | None = Field(None, description="The external service port number.")
    node_port: int | None = Field(None, description="The port on each node for NodePort or LoadBalancer.")


class ExternalConfig(ApiModel):
    """Where an external (hybrid) component listens."""

    host: str = Field(description="Hostname or IP address to communicate with.")
    port: int = Field(description="Port to communicate over.")


class MetricEndpoint(ApiModel):
    """One endpoint a ServiceMonitor scrapes."""

    path: str | None = Field(None, description="HTTP path to scrape metrics from.")
    interval: str | None = Field(None, description="Scrape interval; empty means Prometheus' default.")
    scrape_timeout: str | None = Field(None, description="Scrape timeout; empty means Prometheus' default.")


class ServiceMonitor(ApiModel):
    """A prometheus-operator ServiceMonitor for the component's metrics."""

    enabled: bool = Field(False, description="Create a ServiceMonitor.")
    labels: dict[str, str] | None = Field(None, description="Labels of the ServiceMonitor.")
    annotations: dict[str, str] | None = Field(None, description="Annotations of the ServiceMonitor.")
    interval: str | None = Field(None, description="Scrape interval.")
    scrape_timeout: str | None = Field(None, description="Scrape timeout.")
    endpoints: list[MetricEndpoint] | None = Field(None, description="Endpoints to scrape.")


class Metrics(ApiModel):
    """Metric collection."""

    enabled: bool = Field(False, description="Configure metrics.")
    service_monitor: ServiceMonitor = Field(default_factory=ServiceMonitor, description="ServiceMonitor settings.")


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(ApiModel):
    """`metav1.Condition`: one observation of an object's state."""

    type: str = Field(
        description="Type of condition in CamelCase.",
        json_schema_extra={"maxLength": 316},
    )
    status: ConditionStatus = Field(description="Status of the condition: True, False or Unknown.")
    observed_generation: int | None = Field(
        None, description="The .metadata.generation the condition was set from.", json_schema_extra={"minimum": 0}
    )
    last_transition_time: str = Field(
        description="When the condition last changed status.", json_schema_extra={"format": "date-time"}
    )
    reason: str = Field(
        description="A CamelCase reason for the last transition.",
        json_schema_extra={
            "maxLength": 1024,
            "minLength": 1,
            "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        },
    )
    message: str = Field(
        description="A human readable message about the transition.", json_schema_extra={"maxLength": 32768}
    )


Conditions = Annotated[list[Condition], ListMap(("type",))]
