"""The HPA builder writes what the example manifest does by hand."""

from __future__ import annotations

from pathlib import Path

import yaml

from slinky.operator.autoscaling import nodeset_hpa

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "nodeset-autoscaling.yaml"


def test_the_builder_matches_the_example() -> None:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    [example] = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    built = nodeset_hpa("slinky", "burst", max_replicas=4, scale_down_seconds=60, scale_down_pods=2)
    assert built == example


def test_scale_from_zero_needs_an_average_value_target() -> None:
    spec = nodeset_hpa("ns", "cpu", max_replicas=2)["spec"]
    assert spec["minReplicas"] == 0
    assert spec["metrics"][0]["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}
    assert "policies" not in spec["behavior"]["scaleDown"]
