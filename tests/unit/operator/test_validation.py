"""Bad NodeSet input: each problem names its field and says what to fix."""

from __future__ import annotations

from typing import Any

import pytest

from slinky.operator.api.nodeset import NodeSet
from slinky.operator.validation import max_unavailable, nodeset_problems


def problems(**spec: Any) -> list[tuple[str, str]]:
    base = {"controllerRef": {"name": "slurm"}, "slurmd": {"image": "slurmd:26.05"}}
    ns = NodeSet.model_validate({"metadata": {"name": "a"}, "spec": {**base, **spec}})
    return [(p.field, p.reason) for p in nodeset_problems(ns)]


def test_a_good_nodeset_has_none() -> None:
    assert problems(extraConf="Weight=1", partition={"enabled": True, "config": "MaxTime=1"}) == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"extraConf": "Weight=1\nNodeName=evil"}, ("spec.extraConf", "InvalidExtraConf")),
        ({"extraConf": "Weight=1\rNodeName=evil"}, ("spec.extraConf", "InvalidExtraConf")),
        ({"extraConf": "Weight"}, ("spec.extraConf", "InvalidExtraConf")),
        ({"partition": {"config": "A=1\rB=2"}}, ("spec.partition.config", "InvalidPartitionConfig")),
        ({"replicas": -2}, ("spec.replicas", "InvalidReplicas")),
        ({"slurmd": {}}, ("spec.slurmd.image", "MissingImage")),
        ({"controllerRef": {"name": ""}}, ("spec.controllerRef.name", "InvalidControllerRef")),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 0}}},
            ("spec.updateStrategy.rollingUpdate.maxUnavailable", "InvalidMaxUnavailable"),
        ),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "0%"}}},
            ("spec.updateStrategy.rollingUpdate.maxUnavailable", "InvalidMaxUnavailable"),
        ),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "lots"}}},
            ("spec.updateStrategy.rollingUpdate.maxUnavailable", "InvalidMaxUnavailable"),
        ),
        (
            {"updateStrategy": {"type": "ScheduledUpdate"}},
            ("spec.updateStrategy.scheduledUpdate.startTime", "InvalidScheduledUpdate"),
        ),
    ],
)
def test_each_bad_field(spec: dict[str, Any], expected: tuple[str, str]) -> None:
    assert problems(**spec) == [expected]


def test_max_unavailable_rounds_up_and_is_at_least_one() -> None:
    assert max_unavailable("25%", 4) == 1 and max_unavailable("25%", 5) == 2 and max_unavailable("10%", 1) == 1
    assert max_unavailable(3, 10) == 3 and max_unavailable("2", 10) == 2
    with pytest.raises(ValueError):
        max_unavailable("x%", 4)
