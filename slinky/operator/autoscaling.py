"""A stock HorizontalPodAutoscaler for a NodeSet on Slurm's demand (docs/autoscaling.md): a pure builder, as
``deploy/examples/nodeset-autoscaling.yaml`` writes one by hand (a unit test holds the two together)."""

from __future__ import annotations

from typing import Any

from slinky.operator.api.base import API_VERSION

WANTED = "slurm_partition_nodes_wanted"
"""Busy nodes plus what pending jobs ask for: one pod per node wanted (``AverageValue: 1``)."""


def nodeset_hpa(
    namespace: str,
    nodeset: str,
    *,
    max_replicas: int,
    min_replicas: int = 0,
    scale_down_seconds: int = 60,
    scale_down_pods: int | None = None,
) -> dict[str, Any]:
    """An ``autoscaling/v2beta2`` HPA scaling ``nodeset`` on ``slurm_partition_nodes_wanted{nodeset=<name>}``.

    ``scale_down_seconds`` is how long the partition stays idle before its nodes go; ``scale_down_pods`` caps
    how many pods a scale-down takes per 30 s (None: no cap).
    """
    scale_down: dict[str, Any] = {"stabilizationWindowSeconds": scale_down_seconds}
    if scale_down_pods is not None:
        scale_down["policies"] = [{"type": "Pods", "value": scale_down_pods, "periodSeconds": 30}]
    return {
        "apiVersion": "autoscaling/v2beta2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": nodeset, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": "NodeSet", "name": nodeset},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": WANTED, "selector": {"matchLabels": {"nodeset": nodeset}}},
                        "target": {"type": "AverageValue", "averageValue": "1"},
                    },
                }
            ],
            "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0}, "scaleDown": scale_down},
        },
    }
