"""Pod-level resources, computed like Kubernetes' ``PodRequests``/``PodLimits`` helpers.

For each resource: the larger of (the sum over app containers plus restartable init containers,
i.e. sidecars) and (the largest one-shot init container, plus the sidecars started before it), plus
the pod ``overhead``. For limits, the overhead is added only to resources that have a limit, as
Kubernetes does. A container without a request for a resource falls back to its limit, which is
what the API server's defaulting would have stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, TypeAlias

from slinky.bridge.translate.errors import InvalidPodSpec, InvalidQuantity
from slinky.bridge.translate.quantity import bytes_to_mib, parse_quantity

RESOURCE_CPU: Final = "cpu"
RESOURCE_MEMORY: Final = "memory"
GPU_RESOURCES: Final = ("nvidia.com/gpu", "amd.com/gpu")
"""Device-plugin GPU resources mapped to ``gres/gpu``, as upstream does."""

ResourceList: TypeAlias = dict[str, Decimal]


@dataclass(frozen=True)
class PodResources:
    """What one pod asks for, in Slurm's units. None means the pod does not say."""

    cpus: int | None
    memory_mib: int | None
    gpus: int | None


def _container_resources(container: Mapping[str, Any], which: str, path: str) -> ResourceList:
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    if which == "requests":
        merged = {**limits, **requests}
    else:
        merged = dict(limits)
    out: ResourceList = {}
    for name, raw in merged.items():
        source = "requests" if which == "requests" and name in requests else "limits"
        try:
            out[name] = parse_quantity(raw)
        except InvalidQuantity as err:
            raise InvalidPodSpec(err.reason, field=f"{path}.resources.{source}.{name}") from err
    return out


def _add(into: ResourceList, other: Mapping[str, Decimal]) -> None:
    for name, value in other.items():
        into[name] = into.get(name, Decimal(0)) + value


def _max(into: ResourceList, other: Mapping[str, Decimal]) -> None:
    for name, value in other.items():
        if value > into.get(name, Decimal(-1)):
            into[name] = value


def pod_resources(pod: Mapping[str, Any], which: str) -> ResourceList:
    """``PodRequests`` (``which="requests"``) or ``PodLimits`` (``which="limits"``) of a pod dict."""
    spec = pod.get("spec") or {}
    total: ResourceList = {}
    for index, container in enumerate(spec.get("containers") or []):
        _add(total, _container_resources(container, which, f"spec.containers[{index}]"))

    sidecars: ResourceList = {}
    max_init: ResourceList = {}
    for index, container in enumerate(spec.get("initContainers") or []):
        own = _container_resources(container, which, f"spec.initContainers[{index}]")
        if container.get("restartPolicy") == "Always":
            # A sidecar keeps running beside the app containers and every later init container.
            _add(sidecars, own)
            _max(max_init, sidecars)
        else:
            effective = dict(sidecars)
            _add(effective, own)
            _max(max_init, effective)
    _add(total, sidecars)
    _max(total, max_init)

    overhead_raw = spec.get("overhead") or {}
    for name, raw in overhead_raw.items():
        if which == "limits" and name not in total:
            continue
        try:
            value = parse_quantity(raw)
        except InvalidQuantity as err:
            raise InvalidPodSpec(err.reason, field=f"spec.overhead.{name}") from err
        total[name] = total.get(name, Decimal(0)) + value
    return total


def _ceil_positive(value: Decimal | None) -> int | None:
    if value is None or value <= 0:
        return None
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


def translate_resources(pod: Mapping[str, Any]) -> PodResources:
    """CPUs, MiB and GPUs of a pod: each from its request, else its limit; GPUs from limits.

    Zero counts as unset, so the partition's default applies (upstream behaviour).
    """
    requests = pod_resources(pod, "requests")
    limits = pod_resources(pod, "limits")

    def pick(name: str) -> Decimal | None:
        value = requests.get(name)
        if value is None or value == 0:
            value = limits.get(name)
        return value

    memory = pick(RESOURCE_MEMORY)
    gpus = [limits[name] for name in GPU_RESOURCES if name in limits]
    return PodResources(
        cpus=_ceil_positive(pick(RESOURCE_CPU)),
        memory_mib=bytes_to_mib(memory) if memory is not None and memory > 0 else None,
        gpus=_ceil_positive(max(gpus)) if gpus else None,
    )
