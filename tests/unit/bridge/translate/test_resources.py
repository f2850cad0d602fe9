from __future__ import annotations

from typing import Any

import pytest

from slinky.bridge.translate.errors import InvalidPodSpec
from slinky.bridge.translate.resources import PodResources, translate_resources
from tests.builders import make_container, make_pod

CASES: list[tuple[str, dict[str, Any], PodResources]] = [
    ("no resources leaves everything to the partition", make_pod(), PodResources(None, None, None)),
    ("single container requests", make_pod(cpu="2", memory="1Gi"), PodResources(2, 1024, None)),
    ("millicores round up to a whole cpu", make_pod(cpu="500m"), PodResources(1, None, None)),
    (
        "limits only are used as requests",
        make_pod(limits={"cpu": "3", "memory": "2Gi"}),
        PodResources(3, 2048, None),
    ),
    (
        "request wins over a larger limit",
        make_pod(cpu="1", memory="1Gi", limits={"cpu": "4", "memory": "4Gi"}),
        PodResources(1, 1024, None),
    ),
    (
        "zero request falls back to the limit",
        make_pod(containers=[make_container(requests={"cpu": "0"}, limits={"cpu": "2"})]),
        PodResources(2, None, None),
    ),
    (
        "app containers add up",
        make_pod(
            containers=[
                make_container("a", requests={"cpu": "1500m", "memory": "512Mi"}),
                make_container("b", requests={"cpu": "1", "memory": "512Mi"}),
            ]
        ),
        PodResources(3, 1024, None),
    ),
    (
        "a big init container dominates the app sum",
        make_pod(
            containers=[
                make_container("a", requests={"cpu": "1"}),
                make_container("b", requests={"cpu": "1"}),
            ],
            init_containers=[make_container("init", requests={"cpu": "5", "memory": "8Gi"})],
        ),
        PodResources(5, 8192, None),
    ),
    (
        "init containers take the max, not the sum",
        make_pod(
            cpu="1",
            init_containers=[
                make_container("i1", requests={"cpu": "2"}),
                make_container("i2", requests={"cpu": "3"}),
            ],
        ),
        PodResources(3, None, None),
    ),
    (
        "a sidecar adds to the app containers",
        make_pod(
            cpu="2",
            init_containers=[make_container("side", requests={"cpu": "1"}, restart_policy="Always")],
        ),
        PodResources(3, None, None),
    ),
    (
        "a sidecar started before an init container runs beside it",
        make_pod(
            cpu="1",
            init_containers=[
                make_container("side", requests={"cpu": "2"}, restart_policy="Always"),
                make_container("init", requests={"cpu": "3"}),
            ],
        ),
        PodResources(5, None, None),
    ),
    (
        "overhead is added to requests",
        make_pod(cpu="1", memory="1Gi", overhead={"cpu": "250m", "memory": "100Mi"}),
        PodResources(2, 1124, None),
    ),
    (
        "overhead is not a limit when the pod has none",
        make_pod(overhead={"cpu": "250m"}),
        PodResources(1, None, None),
    ),
    ("nvidia gpus come from limits", make_pod(limits={"nvidia.com/gpu": "2"}), PodResources(None, None, 2)),
    ("amd gpus come from limits", make_pod(limits={"amd.com/gpu": "1"}), PodResources(None, None, 1)),
    (
        "gpus add up across containers",
        make_pod(
            containers=[
                make_container("a", limits={"nvidia.com/gpu": "1"}),
                make_container("b", limits={"nvidia.com/gpu": "2"}),
            ]
        ),
        PodResources(None, None, 3),
    ),
    (
        "the larger gpu vendor count wins",
        make_pod(limits={"nvidia.com/gpu": "1", "amd.com/gpu": "4"}),
        PodResources(None, None, 4),
    ),
    ("zero gpus is no gpu", make_pod(limits={"nvidia.com/gpu": "0"}), PodResources(None, None, None)),
    (
        "other extended resources are ignored",
        make_pod(limits={"example.com/foo": "3"}),
        PodResources(None, None, None),
    ),
]


@pytest.mark.parametrize(("pod", "want"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_translate_resources(pod: dict[str, Any], want: PodResources) -> None:
    assert translate_resources(pod) == want


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        (make_pod(cpu="lots"), "spec.containers[0].resources.requests.cpu"),
        (make_pod(limits={"memory": "1GB"}), "spec.containers[0].resources.limits.memory"),
        (
            make_pod(init_containers=[make_container("i", requests={"cpu": "-1"})]),
            "spec.initContainers[0].resources.requests.cpu",
        ),
        (make_pod(cpu="1", overhead={"cpu": "x"}), "spec.overhead.cpu"),
    ],
    ids=["bad cpu request", "bad memory limit", "negative init request", "bad overhead"],
)
def test_bad_quantity_names_the_field(pod: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidPodSpec) as info:
        translate_resources(pod)
    assert info.value.field == field
    assert field in str(info.value)
