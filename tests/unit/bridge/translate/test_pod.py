from __future__ import annotations

import pickle
from typing import Any

import pytest

from slinky import wellknown
from slinky.bridge.models import SlurmJobSpec, TranslateDefaults
from slinky.bridge.translate import (
    ConflictingAnnotations,
    InvalidAnnotation,
    InvalidPodSpec,
    TranslationError,
    UnknownAnnotation,
    translate_pod,
)
from tests.builders import make_job, make_jobset, make_node, make_pod

W = wellknown
DEFAULTS = TranslateDefaults()
NS = W.DEFAULT_MANAGED_NAMESPACE


def _spec(pod: dict[str, Any], **kwargs: Any) -> SlurmJobSpec:
    return translate_pod(pod, settings=DEFAULTS, **kwargs).spec


def test_plain_pod_gets_defaults_and_derived_values() -> None:
    spec = _spec(make_pod("web", cpu="1500m", memory="1Gi"))

    assert spec == SlurmJobSpec(
        pods=(f"{NS}/web",),
        name="web",
        partition=W.DEFAULT_PARTITION,
        mcs_label=W.DEFAULT_MCS_LABEL,
        min_nodes=1,
        max_nodes=1,
        tasks_per_node=1,
        cpus_per_task=2,
        memory_per_node_mib=1024,
        exclusive=True,
    )
    assert spec.to_job_desc()["shared"] == ["none"]


def test_settings_supply_partition_and_mcs_label() -> None:
    result = translate_pod(make_pod(), settings=TranslateDefaults(partition="k8s", mcs_label=None))

    assert result.spec.partition == "k8s"
    assert result.spec.mcs_label is None
    assert "mcs_label" not in result.spec.to_job_desc()


def test_gpus_become_tres_per_node() -> None:
    assert _spec(make_pod(limits={"nvidia.com/gpu": "2"})).tres_per_node == "gres/gpu=2"


ALL_ANNOTATIONS = {
    W.ANNOTATION_ACCOUNT: "acct",
    W.ANNOTATION_CONSTRAINTS: "fast",
    W.ANNOTATION_CPU_PER_TASK: "3",
    W.ANNOTATION_EXCLUSIVE: "false",
    W.ANNOTATION_GRES: "gpu:v100:1",
    W.ANNOTATION_GROUP_ID: "20",
    W.ANNOTATION_JOB_NAME: "named",
    W.ANNOTATION_LICENSES: "lic:1",
    W.ANNOTATION_MAX_NODES: "2",
    W.ANNOTATION_MEM_PER_NODE: "2Gi",
    W.ANNOTATION_MIN_NODES: "2",
    W.ANNOTATION_PARTITION: "other",
    W.ANNOTATION_PRIORITY: "7",
    W.ANNOTATION_QOS: "q",
    W.ANNOTATION_RESERVATION: "r",
    W.ANNOTATION_TIMELIMIT: "5",
    W.ANNOTATION_USER_ID: "1000",
    W.ANNOTATION_WCKEY: "w",
}


def test_every_annotation_overrides_defaults_and_derived_values() -> None:
    assert ALL_ANNOTATIONS.keys() == W.WORKLOAD_ANNOTATIONS
    pod = make_pod(
        "p",
        annotations=ALL_ANNOTATIONS,
        cpu="8",
        memory="8Gi",
        limits={"nvidia.com/gpu": "4"},
        active_deadline_seconds=3600,
    )

    desc = _spec(pod).to_job_desc()

    assert desc == {
        "flags": ["EXTERNAL_JOB"],
        "admin_comment": f'{{"pods": ["{NS}/p"]}}',
        "current_working_directory": "/tmp",
        "shared": [],
        "name": "named",
        "partition": "other",
        "account": "acct",
        "qos": "q",
        "reservation": "r",
        "licenses": "lic:1",
        "constraints": "fast",
        "wckey": "w",
        "tres_per_node": "gres/gpu:v100:1",
        "mcs_label": W.DEFAULT_MCS_LABEL,
        "minimum_nodes": 2,
        "maximum_nodes": 2,
        "tasks_per_node": 1,
        "cpus_per_task": 3,
        "memory_per_node": {"set": True, "infinite": False, "number": 2048},
        "time_limit": {"set": True, "infinite": False, "number": 5},
        "priority": {"set": True, "infinite": False, "number": 7},
        "user_id": "1000",
        "group_id": "20",
    }


