from __future__ import annotations

from typing import Any

import pytest

from slinky import wellknown
from slinky.bridge.translate.annotations import FIELDS, parse_annotations
from slinky.bridge.translate.errors import InvalidAnnotation, TranslationError, UnknownAnnotation

W = wellknown


def test_every_workload_annotation_has_a_parser() -> None:
    assert FIELDS.keys() == W.WORKLOAD_ANNOTATIONS
    assert len(FIELDS) == 18


VALID: list[tuple[str, str, str, str, Any]] = [
    ("account", W.ANNOTATION_ACCOUNT, " physics ", "account", "physics"),
    ("constraints", W.ANNOTATION_CONSTRAINTS, "zone-a&fast", "constraints", "zone-a&fast"),
    ("cpu-per-task whole", W.ANNOTATION_CPU_PER_TASK, "4", "cpus_per_task", 4),
    ("cpu-per-task millicores round up", W.ANNOTATION_CPU_PER_TASK, "1500m", "cpus_per_task", 2),
    ("exclusive false shares the node", W.ANNOTATION_EXCLUSIVE, "false", "exclusive", False),
    ("exclusive is case-insensitive", W.ANNOTATION_EXCLUSIVE, "TRUE", "exclusive", True),
    ("gres gets the gres/ prefix", W.ANNOTATION_GRES, "gpu:v100:2", "tres_per_node", "gres/gpu:v100:2"),
    ("gres list", W.ANNOTATION_GRES, "gpu:2, gres/shard=4", "tres_per_node", "gres/gpu:2,gres/shard=4"),
    ("group-id", W.ANNOTATION_GROUP_ID, "100", "group_id", 100),
    ("group-id root", W.ANNOTATION_GROUP_ID, "0", "group_id", 0),
    ("job-name", W.ANNOTATION_JOB_NAME, "train", "name", "train"),
    ("licenses", W.ANNOTATION_LICENSES, "matlab:1", "licenses", "matlab:1"),
    ("max-nodes", W.ANNOTATION_MAX_NODES, "3", "max_nodes", 3),
    ("mem-per-node Gi", W.ANNOTATION_MEM_PER_NODE, "4Gi", "memory_per_node_mib", 4096),
    ("mem-per-node G rounds up", W.ANNOTATION_MEM_PER_NODE, "1G", "memory_per_node_mib", 954),
    ("min-nodes", W.ANNOTATION_MIN_NODES, " 2 ", "min_nodes", 2),
    ("partition", W.ANNOTATION_PARTITION, "gpu", "partition", "gpu"),
    ("priority", W.ANNOTATION_PRIORITY, "0", "priority", 0),
    ("qos", W.ANNOTATION_QOS, "high", "qos", "high"),
    ("reservation", W.ANNOTATION_RESERVATION, "maint", "reservation", "maint"),
    ("timelimit minutes", W.ANNOTATION_TIMELIMIT, "90", "time_limit_minutes", 90),
    ("user-id", W.ANNOTATION_USER_ID, "1000", "user_id", 1000),
    ("wckey", W.ANNOTATION_WCKEY, "proj", "wckey", "proj"),
]


@pytest.mark.parametrize(("key", "raw", "field", "want"), [c[1:] for c in VALID], ids=[c[0] for c in VALID])
def test_valid_annotation(key: str, raw: str, field: str, want: Any) -> None:
    parsed = parse_annotations({key: raw})

    assert parsed.values == {field: want}
    assert parsed.sources == {field: key}
    assert parsed.warnings == ()


