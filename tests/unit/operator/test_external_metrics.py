"""The external metrics API's answers: selectors as Kubernetes parses them, quantities as it prints them, and
value lists that never show another namespace's samples."""

from __future__ import annotations

import pytest

from slinky.operator import external_metrics as em
from slinky.operator.slurm_metrics import Family

LABELS = {"namespace": "hpc", "controller": "slurm", "partition": "cpu", "nodeset": "cpu"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("nodeset=cpu", True),
        ("nodeset==cpu,partition=cpu", True),
        ("nodeset=gpu", False),
        ("nodeset!=gpu", True),
        ("nodeset in (gpu, cpu)", True),
        ("partition notin (cpu)", False),
        ("controller", True),
        ("!reason", True),
        ("!nodeset", False),
        ("missing!=x", True),
    ],
)
def test_selectors(selector: str, matches: bool) -> None:
    assert all(r.matches(LABELS) for r in em.parse_selector(selector)) is matches


@pytest.mark.parametrize("bad", ["nodeset=(", "!a=b", "a b c"])
def test_a_bad_selector_is_refused(bad: str) -> None:
    with pytest.raises(em.SelectorError):
        em.parse_selector(bad)


def test_quantities() -> None:
    assert (em.quantity(12.0), em.quantity(0), em.quantity(1.5), em.quantity(0.0004)) == ("12", "0", "1500m", "0m")


def test_value_list_of_one_metric_in_one_namespace() -> None:
    families = [
        Family(
            "slurm_partition_nodes_wanted",
            "h",
            [
                (LABELS, 4.0),
                ({**LABELS, "partition": "gpu", "nodeset": "gpu"}, 2.0),
                ({**LABELS, "namespace": "other"}, 9.0),
            ],
        ),
        Family("slurm_partition_jobs_pending", "h", [(LABELS, 1.0)]),
    ]
    answer = em.value_list(families, "slurm_partition_nodes_wanted", "hpc", "nodeset=cpu", "2026-11-25T00:00:00Z")
    assert answer["kind"] == "ExternalMetricValueList" and answer["apiVersion"] == "external.metrics.k8s.io/v1beta1"
    assert answer["items"] == [
        {
            "metricName": "slurm_partition_nodes_wanted",
            "metricLabels": LABELS,
            "timestamp": "2026-11-25T00:00:00Z",
            "value": "4",
        }
    ]
    everything = em.value_list(families, "slurm_partition_nodes_wanted", "hpc", "", "t")["items"]
    assert [i["value"] for i in everything] == ["4", "2"], "another namespace's sample is never shown"
    discovery = em.resource_list(f.name for f in families)
    assert [r["name"] for r in discovery["resources"]] == [
        "slurm_partition_jobs_pending",
        "slurm_partition_nodes_wanted",
    ]