PRECEDENCE: list[tuple[str, dict[str, Any], dict[str, Any], str, Any]] = [
    ("derived cpu beats the partition default", make_pod(cpu="2"), {}, "cpus_per_task", 2),
    (
        "annotation cpu beats derived cpu",
        make_pod(cpu="2", annotations={W.ANNOTATION_CPU_PER_TASK: "6"}),
        {},
        "cpus_per_task",
        6,
    ),
    (
        "annotation memory beats derived memory",
        make_pod(memory="1Gi", annotations={W.ANNOTATION_MEM_PER_NODE: "512Mi"}),
        {},
        "memory_per_node_mib",
        512,
    ),
    (
        "annotation partition beats the settings default",
        make_pod(annotations={W.ANNOTATION_PARTITION: "gpu"}),
        {},
        "partition",
        "gpu",
    ),
    (
        "annotation job-name beats the pod name",
        make_pod("p", annotations={W.ANNOTATION_JOB_NAME: "n"}),
        {},
        "name",
        "n",
    ),
    (
        "gres annotation beats the gpu limit",
        make_pod(limits={"nvidia.com/gpu": "2"}, annotations={W.ANNOTATION_GRES: "gpu:a100:1"}),
        {},
        "tres_per_node",
        "gres/gpu:a100:1",
    ),
    (
        "pod activeDeadlineSeconds rounds up to minutes",
        make_pod(active_deadline_seconds=61),
        {},
        "time_limit_minutes",
        2,
    ),
    (
        "owner Job deadline beats the pod's",
        make_pod(active_deadline_seconds=60),
        {"owner": make_job(active_deadline_seconds=600)},
        "time_limit_minutes",
        10,
    ),
    (
        "timelimit annotation beats the Job deadline",
        make_pod(),
        {"owner": make_job(active_deadline_seconds=600, annotations={W.ANNOTATION_TIMELIMIT: "3"})},
        "time_limit_minutes",
        3,
    ),
    ("no deadline leaves the partition limit", make_pod(), {"owner": make_job()}, "time_limit_minutes", None),
    (
        "a JobSet pod takes the deadline from its child Job",
        make_pod(),
        {"owner": make_jobset(), "job": make_job(active_deadline_seconds=90)},
        "time_limit_minutes",
        2,
    ),
    (
        "exclusive true keeps the default",
        make_pod(annotations={W.ANNOTATION_EXCLUSIVE: "true"}),
        {},
        "exclusive",
        True,
    ),
]


@pytest.mark.parametrize(
    ("pod", "kwargs", "field", "want"), [c[1:] for c in PRECEDENCE], ids=[c[0] for c in PRECEDENCE]
)
def test_precedence(pod: dict[str, Any], kwargs: dict[str, Any], field: str, want: Any) -> None:
    assert getattr(_spec(pod, **kwargs), field) == want


@pytest.mark.parametrize(
    "owner",
    [
        make_job(annotations={W.ANNOTATION_ACCOUNT: "owner"}),
        make_jobset(annotations={W.ANNOTATION_ACCOUNT: "owner"}),
    ],
    ids=["Job", "JobSet"],
)
def test_owner_annotations_replace_the_pods(owner: dict[str, Any]) -> None:
    pod = make_pod(annotations={W.ANNOTATION_ACCOUNT: "pod", W.ANNOTATION_QOS: "pod"}, owner=owner)

    spec = _spec(pod, owner=owner)

    assert spec.account == "owner"
    assert spec.qos is None


def test_bad_pod_annotation_is_ignored_under_a_job_owner() -> None:
    # Upstream reads only the top-level object's annotations for Jobs and JobSets.
    owner = make_job()
    pod = make_pod(annotations={W.ANNOTATION_MIN_NODES: "many"}, owner=owner)

    assert _spec(pod, owner=owner).min_nodes == 1


def test_an_unsupported_owner_kind_leaves_the_pod_in_charge() -> None:
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"annotations": {W.ANNOTATION_QOS: "rs"}},
    }
    pod = make_pod(annotations={W.ANNOTATION_QOS: "pod"})

    assert _spec(pod, owner=owner).qos == "pod"


def test_deprecated_alias_warns() -> None:
    alias = W.PREFIX_SLINKY + "job-name"
    result = translate_pod(make_pod(annotations={alias: "legacy"}), settings=DEFAULTS)

    assert result.spec.name == "legacy"
    assert [w.annotation for w in result.warnings] == [alias]


def test_candidate_nodes_become_excluded_nodes_never_required() -> None:
    pod = make_pod(node_selector={"zone": "a"})
    nodes = [make_node("a", labels={"zone": "a"}), make_node("b", slurm_name="slurm-b")]

    desc = _spec(pod, nodes=nodes).to_job_desc()

    assert desc["excluded_nodes"] == ["slurm-b"]
    assert "required_nodes" not in desc


