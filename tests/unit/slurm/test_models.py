"""The models parse recorded slurmrestd 26.05 answers and build the recorded requests."""

from __future__ import annotations

import pytest

from slinky.clients.slurm.models import (
    Diag,
    JobDescMsg,
    JobInfo,
    JobsResponse,
    Node,
    NodeResourcesResponse,
    NodeUpdate,
    is_infinite,
)
from tests.unit.slurm.helpers import sample


def test_running_job_parses_states_nodes_times_and_resources() -> None:
    answer = JobsResponse.model_validate(sample("get_job_running.json"))
    job = answer.jobs[0]
    assert job.job_id == 1
    assert job.state == "RUNNING" and job.is_running and not job.is_finished
    assert job.nodes == "k8s-node-1"
    assert job.admin_comment == '{"pods": ["ns/ext-a"]}'
    assert job.is_external
    assert job.submit_time == 1795320019
    assert job.end_time == 1795323619
    assert job.time_limit == 60
    assert job.cpus == 8 and job.cpus_per_task == 4 and job.memory_per_node == 1000
    assert job.job_resources is not None and job.job_resources.nodes is not None
    assert job.job_resources.nodes.node_list == "k8s-node-1"
    assert job.job_resources.nodes.allocation[0].cpu_count == 8
    assert job.job_resources.nodes.allocation[0].memory_allocated == 1000
    assert answer.last_update == 1795320019


def test_pending_and_cancelled_jobs() -> None:
    pending = JobsResponse.model_validate(sample("get_job_pending.json")).jobs[0]
    assert pending.is_pending and pending.nodes == "" and pending.state_reason
    cancelled = JobsResponse.model_validate(sample("get_job_cancelled.json")).jobs[0]
    assert cancelled.state == "CANCELLED" and cancelled.is_finished and not cancelled.is_running


def test_gang_job_has_three_nodes() -> None:
    gang = JobsResponse.model_validate(sample("get_job_gang.json")).jobs[0]
    assert gang.node_count == 3
    assert gang.job_resources is not None and gang.job_resources.nodes is not None
    assert len(gang.job_resources.nodes.allocation) == 3
    layout = NodeResourcesResponse.model_validate(sample("get_job_gang_resources.json")).nodes
    assert [n.node for n in layout] == ["k8s-node-1", "k8s-node-2", "k8s-node-3"]
    assert layout[0].core_bitmap == "0xFF" and layout[0].channel is None


def test_unknown_fields_from_a_newer_slurm_are_not_fatal_and_a_job_keeps_only_its_typed_fields() -> None:
    raw = sample("get_job_running.json")["jobs"][0]
    raw["field_from_slurm_27"] = {"anything": [1, 2]}
    raw["job_state"] = ["RUNNING", "BRAND_NEW_FLAG"]
    job = JobInfo.model_validate(raw)
    assert job.is_running and "BRAND_NEW_FLAG" in job.job_state
    # The watcher holds every job Slurm knows: the untyped rest of each is dropped (memory at 10,000 jobs).
    assert not job.model_extra
    assert "field_from_slurm_27" not in job.model_dump()
    diag = Diag.model_validate({"field_from_slurm_27": 1})
    assert diag.model_extra == {"field_from_slurm_27": 1}, "other answers keep what they do not type"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"set": True, "infinite": False, "number": 7}, 7),
        ({"set": False, "infinite": False, "number": 0}, None),
        ({"set": True, "infinite": True, "number": 0}, None),
        (5, 5),
        (None, None),
    ],
    ids=["set", "unset", "infinite", "plain-number-from-older-parsers", "null"],
)
def test_no_val_wrapper_is_unwrapped_once(raw: object, expected: int | None) -> None:
    assert JobInfo.model_validate({"job_id": 1, "time_limit": raw}).time_limit == expected


def test_is_infinite_tells_infinite_from_unset() -> None:
    assert is_infinite({"set": True, "infinite": True, "number": 0})
    assert not is_infinite({"set": False, "infinite": False, "number": 0})


def test_submit_description_serialises_exactly_like_the_recorded_request() -> None:
    recorded = sample("submit_ext_request.json")["job"]
    job = JobDescMsg(
        name="ext-a",
        partition="k8s",
        flags=["EXTERNAL_JOB"],
        minimum_nodes=1,
        maximum_nodes=1,
        tasks_per_node=1,
        cpus_per_task=4,
        memory_per_node=1000,
        time_limit=60,
        shared=["none"],
        admin_comment='{"pods": ["ns/ext-a"]}',
        current_working_directory="/tmp",
    )
    assert job.to_request() == recorded


def test_update_description_is_the_recorded_bare_body() -> None:
    recorded = sample("update_pending_request.json")
    update = JobDescMsg(
        time_limit=30, comment="updated-by-bridge", admin_comment='{"pods": ["ns/ext-pend", "ns/ext-pend-2"]}'
    )
    assert update.to_request() == recorded


def test_drain_body_is_the_recorded_one() -> None:
    body = NodeUpdate(state=["DRAIN"], reason="slurm-bridge: cordoned").to_request()
    assert body == sample("node_drain_request.json")


def test_node_state_set_and_csv_fields() -> None:
    node = Node.model_validate(
        {
            "name": "k8s-node-10",
            "state": ["ALLOCATED", "EXTERNAL", "DRAIN"],
            "features": "k8s,zone-a",  # pre-v0.0.44 csv string form
            "partitions": ["k8s"],
            "cpus": 8,
            "real_memory": 16000,
            "slurmd_start_time": {"number": 0},
        }
    )
    assert node.states == {"ALLOCATED", "EXTERNAL", "DRAIN"}
    assert node.features == ["k8s", "zone-a"]
    assert node.is_external and node.is_drain and node.is_busy and not node.is_drained
    idle = node.model_copy(update={"state": ["IDLE", "EXTERNAL", "DRAIN"]})
    assert idle.is_drained