INVALID: list[tuple[str, str, str]] = [
    ("min-nodes not a number", W.ANNOTATION_MIN_NODES, "two"),
    ("min-nodes fraction", W.ANNOTATION_MIN_NODES, "1.5"),
    ("min-nodes zero", W.ANNOTATION_MIN_NODES, "0"),
    ("max-nodes negative", W.ANNOTATION_MAX_NODES, "-1"),
    ("max-nodes beyond int32", W.ANNOTATION_MAX_NODES, "4294967296"),
    ("priority not a number", W.ANNOTATION_PRIORITY, "high"),
    ("timelimit as a duration", W.ANNOTATION_TIMELIMIT, "1:00:00"),
    ("timelimit zero", W.ANNOTATION_TIMELIMIT, "0"),
    ("user-id as a name", W.ANNOTATION_USER_ID, "alice"),
    ("group-id negative", W.ANNOTATION_GROUP_ID, "-5"),
    ("cpu-per-task unparsable", W.ANNOTATION_CPU_PER_TASK, "four"),
    ("cpu-per-task zero", W.ANNOTATION_CPU_PER_TASK, "0"),
    ("mem-per-node unparsable", W.ANNOTATION_MEM_PER_NODE, "4GB"),
    ("mem-per-node zero", W.ANNOTATION_MEM_PER_NODE, "0"),
    ("exclusive yes", W.ANNOTATION_EXCLUSIVE, "yes"),
    ("gres with spaces inside", W.ANNOTATION_GRES, "gpu 2"),
    ("gres empty item", W.ANNOTATION_GRES, "gpu:1,"),
    ("account empty", W.ANNOTATION_ACCOUNT, "  "),
    ("partition empty", W.ANNOTATION_PARTITION, ""),
]


@pytest.mark.parametrize(("key", "raw"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_annotation_names_its_key(key: str, raw: str) -> None:
    with pytest.raises(InvalidAnnotation) as info:
        parse_annotations({key: raw})

    assert isinstance(info.value, TranslationError)
    assert isinstance(info.value, ValueError)
    assert info.value.annotation == key
    assert key in str(info.value)
    assert info.value.reason


def test_unknown_key_under_the_prefix_is_an_error_with_a_suggestion() -> None:
    typo = W.PREFIX_SLURMJOB + "timelimt"
    with pytest.raises(UnknownAnnotation) as info:
        parse_annotations({typo: "10", W.ANNOTATION_ACCOUNT: "a"})

    assert info.value.annotation == typo
    assert W.ANNOTATION_TIMELIMIT in info.value.reason


def test_keys_outside_the_prefix_are_ignored() -> None:
    parsed = parse_annotations(
        {"kubectl.kubernetes.io/last-applied-configuration": "{}", W.PREFIX_SLINKY + "other": "x"}
    )

    assert parsed.values == {}
    assert parsed.warnings == ()


@pytest.mark.parametrize(
    ("alias", "canonical", "field"),
    [
        (W.PREFIX_SLINKY + "job-name", W.ANNOTATION_JOB_NAME, "name"),
        (W.PREFIX_SLINKY + "account", W.ANNOTATION_ACCOUNT, "account"),
    ],
    ids=["job-name alias", "account alias"],
)
def test_deprecated_alias_is_used_with_a_warning(alias: str, canonical: str, field: str) -> None:
    assert W.DEPRECATED_ANNOTATION_ALIASES[alias] == canonical

    parsed = parse_annotations({alias: "old"})

    assert parsed.values == {field: "old"}
    assert parsed.sources == {field: alias}
    assert [w.annotation for w in parsed.warnings] == [alias]
    assert canonical in parsed.warnings[0].message


def test_current_key_wins_over_its_deprecated_alias() -> None:
    alias = W.PREFIX_SLINKY + "account"
    parsed = parse_annotations({alias: "old", W.ANNOTATION_ACCOUNT: "new"})

    assert parsed.values == {"account": "new"}
    assert [w.annotation for w in parsed.warnings] == [alias]
    assert "ignored" in parsed.warnings[0].message


def test_invalid_alias_value_names_the_alias() -> None:
    alias = W.PREFIX_SLINKY + "job-name"
    with pytest.raises(InvalidAnnotation) as info:
        parse_annotations({alias: ""})

    assert info.value.annotation == alias