ERRORS: list[tuple[str, dict[str, Any], dict[str, Any], type[TranslationError], str | None]] = [
    (
        "non-integer node count",
        make_pod(annotations={W.ANNOTATION_MIN_NODES: "two"}),
        {},
        InvalidAnnotation,
        W.ANNOTATION_MIN_NODES,
    ),
    (
        "unparsable memory quantity",
        make_pod(annotations={W.ANNOTATION_MEM_PER_NODE: "lots"}),
        {},
        InvalidAnnotation,
        W.ANNOTATION_MEM_PER_NODE,
    ),
    (
        "unknown key under the prefix",
        make_pod(annotations={W.PREFIX_SLURMJOB + "nodes": "2"}),
        {},
        UnknownAnnotation,
        W.PREFIX_SLURMJOB + "nodes",
    ),
    (
        "bad value on the owner Job",
        make_pod(),
        {"owner": make_job(annotations={W.ANNOTATION_PRIORITY: "urgent"})},
        InvalidAnnotation,
        W.ANNOTATION_PRIORITY,
    ),
    (
        "min-nodes above the derived max",
        make_pod(annotations={W.ANNOTATION_MIN_NODES: "2"}),
        {},
        ConflictingAnnotations,
        W.ANNOTATION_MIN_NODES,
    ),
    (
        "max-nodes below min-nodes",
        make_pod(annotations={W.ANNOTATION_MIN_NODES: "3", W.ANNOTATION_MAX_NODES: "2"}),
        {},
        ConflictingAnnotations,
        W.ANNOTATION_MIN_NODES,
    ),
    ("unparsable cpu request", make_pod(cpu="fast"), {}, InvalidPodSpec, None),
    (
        "negative Job deadline",
        make_pod(),
        {"owner": make_job(active_deadline_seconds=-1)},
        InvalidPodSpec,
        None,
    ),
]


@pytest.mark.parametrize(("pod", "kwargs", "error", "annotation"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_errors_are_typed_and_name_their_source(
    pod: dict[str, Any], kwargs: dict[str, Any], error: type[TranslationError], annotation: str | None
) -> None:
    with pytest.raises(error) as info:
        translate_pod(pod, settings=DEFAULTS, **kwargs)

    assert info.value.annotation == annotation
    if annotation is None:
        assert info.value.field
        assert info.value.field in str(info.value)
    else:
        assert annotation in str(info.value)


def test_pod_without_namespace_is_rejected() -> None:
    pod = make_pod()
    del pod["metadata"]["namespace"]

    with pytest.raises(InvalidPodSpec):
        translate_pod(pod, settings=DEFAULTS)


def test_translation_error_pickles_with_its_attributes() -> None:
    error = InvalidAnnotation("bad", annotation=W.ANNOTATION_QOS)
    copy = pickle.loads(pickle.dumps(error))

    assert type(copy) is InvalidAnnotation
    assert (copy.annotation, copy.reason, str(copy)) == (error.annotation, error.reason, str(error))


def test_a_gang_excludes_the_nodes_any_member_does_not_fit_checking_each_placement_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Members with the same selector, affinity and tolerations fit the same nodes: a 1,000-pod gang on 1,000 nodes
    is checked against each node once per distinct placement, and the union of the exclusions is kept."""
    from slinky.bridge.translate import nodes as node_rules
    from slinky.bridge.translate import translate_group

    checks: list[str] = []
    fits = node_rules.node_fits

    def counted(pod: dict[str, Any], node: dict[str, Any]) -> bool:
        checks.append(pod["metadata"]["name"])
        return fits(pod, node)

    monkeypatch.setattr(node_rules, "node_fits", counted)
    nodes = [make_node("n-a", labels={"zone": "a"}), make_node("n-b", labels={"zone": "b"}), make_node("n-c")]
    members = [make_pod(f"m{i}", node_selector={"zone": "a"}) for i in range(50)]
    members.append(make_pod("odd", node_selector={"zone": "b"}))
    spec = translate_group(members, settings=DEFAULTS, annotation_source={"metadata": {}}, nodes=nodes).spec
    assert spec.excluded_nodes == ("n-a", "n-b", "n-c")
    assert (spec.min_nodes, spec.max_nodes) == (51, 51)
    assert len(checks) == 2 * len(nodes)  # two placements, not 51 members

    same = [make_pod(f"s{i}", node_selector={"zone": "a"}) for i in range(3)]
    spec = translate_group(same, settings=DEFAULTS, annotation_source={"metadata": {}}, nodes=nodes).spec
    assert spec.excluded_nodes == ("n-b", "n-c")
