"""Pure translation from Kubernetes workloads (API dicts) to Slurm job specs.

No I/O: the caller fetches the pod, its owner and the nodes, and records the warnings and errors.
"""

from slinky.bridge.translate.annotations import parse_annotations
from slinky.bridge.translate.errors import (
    ConflictingAnnotations,
    InvalidAnnotation,
    InvalidPodSpec,
    InvalidQuantity,
    TranslationError,
    UnknownAnnotation,
)
from slinky.bridge.translate.nodes import excluded_nodes, node_fits, slurm_node_name
from slinky.bridge.translate.pod import pod_key, translate_group, translate_pod

__all__ = [
    "ConflictingAnnotations",
    "InvalidAnnotation",
    "InvalidPodSpec",
    "InvalidQuantity",
    "TranslationError",
    "UnknownAnnotation",
    "excluded_nodes",
    "node_fits",
    "parse_annotations",
    "pod_key",
    "slurm_node_name",
    "translate_group",
    "translate_pod",
]
