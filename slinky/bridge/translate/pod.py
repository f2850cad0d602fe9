"""A pod, and the workload that owns it, to one Slurm external job (`SlurmJobSpec`).

Precedence, lowest first (upstream's documented rule):

1. defaults: the bridge's partition and MCS label, whole-node (exclusive) allocation;
2. derived from the workload: one node and one task per pod, the pod's name, the time limit
   from ``activeDeadlineSeconds``, cpu, memory and GPUs from the pod's resources, and the nodes
   the pod does not fit as ``excluded_nodes``;
3. the ``slurmjob.slinky.slurm.net/*`` annotations, read from the pod for a plain pod and from
   the top-level owner (Job, JobSet) otherwise, as upstream does.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final

from slinky import wellknown
from slinky.bridge.models import SlurmJobSpec, TranslateDefaults, TranslationResult
from slinky.bridge.translate.annotations import parse_annotations
from slinky.bridge.translate.errors import ConflictingAnnotations, InvalidPodSpec
from slinky.bridge.translate.nodes import excluded_nodes, placement_key
from slinky.bridge.translate.resources import translate_resources

KIND_JOB: Final = "Job"
OWNER_KINDS_WITH_ANNOTATIONS: Final = frozenset({KIND_JOB, "JobSet"})
"""Owners whose annotations (not the pod's) configure the Slurm job, as upstream."""


def pod_key(pod: Mapping[str, Any]) -> str:
    """``namespace/name`` of a pod dict, the form used in ``admin_comment``."""
    metadata = pod.get("metadata") or {}
    namespace, name = metadata.get("namespace"), metadata.get("name")
    if not namespace or not name:
        raise InvalidPodSpec("a pod needs a namespace and a name", field="metadata")
    return f"{namespace}/{name}"


def _deadline_minutes(obj: Mapping[str, Any] | None, field: str) -> int | None:
    if obj is None:
        return None
    seconds = (obj.get("spec") or {}).get("activeDeadlineSeconds")
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
        raise InvalidPodSpec(f"{seconds!r} is not a positive number of seconds", field=field)
    return math.ceil(seconds / 60)


def _annotation_source(pod: Mapping[str, Any], owner: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if owner is not None and owner.get("kind") in OWNER_KINDS_WITH_ANNOTATIONS:
        return owner
    return pod


def translate_pod(
    pod: Mapping[str, Any],
    *,
    settings: TranslateDefaults,
    owner: Mapping[str, Any] | None = None,
    job: Mapping[str, Any] | None = None,
    nodes: Iterable[Mapping[str, Any]] = (),
    slurm_nodes: Collection[str] | None = None,
) -> TranslationResult:
    """Translate one pod (a single-pod workload) to a Slurm job spec.

    Args:
        pod: The pod, as a Kubernetes API dict (camelCase).
        settings: The bridge's defaults.
        owner: The top-level owner (a Job or JobSet) as an API dict, or None for a plain pod. Its
            annotations replace the pod's; an owner of another kind is ignored.
        job: The batch/v1 Job controlling the pod, for ``activeDeadlineSeconds``. Defaults to
            ``owner`` when that is a Job; pass the child Job for a JobSet pod.
        nodes: Kubernetes nodes, as API dicts; those the pod does not fit become ``excluded_nodes``.
        slurm_nodes: When given, restricts ``excluded_nodes`` to these Slurm node names.

    Returns:
        The spec, and warnings (deprecated annotation keys) for the caller to record as Events.

    Raises:
        TranslationError: A subclass naming the annotation or field at fault.
    """
    if job is None and owner is not None and owner.get("kind") == KIND_JOB:
        job = owner
    return translate_group(
        [pod],
        settings=settings,
        annotation_source=_annotation_source(pod, owner),
        job=job,
        nodes=nodes,
        slurm_nodes=slurm_nodes,
        name=(pod.get("metadata") or {}).get("name"),
    )


def translate_group(
    pods: Sequence[Mapping[str, Any]],
    *,
    settings: TranslateDefaults,
    annotation_source: Mapping[str, Any],
    job: Mapping[str, Any] | None = None,
    nodes: Iterable[Mapping[str, Any]] = (),
    slurm_nodes: Collection[str] | None = None,
    name: str | None = None,
) -> TranslationResult:
    """Translate a group of pods that run as ONE Slurm job, one pod per node (a gang; one pod is a group of one).

    Args:
        pods: The members, as API dicts; the job asks for exactly ``len(pods)`` nodes.
        settings: The bridge's defaults.
        annotation_source: The object whose ``slurmjob.slinky.slurm.net/*`` annotations apply (the pod
            itself, its Job/JobSet, the PodGroup or the LeaderWorkerSet).
        job: The batch/v1 Job controlling the pods, for ``activeDeadlineSeconds``.
        nodes: Kubernetes nodes; those that any member does not fit become ``excluded_nodes``.
        slurm_nodes: When given, restricts ``excluded_nodes`` to these Slurm node names.
        name: The job name unless an annotation sets one.

    Raises:
        TranslationError: A subclass naming the annotation or field at fault.
    """
    if not pods:
        raise InvalidPodSpec("a group needs at least one pod", field="pods")
    nodes = list(nodes)
    per_pod = [translate_resources(pod) for pod in pods]
    time_limit = _deadline_minutes(job, "job.spec.activeDeadlineSeconds")
    if time_limit is None:
        limits = [_deadline_minutes(pod, "spec.activeDeadlineSeconds") for pod in pods]
        time_limit = min((t for t in limits if t is not None), default=None)
    gpus = _max_or_none(r.gpus for r in per_pod)
    excluded: set[str] = set()
    # The nodes are checked once per distinct placement, not per member: a 1,000-pod gang on 1,000 nodes took
    # 2.3 s (a million node checks), and held its lifecycle's workflow task 7.5 s on a busy machine.
    for pod in {placement_key(pod): pod for pod in pods}.values():
        excluded.update(excluded_nodes(pod, nodes, slurm_nodes=slurm_nodes))
    size = len(pods)
    values: dict[str, Any] = {
        # Defaults.
        "partition": settings.partition,
        "mcs_label": settings.mcs_label,
        "exclusive": True,
        # Derived: one pod per node, one task per pod; resources are the largest member's.
        "pods": tuple(pod_key(pod) for pod in pods),
        "name": name,
        "min_nodes": size,
        "max_nodes": size,
        "tasks_per_node": 1,
        "cpus_per_task": _max_or_none(r.cpus for r in per_pod),
        "memory_per_node_mib": _max_or_none(r.memory_mib for r in per_pod),
        "tres_per_node": f"gres/gpu={gpus}" if gpus else None,
        "time_limit_minutes": time_limit,
        "excluded_nodes": tuple(sorted(excluded)),
    }
    parsed = parse_annotations((annotation_source.get("metadata") or {}).get("annotations"))
    values.update(parsed.values)

    if values["min_nodes"] > values["max_nodes"]:
        culprit = parsed.sources.get("min_nodes") or parsed.sources.get("max_nodes")
        raise ConflictingAnnotations(
            f"min-nodes {values['min_nodes']} is more than max-nodes {values['max_nodes']}",
            annotation=culprit or wellknown.ANNOTATION_MIN_NODES,
        )
    return TranslationResult(spec=SlurmJobSpec(**values), warnings=parsed.warnings)


def _max_or_none(values: Iterable[int | None]) -> int | None:
    return max((v for v in values if v is not None), default=None)
