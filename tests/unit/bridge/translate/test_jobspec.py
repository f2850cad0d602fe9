from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from slinky.bridge.models import SlurmJobSpec, TranslationResult, admin_comment_for, pods_from_admin_comment


def test_to_job_desc_minimal_is_an_exclusive_external_job() -> None:
    spec = SlurmJobSpec(pods=("ns/a",))

    assert spec.to_job_desc() == {
        "flags": ["EXTERNAL_JOB"],
        "admin_comment": '{"pods": ["ns/a"]}',
        "current_working_directory": "/tmp",
        "shared": ["none"],
    }


def test_to_job_desc_full_wire_form() -> None:
    spec = SlurmJobSpec(
        pods=("ns/a",),
        name="a",
        partition="k8s",
        account="acct",
        qos="high",
        reservation="resv",
        licenses="lic:2",
        constraints="zone-a,fast",
        wckey="wck",
        priority=10,
        user_id=1000,
        group_id=2000,
        min_nodes=1,
        max_nodes=2,
        tasks_per_node=1,
        cpus_per_task=4,
        memory_per_node_mib=1000,
        tres_per_node="gres/gpu=2",
        time_limit_minutes=60,
        exclusive=False,
        excluded_nodes=("n1", "n2"),
        mcs_label="kubernetes",
    )

    assert spec.to_job_desc() == {
        "flags": ["EXTERNAL_JOB"],
        "admin_comment": '{"pods": ["ns/a"]}',
        "current_working_directory": "/tmp",
        "shared": [],
        "name": "a",
        "partition": "k8s",
        "account": "acct",
        "qos": "high",
        "reservation": "resv",
        "licenses": "lic:2",
        "constraints": "zone-a,fast",
        "wckey": "wck",
        "tres_per_node": "gres/gpu=2",
        "mcs_label": "kubernetes",
        "minimum_nodes": 1,
        "maximum_nodes": 2,
        "tasks_per_node": 1,
        "cpus_per_task": 4,
        "memory_per_node": {"set": True, "infinite": False, "number": 1000},
        "time_limit": {"set": True, "infinite": False, "number": 60},
        "priority": {"set": True, "infinite": False, "number": 10},
        "user_id": "1000",
        "group_id": "2000",
        "excluded_nodes": ["n1", "n2"],
    }


def test_to_job_desc_matches_the_verified_submit_sample() -> None:
    # slurm.md §5: the request body slurmrestd 26.05 accepted for an external job.
    sample = {
        "name": "ext-a",
        "partition": "k8s",
        "flags": ["EXTERNAL_JOB"],
        "minimum_nodes": 1,
        "maximum_nodes": 1,
        "tasks_per_node": 1,
        "cpus_per_task": 4,
        "memory_per_node": {"set": True, "infinite": False, "number": 1000},
        "time_limit": {"set": True, "infinite": False, "number": 60},
        "shared": ["none"],
        "admin_comment": '{"pods": ["ns/ext-a"]}',
        "current_working_directory": "/tmp",
    }
    spec = SlurmJobSpec(
        pods=("ns/ext-a",),
        name="ext-a",
        partition="k8s",
        min_nodes=1,
        max_nodes=1,
        tasks_per_node=1,
        cpus_per_task=4,
        memory_per_node_mib=1000,
        time_limit_minutes=60,
    )

    assert spec.to_job_desc() == sample


def test_to_job_desc_never_sets_required_nodes() -> None:
    spec = SlurmJobSpec(pods=("ns/a",), excluded_nodes=("n1",))

    assert "required_nodes" not in spec.to_job_desc()


@pytest.mark.parametrize(
    "pods",
    [["ns/a"], ["ns/a", "ns/b", "other/c"], ['ns/with"quote']],
    ids=["one pod", "a gang across namespaces", "a name needing escapes"],
)
def test_admin_comment_round_trips(pods: list[str]) -> None:
    assert pods_from_admin_comment(admin_comment_for(pods)) == pods


def test_admin_comment_is_upstream_json_form() -> None:
    assert admin_comment_for(["ns/a", "ns/b"]) == '{"pods": ["ns/a", "ns/b"]}'
    # Upstream Go writes compact JSON; both forms must parse.
    assert pods_from_admin_comment('{"pods":["ns/a"]}') == ["ns/a"]


@pytest.mark.parametrize(
    "text",
    [None, "", "not json", "[]", '"ns/a"', '{"pod": ["ns/a"]}', '{"pods": []}', '{"pods": "ns/a"}',
     '{"pods": [1]}', '{"pods": ["no-namespace"]}', '{"pods": ["ns/"]}', '{"pods": ["a/b/c"]}', 5],
    ids=[
        "none",
        "empty",
        "free text",
        "a list",
        "a string",
        "wrong key",
        "no pods",
        "pods not a list",
        "not strings",
        "no slash",
        "empty name",
        "two slashes",
        "not even text",
    ],
)  # fmt: skip
def test_pods_from_admin_comment_tolerates_junk(text: str | None) -> None:
    assert pods_from_admin_comment(text) is None


def test_spec_is_frozen_and_validated() -> None:
    spec = SlurmJobSpec(pods=("ns/a",))
    with pytest.raises(ValidationError):
        spec.name = "b"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        SlurmJobSpec(pods=())
    with pytest.raises(ValidationError):
        SlurmJobSpec(pods=("ns/a",), cpus_per_task=0)


def test_result_survives_json_round_trip() -> None:
    # What the pydantic data converter does when a result crosses a Temporal boundary.
    result = TranslationResult(spec=SlurmJobSpec(pods=("ns/a",), excluded_nodes=("n1",), priority=3))
    data: Any = json.loads(result.model_dump_json())

    assert TranslationResult.model_validate(data) == result
